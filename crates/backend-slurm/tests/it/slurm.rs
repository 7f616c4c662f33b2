//! The Slurm backend against the real Slurm lab (`cargo xtask lab up`, `ci/lab/README.md`):
//! the conformance suite, availability from live `sinfo` through the solver, 1- and 2-node
//! jobs, a 2-node JAX job, Slurm's rejections and the cancel of a 2-node job. Processes are
//! counted by what Slurm knows (its steps), as on a real cluster; the lab's nodes are this
//! machine, so some tests also cross-check the local `/proc`.
//!
//! Without `THESEUSTEST_SLURM_SSH_PORT` every test prints `NOT RUN` and passes, unless
//! `THESEUSTEST_REQUIRE_ALL=1`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use theseus_backend_slurm::SlurmHost;
use theseus_backend_slurm::config::PartitionConfig;
use theseus_backend_slurm::placement::SlurmPlacement;
use theseus_backend_slurm::slurm::{Settings, SlurmBackend, SlurmHandleData};
use theseus_backend_ssh::ssh::{Backoff, KnownHostsPolicy, SshHost, SshOptions};
use theseus_core::availability::Availability;
use theseus_core::backend::{
    Backend, EnvVar, JobHandle, JobState, JobStatus, LogLine, LogOptions, PreparedJob, SubmitOptions,
};
use theseus_core::bootstrap::{self, BootstrapInput};
use theseus_core::chips;
use theseus_core::config::{ClusterConfig, DispatchConfig, HostConfig};
use theseus_core::fit::Layout;
use theseus_core::job::{Distributed, Entrypoint, Experiment, JobIdentity};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::solver::{self, ChipRequest, Plan, Request};
use theseus_core::testing::{self, Harness, ProcessProbe};

pub(crate) const ALIAS: &str = "theseus-slurm-lab";
/// How long a job may take, queueing behind the other tests' jobs included.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(180);

/// The lab's login node and files.
#[derive(Debug)]
pub(crate) struct SlurmLab {
    pub(crate) dir: PathBuf,
    pub(crate) config: PathBuf,
    pub(crate) shared: PathBuf,
    pub(crate) remote_python: String,
}

static LAB: OnceLock<Result<SlurmLab, String>> = OnceLock::new();

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("THESEUSTEST_SLURM_SSH_PORT is set but {name} is not"))
}

