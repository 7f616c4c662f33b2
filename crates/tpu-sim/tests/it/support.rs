//! Test support: a simulator per test and a curl-based client that trusts its CA.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use theseus_tpu_sim::{Sim, SimConfig};

/// A running simulator, its root directory and an API token.
pub(crate) struct Fixture {
    pub(crate) sim: Sim,
    pub(crate) _root: tempfile::TempDir,
    pub(crate) token: String,
}

pub(crate) const PARENT: &str = "v2/projects/p1/locations/us-central2-b";

impl Fixture {
    /// A simulator without real workers (fast, no root needed).
    pub(crate) async fn api_only() -> Fixture {
        Fixture::start(|c| {
            c.workers = false;
            c.create_seconds = Duration::from_millis(300);
            c.delete_seconds = Duration::from_millis(100);
        })
        .await
    }

    pub(crate) async fn start(tune: impl FnOnce(&mut SimConfig)) -> Fixture {
        // Under /var/tmp: a root under /tmp would keep the workers from a private /tmp.
        let root = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut config = SimConfig { root: root.path().to_owned(), ..SimConfig::default() };
        tune(&mut config);
        let sim = Sim::start(config).await.unwrap();
        let mut fx = Fixture { sim, _root: root, token: String::new() };
        let (status, reply) = fx.admin("POST", "tokens", json!({})).await;
        assert_eq!(status, 200, "{reply}");
        fx.token = reply["access_token"].as_str().unwrap().to_owned();
        fx
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.sim.info().endpoint)
    }

    /// An API call with the fixture's token.
    pub(crate) async fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let auth = format!("Authorization: Bearer {}", self.token);
        curl(&self.sim.info().ca, method, &self.url(path), body.map(|b| b.to_string()), &[&auth], "application/json")
            .await
    }

    /// An admin call.
    pub(crate) async fn admin(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
        let body = (method != "GET").then(|| body.to_string());
        curl(&self.sim.info().ca, method, &self.url(&format!("sim/v1/{path}")), body, &[], "application/json").await
    }

    /// Polls an operation until it is done (at most 30 s).
    pub(crate) async fn wait_op(&self, op: &Value) -> Value {
        let name = op["name"].as_str().unwrap_or_else(|| panic!("not an operation: {op}")).to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, op) = self.api("GET", &format!("v2/{name}"), None).await;
            assert_eq!(status, 200, "{op}");
            if op["done"] == true {
                return op;
            }
            assert!(Instant::now() < deadline, "operation {name} not done in 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Polls until `f` holds for the resource at `path` (at most 30 s).
    pub(crate) async fn wait_for(&self, path: &str, what: &str, f: impl Fn(u16, &Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, v) = self.api("GET", path, None).await;
            if f(status, &v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{path}: not {what} in 30 s: {status} {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Creates a node and waits for its operation.
    pub(crate) async fn create_node(&self, id: &str, body: Value) -> Value {
        let (status, op) = self.api("POST", &format!("{PARENT}/nodes?nodeId={id}"), Some(body)).await;
        assert_eq!(status, 200, "{op}");
        self.wait_op(&op).await
    }
}

/// A v4-16 (two workers) on-demand node body.
pub(crate) fn v4_16() -> Value {
    json!({"acceleratorType": "v4-16", "runtimeVersion": "tpu-ubuntu2204-base"})
}

/// `curl` with the CA; the status and the JSON body (`Value::Null` when not JSON).
pub(crate) async fn curl(
    ca: &std::path::Path,
    method: &str,
    url: &str,
    body: Option<String>,
    headers: &[&str],
    content_type: &str,
) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--cacert"]).arg(ca).args(["-X", method, "-w", "\n%{http_code}"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    if let Some(body) = body {
        cmd.args(["-H", &format!("Content-Type: {content_type}"), "--data-binary", &body]);
    }
    cmd.arg(url);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap().unwrap();
    assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), serde_json::from_str(body).unwrap_or(Value::Null))
}
