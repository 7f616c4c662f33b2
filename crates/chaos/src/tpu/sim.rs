//! The harness's side of `theseus-tpu-sim`: the child process (stopped with SIGTERM, so it
//! removes its namespaces and sshd), its admin API and Google's API with a token of its own,
//! over HTTPS through curl trusting the simulator's CA.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use super::{PROJECT, ZONE};
use crate::proc::indent;

/// A running `theseus-tpu-sim`, stopped with SIGTERM (it removes its workers) on drop.
pub(super) struct Sim {
    child: Child,
    pub(super) endpoint: String,
    pub(super) ca: PathBuf,
    pub(super) ssh_proxy: String,
    pub(super) pattern: String,
}

impl Sim {
    pub(super) fn start(bin: &Path, root: &Path) -> Result<Sim, String> {
        let log = std::fs::File::create(root.join("sim.log")).map_err(|e| e.to_string())?;
        let mut child = Command::new(bin)
            .arg("--root")
            .arg(root.join("sim"))
            .args(["--port", "0", "--zones", ZONE, "--create-seconds", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                format!("cannot run {}: {e} (`cargo build -p theseus-tpu-sim` puts it beside `theseus`)", bin.display())
            })?;
        let mut line = String::new();
        let read = child.stdout.take().map(|out| BufReader::new(out).read_line(&mut line));
        let ready: Value = serde_json::from_str(line.trim()).unwrap_or_default();
        let field = |k: &str| ready[k].as_str().map(str::to_owned);
        let sim = match (read, field("endpoint"), field("ca"), field("ssh_proxy"), field("ssh_host_pattern")) {
            (Some(Ok(_)), Some(endpoint), Some(ca), Some(ssh_proxy), Some(pattern)) => {
                Sim { child, endpoint, ca: PathBuf::from(ca), ssh_proxy, pattern }
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let log = std::fs::read_to_string(root.join("sim.log")).unwrap_or_default();
                return Err(format!(
                    "the TPU simulator did not start (it printed `{}`):\n{}",
                    line.trim(),
                    indent(&log)
                ));
            }
        };
        Ok(sim)
    }

    /// `METHOD PATH` on the simulator with curl (its CA trusted): the status and the JSON.
    pub(super) fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        let url = format!("{}{}", self.endpoint, path.trim_start_matches('/'));
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "30", "-X", method, "-w", "\n%{http_code}", "--cacert"]).arg(&self.ca);
        cmd.args(["-H", "Content-Type: application/json"]);
        if let Some(token) = token {
            cmd.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        if let Some(body) = body {
            cmd.args(["--data-binary", &body.to_string()]);
        }
        let out = cmd.arg(&url).output().map_err(|e| format!("cannot run curl: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        let code: u16 = code
            .trim()
            .parse()
            .map_err(|_| format!("{method} {path}: curl failed: {}", String::from_utf8_lossy(&out.stderr).trim()))?;
        Ok((code, serde_json::from_str(body).unwrap_or(Value::Null)))
    }

    pub(super) fn admin(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        match self.call(method, &format!("sim/v1/{path}"), None, body)? {
            (200, value) => Ok(value),
            (status, value) => Err(format!("{method} /sim/v1/{path}: HTTP {status}: {value}")),
        }
    }

    /// Google's API with a token of the harness's own: the `items` of a list.
    fn list(&self, what: &str) -> Result<Vec<Value>, String> {
        let token = self.admin("POST", "tokens", Some(&json!({})))?;
        let token = token["access_token"].as_str().unwrap_or_default().to_owned();
        let path = format!("v2/projects/{PROJECT}/locations/{ZONE}/{what}");
        match self.call("GET", &path, Some(&token), None)? {
            (200, v) => Ok(v[what].as_array().cloned().unwrap_or_default()),
            (status, v) => Err(format!("GET {what}: HTTP {status}: {v}")),
        }
    }

    /// Nodes and queued resources labelled `theseus-created=true`, with their state.
    pub(super) fn created(&self) -> Result<Vec<(String, String)>, String> {
        let mut found = Vec::new();
        for node in self.list("nodes")? {
            if node["labels"]["theseus-created"] == "true" {
                found.push((
                    format!("TPU VM {}", short(&node["name"])),
                    node["state"].as_str().unwrap_or("?").to_owned(),
                ));
            }
        }
        for qr in self.list("queuedResources")? {
            let labelled = qr["tpu"]["nodeSpec"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|spec| spec["node"]["labels"]["theseus-created"] == "true");
            if labelled {
                found.push((format!("queued resource {}", short(&qr["name"])), qr["state"]["state"].to_string()));
            }
        }
        Ok(found)
    }

    /// The API and token requests served so far: method and path.
    pub(super) fn requests(&self) -> Result<Vec<(String, String)>, String> {
        let log = self.admin("GET", "requests", None)?;
        Ok(log
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| (r["method"].as_str().unwrap_or("").to_owned(), r["path"].as_str().unwrap_or("").to_owned()))
            .collect())
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        // SIGTERM (by PID: our child) lets it tear down its namespaces and sshd.
        let pid = self.child.id().to_string();
        if !Command::new("kill").args(["-TERM", &pid]).status().is_ok_and(|s| s.success()) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The last part of a resource name.
fn short(name: &Value) -> String {
    name.as_str().unwrap_or("?").rsplit('/').next().unwrap_or("?").to_owned()
}