fn start() -> Result<SlurmLab, String> {
    let port = std::env::var("THESEUSTEST_SLURM_SSH_PORT")
        .map_err(|_| "THESEUSTEST_SLURM_SSH_PORT is not set (start the lab: cargo xtask lab up)".to_owned())?;
    let host = env("THESEUSTEST_SLURM_SSH_HOST")?;
    let user = env("THESEUSTEST_SLURM_SSH_USER")?;
    let key = env("THESEUSTEST_SSH_KEY")?;
    let known = env("THESEUSTEST_SSH_KNOWN_HOSTS")?;
    let shared = PathBuf::from(env("THESEUSTEST_SLURM_SHARED")?);
    let remote_python = env("THESEUSTEST_REMOTE_PYTHON")?;
    let dir = std::env::temp_dir().join(format!("theseus-slurm-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let config = dir.join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "Host {ALIAS}\n  HostName {host}\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  \
             IdentitiesOnly yes\n  UserKnownHostsFile {known}\n  LogLevel ERROR\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    Ok(SlurmLab { dir, config, shared, remote_python })
}

pub(crate) fn lab() -> Option<&'static SlurmLab> {
    match LAB.get_or_init(start) {
        Ok(lab) => Some(lab),
        Err(why) => {
            eprintln!("NOT RUN: no Slurm lab for the Slurm backend tests: {why}");
            assert!(std::env::var("THESEUSTEST_REQUIRE_ALL").as_deref() != Ok("1"), "THESEUSTEST_REQUIRE_ALL=1: {why}");
            None
        }
    }
}

macro_rules! require_slurm {
    () => {
        match lab() {
            Some(lab) => lab,
            None => return,
        }
    };
}

pub(crate) fn host() -> SlurmHost {
    SlurmHost {
        ssh: ALIAS.into(),
        cluster: "lab".into(),
        partitions: vec![PartitionConfig::Name("gpu".into())],
        cpu_partitions: vec!["cpu".into()],
        mem: Some("300M".into()),
        time: Some("10".into()),
        ..SlurmHost::default()
    }
}

pub(crate) fn backend(lab: &SlurmLab, name: &str, host: SlurmHost) -> (Arc<SlurmBackend>, Arc<SshHost>) {
    // Job dirs live on the lab's shared storage (the same path on the login node and the nodes).
    let root = lab.shared.join(format!("it-{name}-{}", theseus_core::job::new_run_id()));
    let settings = Settings { poll_interval: Duration::from_millis(200), ..Settings::default() };
    backend_at(lab, name, host, &root, settings)
}

/// A backend whose cluster lives under `root`, with its own SSH connection (control dir `name`).
pub(crate) fn backend_at(
    lab: &SlurmLab,
    name: &str,
    host: SlurmHost,
    root: &std::path::Path,
    settings: Settings,
) -> (Arc<SlurmBackend>, Arc<SshHost>) {
    let cluster = ClusterConfig {
        root: root.join("root").display().to_string(),
        work: root.join("work").display().to_string(),
        ..ClusterConfig::default()
    };
    backend_of(lab, name, host, cluster, settings)
}

/// A backend of `cluster`, with its own SSH connection (control dir `name`).
pub(crate) fn backend_of(
    lab: &SlurmLab,
    name: &str,
    host: SlurmHost,
    cluster: ClusterConfig,
    settings: Settings,
) -> (Arc<SlurmBackend>, Arc<SshHost>) {
    let mut o = SshOptions::new(ALIAS);
    o.config_file = Some(lab.config.clone());
    o.known_hosts = Some(KnownHostsPolicy::Strict);
    let ctl = lab.dir.join("ctl").join(name);
    std::fs::create_dir_all(&ctl).unwrap();
    o.control_dir = Some(ctl);
    o.connect_timeout = Some(Duration::from_secs(5));
    o.backoff = Backoff { initial: Duration::from_millis(200), max: Duration::from_secs(2), attempts: 5 };
    let ssh = Arc::new(SshHost::new(o));
    (Arc::new(SlurmBackend::with_ssh("lab", host, cluster, ssh.clone(), settings)), ssh)
}

pub(crate) fn plan(partition: &str, nodes: u32, gpus_per_node: u32) -> Plan {
    placed(partition, nodes, gpus_per_node, (gpus_per_node > 0).then(|| "h100".into()))
}

/// A plan on `partition` with GRES type `gres_type`.
pub(crate) fn placed(partition: &str, nodes: u32, gpus_per_node: u32, gres_type: Option<String>) -> Plan {
    let placed = SlurmPlacement { partition: Some(partition.into()), gres_type }
        .place(Layout { chips_per_node: gpus_per_node, ..Layout::default() });
    Plan {
        host: "lab".into(),
        kind: theseus_backend_slurm::KIND,
        cluster: "lab".into(),
        chip: None,
        nodes,
        chips_per_node: gpus_per_node,
        processes_per_node: 1,
        total_chips: nodes * gpus_per_node,
        placement: placed.placement,
        placement_text: placed.placement_text,
        queued: false,
        notes: vec![],
        considered: vec![],
    }
}

/// Counts the steps Slurm still lists for the job (`squeue --steps`): what a client can know
/// on a real cluster, whose nodes' processes the login node cannot see. A running job has at
/// least its batch step and the `srun` step.
struct StepProbe(Arc<SshHost>);

#[async_trait]
impl ProcessProbe for StepProbe {
    async fn alive(&self, handle: &JobHandle) -> theseus_core::Result<usize> {
        Ok(crate::slurm_lifecycle::steps(&self.0, &handle.id).await.len())
    }
}

/// Live processes carrying the run's marker in this machine's `/proc`: a lab-only cross-check
/// (the lab's nodes are this machine), never what the backend relies on.
fn marked_processes(handle: &JobHandle) -> usize {
    marked_pids(handle).len()
}

/// PIDs on this machine (the lab's nodes share it) carrying the job's marker.
fn marked_pids(handle: &JobHandle) -> Vec<i32> {
    let data: SlurmHandleData = serde_json::from_value(handle.data.clone()).unwrap();
    theseus_core::local::process::job_processes(&data.run_id)
}

fn harness(backend: Arc<SlurmBackend>, ssh: Arc<SshHost>, plan: Plan) -> Harness {
    Harness { backend, plan, probe: Arc::new(StepProbe(ssh)), timeout: TIMEOUT }
}

/// A job of `files` running `words` under `plan`.
pub(crate) fn prepare(
    b: &SlurmBackend,
    plan: &Plan,
    name: &str,
    files: &[(&str, &str)],
    words: &[&str],
    env: &[(&str, &str)],
    distributed: Distributed,
) -> (PreparedJob, tempfile::TempDir) {
    prepare_with_config(b, plan, name, files, words, env, distributed, serde_json::json!({}))
}

/// [`prepare`] with the experiment's `config` (`$THESEUS_CONFIG`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare_with_config(
    b: &SlurmBackend,
    plan: &Plan,
    name: &str,
    files: &[(&str, &str)],
    words: &[&str],
    env: &[(&str, &str)],
    distributed: Distributed,
    config: serde_json::Value,
) -> (PreparedJob, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        std::fs::write(dir.path().join(path), text).unwrap();
    }
    let snapshot = Snapshot::collect(dir.path(), SnapshotMode::Dirty).unwrap();
    let identity = JobIdentity::new(name, Some("slurm-it"), None);
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    let env: Vec<EnvVar> =
        env.iter().map(|(n, v)| EnvVar { name: n.to_string(), value: v.to_string(), secret: false }).collect();
    let experiment = Experiment { entrypoint: Entrypoint::Words(words.clone()), distributed, ..Experiment::default() };
    let layout = b.layout(&identity, plan).unwrap();
    let input = BootstrapInput::for_layout(identity.clone(), &layout, env.clone(), words, distributed, config);
    let bootstrap = bootstrap::render(&input).unwrap();
    (PreparedJob { identity, experiment, env, plan: plan.clone(), snapshot, bootstrap }, dir)
}

