//! The client's requests as Google's API takes them: list pages followed with the page token
//! escaped, the per-request deadline, and the bodies of creates.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use theseus_backend_tpu::api::transport::Http;
use theseus_backend_tpu::api::types::ApiNode;
use theseus_backend_tpu::api::{AccessToken, Client, ErrorKind, Retry};
use theseus_backend_tpu::auth::StaticToken;
use wiremock::matchers::{body_json, header, method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, ResponseTemplate};

const PARENT: &str = "/v2/projects/p/locations/us-central2-b";

fn client(server: &MockServer, timeout: Duration) -> Client {
    let tokens = Arc::new(StaticToken(AccessToken::new("tok")));
    Client::new(Http::new(None, None).unwrap(), &server.uri(), "p", "us-central2-b", tokens, timeout)
        .with_retry(Retry { attempts: 2, first_wait: Duration::from_millis(1), max_wait: Duration::from_millis(1) })
}

#[tokio::test]
async fn lists_follow_every_page() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("{PARENT}/nodes")))
        .and(query_param_is_missing("pageToken"))
        .and(header("authorization", "Bearer tok"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"nodes": [{"name": "a"}], "nextPageToken": "n+/="})),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{PARENT}/nodes")))
        .and(query_param("pageToken", "n+/="))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"nodes": [{"name": "b"}]})))
        .expect(1)
        .mount(&server)
        .await;
    let names: Vec<String> =
        client(&server, Duration::from_secs(5)).list_nodes().await.unwrap().into_iter().map(|n| n.name).collect();
    assert_eq!(names, ["a", "b"]);
}

#[tokio::test]
async fn a_slow_answer_is_cut_at_the_deadline() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({})).set_delay(Duration::from_secs(30)))
        .mount(&server)
        .await;
    let e = client(&server, Duration::from_millis(200)).get_node("t").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Transient);
    assert!(e.message.contains("did not answer within 0.2s") && e.message.contains("api_timeout"), "{e}");
    assert_eq!(server.received_requests().await.unwrap().len(), 2, "tried again once");
}

#[tokio::test]
async fn a_create_sends_the_node_as_google_reads_it() {
    let server = MockServer::start().await;
    let node = ApiNode {
        accelerator_type: "v4-8".into(),
        runtime_version: "tpu-ubuntu2204-base".into(),
        ..ApiNode::default()
    };
    Mock::given(method("POST"))
        .and(path(format!("{PARENT}/nodes")))
        .and(query_param("nodeId", "t"))
        .and(header("content-type", "application/json"))
        .and(body_json(json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-ubuntu2204-base"})))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"name": "projects/p/locations/us-central2-b/operations/o", "done": false})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let op = client(&server, Duration::from_secs(5)).create_node("t", &node).await.unwrap();
    assert_eq!(op.name, "projects/p/locations/us-central2-b/operations/o");
    assert!(!op.done);
}

#[tokio::test]
async fn an_answer_that_is_not_json_is_named() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("<html>login</html>"))
        .mount(&server)
        .await;
    let e = client(&server, Duration::from_secs(5)).get_node("t").await.unwrap_err();
    assert!(e.message.contains("JSON theseus cannot read") && e.message.contains("/nodes/t"), "{e}");
}
