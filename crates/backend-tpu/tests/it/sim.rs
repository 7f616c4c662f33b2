//! The backend against the TPU simulator (crates/tpu-sim): the real API over HTTPS with its CA
//! and a service-account key, real workers (sshd in network namespaces, reached through the
//! simulator's proxy as a site's bastion would be, keys from the node's `ssh-keys`), their real
//! metadata servers. One test, one simulator, in order: creation refused without confirmation,
//! a confirmed create of a spot VM of two workers and a job wired across them, the conformance
//! suite on the READY VM, then a run on a VM it creates, preempted in the middle: `status`
//! creates the VM anew and the run restarts as attempt 2; when it ends, worker 0 deletes the
//! VM. Needs root (network namespaces) and the lab's user `theseus-test` (`cargo xtask lab up`).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use theseus_backend_tpu::backend::{Connector, TpuBackend, TpuHandleData, cloud_vm};
use theseus_backend_tpu::cloud::{Cloud, Waits};
use theseus_backend_tpu::config::TpuSettings;
use theseus_core::backend::{Backend, JobState, LogOptions, SubmitOptions};
use theseus_core::config::ClusterConfig;
use theseus_core::testing::{self, Harness};
use theseus_tpu_sim::{Sim, SimConfig};

const USER: &str = "theseus-test";
const NAME: &str = "simtpu";
const ZONE: &str = "us-central2-b";
const PROJECT: &str = "sim-project";

/// Why the simulator's workers cannot run here, if so.
fn missing() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root (the simulator's workers need network namespaces)".into());
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    if !passwd.lines().any(|l| l.starts_with(&format!("{USER}:"))) {
        return Some(format!("no user `{USER}` (run `cargo xtask lab up` once)"));
    }
    None
}

/// `curl` of the simulator's admin API.
fn admin(sim: &Sim, path: &str, body: &str) -> serde_json::Value {
    let info = sim.info();
    let out = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&info.ca)
        .args(["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", body])
        .arg(format!("{}sim/v1/{path}", info.endpoint))
        .output()
        .unwrap();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

fn settings() -> TpuSettings {
    TpuSettings {
        cluster: "sim".into(),
        zone: ZONE.into(),
        project: Some(PROJECT.into()),
        accelerator_type: "v4-16".into(),
        version: "tpu-ubuntu2204-base".into(),
        spot: true,
        ssh_user: Some(USER.into()),
        ..TpuSettings::default()
    }
}