pub(crate) async fn wait_terminal(b: &SlurmBackend, handle: &JobHandle) -> JobStatus {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let status = b.status(handle).await.expect("status");
        if status.state.is_terminal() {
            return status;
        }
        assert!(Instant::now() < deadline, "job {} did not finish within {TIMEOUT:?}: {status:?}", handle.id);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn logs(b: &SlurmBackend, handle: &JobHandle) -> Vec<LogLine> {
    let stream = b.logs(handle, &LogOptions { follow: false, rank: None }).await.unwrap();
    stream.collect::<Vec<_>>().await.into_iter().map(|l| l.unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_backend_passes_the_conformance_suite() {
    let lab = require_slurm!();
    let (b, ssh) = backend(lab, "conformance", host());
    let started = Instant::now();
    testing::run_all(&harness(b, ssh.clone(), plan("cpu", 1, 0))).await;
    eprintln!("slurm conformance suite took {:?} with {} connection(s)", started.elapsed(), ssh.connect_attempts());
}

/// Issue 25: a follow ends after the job although nothing is written to its log after the end
/// (the end is Slurm's word, asked sooner once the bootstrap recorded it), with the last line
/// the job wrote right before its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_ends_after_the_job_with_its_last_line() {
    let lab = require_slurm!();
    let (b, ssh) = backend(lab, "follow-end", host());
    testing::check_follow_keeps_the_last_line_and_ends(&harness(b, ssh, plan("cpu", 1, 0))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_from_live_sinfo_picks_the_partition_and_node_count() {
    let lab = require_slurm!();
    let (b, _) = backend(lab, "availability", host());
    let h100 = chips::lookup("h100").unwrap();
    let request = |count| Request {
        chip: ChipRequest::Chip(h100),
        count,
        preferred_clusters: vec![],
        forbidden_clusters: vec![],
        host: None,
    };
    let avail = b.availability(&request(8)).await.unwrap();
    let Availability::Partitions(slurm) = &avail else { panic!("not a slurm availability: {avail:?}") };
    let mut names: Vec<_> = slurm.partitions.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["cpu", "gpu"]);
    for p in &slurm.partitions {
        let nodes: Vec<_> =
            p.nodes.iter().map(|n| (n.name.as_str(), n.gpu_type.as_deref(), n.total, n.usable)).collect();
        assert_eq!(nodes, [("node1", Some("h100"), 4, true), ("node2", Some("h100"), 4, true)], "{}", p.name);
        assert!(p.nodes.iter().all(|n| n.free <= 4));
    }

    let mut config = DispatchConfig::default();
    config.clusters.insert("lab".into(), ClusterConfig { root: "/r".into(), work: "/w".into(), ..Default::default() });
    config.hosts.insert("lab".into(), HostConfig::new(Box::new(host())));
    config.gres_mapping = BTreeMap::from([("h100".to_owned(), "h100".to_owned())]);
    let map = BTreeMap::from([("lab".to_owned(), avail.clone())]);
    let eight = solver::solve(&config, &request(8), &map).unwrap();
    assert_eq!(
        (
            SlurmPlacement::of(&eight).partition.as_deref(),
            eight.nodes,
            eight.chips_per_node,
            SlurmPlacement::of(&eight).gres_type.as_deref()
        ),
        (Some("gpu"), 2, 4, Some("h100")),
        "{eight:?}"
    );
    let four = solver::solve(&config, &request(4), &map).unwrap();
    assert_eq!((four.nodes, four.chips_per_node), (1, 4), "4 GPUs fit on one node: {four:?}");
    // The whole sbatch file the 8-GPU plan renders asks for 2 nodes of 4 GPUs each.
    let (job, _dir) = prepare(&b, &eight, "dry", &[("x.py", "")], &["python", "x.py"], &[], Distributed::None);
    let doc = &b.dry_run(&job).unwrap()[0].text;
    assert!(doc.contains("#SBATCH --nodes=2\n") && doc.contains("#SBATCH --gres=gpu:h100:4\n"), "{doc}");
    assert!(doc.contains("#SBATCH --partition=gpu\n") && doc.contains("#SBATCH --ntasks-per-node=1\n"), "{doc}");
}

const NODES_PY: &str = r#"
import os
print("hello from", os.environ["SLURMD_NODENAME"], "rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"],
      "gpus", os.environ.get("CUDA_VISIBLE_DEVICES", "none"), flush=True)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_and_two_node_jobs_run_on_their_nodes() {
    let lab = require_slurm!();
    let (b, _) = backend(lab, "nodes", host());
    let started = Instant::now();
    let one = plan("cpu", 1, 0);
    let two = plan("gpu", 2, 1);
    let (job1, _d1) = prepare(&b, &one, "one", &[("n.py", NODES_PY)], &["python", "n.py"], &[], Distributed::None);
    let (job2, _d2) = prepare(&b, &two, "two", &[("n.py", NODES_PY)], &["python", "n.py"], &[], Distributed::None);
    let h1 = b.submit(&job1, &SubmitOptions::default()).await.unwrap();
    let h2 = b.submit(&job2, &SubmitOptions::default()).await.unwrap();
    assert_ne!(h1.id, h2.id);
    for (h, n) in [(&h1, 1usize), (&h2, 2)] {
        let status = wait_terminal(&b, h).await;
        assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}");
        assert_eq!(status.ranks.len(), n, "{status:?}");
        let lines = logs(&b, h).await;
        let mut hello: Vec<_> =
            lines.iter().filter(|l| l.text.starts_with("hello from")).map(|l| (l.rank, l.text.clone())).collect();
        hello.sort();
        // Slurm picks the nodes (a busy node1 sends a one-node job to node2), so each rank's
        // node is the one the allocation reports for it; two ranks sit on two distinct nodes.
        let nodes: Vec<String> =
            status.ranks.iter().map(|r| r.location.clone().expect("a finished rank has its node")).collect();
        assert!(nodes.iter().all(|n| n == "node1" || n == "node2"), "{status:?}");
        if n == 2 {
            assert_ne!(nodes[0], nodes[1], "{status:?}");
        }
        let expected: Vec<_> = (0..n)
            .map(|r| {
                let gpus = if n == 1 { "none" } else { "0" };
                (Some(r as u32), format!("hello from {} rank {r} of {n} gpus {gpus}", nodes[r]))
            })
            .collect();
        assert_eq!(hello, expected, "all lines: {lines:?}");
    }
    // Only rank 1's lines.
    let stream = b.logs(&h2, &LogOptions { follow: false, rank: Some(1) }).await.unwrap();
    let only: Vec<_> = stream.collect::<Vec<_>>().await.into_iter().map(|l| l.unwrap()).collect();
    assert!(!only.is_empty() && only.iter().all(|l| l.rank == Some(1)), "{only:?}");
    eprintln!("1-node and 2-node jobs took {:?}", started.elapsed());
}

const JAX_PY: &str = r#"
import os, jax
print("jax", os.environ["SLURMD_NODENAME"], f"process_index={jax.process_index()}",
      f"process_count={jax.process_count()}", flush=True)
jax.distributed.shutdown()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_jax_job_sees_both_processes() {
    let lab = require_slurm!();
    let (b, _) = backend(lab, "jax", host());
    let started = Instant::now();
    let two = plan("cpu", 2, 0);
    let env =
        [("THESEUS_PYTHON", lab.remote_python.as_str()), ("JAX_PLATFORMS", "cpu"), ("THESEUS_JAX_INIT_TIMEOUT", "90")];
    // The default mode (no `distributed` key, issue 28): JAX distributed on the job's import of jax.
    let (job, _d) = prepare(&b, &two, "jax", &[("j.py", JAX_PY)], &["python", "j.py"], &env, Distributed::Auto);
    let h = b.submit(&job, &SubmitOptions::default()).await.unwrap();
    // Follow the log to its end: it ends when the job does.
    let stream = b.logs(&h, &LogOptions { follow: true, rank: None }).await.unwrap();
    let lines: Vec<LogLine> = tokio::time::timeout(TIMEOUT, stream.collect::<Vec<_>>())
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.unwrap())
        .collect();
    let status = b.status(&h).await.unwrap();
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}\n{lines:#?}");
    let mut jax: Vec<_> =
        lines.iter().filter(|l| l.text.starts_with("jax ")).map(|l| (l.rank, l.text.clone())).collect();
    jax.sort();
    assert_eq!(
        jax,
        [
            (Some(0), "jax node1 process_index=0 process_count=2".to_owned()),
            (Some(1), "jax node2 process_index=1 process_count=2".to_owned())
        ],
        "{lines:#?}"
    );
    // The coordinator is the first node's NodeAddr (the lab's names do not resolve).
    assert!(lines.iter().any(|l| l.text.contains("coordinator 127.0.0.1:")), "{lines:#?}");
    for rank in 0..2 {
        assert!(
            lines.iter().any(|l| l.rank == Some(rank)
                && l.text.starts_with("[theseus] jax.distributed.initialize(")
                && l.text.ends_with("on the job's import of jax")),
            "rank {rank} initialised on import: {lines:#?}"
        );
    }
    eprintln!("2-node JAX job took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_slurm_rejects_surface_slurms_message_and_leave_nothing() {
    let lab = require_slurm!();
    let (b, _) = backend(lab, "rejected", host());
    let cases = [
        (plan("nosuch", 1, 0), "Invalid partition name specified"),
        (placed("gpu", 1, 1, Some("b200".into())), "Requested node configuration is not available"),
        (plan("gpu", 1, 9), "Requested node configuration is not available"),
    ];
    for (p, expected) in cases {
        let (job, _d) = prepare(&b, &p, "rejected", &[("x.py", "")], &["python", "x.py"], &[], Distributed::None);
        let err = b.submit(&job, &SubmitOptions::default()).await.expect_err("Slurm rejects it");
        let text = err.to_string();
        assert!(text.contains(expected) && text.contains("sbatch: error"), "{text}");
        let layout = b.layout(&job.identity, &p).unwrap();
        assert!(!std::path::Path::new(&layout.work_dir).exists(), "the rejected run's code is removed");
    }
}

const SLEEP_PY: &str = r#"
import os, subprocess
child = subprocess.Popen(["sleep", "600"])
print("started", os.environ["RANK"], child.pid, flush=True)
child.wait()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_running_two_node_job_leaves_no_process() {
    let lab = require_slurm!();
    let (b, ssh) = backend(lab, "cancel", host());
    let two = plan("cpu", 2, 0);
    let (job, _d) = prepare(&b, &two, "cancel", &[("s.py", SLEEP_PY)], &["python", "s.py"], &[], Distributed::None);
    let h = b.submit(&job, &SubmitOptions::default()).await.unwrap();
    let mut stream = b.logs(&h, &LogOptions { follow: true, rank: None }).await.unwrap();
    let mut started = std::collections::BTreeSet::new();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(line) = stream.next().await {
            let line = line.unwrap();
            if line.text.starts_with("started ") {
                started.insert(line.rank);
                if started.len() == 2 {
                    break;
                }
            }
        }
    })
    .await
    .expect("both ranks start");
    drop(stream);
    assert_eq!(started.into_iter().collect::<Vec<_>>(), [Some(0), Some(1)]);
    // Slurm lists the batch step and the srun step over both nodes.
    let before = crate::slurm_lifecycle::steps(&ssh, &h.id).await;
    assert!(before.contains(&format!("{}.0", h.id)) && before.contains(&format!("{}.batch", h.id)), "{before:?}");
    let t0 = Instant::now();
    let status = b.cancel(&h).await.expect("cancel");
    eprintln!("cancel of a 2-node job took {:?}", t0.elapsed());
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    assert_eq!(crate::slurm_lifecycle::steps(&ssh, &h.id).await, Vec::<String>::new(), "Slurm lists no step");
    assert_eq!(marked_processes(&h), 0, "lab cross-check: no process of the job is left on the nodes");
    assert_eq!(b.status(&h).await.unwrap().state, JobState::Cancelled);
}

