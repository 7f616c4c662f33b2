//! The dashboard's JSON API over plain HTTP (`theseus ui --port 0`): the token is the only way
//! in (header, bearer, query for GETs, the cookie a query GET sets, named after the port; never a
//! cookie or query for a POST), the security headers, the routes and their errors, cancel, and no secret anywhere: a
//! `--secret-env` value and the kubeconfig's token and CA data appear in no answer.

use serde_json::Value;
use theseus_kube_sim::Authz;

use super::{CancelOnDrop, UiServer, submit, wait_state};
use crate::{TestContext, text};

/// A job that prints a line and sleeps, and one that completes.
fn code() -> tempfile::TempDir {
    let code = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(code.path().join(name), text).unwrap();
    write("sleep.py", "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n");
    write("done.py", "print('done <b>here</b>', flush=True)\n");
    write("sleep.yaml", "entrypoint: python sleep.py\nrequest: {chip: cpu}\n");
    write("done.yaml", "entrypoint: python done.py\nrequest: {chip: cpu}\n");
    code
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn the_api_lets_in_only_the_token_and_answers_every_route() {
    let ctx = TestContext::new();
    let code = code();
    let done = submit(&ctx, code.path(), "done.yaml", "api-done", &[]);
    let long = submit(&ctx, code.path(), "sleep.yaml", "api-long", &["-g", "g2"]);
    let _cleanup = CancelOnDrop(&ctx, vec![long.clone()]);
    wait_state(&ctx, &done, "completed");
    wait_state(&ctx, &long, "running");
    let ui = UiServer::start(&ctx, &[]);
    let token = ui.token.clone();
    // Named after the port: browsers scope cookies by host, not port.
    let cookie = format!("theseus_ui_token_{}", ui.addr.rsplit_once(':').unwrap().1);
    assert_eq!(token.len(), 48, "{}", ui.url);
    assert!(ui.url.starts_with("http://127.0.0.1:"), "{}", ui.url);

    // Without the token (or with a wrong one) nothing is served, not even health or the assets.
    for path in ["/", "/runs/x", "/capacity", "/assets/app.js", "/assets/app.css", "/api/health", "/api/runs"] {
        for headers in [vec![], vec!["X-Theseus-Token: wrong".to_owned()], vec![format!("Cookie: {cookie}={token}x")]] {
            let (status, head, body) = ui.request("GET", path, &headers);
            assert_eq!(status, 401, "GET {path} {headers:?}: {head}");
            assert!(body.contains("needs the token"), "{path}: {body}");
            assert!(!body.contains(&token));
            let json = path.starts_with("/api/");
            assert_eq!(header(&head, "content-type").is_some_and(|c| c.contains("json")), json, "{path}: {head}");
        }
    }
    // Every way in for a GET.
    let ways = [
        (format!("/api/health?token={token}"), vec![]),
        ("/api/health".to_owned(), vec![ui.token_header()]),
        ("/api/health".to_owned(), vec![format!("Authorization: Bearer {token}")]),
        ("/api/health".to_owned(), vec![format!("Cookie: {cookie}={token}")]),
    ];
    for (path, headers) in &ways {
        let (status, head, body) = ui.request("GET", path, headers);
        assert_eq!(status, 200, "{path} {headers:?}: {head}");
        let health: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(health["ok"], true, "{body}");
        assert_eq!(header(&head, "x-content-type-options"), Some("nosniff"));
        assert_eq!(header(&head, "referrer-policy"), Some("no-referrer"));
        assert_eq!(header(&head, "x-frame-options"), Some("DENY"));
        assert_eq!(header(&head, "cache-control"), Some("no-store"), "{head}");
    }
    // The query sets the cookie; the page carries the token in its meta tag and a strict CSP.
    let (status, head, page) = ui.request("GET", &format!("/?token={token}"), &[]);
    assert_eq!(status, 200, "{head}");
    let set = header(&head, "set-cookie").unwrap_or_default();
    for part in [format!("{cookie}={token}"), "HttpOnly".into(), "SameSite=Lax".into(), "Path=/".into()] {
        assert!(set.contains(&part), "{set}");
    }
    let csp = header(&head, "content-security-policy").unwrap_or_default();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(page.contains(&format!("<meta name=\"theseus-token\" content=\"{token}\">")), "{page}");
    assert!(!page.contains("<script>") && !page.contains("<style"), "no inline script or style: {page}");

    // The routes.
    let (status, runs) = ui.get_json("/api/runs");
    assert_eq!(status, 200, "{runs}");
    assert_eq!(runs["total"], 2, "{runs}");
    let ids: Vec<&str> =
        runs["runs"].as_array().unwrap().iter().filter_map(|r| r["identity"]["run_id"].as_str()).collect();
    assert_eq!(ids, [long.as_str(), done.as_str()], "newest first");
    assert_eq!(runs["counts"]["running"], 1, "{runs}");
    assert_eq!(ui.get_json("/api/runs?group=g2").1["total"], 1);
    assert_eq!(ui.get_json("/api/runs?state=completed&project=&host=").1["total"], 1, "empty values are no filter");
    assert_eq!(ui.get_json("/api/runs?offset=1&limit=1").1["runs"][0]["identity"]["run_id"], done.as_str());
    for bad in ["/api/runs?state=sleepy", "/api/runs?limit=100000", "/api/runs?limit=x"] {
        let (status, body) = ui.get_json(bad);
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"].is_string(), "{bad}: {body}");
    }
    let (status, detail) = ui.get_json(&format!("/api/runs/{done}"));
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["run"]["state"], "completed", "{detail}");
    assert_eq!(detail["commands"]["status"], format!("theseus status {done}"));
    assert_eq!(ui.get_json("/api/runs/api-done").1["run"]["identity"]["run_id"], done.as_str(), "by name too");
    let (status, missing) = ui.get_json("/api/runs/no-such-run");
    assert_eq!(status, 404, "{missing}");
    assert!(missing["error"].is_string());
    let (status, logs) = ui.get_json(&format!("/api/runs/{done}/logs"));
    assert_eq!(status, 200, "{logs}");
    assert!(logs["lines"].to_string().contains("done <b>here</b>"), "{logs}");
    assert_eq!(logs["end"]["state"], "completed", "{logs}");
    let (status, head, stream) =
        ui.request("GET", &format!("/api/runs/{done}/logs/stream?follow=0"), &[ui.token_header()]);
    assert_eq!(status, 200, "{head}");
    assert!(header(&head, "content-type").is_some_and(|c| c.starts_with("text/event-stream")), "{head}");
    assert!(stream.contains("event: line\ndata: ") && stream.contains("event: end\ndata: "), "{stream}");
    let (status, capacity) = ui.get_json("/api/capacity");
    assert_eq!(status, 200, "{capacity}");
    assert!(capacity["hosts"].as_array().unwrap().iter().any(|h| h["host"] == "local"), "{capacity}");
    assert_eq!(ui.request("GET", "/no/such/page", &[ui.token_header()]).0, 404);
    assert_eq!(ui.request("POST", "/api/health", &[ui.token_header()]).0, 405);

    // POST only with a header: the cookie or the query never cancel (a cross-site form could).
    let cancel = format!("/api/runs/{long}/cancel");
    for (path, headers) in [
        (cancel.clone(), vec![format!("Cookie: {cookie}={token}")]),
        (format!("{cancel}?token={token}"), vec![]),
        (cancel.clone(), vec![]),
    ] {
        let (status, head, _) = ui.request("POST", &path, &headers);
        assert_eq!(status, 401, "POST {path} {headers:?}: {head}");
    }
    wait_state(&ctx, &long, "running");
    let (status, _, body) = ui.request("POST", &cancel, &[ui.token_header()]);
    assert_eq!(status, 200, "{body}");
    let detail: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(detail["run"]["state"], "cancelled", "{detail}");
    wait_state(&ctx, &long, "cancelled");
}

