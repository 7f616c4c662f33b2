//! The API client, the credential chain and the VM's lifecycle against the TPU simulator
//! (crates/tpu-sim) without its workers (no root needed): Google's API over HTTPS with the
//! simulator's CA, its token endpoint, metadata server and admin API (quota, stockout,
//! preemption, expired tokens, injected faults). Requests are counted from the simulator's log.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};
use theseus_backend_tpu::api::transport::Http;
use theseus_backend_tpu::api::{ErrorKind, Retry};
use theseus_backend_tpu::auth::Env;
use theseus_backend_tpu::cloud::{Cloud, Waits, labels};
use theseus_backend_tpu::config::TpuSettings;
use theseus_tpu_sim::{Sim, SimConfig};

const ZONE: &str = "us-central2-b";
const PROJECT: &str = "sim-project";

struct Lab {
    sim: Sim,
    dir: tempfile::TempDir,
    http: Http,
}

impl Lab {
    async fn start() -> Lab {
        Lab::start_with(None).await
    }

    /// With `flaky`: about one API read in twenty answers 503 (a seed makes it repeatable).
    async fn start_with(flaky: Option<u64>) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let config = SimConfig {
            root: dir.path().join("sim"),
            workers: false,
            create_seconds: Duration::from_millis(300),
            delete_seconds: Duration::from_millis(100),
            latency: Duration::from_millis(1),
            flaky_seed: flaky,
            ..SimConfig::default()
        };
        let sim = Sim::start(config).await.unwrap();
        let http = Http::new(Some(&sim.info().ca), None).unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        Lab { sim, dir, http }
    }

    /// A call of the simulator's admin API.
    async fn admin(&self, path: &str, body: Value) -> Value {
        let request = http::Request::post(format!("{}sim/v1/{path}", self.sim.info().endpoint))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let answer = self.http.send(request, Duration::from_secs(30), "admin").await.unwrap();
        assert_eq!(answer.status, 200, "{path}: {}", String::from_utf8_lossy(&answer.body));
        serde_json::from_slice(&answer.body).unwrap()
    }

    /// The environment of a user with no credentials yet: the simulator's endpoint and CA, a
    /// home and PATH of its own, no metadata server.
    fn env(&self) -> Env {
        let info = self.sim.info();
        Env::from_pairs([
            ("HOME", self.dir.path().display().to_string()),
            ("PATH", self.dir.path().join("bin").display().to_string()),
            ("GCE_METADATA_HOST", "127.0.0.1:1".to_owned()),
            ("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU", info.endpoint.clone()),
            ("CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", info.ca.display().to_string()),
        ])
    }

    /// The environment with a service-account key the simulator issued.
    async fn env_with_key(&self) -> Env {
        let key = self.admin("keys", json!({"project": PROJECT})).await;
        let file = self.dir.path().join("sa.json");
        std::fs::write(&file, key.to_string()).unwrap();
        self.env().with("GOOGLE_APPLICATION_CREDENTIALS", file.display().to_string())
    }

    fn count(&self, method: &str, fragment: &str) -> usize {
        self.sim.requests().iter().filter(|r| r.method == method && r.path.contains(fragment)).count()
    }
}

fn settings() -> TpuSettings {
    TpuSettings {
        cluster: "sim".into(),
        zone: ZONE.into(),
        accelerator_type: "v4-16".into(),
        version: "tpu-ubuntu2204-base".into(),
        ..TpuSettings::default()
    }
}

fn cloud(settings: &TpuSettings, env: Env) -> Cloud {
    Cloud::with_env("simtpu", settings, env)
        .unwrap()
        .with_waits(Waits {
            poll: Duration::from_millis(50),
            ready: Duration::from_secs(60),
            delete: Duration::from_secs(60),
        })
        .with_retry(Retry { attempts: 3, first_wait: Duration::from_millis(10), max_wait: Duration::from_millis(20) })
}

fn quiet() -> impl Fn(&str) + Send + Sync {
    |_: &str| {}
}