const ORPHAN_PY: &str = r#"
import os, subprocess, sys, time
# A background process whose parent exits at once: it leaves the step's process tree (what
# proctrack/linuxproc follows) but stays in the job's process group. With `deaf`, it ignores
# TERM, so only a KILL from the bootstrap can reach it before Slurm's own KILL ends the step.
trap = "trap '' TERM; " if sys.argv[1] == "deaf" else ""
subprocess.run(["sh", "-c", "(" + trap + "exec sleep 600) > /dev/null 2>&1 &"], check=True)
print("started", os.environ["RANK"], flush=True)
time.sleep(600)
"#;

/// A process the job left in the background, outside the step's process tree, is stopped by
/// `cancel` too: the bootstrap signals the job's whole process group, not only its child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_background_process_that_left_the_steps_process_tree() {
    cancel_stops_an_orphan("orphan", "polite").await;
}

/// The same for one that ignores TERM: the lab's KillWait (5 s) is shorter than the bootstrap's
/// default grace (10 s), so the bootstrap KILLs the group before Slurm KILLs the bootstrap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_background_process_that_ignores_term_before_slurms_kill_wait() {
    cancel_stops_an_orphan("deaf", "deaf").await;
}

async fn cancel_stops_an_orphan(name: &str, mode: &str) {
    let lab = require_slurm!();
    let (b, _ssh) = backend(lab, name, host());
    let (job, _d) = prepare(
        &b,
        &plan("cpu", 1, 0),
        name,
        &[("o.py", ORPHAN_PY)],
        &["python", "o.py", mode],
        &[],
        Distributed::None,
    );
    let h = b.submit(&job, &SubmitOptions::default()).await.unwrap();
    let mut stream = b.logs(&h, &LogOptions { follow: true, rank: None }).await.unwrap();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(line) = stream.next().await {
            if line.unwrap().text.starts_with("started ") {
                break;
            }
        }
    })
    .await
    .expect("the job starts");
    drop(stream);
    assert!(marked_processes(&h) >= 2, "the job and its background sleep run");
    let status = b.cancel(&h).await.expect("cancel");
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    let left: Vec<String> = marked_pids(&h)
        .iter()
        .map(|pid| std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default().replace('\0', " "))
        .collect();
    assert!(left.is_empty(), "lab cross-check: processes of the job left on the node: {left:?}");
}

