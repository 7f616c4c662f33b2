//! The plain backend over a real sshd: the conformance suite, availability from a fake
//! `nvidia-smi`, and shipping through a connection that breaks.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use theseus_backend_ssh::plain::PlainHost;
use theseus_backend_ssh::plain::{PlainBackend, PlainHandleData, Settings};
use theseus_backend_ssh::ssh::SshHost;
use theseus_backend_ssh::testing::error_chain;
use theseus_core::availability::Availability;
use theseus_core::backend::{Backend, JobHandle, JobState, SubmitOptions};
use theseus_core::chips;
use theseus_core::config::ClusterConfig;
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::solver::{ChipRequest, Plan, Request};
use theseus_core::testing::{self, Harness, ProcessProbe};

use crate::require_lab;
use crate::support::{Lab, kill_masters};

/// The sshd runs on this machine, so the job's processes are visible in the local `/proc`,
/// found by the same marker the backend uses.
pub(crate) struct LocalProcProbe;

#[async_trait]
impl ProcessProbe for LocalProcProbe {
    async fn alive(&self, handle: &JobHandle) -> theseus_core::Result<usize> {
        Ok(theseus_core::local::process::job_processes(&handle.id).len())
    }
}

pub(crate) fn plan() -> Plan {
    testing::cpu_plan("lab", theseus_backend_ssh::plain::KIND, 1)
}

pub(crate) struct Setup {
    pub(crate) backend: Arc<PlainBackend>,
    pub(crate) ssh: Arc<SshHost>,
    pub(crate) root: std::path::PathBuf,
}

pub(crate) fn setup(lab: &Lab, name: &str, settings: Settings) -> Setup {
    let (cluster, root) = scratch_cluster(lab, name);
    let ssh = Arc::new(SshHost::new(lab.options(name)));
    let backend = Arc::new(PlainBackend::with_ssh("lab", lab_host(), cluster, ssh.clone(), settings));
    Setup { backend, ssh, root }
}

/// A cluster whose root and work are `root/root` and `root/work` of a fresh scratch dir `root`
/// (named after `name`) of the lab.
pub(crate) fn scratch_cluster(lab: &Lab, name: &str) -> (ClusterConfig, std::path::PathBuf) {
    let root = lab.scratch(name);
    let cluster = ClusterConfig {
        root: root.join("root").display().to_string(),
        work: root.join("work").display().to_string(),
        ..ClusterConfig::default()
    };
    (cluster, root)
}

/// The lab's sshd as a plain host of cluster `lab`.
pub(crate) fn lab_host() -> PlainHost {
    PlainHost { ssh: super::support::ALIAS.into(), cluster: "lab".into(), ..PlainHost::default() }
}

pub(crate) fn quick() -> Settings {
    Settings { cancel_grace: Duration::from_secs(3), ..Settings::default() }
}