#[tokio::test]
async fn create_wait_reuse_and_delete_an_on_demand_vm() {
    let lab = Lab::start().await;
    let cloud = cloud(&settings(), lab.env_with_key().await);

    // The project comes from the key; nothing is made without confirmation.
    let line = cloud.plan_creation().await.unwrap().unwrap();
    assert_eq!(
        line,
        "TPU VM simtpu (v4-16: 8 chips on 2 workers, on-demand, runtime tpu-ubuntu2204-base) in us-central2-b of project sim-project"
    );
    let e = cloud.ensure_ready(false, &labels("run-1", "me"), &[], &quiet()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Refused);
    assert_eq!(lab.count("POST", "/nodes"), 0);

    let keys = vec!["me:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx me@box".to_owned()];
    let ensured = cloud.ensure_ready(true, &labels("run-1", "me"), &keys, &quiet()).await.unwrap();
    assert!(ensured.created && ensured.node.is_ready() && ensured.node.created_by_theseus);
    assert_eq!(ensured.node.workers.len(), 2);
    assert_eq!(ensured.node.metadata["ssh-keys"], keys[0]);
    assert_eq!(lab.count("POST", "/nodes?nodeId=simtpu"), 1);

    // READY: used as it is, one request.
    let before = lab.sim.requests().len();
    let again = cloud.ensure_ready(false, &labels("run-2", "me"), &[], &quiet()).await.unwrap();
    assert!(!again.created);
    assert_eq!(lab.sim.requests().len() - before, 1);
    assert_eq!(cloud.plan_creation().await.unwrap(), None);
    assert_eq!(cloud.created_nodes().await.unwrap().len(), 1);

    assert!(cloud.delete(&quiet()).await.unwrap());
    assert!(cloud.node().await.unwrap().is_none());
    assert!(!cloud.delete(&quiet()).await.unwrap());
}

#[tokio::test]
async fn spot_vm_through_a_queued_resource_is_made_again_after_a_preemption() {
    let lab = Lab::start().await;
    let cloud = cloud(&TpuSettings { spot: true, ..settings() }, lab.env_with_key().await);
    let first = cloud.ensure_ready(true, &labels("run-1", "me"), &[], &quiet()).await.unwrap();
    assert!(first.node.spot && first.node.queued_resource.as_deref() == Some("simtpu"));
    assert_eq!(lab.count("POST", "/queuedResources?queuedResourceId=simtpu"), 1);

    let preempted = lab.admin(&format!("projects/{PROJECT}/locations/{ZONE}/nodes/simtpu:preempt"), json!({})).await;
    assert_eq!(preempted["state"], "PREEMPTED");
    assert!(cloud.node().await.unwrap().unwrap().is_lost());

    let lines = std::sync::Mutex::new(Vec::new());
    let progress = |l: &str| lines.lock().unwrap().push(l.to_owned());
    let second = cloud.ensure_ready(true, &labels("run-1", "me"), &[], &progress).await.unwrap();
    assert!(second.created && second.node.is_ready());
    assert_ne!(first.node.create_time, second.node.create_time, "a new VM");
    assert_eq!(lab.count("DELETE", "/queuedResources/simtpu?force=true"), 1);
    assert!(lines.lock().unwrap().iter().any(|l| l.contains("is PREEMPTED: deleting it to create it again")));

    assert!(cloud.delete(&quiet()).await.unwrap());
    assert!(cloud.created_nodes().await.unwrap().is_empty());
}

