//! The routes' answers: JSON shapes, the query of `/api/runs`, the statuses of the source's
//! errors, 404 and 405, the capped history of `/logs`.

use http::{Method, StatusCode};
use theseus_ui::RunQuery;

use crate::harness::{LONG_LINES, TOKEN, get, request, start};

#[tokio::test]
async fn health_pages_assets_and_capacity() {
    let server = start().await;
    let reply = get(server.addr, "/api/health").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/json");
    assert_eq!(reply.json(), serde_json::json!({"ok": true, "version": env!("CARGO_PKG_VERSION")}));
    for (path, kind) in [
        ("/assets/app.js", "text/javascript; charset=utf-8"),
        ("/assets/app.css", "text/css; charset=utf-8"),
        ("/assets/favicon.svg", "image/svg+xml"),
        ("/", "text/html; charset=utf-8"),
        ("/runs/any%20name", "text/html; charset=utf-8"),
    ] {
        let reply = get(server.addr, path).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(reply.header("content-type"), kind, "{path}");
        assert!(!reply.body.is_empty(), "{path}");
    }
    assert_eq!(get(server.addr, "/api/capacity").await.json()["probed_at"], "2026-01-01T00:00:00Z");
}

#[tokio::test]
async fn head_answers_without_a_body() {
    let server = start().await;
    for path in ["/", "/api/health", "/api/runs/done/logs/stream", "/api/events"] {
        let reply = request(server.addr, Method::HEAD, path, &[("x-theseus-token", TOKEN)]).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(reply.body, "", "{path}");
    }
}

#[tokio::test]
async fn the_run_query_reaches_the_source() {
    let server = start().await;
    let reply = get(server.addr, "/api/runs?offset=50&limit=25&project=my+proj&group=&host=gpu%2D1&state=failed").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let asked = server.fake.last_query.lock().unwrap().clone().unwrap();
    let want = RunQuery {
        offset: 50,
        limit: Some(25),
        project: Some("my proj".into()),
        group: None,
        host: Some("gpu-1".into()),
        state: Some("failed".into()),
    };
    assert_eq!(asked, want);
    assert_eq!(reply.json()["limit"], 25);
    get(server.addr, "/api/runs").await;
    let asked = server.fake.last_query.lock().unwrap().clone().unwrap();
    assert_eq!(asked, RunQuery { limit: Some(50), ..RunQuery::default() });
}

#[tokio::test]
async fn bad_queries_are_400_with_the_key() {
    let server = start().await;
    *server.fake.last_query.lock().unwrap() = None;
    for (query, key) in [("limit=0", "limit"), ("limit=501", "limit"), ("limit=x", "limit"), ("offset=-1", "offset")] {
        let reply = get(server.addr, &format!("/api/runs?{query}")).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{query}");
        let error = reply.json()["error"].as_str().unwrap().to_owned();
        assert!(error.contains(&format!("`{key}`")), "{query}: {error}");
    }
    let reply = get(server.addr, "/api/runs?state=sleeping").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.json()["error"].as_str().unwrap().contains("running"));
    assert!(server.fake.last_query.lock().unwrap().is_none(), "a bad query reached the source");
}

#[tokio::test]
async fn source_errors_map_to_statuses() {
    let server = start().await;
    let reply = get(server.addr, "/api/runs/missing").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.json(), serde_json::json!({"error": "no run `missing` in the ledger"}));
    let reply = get(server.addr, "/api/runs/boom").await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(reply.json(), serde_json::json!({"error": "the host said no second line"}));
    for path in ["/api/runs/missing/logs", "/api/runs/missing/logs/stream"] {
        let reply = get(server.addr, path).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(reply.header("content-type"), "application/json", "{path}");
    }
    let reply = request(server.addr, Method::POST, "/api/runs/missing/cancel", &[("x-theseus-token", TOKEN)]).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn run_ids_are_percent_decoded() {
    let server = start().await;
    let reply = get(server.addr, "/api/runs/mis%73ing").await;
    assert_eq!(reply.json()["error"], "no run `missing` in the ledger");
    let reply = get(server.addr, "/api/runs/d%6Fne").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["run"]["identity"]["run_id"], "id-done");
}

#[tokio::test]
async fn unknown_paths_are_404_and_wrong_methods_405() {
    let server = start().await;
    let reply = get(server.addr, "/api/nowhere").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert!(reply.json()["error"].as_str().unwrap().contains("/api/nowhere"));
    let reply = get(server.addr, "/assets/secret.txt").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert!(reply.header("content-type").starts_with("text/html"));
    let reply = get(server.addr, "/api/runs/live/cancel").await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.header("allow"), "POST");
    assert!(reply.json()["error"].as_str().unwrap().contains("POST"));
    let reply = request(server.addr, Method::DELETE, "/api/runs/live", &[("x-theseus-token", TOKEN)]).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.header("allow"), "GET, HEAD");
    assert_eq!(*server.fake.cancels.lock().unwrap(), 0);
}

#[tokio::test]
async fn logs_are_the_history_and_how_it_ended() {
    let server = start().await;
    let reply = get(server.addr, "/api/runs/done/logs").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.json(),
        serde_json::json!({
            "lines": [{"rank": 0, "text": "first"}, {"rank": 0, "text": "second"}],
            "end": {"state": "completed", "exit_code": 0},
            "truncated": false,
        })
    );
    // The history of a live run: it does not wait for the run to end.
    let reply = get(server.addr, "/api/runs/live/logs").await;
    assert_eq!(reply.json()["lines"], serde_json::json!([{"rank": 0, "text": "before"}]));
    assert_eq!(reply.json()["end"]["state"], "running");
}

#[tokio::test]
async fn logs_keep_the_last_200000_lines() {
    let server = start().await;
    let reply = get(server.addr, "/api/runs/long/logs").await;
    let json = reply.json();
    let lines = json["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 200_000);
    assert_eq!(lines[0]["text"], format!("line {}", LONG_LINES - 200_000));
    assert_eq!(lines[199_999]["text"], format!("line {}", LONG_LINES - 1));
    assert_eq!(json["truncated"], true);
}
