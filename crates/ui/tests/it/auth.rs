//! Nothing without the token; the query parameter sets the cookie; POST only by header; the
//! security headers on every answer.

use http::{Method, StatusCode};
use theseus_core::backend::JobState;

use crate::harness::{TOKEN, get, request, start, start_with};

const DENIED: &str = "theseus ui: this needs the token that `theseus ui` printed; open the URL it printed";

/// Every kind of route: page, asset, API, event streams, unknown.
const GETS: &[&str] = &[
    "/",
    "/runs/done",
    "/capacity",
    "/assets/app.js",
    "/assets/app.css",
    "/assets/favicon.svg",
    "/api/health",
    "/api/runs",
    "/api/runs/done",
    "/api/runs/done/logs",
    "/api/runs/done/logs/stream",
    "/api/events",
    "/api/capacity",
    "/nowhere",
    "/api/nowhere",
];

#[tokio::test]
async fn without_the_token_every_route_is_401() {
    let server = start().await;
    for path in GETS {
        for method in [Method::GET, Method::HEAD] {
            let reply = request(server.addr, method.clone(), path, &[]).await;
            assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{method} {path}");
            assert_eq!(reply.header("set-cookie"), "", "{path}");
            if method == Method::HEAD {
                continue;
            }
            if path.starts_with("/api/") {
                assert_eq!(reply.json(), serde_json::json!({ "error": DENIED }), "{path}");
            } else {
                assert!(reply.header("content-type").starts_with("text/html"), "{path}");
                assert!(reply.body.contains("this needs the token that `theseus ui` printed"), "{path}");
                assert!(!reply.body.contains("theseus-token"), "{path}: the page leaked");
            }
        }
    }
    let reply = request(server.addr, Method::POST, "/api/runs/live/cancel", &[]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(*server.fake.cancels.lock().unwrap(), 0);
}

#[tokio::test]
async fn a_wrong_token_of_the_same_length_is_401() {
    let server = start().await;
    let wrong = format!("{}e", &TOKEN[..TOKEN.len() - 1]);
    assert_eq!(wrong.len(), TOKEN.len());
    let cookie = format!("theseus_ui_token_{}={wrong}", server.addr.port());
    let bearer = format!("Bearer {wrong}");
    let with_query = format!("/api/health?token={wrong}");
    let tries: [(&str, Vec<(&str, &str)>); 4] = [
        ("/api/health", vec![("x-theseus-token", &wrong)]),
        ("/api/health", vec![("authorization", &bearer)]),
        ("/api/health", vec![("cookie", &cookie)]),
        (&with_query, vec![]),
    ];
    for (path, headers) in &tries {
        let reply = request(server.addr, Method::GET, path, headers).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{path} {headers:?}");
    }
    let reply = request(server.addr, Method::POST, "/api/runs/live/cancel", &[("x-theseus-token", &wrong)]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_query_token_sets_the_cookie_and_the_cookie_then_works() {
    let server = start().await;
    let reply = request(server.addr, Method::GET, &format!("/?token={TOKEN}"), &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    let cookie = reply.header("set-cookie");
    let port = server.addr.port();
    assert_eq!(cookie, format!("theseus_ui_token_{port}={TOKEN}; HttpOnly; SameSite=Lax; Path=/"));
    let pair = cookie.split(';').next().unwrap().to_owned();
    for path in ["/api/health", "/assets/app.js", "/runs/done", "/api/runs/done"] {
        let reply = request(server.addr, Method::GET, path, &[("cookie", &pair)]).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        // Only the query parameter sets the cookie.
        assert_eq!(reply.header("set-cookie"), "", "{path}");
    }
    // Beside other cookies too.
    let several = format!("a=1; {pair}; b=2");
    assert_eq!(request(server.addr, Method::GET, "/api/health", &[("cookie", &several)]).await.status, StatusCode::OK);
}

/// A browser's cookies for 127.0.0.1: by name, whatever the port (as browsers keep them).
#[derive(Default)]
struct Jar(std::collections::BTreeMap<String, String>);

impl Jar {
    fn keep(&mut self, set_cookie: &str) {
        let pair = set_cookie.split(';').next().unwrap();
        let (name, value) = pair.split_once('=').unwrap();
        self.0.insert(name.to_owned(), value.to_owned());
    }

    fn header(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }
}

#[tokio::test]
async fn two_dashboards_on_one_machine_keep_their_own_cookies() {
    let first = start().await;
    let other_token = "fedcba9876543210fedcba9876543210fedcba9876543210";
    let second = start_with(other_token).await;
    let mut jar = Jar::default();
    for (server, token) in [(&first, TOKEN), (&second, other_token)] {
        let reply = request(server.addr, Method::GET, &format!("/?token={token}"), &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        jar.keep(reply.header("set-cookie"));
    }
    assert_eq!(jar.0.len(), 2, "the second dashboard's cookie replaced the first's: {:?}", jar.0);
    // Reloads of either page (the assets and event streams ride on the cookie) still work.
    let cookies = jar.header();
    for server in [&first, &second] {
        for path in ["/", "/assets/app.js", "/api/health"] {
            let reply = request(server.addr, Method::GET, path, &[("cookie", &cookies)]).await;
            assert_eq!(reply.status, StatusCode::OK, "{path} on port {}", server.addr.port());
        }
    }
}

#[tokio::test]
async fn post_needs_the_header_not_the_cookie_nor_the_query() {
    let server = start().await;
    let cookie = format!("theseus_ui_token_{}={TOKEN}", server.addr.port());
    let path = "/api/runs/live/cancel";
    let reply = request(server.addr, Method::POST, path, &[("cookie", &cookie)]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.json()["error"], DENIED);
    let reply = request(server.addr, Method::POST, &format!("{path}?token={TOKEN}"), &[]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let reply = request(server.addr, Method::POST, &format!("{path}?token={TOKEN}"), &[("cookie", &cookie)]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(*server.fake.cancels.lock().unwrap(), 0, "a refused POST reached the source");
    // A cross-site page can send the header only after a CORS preflight, which is refused (the
    // preflight carries no token) and allows nothing: the cookie's SameSite=Lax costs no safety.
    let preflight = [
        ("origin", "https://evil.example"),
        ("access-control-request-method", "POST"),
        ("access-control-request-headers", "x-theseus-token"),
        ("cookie", cookie.as_str()),
    ];
    let reply = request(server.addr, Method::OPTIONS, path, &preflight).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(reply.headers.keys().all(|k| !k.as_str().starts_with("access-control-")), "{:?}", reply.headers);

    let reply = request(server.addr, Method::POST, path, &[("x-theseus-token", TOKEN)]).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.json()["run"]["state"], "cancelled");
    let bearer = format!("Bearer {TOKEN}");
    let reply = request(server.addr, Method::POST, "/api/runs/done/cancel", &[("authorization", &bearer)]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(*server.fake.cancels.lock().unwrap(), 2);
    assert_eq!(get(server.addr, "/api/runs/live").await.json()["run"]["state"], serde_json::json!(JobState::Cancelled));
}

#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let server = start().await;
    let page_policy = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
                       connect-src 'self'; frame-ancestors 'none'";
    let pages = ["/", "/capacity", "/runs/done", "/assets/app.js", "/nowhere"];
    let api = ["/api/health", "/api/runs", "/api/runs/missing", "/api/nowhere", "/api/runs?limit=0"];
    for path in pages.iter().chain(&api) {
        let reply = get(server.addr, path).await;
        assert_eq!(reply.header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(reply.header("referrer-policy"), "no-referrer", "{path}");
        assert_eq!(reply.header("x-frame-options"), "DENY", "{path}");
        if pages.contains(path) {
            assert_eq!(reply.header("content-security-policy"), page_policy, "{path}");
        } else {
            assert_eq!(reply.header("cache-control"), "no-store", "{path}");
        }
    }
    assert_eq!(get(server.addr, "/").await.header("cache-control"), "no-store", "the page holds the token");
    let denied = request(server.addr, Method::GET, "/api/health", &[]).await;
    assert_eq!(denied.header("x-frame-options"), "DENY");
    assert_eq!(denied.header("cache-control"), "no-store");
}

#[tokio::test]
async fn the_page_carries_the_token_html_escaped() {
    let token = r#"t"><script>x</script>&'"#;
    let server = start_with(token).await;
    let reply = request(server.addr, Method::GET, "/", &[("x-theseus-token", token)]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.header("content-type").starts_with("text/html"));
    assert!(reply.body.contains(r#"content="t&quot;&gt;&lt;script&gt;x&lt;/script&gt;&amp;&#39;""#), "{}", reply.body);
    assert!(!reply.body.contains("<script>x"));
    assert!(!reply.body.contains("{{TOKEN}}"));
    let plain = start().await;
    let page = get(plain.addr, "/runs/done").await.body;
    assert!(page.contains(&format!(r#"content="{TOKEN}""#)));
}