pub(crate) fn harness(s: &Setup) -> Harness {
    Harness {
        backend: s.backend.clone(),
        plan: plan(),
        probe: Arc::new(LocalProcProbe),
        timeout: Duration::from_secs(90),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_backend_passes_the_conformance_suite() {
    let lab = require_lab!();
    let s = setup(lab, "conformance", quick());
    let started = Instant::now();
    testing::run_all(&harness(&s)).await;
    eprintln!(
        "conformance suite over ssh took {:?} with {} connection(s)",
        started.elapsed(),
        s.ssh.connect_attempts()
    );
    assert_eq!(s.ssh.connect_attempts(), 1, "one connection serves every command");
    // Nothing half-shipped is left behind.
    assert_eq!(partials(&s.root.join("work")), Vec::<String>::new());
}

/// Issue 25: a follow ends after the job although nothing is written to its log after the end
/// (the exit code seen in the run dir), with the last line the job wrote right before its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_ends_after_the_job_with_its_last_line() {
    let lab = require_lab!();
    let s = setup(lab, "follow-end", quick());
    testing::check_follow_keeps_the_last_line_and_ends(&harness(&s)).await;
}

/// A fake `nvidia-smi` printing the given GPU and process listings.
fn fake_nvidia_smi(dir: &Path, gpus: &str, apps: &str) -> String {
    std::fs::write(dir.join("gpus.txt"), gpus).unwrap();
    std::fs::write(dir.join("apps.txt"), apps).unwrap();
    let path = dir.join("nvidia-smi");
    std::fs::write(
        &path,
        "#!/bin/sh\nd=$(dirname \"$0\")\ncase \"$1\" in\n  --query-gpu=*) cat \"$d/gpus.txt\" ;;\n  \
         --query-compute-apps=*) cat \"$d/apps.txt\" ;;\n  *) exit 2 ;;\nesac\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn request(chip: ChipRequest) -> Request {
    Request { chip, count: 1, preferred_clusters: vec![], forbidden_clusters: vec![], host: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_counts_free_gpus_of_the_requested_chip() {
    let lab = require_lab!();
    let dir = lab.scratch("gpus");
    // Two A100 80GB (one 10 % used, so busy), one L40 using 1 GiB of 45 (free).
    let gpus = "GPU-a, NVIDIA A100-SXM4-80GB, 81920\nGPU-b, NVIDIA A100-SXM4-80GB, 81920\nGPU-c, NVIDIA L40, 46068\n";
    let apps = "GPU-a, 8192\nGPU-c, 1024\n";
    let smi = fake_nvidia_smi(&dir, gpus, apps);
    let s = setup(lab, "gpus", Settings { nvidia_smi: smi, ..quick() });
    let free = |n: u32| Availability::Free { chips: n, source: "nvidia-smi".into() };
    let chip = |name: &str| ChipRequest::Chip(chips::lookup(name).unwrap());
    assert_eq!(s.backend.availability(&request(chip("a100-sxm4-80gb"))).await.unwrap(), free(1));
    assert_eq!(s.backend.availability(&request(chip("l40"))).await.unwrap(), free(1));
    assert_eq!(s.backend.availability(&request(chip("h100"))).await.unwrap(), free(0));
    assert_eq!(s.backend.availability(&request(ChipRequest::AnyGpu)).await.unwrap(), free(2));

    // Just under 10 % is free; unknown memory sizes use the 1 GiB rule.
    std::fs::write(dir.join("apps.txt"), "GPU-a, 8191\n").unwrap();
    assert_eq!(s.backend.availability(&request(chip("a100-sxm4-80gb"))).await.unwrap(), free(2));
    std::fs::write(dir.join("gpus.txt"), "GPU-x, NVIDIA L40, [N/A]\nGPU-y, NVIDIA L40, [N/A]\n").unwrap();
    std::fs::write(dir.join("apps.txt"), "GPU-x, 1023\nGPU-y, 1024\n").unwrap();
    assert_eq!(s.backend.availability(&request(chip("l40"))).await.unwrap(), free(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_without_nvidia_smi_serve_cpu_requests_only() {
    let lab = require_lab!();
    let missing = lab.scratch("cpu").join("no-such-nvidia-smi").display().to_string();
    let s = setup(lab, "cpu", Settings { nvidia_smi: missing, ..quick() });
    let any = s.backend.availability(&request(ChipRequest::AnyGpu)).await.unwrap();
    assert!(matches!(any, Availability::Free { chips: 0, .. }), "{any:?}");
    match s.backend.availability(&request(ChipRequest::Cpu)).await.unwrap() {
        Availability::Free { chips, .. } => assert!(chips >= 1),
        other => panic!("CPU request: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_killed_while_shipping_is_retried_cleanly() {
    let lab = require_lab!();
    let s = setup(lab, "ship-retry", quick());
    let h = harness(&s);
    let ctl = s.ssh.options().control_dir.clone().unwrap();
    let (mut job, dir) =
        testing::prepare(&h, "ship-retry", &["ok"], vec![], serde_json::json!({"greeting": "again"})).await.unwrap();
    big_file(dir.path());
    job.snapshot = Snapshot::collect(dir.path(), SnapshotMode::Dirty).unwrap();

    // Kill the ssh master once, when 8 MB of the code are on their way.
    let killed = Arc::new(AtomicBool::new(false));
    let notes = Arc::new(AtomicUsize::new(0));
    let options = SubmitOptions {
        progress: Some({
            let (killed, ctl) = (killed.clone(), ctl.clone());
            Arc::new(move |sent, _| {
                if sent > 8 << 20 && !killed.swap(true, Ordering::SeqCst) {
                    assert_eq!(kill_masters(&ctl), 1);
                }
            })
        }),
        status: Some({
            let notes = notes.clone();
            Arc::new(move |text: &str| {
                if text.contains("trying again") {
                    notes.fetch_add(1, Ordering::SeqCst);
                }
            })
        }),
        ..SubmitOptions::default()
    };
    let handle = s.backend.submit(&job, &options).await.expect("the second attempt ships the code");
    assert!(killed.load(Ordering::SeqCst), "the master was killed mid-transfer");
    assert_eq!(notes.load(Ordering::SeqCst), 1, "the retry was reported");
    assert_eq!(s.ssh.connect_attempts(), 2);
    let status = testing::wait_terminal(&h, &handle).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    let data: PlainHandleData = serde_json::from_value(handle.data.clone()).unwrap();
    let shipped = std::fs::metadata(Path::new(&data.work_dir).join("big.bin")).unwrap().len();
    assert_eq!(shipped, BIG, "the whole file arrived");
    assert_eq!(partials(&s.root.join("work")), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_keeps_breaking_fails_clearly_and_leaves_no_usable_run_dir() {
    let lab = require_lab!();
    let s = setup(lab, "ship-fail", quick());
    let h = harness(&s);
    let ctl = s.ssh.options().control_dir.clone().unwrap();
    let (mut job, dir) =
        testing::prepare(&h, "ship-fail", &["ok"], vec![], serde_json::json!({"greeting": "x"})).await.unwrap();
    big_file(dir.path());
    job.snapshot = Snapshot::collect(dir.path(), SnapshotMode::Dirty).unwrap();
    // Every attempt loses its connection halfway.
    let options = SubmitOptions {
        progress: Some({
            let ctl = ctl.clone();
            let armed = Arc::new(AtomicBool::new(true));
            Arc::new(move |sent, _| {
                if sent < 1 << 20 {
                    armed.store(true, Ordering::SeqCst);
                } else if sent > 8 << 20 && armed.swap(false, Ordering::SeqCst) {
                    kill_masters(&ctl);
                }
            })
        }),
        ..SubmitOptions::default()
    };
    let err = s.backend.submit(&job, &options).await.expect_err("shipping cannot succeed");
    let text = error_chain(&err);
    eprintln!("shipping through a breaking connection: {text}");
    assert!(text.contains("connection") && text.contains("broke"), "clear error: {text}");
    let layout = s.backend.layout(&job.identity, &h.plan).unwrap();
    assert!(!Path::new(&layout.work_dir).exists(), "no run dir was put in place");

    // A later run of the same job works and never sees the cut-off code.
    let (job2, _dir2) =
        testing::prepare(&h, "ship-fail", &["ok"], vec![], serde_json::json!({"greeting": "later"})).await.unwrap();
    let handle = s.backend.submit(&job2, &SubmitOptions::default()).await.unwrap();
    let status = testing::wait_terminal(&h, &handle).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    let data: PlainHandleData = serde_json::from_value(handle.data).unwrap();
    assert!(!Path::new(&data.work_dir).join("big.bin").exists());
}

const BIG: u64 = 24 << 20;

fn big_file(dir: &Path) {
    let block: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 253) as u8).collect();
    let mut f = std::fs::File::create(dir.join("big.bin")).unwrap();
    for _ in 0..BIG >> 20 {
        std::io::Write::write_all(&mut f, &block).unwrap();
    }
}

/// `.partial` dirs anywhere under `dir`.
fn partials(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.extension().is_some_and(|e| e == "partial") {
                found.push(path.display().to_string());
            } else {
                found.extend(partials(&path));
            }
        }
    }
    found
}
