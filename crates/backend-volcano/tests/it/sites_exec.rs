//! Exec credential plugins (issue 23): the plugin runs once per process and credential (its token
//! kept until `expirationTimestamp`), and a failing or missing plugin is one line naming the
//! command and the kubeconfig's `installHint`, never its arguments or `env` values.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use theseus_backend_volcano::{Cluster, RetryPolicy};
use wiremock::matchers::{header, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::site_support::{host_with, write_kubeconfig};

const SECRET: &str = "vault-s3cr3t-9f8e7d";

fn status(code: u16, reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": reason
    }))
}

/// An API server that answers 404 (no such queue) to the bearer token `token` and 401 to anyone else.
async fn api_expecting(token: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(header("authorization", format!("Bearer {token}").as_str()))
        .respond_with(status(404, "NotFound"))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET")).respond_with(status(401, "Unauthorized")).with_priority(10).mount(&server).await;
    server
}

/// A plugin script that counts its runs in `runs` and prints `body` (or exits with `exit`).
fn plugin(dir: &Path, runs: &Path, body: &str, exit: i32) -> std::path::PathBuf {
    let path = dir.join("get-token");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho run >> '{}'\n[ \"$VAULT_TOKEN\" = '{SECRET}' ] || {{ echo 'no VAULT_TOKEN' >&2; exit 9; }}\ncat <<'EOF'\n{body}\nEOF\nexit {exit}\n",
            runs.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn exec_user(command: &Path, hint: &str) -> String {
    format!(
        "exec: {{apiVersion: client.authentication.k8s.io/v1, command: '{}', args: [--role, '{SECRET}'], \
         env: [{{name: VAULT_TOKEN, value: '{SECRET}'}}], interactiveMode: Never, installHint: '{hint}'}}",
        command.display()
    )
}

fn runs(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[tokio::test]
async fn an_exec_plugin_runs_once_and_its_token_is_kept_until_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("runs");
    let server = api_expecting("tok-123").await;
    let body = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok-123","expirationTimestamp":"2099-01-01T00:00:00Z"}}"#;
    let command = plugin(dir.path(), &counter, body, 0);
    let kubeconfig = dir.path().join("config");
    write_kubeconfig(&kubeconfig, &server.uri(), "", &exec_user(&command, "x"), None);
    let host = host_with(&kubeconfig, serde_json::json!({}));
    for _ in 0..2 {
        let cluster = Cluster::connect(&host).await.unwrap().with_retry(RetryPolicy::fast());
        assert!(cluster.get_queue("q").await.unwrap().is_none());
        assert!(cluster.get_queue("q").await.unwrap().is_none());
    }
    assert_eq!(runs(&counter), 1, "the plugin runs once per process while its token is valid");
}

/// A token that expired is fetched again before the next request (as client-go does), so a long
/// `submit --follow` outlives a 15-minute EKS token.
#[tokio::test]
async fn an_expired_exec_token_is_fetched_again() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("runs");
    let server = api_expecting("tok-old").await;
    let body = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok-old","expirationTimestamp":"2001-01-01T00:00:00Z"}}"#;
    let command = plugin(dir.path(), &counter, body, 0);
    let kubeconfig = dir.path().join("config");
    write_kubeconfig(&kubeconfig, &server.uri(), "", &exec_user(&command, "x"), None);
    let host = host_with(&kubeconfig, serde_json::json!({}));
    let cluster = Cluster::connect(&host).await.unwrap().with_retry(RetryPolicy::fast());
    assert_eq!(runs(&counter), 1, "the plugin runs when the client is made");
    assert!(cluster.get_queue("q").await.unwrap().is_none());
    assert!(cluster.get_queue("q").await.unwrap().is_none());
    assert_eq!(runs(&counter), 3, "an expired credential is fetched again for each request");
    Cluster::connect(&host).await.unwrap();
    assert_eq!(runs(&counter), 4, "an expired credential is not kept");
}

#[tokio::test]
async fn a_failing_or_missing_plugin_is_named_without_its_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("runs");
    let server = api_expecting("never").await;
    let command = plugin(dir.path(), &counter, "{}", 3);
    let kubeconfig = dir.path().join("config");
    write_kubeconfig(&kubeconfig, &server.uri(), "", &exec_user(&command, "x"), None);
    let host = host_with(&kubeconfig, serde_json::json!({}));
    let err = match Cluster::connect(&host).await {
        Err(e) => e.to_string(),
        Ok(cluster) => cluster.get_queue("q").await.unwrap_err().to_string(),
    };
    assert!(!err.contains(SECRET) && !err.contains('\n'), "{err}");
    assert!(err.contains(&command.display().to_string()) && err.contains("exited with 3"), "{err}");
    assert!(runs(&counter) <= 1, "a failing plugin is not run again and again: {}", runs(&counter));

    let missing = dir.path().join("no-such-dir/aws-iam-authenticator");
    write_kubeconfig(
        &kubeconfig,
        &server.uri(),
        "",
        &exec_user(&missing, "aws-iam-authenticator is needed: brew install aws-iam-authenticator"),
        None,
    );
    let err = match Cluster::connect(&host).await {
        Err(e) => e.to_string(),
        Ok(cluster) => cluster.get_queue("q").await.unwrap_err().to_string(),
    };
    assert!(!err.contains(SECRET), "{err}");
    assert!(err.contains(&missing.display().to_string()) && err.contains("not found"), "{err}");
    assert!(err.contains("brew install aws-iam-authenticator"), "the installHint: {err}");
}

#[tokio::test]
async fn a_plugin_failing_when_its_token_expired_is_named_without_its_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("runs");
    let server = api_expecting("tok-once").await;
    let command = dir.path().join("get-token");
    // The first run answers with a token that has already expired; every later run fails.
    std::fs::write(
        &command,
        format!(
            "#!/bin/sh\n[ -s '{runs}' ] && {{ echo run >> '{runs}'; exit 4; }}\necho run >> '{runs}'\n\
             echo '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"tok-once\",\"expirationTimestamp\":\"2001-01-01T00:00:00Z\"}}}}'\n",
            runs = counter.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&command, std::fs::Permissions::from_mode(0o755)).unwrap();
    let kubeconfig = dir.path().join("config");
    write_kubeconfig(&kubeconfig, &server.uri(), "", &exec_user(&command, "x"), None);
    let cluster = Cluster::connect(&host_with(&kubeconfig, serde_json::json!({}))).await.unwrap();
    let cluster = cluster.with_retry(RetryPolicy::fast());
    let err = cluster.get_queue("q").await.unwrap_err().to_string();
    assert!(!err.contains(SECRET) && !err.contains('\n'), "{err}");
    assert!(err.contains(&command.display().to_string()) && err.contains("exited with 4"), "{err}");
    assert_eq!(runs(&counter), 2, "a failing plugin is not retried");
}
