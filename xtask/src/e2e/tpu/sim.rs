//! The TPU simulator child process of the TPU scenarios, and the harness's own calls to it: its
//! admin API (`/sim/v1/`: keys, tokens, preemption, quota) and Google's API with a token of its
//! own, over HTTPS trusting the simulator's CA.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::super::api::https_status;

/// A running `theseus-tpu-sim`, stopped (SIGTERM: it tears down its workers) on drop.
pub(crate) struct TpuSim {
    child: Option<Child>,
    /// `https://127.0.0.1:PORT/`.
    pub(crate) endpoint: String,
    addr: String,
    ca_pem: String,
    /// Its CA's PEM file.
    pub(crate) ca: PathBuf,
    /// The ProxyCommand that reaches a worker's address.
    pub(crate) ssh_proxy: String,
    /// An ssh_config `Host` pattern matching every worker address.
    pub(crate) worker_pattern: String,
    /// Tokens and keys it handed out, which no output may show.
    secrets: Mutex<Vec<String>>,
}

impl TpuSim {
    pub(crate) fn start(bin: &Path, root: &Path, zones: &[&str]) -> Result<TpuSim> {
        std::fs::create_dir_all(root)?;
        let log = root.with_extension("log");
        let mut child = Command::new(bin)
            .arg("--root")
            .arg(root)
            .args(["--port", "0", "--zones", &zones.join(",")])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let ready = (|| -> Result<Value> {
            let mut line = String::new();
            BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
            serde_json::from_str(line.trim()).with_context(|| format!("the simulator printed `{}`", line.trim()))
        })();
        let ready = match ready {
            Ok(v) => v,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.context(format!("the TPU simulator did not start; see {}", log.display())));
            }
        };
        let field = |k: &str| ready[k].as_str().map(str::to_owned).with_context(|| format!("no `{k}` in {ready}"));
        let endpoint = field("endpoint")?;
        let ca = PathBuf::from(field("ca")?);
        let addr = endpoint.trim_start_matches("https://").trim_end_matches('/').to_owned();
        Ok(TpuSim {
            ca_pem: std::fs::read_to_string(&ca).with_context(|| format!("cannot read {}", ca.display()))?,
            ca,
            addr,
            ssh_proxy: field("ssh_proxy")?,
            worker_pattern: field("ssh_host_pattern")?,
            endpoint,
            child: Some(child),
            secrets: Mutex::new(Vec::new()),
        })
    }

    fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> Result<(u16, Value)> {
        let body = body.map(Value::to_string);
        let (status, bytes) = https_status(&self.addr, &self.ca_pem, method, path, token, body.as_deref())?;
        let value = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
        Ok((status, value))
    }

    fn admin(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let (status, value) = self.call(method, &format!("/sim/v1/{path}"), None, body)?;
        if !(200..300).contains(&status) {
            bail!("{method} /sim/v1/{path}: HTTP {status}: {value}");
        }
        Ok(value)
    }

    fn remember(&self, secret: &str) {
        self.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(secret.to_owned());
    }

    /// What no output may show.
    pub(crate) fn secrets(&self) -> Vec<String> {
        self.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// A service-account key file (Google's JSON) the simulator accepts.
    pub(crate) fn service_account_key(&self) -> Result<String> {
        let key = self.admin("POST", "keys", Some(&json!({})))?;
        if let Some(private) = key["private_key"].as_str() {
            // The PEM's base64 body lines are what a leak would show.
            for line in private.lines().filter(|l| l.len() > 40) {
                self.remember(line);
            }
        }
        Ok(key.to_string())
    }

    /// Google's API as an admin of the project (a token of its own).
    fn google(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
        let token = self.admin("POST", "tokens", Some(&json!({})))?;
        let token = token["access_token"].as_str().context("no access_token")?.to_owned();
        self.remember(&token);
        self.call(method, &format!("/v2/projects/{}/locations/{path}", super::PROJECT), Some(&token), body)
    }

    /// The node `id` of `zone`, if it exists.
    pub(crate) fn node(&self, zone: &str, id: &str) -> Result<Option<Value>> {
        match self.google("GET", &format!("{zone}/nodes/{id}"), None)? {
            (200, v) => Ok(Some(v)),
            (404, _) => Ok(None),
            (status, v) => bail!("GET node {id}: HTTP {status}: {v}"),
        }
    }

    /// Creates node `id` as its user would (not labelled by theseus), with `ssh_keys` in its
    /// metadata (what `gcloud compute tpus tpu-vm ssh` adds on a first login).
    pub(crate) fn create_node(&self, zone: &str, id: &str, accelerator: &str, ssh_keys: &str) -> Result<()> {
        let body = json!({
            "acceleratorType": accelerator, "runtimeVersion": "tpu-ubuntu2204-base",
            "metadata": {"ssh-keys": ssh_keys},
        });
        match self.google("POST", &format!("{zone}/nodes?nodeId={id}"), Some(&body))? {
            (200, _) => Ok(()),
            (status, v) => bail!("create node {id}: HTTP {status}: {v}"),
        }
    }

    pub(crate) fn delete_node(&self, zone: &str, id: &str) -> Result<()> {
        match self.google("DELETE", &format!("{zone}/nodes/{id}"), None)? {
            (200 | 404, _) => Ok(()),
            (status, v) => bail!("delete node {id}: HTTP {status}: {v}"),
        }
    }

    pub(crate) fn queued_resources(&self, zone: &str) -> Result<Vec<Value>> {
        match self.google("GET", &format!("{zone}/queuedResources"), None)? {
            (200, v) => Ok(v["queuedResources"].as_array().cloned().unwrap_or_default()),
            (status, v) => bail!("list queued resources: HTTP {status}: {v}"),
        }
    }

    /// Names of the nodes of every zone labelled as created by theseus.
    pub(crate) fn created_nodes(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for zone in [super::ZONE, super::QUOTA_ZONE] {
            let (status, v) = self.google("GET", &format!("{zone}/nodes"), None)?;
            if status != 200 {
                bail!("list nodes of {zone}: HTTP {status}: {v}");
            }
            for node in v["nodes"].as_array().into_iter().flatten() {
                if node["labels"]["theseus-created"] == "true" {
                    names.push(node["name"].as_str().unwrap_or("?").to_owned());
                }
            }
        }
        Ok(names)
    }

    /// Google takes the spot VM back.
    pub(crate) fn preempt(&self, zone: &str, id: &str) -> Result<()> {
        self.admin("POST", &format!("projects/{}/locations/{zone}/nodes/{id}:preempt", super::PROJECT), None).map(drop)
    }

    pub(crate) fn set_quota(&self, project: &str, zone: &str, cores: u32) -> Result<()> {
        let body = json!({"project": project, "zone": zone, "acceleratorCores": cores});
        self.admin("POST", "quota", Some(&body)).map(drop)
    }
}

impl Drop for TpuSim {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pid = child.id().to_string();
        if !Command::new("kill").args(["-TERM", &pid]).status().is_ok_and(|s| s.success()) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}