/// What the kubeconfig holds that must never be shown: its token and its CA data.
fn kubeconfig_secrets(ctx: &TestContext) -> Vec<String> {
    let config = std::fs::read_to_string(ctx.home().join(".kube/config")).unwrap();
    let ca = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data:"))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .expect("the simulator's kubeconfig has CA data");
    vec![KUBE_TOKEN.to_owned(), ca[..ca.len().min(60)].to_owned()]
}

const KUBE_TOKEN: &str = "t-ui-researcher-9f27c1d4e8";
const SECRET: &str = "ui-secret-value-52be0a7d";

#[test]
fn no_secret_reaches_the_api_or_the_pages() {
    let ctx = TestContext::new();
    let rbac = std::fs::read_to_string(crate::repo_root().join("docs/rbac.yaml")).unwrap();
    let authz = Authz::from_files(&format!("{KUBE_TOKEN},researcher,1\n"), &rbac).unwrap();
    // Dropped last: the runs are cancelled while the simulator still answers.
    let _world = crate::volcano::SimWorld::start_with(&ctx, Some((authz, KUBE_TOKEN)));
    let code = code();
    let mut runs = Vec::new();
    for (name, extra) in
        [("sec-local", &[][..]), ("sec-sim", &["--host", "k8s", "--cpu", "100m", "--mem", "128Mi"][..])]
    {
        let out = ctx
            .cmd()
            .env("UI_SECRET", SECRET)
            .args([
                "submit",
                name,
                code.path().join("sleep.yaml").to_str().unwrap(),
                "--code",
                code.path().to_str().unwrap(),
            ])
            .args(["--secret-env", "UI_SECRET"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        runs.push(text(&out.stdout).trim().lines().last().unwrap().to_owned());
    }
    let _cleanup = CancelOnDrop(&ctx, runs.clone());
    for run in &runs {
        wait_state(&ctx, run, "running");
    }
    let ui = UiServer::start(&ctx, &[]);
    let mut paths = vec!["/".to_owned(), "/api/health".into(), "/api/runs".into(), "/api/capacity".into()];
    for run in &runs {
        paths.push(format!("/api/runs/{run}"));
        paths.push(format!("/api/runs/{run}/logs"));
        paths.push(format!("/api/runs/{run}/logs/stream?follow=0"));
    }
    let mut secrets = kubeconfig_secrets(&ctx);
    secrets.push(SECRET.to_owned());
    for path in &paths {
        let (status, head, body) = ui.request("GET", path, &[ui.token_header()]);
        assert_eq!(status, 200, "{path}: {head}\n{body}");
        for secret in &secrets {
            assert!(!body.contains(secret.as_str()), "GET {path} shows a secret ({secret}): {body}");
        }
    }
    // The simulator's run is there with its pod: the API did reach the cluster.
    let (_, detail) = ui.get_json(&format!("/api/runs/{}", runs[1]));
    assert!(detail["status"]["ranks"].as_array().is_some_and(|r| !r.is_empty()), "{detail}");
    assert!(!ui.stderr().contains(SECRET) && !ui.stderr().contains(KUBE_TOKEN), "{}", ui.stderr());
}