const FAIL_PY: &str = r#"
import os, sys, time
if os.environ["RANK"] == "1":
    print("rank 1 fails", flush=True)
    sys.exit(3)
time.sleep(120)
"#;

/// One failing rank stops the whole job (`srun --kill-on-bad-exit=1`) and its exit code is
/// the job's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_rank_fails_the_two_node_job_with_its_exit_code() {
    let lab = require_slurm!();
    let (b, _) = backend(lab, "fail", host());
    let two = plan("cpu", 2, 0);
    let (job, _d) = prepare(&b, &two, "fail", &[("f.py", FAIL_PY)], &["python", "f.py"], &[], Distributed::None);
    let t0 = Instant::now();
    let h = b.submit(&job, &SubmitOptions::default()).await.unwrap();
    let status = wait_terminal(&b, &h).await;
    eprintln!("failing 2-node job ended in {:?}: {status:?}", t0.elapsed());
    assert_eq!((status.state, status.exit_code), (JobState::Failed, Some(3)), "{status:?}");
    assert!(t0.elapsed() < Duration::from_secs(100), "rank 0 was stopped, not left sleeping");
    let lines = logs(&b, &h).await;
    assert!(lines.iter().any(|l| l.rank == Some(1) && l.text == "rank 1 fails"), "{lines:?}");
    assert_eq!(marked_processes(&h), 0, "lab cross-check: no process of the job is left on the nodes");
}