/// The backend of host `simtpu` over the simulator: a service-account key it issued, its CA,
/// an ssh config sending worker addresses through its proxy, a key of ours in `home/.ssh`.
fn sim_backend(sim: &Sim, dir: &Path, s: TpuSettings) -> Arc<TpuBackend> {
    let info = sim.info();
    let key_file = dir.join("sa.json");
    let home = dir.join("home");
    if !key_file.exists() {
        let key = admin(sim, "keys", &format!(r#"{{"project":"{PROJECT}"}}"#));
        std::fs::write(&key_file, key.to_string()).unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        let ok = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(home.join(".ssh/id_ed25519"))
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let config = dir.join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "Host {}\n  User {USER}\n  IdentityFile {}\n  IdentitiesOnly yes\n  ProxyCommand {}\n  LogLevel ERROR\n",
            info.ssh_host_pattern.as_deref().expect("workers"),
            home.join(".ssh/id_ed25519").display(),
            info.ssh_proxy.as_deref().expect("workers"),
        ),
    )
    .unwrap();
    let env = theseus_backend_tpu::auth::Env::from_pairs([
        ("GOOGLE_APPLICATION_CREDENTIALS", key_file.display().to_string()),
        ("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU", info.endpoint.clone()),
        ("CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", info.ca.display().to_string()),
        ("HOME", home.display().to_string()),
    ]);
    let waits =
        Waits { poll: Duration::from_millis(200), ready: Duration::from_secs(120), delete: Duration::from_secs(60) };
    let cloud = Cloud::with_env(NAME, &s, env.clone()).unwrap().with_waits(waits);
    let vm = cloud_vm::over_cloud(cloud, &s, &home, env, Some(waits));
    let connector = Connector {
        user: s.ssh_user.clone(),
        config_file: Some(config),
        known_hosts_dir: Some(dir.join("known_hosts")),
        control_dir: Some(dir.join("ctl")),
        connect_timeout: Some(Duration::from_secs(10)),
        settings: theseus_backend_ssh::plain::Settings {
            cancel_grace: Duration::from_secs(3),
            ..theseus_backend_ssh::plain::Settings::default()
        },
    };
    std::fs::create_dir_all(dir.join("ctl")).unwrap();
    let cluster = ClusterConfig { root: "~/theseus".into(), work: "~/theseus/work".into(), ..ClusterConfig::default() };
    Arc::new(
        TpuBackend::new(NAME, "sim", cluster, vm, connector)
            .with_accelerator(s.accelerator().unwrap())
            .with_spool(dir.join("spool"))
            .with_self_delete(Duration::ZERO),
    )
}

fn harness(backend: Arc<TpuBackend>, processes: u32) -> Harness {
    let mut plan = testing::cpu_plan(NAME, theseus_backend_tpu::config::KIND, 1);
    plan.nodes = processes;
    Harness { backend, plan, probe: Arc::new(NoProbe), timeout: Duration::from_secs(120) }
}

/// The workers' processes live in the simulator's namespaces, but in this machine's `/proc`.
struct NoProbe;

#[async_trait::async_trait]
impl testing::ProcessProbe for NoProbe {
    async fn alive(&self, handle: &theseus_core::backend::JobHandle) -> theseus_core::Result<usize> {
        Ok(theseus_core::local::process::job_processes(&handle.id).len())
    }
}

/// A job printing `words` of its environment, then sleeping `sleep` seconds on attempt 1.
async fn printing_job(h: &Harness, name: &str, sleep_first: u32) -> (theseus_core::backend::PreparedJob, impl Sized) {
    let script = format!(
        "import os, time; e = os.environ; print('wired', e['RANK'], e['WORLD_SIZE'], e['JAX_COORDINATOR_ADDRESS'], \
         e['THESEUS_TPU_WORKER'], e['THESEUS_TPU_MODE'], 'attempt', e['THESEUS_ATTEMPT'], flush=True); \
         time.sleep({sleep_first} if e['THESEUS_ATTEMPT'] == '1' else 1)"
    );
    let (mut job, dir) = testing::prepare(h, name, &[], vec![], serde_json::json!({})).await.unwrap();
    for f in &mut job.bootstrap.files {
        f.contents = f
            .contents
            .replace("theseus_args=(job.py", &format!("theseus_args=(-c {}", theseus_core::shell::quote(&script)));
    }
    (job, dir)
}

async fn lines(backend: &TpuBackend, handle: &theseus_core::backend::JobHandle) -> Vec<String> {
    let stream = backend.logs(handle, &LogOptions::default()).await.unwrap();
    stream
        .filter_map(|l| async move { l.ok().map(|l| format!("{} {}", l.source.unwrap_or_default(), l.text)) })
        .collect()
        .await
}

fn confirmed(keep: bool) -> SubmitOptions {
    SubmitOptions { create_confirmed: true, keep, ..SubmitOptions::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_runs_on_the_simulators_workers_through_create_conformance_preemption_and_self_delete() {
    if let Some(why) = missing() {
        eprintln!("NOT RUN: {why}");
        assert!(std::env::var("THESEUSTEST_REQUIRE_ALL").as_deref() != Ok("1"), "THESEUSTEST_REQUIRE_ALL=1: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = SimConfig {
        root: dir.path().join("sim"),
        create_seconds: Duration::from_secs(1),
        preempt_grace: Duration::from_secs(1),
        ..SimConfig::default()
    };
    let sim = Sim::start(config).await.unwrap();
    let backend = sim_backend(&sim, dir.path(), settings());
    let wired = harness(backend.clone(), 2);

    // Nothing is created without confirmation; plan says what would be.
    let (job, _code) = printing_job(&wired, "sim-wired", 0).await;
    let creates = backend.creates(&job).await.unwrap();
    assert_eq!(creates.len(), 1, "{creates:?}");
    let err = backend.submit(&job, &SubmitOptions::default()).await.unwrap_err().to_string();
    assert!(err.contains("--yes"), "{err}");
    assert!(backend.creates(&job).await.unwrap().len() == 1, "still nothing created");

    // Created (spot: a queued resource), kept; the job runs on both workers, wired by their
    // metadata servers: rank, count, worker 0's address as the coordinator.
    let started = Instant::now();
    let handle = backend.submit(&job, &confirmed(true)).await.expect("submit creates the VM");
    eprintln!("create + ship + start on 2 workers: {:?}", started.elapsed());
    let status = testing::wait_terminal(&wired, &handle).await;
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}");
    let out = lines(&backend, &handle).await;
    let data: TpuHandleData = serde_json::from_value(handle.data.clone()).unwrap();
    let w0 = &data.workers[0].address;
    let port = theseus_backend_ssh::paths::coordinator_port(&handle.id);
    for w in 0..2 {
        let want = format!("worker-{w} wired {w} 2 {w0}:{port} {w} 1 attempt 1");
        assert!(out.contains(&want), "no `{want}` in {out:#?}");
    }
    assert!(backend.creates(&job).await.unwrap().is_empty(), "the VM exists now");

    // The conformance suite on the READY VM (one process: worker 0).
    let started = Instant::now();
    testing::run_all(&harness(backend.clone(), 1)).await;
    eprintln!("conformance suite on the simulator's worker: {:?}", started.elapsed());

    // A run on a VM it creates (not kept), preempted in the middle: status creates the VM anew
    // and the run starts again as attempt 2; when it ends, worker 0 deletes the VM.
    backend.cancel(&handle).await.unwrap();
    delete_vm(&sim);
    let (job, _code) = printing_job(&wired, "sim-preempt", 120).await;
    let handle = backend.submit(&job, &confirmed(false)).await.expect("submit creates the VM again");
    wait_line(&backend, &handle, "worker-1 wired 1 2").await;
    let node = format!("projects/{PROJECT}/locations/{ZONE}/nodes/{NAME}:preempt");
    let preempted = admin(&sim, &node, "{}");
    assert_eq!(preempted["state"], "PREEMPTED", "{preempted}");
    // The status is asked by a client whose config now lacks the version and says on-demand
    // (as when the submit gave --tpu-version and --tpu-spot): the VM is created anew as it was
    // submitted, a spot VM of that version.
    let now = TpuSettings { version: String::new(), spot: false, ..settings() };
    let later = sim_backend(&sim, dir.path(), now);
    let started = Instant::now();
    let status = later.status(&handle).await.unwrap();
    eprintln!("status that recreated the VM and restarted the run: {:?}", started.elapsed());
    let node = get_node(&sim).expect("created anew");
    assert_eq!(node["schedulingConfig"]["spot"], true, "{node}");
    assert_eq!(node["runtimeVersion"], "tpu-ubuntu2204-base", "{node}");
    assert_eq!(status.attempt, Some(2), "{status:?}");
    assert!(status.message.as_deref().unwrap_or("").contains("was preempted"), "{status:?}");
    let status = testing::wait_terminal(&wired, &handle).await;
    assert_eq!((status.state, status.attempt), (JobState::Completed, Some(2)), "{status:?}");
    wait_line(&backend, &handle, "worker-1 wired 1 2").await;
    assert!(lines(&backend, &handle).await.iter().any(|l| l.ends_with("attempt 2")));
    // Worker 0's wrapper deletes the VM through the API from inside the worker.
    let deadline = Instant::now() + Duration::from_secs(60);
    while get_node(&sim).is_some() {
        assert!(Instant::now() < deadline, "worker 0 did not delete the VM: {:?}", get_node(&sim));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let status = backend.status(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Completed, "the final status outlives the VM: {status:?}");
    sim.shutdown().await;
}

/// The node as the API shows it (through the admin's view of workers: absent when 404).
fn get_node(sim: &Sim) -> Option<serde_json::Value> {
    let info = sim.info();
    let token = admin(sim, "tokens", "{}")["access_token"].as_str().unwrap().to_owned();
    let out = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&info.ca)
        .args(["-H", &format!("Authorization: Bearer {token}"), "-w", "\n%{http_code}"])
        .arg(format!("{}v2/projects/{PROJECT}/locations/{ZONE}/nodes/{NAME}", info.endpoint))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim() == "200").then(|| serde_json::from_str(body).unwrap())
}

/// Deletes the node through its queued resource (`?force=true`, as `gcloud ... queued-resources
/// delete --force`) and waits until it is gone.
fn delete_vm(sim: &Sim) {
    let info = sim.info();
    let token = admin(sim, "tokens", "{}")["access_token"].as_str().unwrap().to_owned();
    let ok = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&info.ca)
        .args(["-X", "DELETE", "-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("{}v2/projects/{PROJECT}/locations/{ZONE}/queuedResources/{NAME}?force=true", info.endpoint))
        .output()
        .unwrap();
    assert!(ok.status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while get_node(sim).is_some() {
        assert!(Instant::now() < deadline, "the node was not deleted");
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn wait_line(backend: &TpuBackend, handle: &theseus_core::backend::JobHandle, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = lines(backend, handle).await;
        if out.iter().any(|l| l.starts_with(prefix)) {
            return;
        }
        assert!(Instant::now() < deadline, "no line `{prefix}...`: {out:#?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