#[tokio::test]
async fn quota_and_stockout_are_one_line_and_leave_nothing() {
    let lab = Lab::start().await;
    let env = lab.env_with_key().await;
    lab.admin("quota", json!({"project": PROJECT, "zone": ZONE, "acceleratorCores": 8})).await;
    let cloud = cloud(&settings(), env.clone());
    let e = cloud.ensure_ready(true, &labels("r", "me"), &[], &quiet()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Quota, "{e}");
    assert!(e.message.starts_with("quota exceeded for TPU v4 cores in us-central2-b of project sim-project: "), "{e}");
    assert!(!e.message.contains('\n'));
    assert_eq!(lab.count("POST", "/nodes?nodeId"), 1, "a quota refusal is not retried");

    lab.admin("quota", json!({"project": PROJECT, "zone": ZONE, "acceleratorCores": null})).await;
    lab.admin("capacity", json!({"zone": ZONE, "available": false})).await;
    let e = cloud.ensure_ready(true, &labels("r", "me"), &[], &quiet()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Stockout, "{e}");
    assert!(
        e.message.starts_with("no capacity for v4-16 in us-central2-b now (Google: There is no more capacity"),
        "{e}"
    );
    assert!(cloud.node().await.unwrap().is_none(), "the failed VM was deleted");
    assert!(cloud.created_nodes().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unknown_zone_is_named() {
    let lab = Lab::start().await;
    let cloud = cloud(&TpuSettings { zone: "us-nowhere1-a".into(), ..settings() }, lab.env_with_key().await);
    let e = cloud.plan_creation().await.unwrap_err();
    assert!(
        e.message.contains("Location us-nowhere1-a is not found") && e.message.contains("`zone` (us-nowhere1-a)"),
        "{e}"
    );
}

#[tokio::test]
async fn injected_server_errors_are_retried() {
    let lab = Lab::start().await;
    let cloud = cloud(&settings(), lab.env_with_key().await);
    lab.admin("faults", json!({"method": "GET", "path": "/nodes/simtpu", "status": 503})).await;
    assert!(cloud.node().await.unwrap().is_none());
    let tries: Vec<u16> =
        lab.sim.requests().iter().filter(|r| r.path.ends_with("/nodes/simtpu")).map(|r| r.status).collect();
    assert_eq!(tries, [503, 404]);
}

#[tokio::test]
async fn an_expired_token_is_renewed_once() {
    let lab = Lab::start().await;
    let cloud = cloud(&settings(), lab.env_with_key().await);
    assert!(cloud.node().await.unwrap().is_none());
    lab.admin("tokens:expire", json!({})).await;
    assert!(cloud.node().await.unwrap().is_none());
    let statuses: Vec<(String, u16)> = lab
        .sim
        .requests()
        .iter()
        .filter(|r| r.path.contains("/nodes/simtpu") || r.path.contains("token"))
        .map(|r| (r.path.rsplit('/').next().unwrap().to_owned(), r.status))
        .collect();
    let expected: Vec<(String, u16)> =
        [("token", 200), ("simtpu", 404), ("simtpu", 401), ("token", 200), ("simtpu", 404)]
            .into_iter()
            .map(|(p, s)| (p.to_owned(), s))
            .collect();
    assert_eq!(statuses, expected);
}

#[tokio::test]
async fn users_application_default_credentials_reach_the_api() {
    let lab = Lab::start().await;
    let adc = lab.admin("authorized-user", json!({})).await;
    let config = lab.dir.path().join(".config/gcloud");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("application_default_credentials.json"), adc.to_string()).unwrap();
    let env = lab.env().with("THESEUS_GOOGLE_TOKEN_URI", lab.sim.info().token_uri.clone());
    let cloud = cloud(&TpuSettings { project: Some(PROJECT.into()), ..settings() }, env);
    assert!(cloud.node().await.unwrap().is_none());
}

fn fake_gcloud(dir: &Path, token: &str) {
    use std::os::unix::fs::PermissionsExt;
    let program = dir.join("bin/gcloud");
    std::fs::write(&program, format!("#!/bin/sh\necho {token}\n")).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn gcloud_and_the_metadata_server_reach_the_api() {
    let lab = Lab::start().await;
    let token = lab.admin("tokens", json!({})).await["access_token"].as_str().unwrap().to_owned();
    fake_gcloud(lab.dir.path(), &token);
    let cloud_gcloud = cloud(&TpuSettings { project: Some(PROJECT.into()), ..settings() }, lab.env());
    assert!(cloud_gcloud.node().await.unwrap().is_none());

    // No gcloud, no files: the metadata server (token and project).
    let env = lab
        .env()
        .with("PATH", lab.dir.path().join("nothing").display().to_string())
        .with("GCE_METADATA_HOST", lab.sim.info().metadata_host.clone());
    let cloud_vm = cloud(&settings(), env);
    assert!(cloud_vm.node().await.unwrap().is_none());
    assert_eq!(cloud_vm.client().await.unwrap().project(), PROJECT);
}

#[tokio::test]
async fn without_credentials_nothing_is_asked_of_the_api() {
    let lab = Lab::start().await;
    let cloud = cloud(&TpuSettings { project: Some(PROJECT.into()), ..settings() }, lab.env());
    let e = cloud.node().await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Credentials);
    assert!(
        e.message.starts_with("no Google credentials found; looked at: GOOGLE_APPLICATION_CREDENTIALS (not set), "),
        "{e}"
    );
    assert!(lab.sim.requests().is_empty());
}

#[tokio::test]
async fn a_create_whose_operation_fails_leaves_nothing() {
    let lab = Lab::start().await;
    let cloud = cloud(&settings(), lab.env_with_key().await);
    lab.admin("faults", json!({"operation": {"code": 13, "message": "Internal error.", "verb": "create"}})).await;
    let e = cloud.ensure_ready(true, &labels("r", "me"), &[], &quiet()).await.unwrap_err();
    assert!(e.message.contains("Internal error."), "{e}");
    assert!(cloud.node().await.unwrap().is_none(), "nothing left behind");
}

#[tokio::test]
async fn a_cleanup_that_fails_says_what_to_delete() {
    let lab = Lab::start().await;
    // Given up on before the VM is READY (300 ms); deleting it fails as well.
    let waits =
        Waits { poll: Duration::from_millis(20), ready: Duration::from_millis(100), delete: Duration::from_secs(60) };
    let cloud = cloud(&settings(), lab.env_with_key().await).with_waits(waits);
    lab.admin("faults", json!({"method": "DELETE", "path": "/nodes/simtpu", "status": 500, "times": 3})).await;
    let e = cloud.ensure_ready(true, &labels("r", "me"), &[], &quiet()).await.unwrap_err();
    assert!(
        e.message.contains("did not finish in time")
            && e.message.contains("deleting what was made failed too")
            && e.message.contains("(`gcloud compute tpus tpu-vm delete simtpu --zone us-central2-b`)"),
        "{e}"
    );
    assert!(!e.message.contains('\n'));
    assert!(cloud.node().await.unwrap().is_some(), "what the line names is there");
    // The faults are spent: theseus's own delete (cancel, gc) removes it.
    assert!(cloud.delete(&quiet()).await.unwrap());
}

#[tokio::test]
async fn a_flaky_api_does_not_break_the_lifecycle() {
    for seed in [1, 2, 3] {
        let lab = Lab::start_with(Some(seed)).await;
        let cloud = cloud(&TpuSettings { spot: seed % 2 == 0, ..settings() }, lab.env_with_key().await);
        let ensured = cloud.ensure_ready(true, &labels("r", "me"), &[], &quiet()).await.unwrap();
        assert!(ensured.node.is_ready());
        assert!(cloud.delete(&quiet()).await.unwrap());
        assert!(cloud.node().await.unwrap().is_none());
        let failed = lab.sim.requests().iter().filter(|r| r.status == 503).count();
        eprintln!("seed {seed}: {failed} answers 503 of {}", lab.sim.requests().len());
    }
}

/// The kinds of requests of a lifecycle, as fault paths: `(method, path fragment)`.
fn kinds(lab: &Lab) -> Vec<(String, String)> {
    let mut kinds: Vec<(String, String)> = Vec::new();
    for r in lab.sim.requests() {
        // `nodes/simtpu`, `nodes?nodeId=simtpu`, `queuedResources/simtpu?force=true`, `/token`...
        let fragment = match r.path.split_once(&format!("/locations/{ZONE}/")) {
            Some((_, rest)) if rest.starts_with("operations/") => "/operations/".to_owned(),
            Some((_, rest)) => rest.to_owned(),
            None => r.path.clone(),
        };
        let kind = (r.method.clone(), fragment);
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

#[tokio::test]
async fn every_kind_of_request_failed_in_turn_leaves_nothing_unnamed() {
    for spot in [false, true] {
        let settings = TpuSettings { spot, ..settings() };
        let clean = Lab::start().await;
        let cloud_clean = cloud(&settings, clean.env_with_key().await);
        cloud_clean.ensure_ready(true, &labels("r", "me"), &[], &quiet()).await.unwrap();
        cloud_clean.delete(&quiet()).await.unwrap();
        let kinds = kinds(&clean);
        assert!(kinds.len() >= 5, "{kinds:?}");
        for (method, fragment) in kinds {
            let lab = Lab::start().await;
            let cloud = cloud(&settings, lab.env_with_key().await);
            // More failures than the client's attempts.
            lab.admin("faults", json!({"method": method, "path": fragment, "status": 503, "times": 3})).await;
            let case = format!("spot={spot} {method} {fragment}");
            match cloud.ensure_ready(true, &labels("r", "me"), &[], &quiet()).await {
                Ok(ensured) => {
                    assert!(ensured.node.is_ready(), "{case}");
                    if let Err(e) = cloud.delete(&quiet()).await {
                        assert!(!e.message.contains('\n'), "{case}: {e}");
                        assert!(
                            cloud.node().await.unwrap().is_some(),
                            "{case}: a failed delete leaves the VM to delete again"
                        );
                        assert!(cloud.delete(&quiet()).await.unwrap(), "{case}");
                    }
                }
                Err(e) => {
                    assert!(!e.message.contains('\n'), "{case}: {e}");
                    let left = cloud.created_nodes().await.unwrap();
                    assert!(
                        left.is_empty() || e.message.contains("gcloud compute tpus tpu-vm delete simtpu"),
                        "{case}: {e}; left {left:?}"
                    );
                }
            }
            assert!(cloud.node().await.unwrap().is_none(), "{case}: nothing left");
        }
    }
}
