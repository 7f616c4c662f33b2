//! Helpers that the integration tests of every backend reached over SSH share (this crate's
//! plain backend and `theseus-backend-slurm`'s Slurm backend), behind the feature `testing`:
//!
//! - jobs: a one-file job ([`small_job`]);
//! - shipping: a small code tree ([`code_tree`]), a job of it ([`job_of`]), the check that a run
//!   dir holds exactly the snapshot ([`assert_run_dir_is`]) and submit options that collect ship
//!   reports and notes ([`Seen`]), with [`write_file`] and [`files_under`];
//! - a submit held in the middle of shipping ([`Pause`], with [`make_big`] code to ship), and
//!   the check that such a run is cancelled through its planned handle
//!   ([`cancel_while_shipping`]);
//! - probes against a loopback port nobody listens on ([`refused_port`], [`loopback_options`],
//!   [`cpu_request`], [`gpu_request`], [`unreached_cluster`]);
//! - `reclaim` of every finished run ([`everything_old`], [`assert_reclaimed_only_finished`]);
//! - a run's log as lines ([`log_lines`]) and errors on one line ([`error_chain`]).
//!
//! They panic on failure, as test code does.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use theseus_core::backend::{
    Backend, JobHandle, JobState, LogOptions, PreparedJob, ReclaimKind, ReclaimOptions, ReclaimReport, SubmitOptions,
};
use theseus_core::bootstrap::{self, BootstrapInput};
use theseus_core::config::ClusterConfig;
use theseus_core::job::{Distributed, Entrypoint, Experiment, JobIdentity};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::solver::{ChipRequest, Plan, Request};
use theseus_core::store::ShipReport;
use theseus_core::store::sync::{MANIFEST, Manifest};

use crate::ssh::{Backoff, KnownHostsPolicy, SshOptions};

/// Writes `content` to `path` with permissions `mode`, creating the parent dirs.
pub fn write_file(path: &Path, content: &[u8], mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A small repo: executable and plain files, two files with one content, a nested dir, an
/// empty file, a name with a space, and a symlink.
pub fn code_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_file(&d.join("train.py"), b"print('hi')\n", 0o644);
    write_file(&d.join("run.sh"), b"#!/bin/sh\necho run-sh-ran\n", 0o755);
    write_file(&d.join("pkg/a.py"), b"A = 1\n", 0o644);
    write_file(&d.join("pkg/same.py"), b"A = 1\n", 0o644);
    write_file(&d.join("pkg/deep/data.txt"), b"data\n", 0o644);
    write_file(&d.join("with space.txt"), b"spaced\n", 0o600);
    write_file(&d.join("empty"), b"", 0o644);
    std::os::unix::fs::symlink("pkg/a.py", d.join("link.py")).unwrap();
    dir
}

/// A job named `name` (project `store-it`) of the code in `dir` running `words` on `b`.
pub fn job_of(b: &dyn Backend, plan: &Plan, name: &str, dir: &Path, words: &[&str]) -> PreparedJob {
    job_in(b, plan, "store-it", name, dir, words)
}

/// A job named `name` of `project` running `words` on `b`, with a run id of its own; its code is
/// one README in a temp dir, which lives as long as the returned `TempDir`.
pub fn small_job(
    b: &dyn Backend,
    plan: &Plan,
    project: &str,
    name: &str,
    words: &[&str],
) -> (PreparedJob, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README"), format!("{project} test\n")).unwrap();
    (job_in(b, plan, project, name, dir.path(), words), dir)
}

fn job_in(b: &dyn Backend, plan: &Plan, project: &str, name: &str, dir: &Path, words: &[&str]) -> PreparedJob {
    let snapshot = Snapshot::collect(dir, SnapshotMode::Dirty).unwrap();
    let identity = JobIdentity::new(name, Some(project), None);
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    let experiment = Experiment { entrypoint: Entrypoint::Words(words.clone()), ..Experiment::default() };
    let layout = b.layout(&identity, plan).unwrap();
    let input =
        BootstrapInput::for_layout(identity.clone(), &layout, vec![], words, Distributed::None, serde_json::json!({}));
    let bootstrap = bootstrap::render(&input).unwrap();
    PreparedJob { identity, experiment, env: vec![], plan: plan.clone(), snapshot, bootstrap }
}

/// Files (and symlinks) under `dir`, relative, without dirs.
pub fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(next) = todo.pop() {
        for entry in std::fs::read_dir(&next).unwrap().map(Result::unwrap) {
            if entry.file_type().unwrap().is_dir() {
                todo.push(entry.path());
            } else {
                found.insert(entry.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    found
}

/// Asserts that `run` holds exactly the snapshot of `code` (bytes, executable bits, symlink
/// targets) plus `extra` (the per-run files under `.theseus/`), nothing else.
pub fn assert_run_dir_is(code: &Path, run: &Path, extra: &[String]) {
    let snapshot = Snapshot::collect(code, SnapshotMode::Dirty).unwrap();
    for file in &snapshot.files {
        let (a, b) = (code.join(&file.path), run.join(&file.path));
        let ma = std::fs::symlink_metadata(&a).unwrap();
        let mb =
            std::fs::symlink_metadata(&b).unwrap_or_else(|e| panic!("{} missing from the run dir: {e}", file.path));
        assert_eq!(ma.file_type().is_symlink(), mb.file_type().is_symlink(), "{}: symlink or not", file.path);
        if ma.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(&a).unwrap(), std::fs::read_link(&b).unwrap(), "{}", file.path);
            continue;
        }
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "{}: bytes", file.path);
        assert_eq!(ma.mode() & 0o111 != 0, mb.mode() & 0o111 != 0, "{}: executable bit", file.path);
        assert!(matches!(mb.mode() & 0o111, 0 | 0o111), "{}: x for all or none", file.path);
    }
    let mut expected: BTreeSet<String> = snapshot.files.iter().map(|f| f.path.clone()).collect();
    expected.extend(extra.iter().cloned());
    // A ship through the store records the run dir's code for `theseus sync` (a whole ship, the
    // fallback without the store's tools, has none), listing exactly the snapshot's paths.
    if let Ok(text) = std::fs::read_to_string(run.join(MANIFEST)) {
        let listed: Manifest = serde_json::from_str(&text).unwrap();
        let paths: BTreeSet<String> = listed.files.keys().cloned().collect();
        assert_eq!(paths, snapshot.files.iter().map(|f| f.path.clone()).collect(), "the code manifest");
        expected.insert(MANIFEST.to_owned());
    }
    assert_eq!(files_under(run), expected, "the run dir holds the snapshot and the per-run files only");
}

/// Submit options that collect the ship reports and the status notes.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    reports: Arc<Mutex<Vec<ShipReport>>>,
    notes: Arc<Mutex<Vec<String>>>,
}

impl Seen {
    /// Options whose callbacks record into this `Seen`.
    pub fn options(&self) -> SubmitOptions {
        let (reports, notes) = (self.reports.clone(), self.notes.clone());
        SubmitOptions {
            shipped: Some(Arc::new(move |r: &ShipReport| reports.lock().unwrap().push(r.clone()))),
            status: Some(Arc::new(move |t: &str| notes.lock().unwrap().push(t.to_owned()))),
            ..SubmitOptions::default()
        }
    }

    /// The ship reports so far.
    pub fn reports(&self) -> Vec<ShipReport> {
        self.reports.lock().unwrap().clone()
    }

    /// The status notes so far.
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap().clone()
    }
}

/// Holds a submit in the middle of shipping: `paused` once 1 MiB went out, then waits for `go`.
#[derive(Debug, Default)]
pub struct Pause {
    paused: Arc<AtomicBool>,
    go: Arc<AtomicBool>,
}

impl Pause {
    /// A pause that has not paused yet.
    pub fn new() -> Pause {
        Pause::default()
    }

    /// Submit options whose progress callback (on the blocking writer thread) pauses.
    pub fn options(&self) -> SubmitOptions {
        let (paused, go) = (self.paused.clone(), self.go.clone());
        SubmitOptions {
            progress: Some(Arc::new(move |sent, _| {
                if sent > 1 << 20 && !paused.swap(true, Ordering::SeqCst) {
                    let deadline = Instant::now() + Duration::from_secs(120);
                    while !go.load(Ordering::SeqCst) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })),
            ..SubmitOptions::default()
        }
    }

    /// Waits (up to a minute) until the submit is held.
    pub async fn wait_paused(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.paused.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the submit never got to shipping");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets the held submit go on.
    pub fn resume(&self) {
        self.go.store(true, Ordering::SeqCst);
    }
}

/// Adds 4 MiB to the job's code in `dir`, so that shipping reports progress before it ends.
pub fn make_big(job: &mut PreparedJob, dir: &Path) {
    let block: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("big.bin"), block.repeat(4)).unwrap();
    job.snapshot = Snapshot::collect(dir, SnapshotMode::Dirty).unwrap();
}

/// Cancels a run through its `planned` handle while its submit (of `job`, on `b`) is held in
/// the middle of shipping: the run reads `Submitting` meanwhile, the cancel answers `Cancelled`,
/// and the submit, let go on, fails saying that the run was cancelled.
pub async fn cancel_while_shipping<B: Backend + 'static>(b: &Arc<B>, job: &PreparedJob, planned: &JobHandle) {
    let pause = Pause::new();
    let submit = {
        let (b, job, options) = (b.clone(), job.clone(), pause.options());
        tokio::spawn(async move { b.submit(&job, &options).await })
    };
    pause.wait_paused().await;
    let during = b.status(planned).await.unwrap();
    assert_eq!(during.state, JobState::Submitting, "{during:?}");
    let cancelled = b.cancel(planned).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled, "{cancelled:?}");
    pause.resume();
    let err = submit.await.unwrap().expect_err("a run cancelled while being submitted never starts");
    assert!(err.to_string().contains("was cancelled"), "{err}");
}

/// A loopback port nobody listens on (bound, then closed).
pub fn refused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Options for `theseus-probe@127.0.0.1:port` with a short backoff of 5 attempts, no config
/// file and `control` as their control dir.
pub fn loopback_options(port: u16, control: &Path) -> SshOptions {
    let mut o = SshOptions::new("theseus-probe@127.0.0.1");
    o.port = Some(port);
    o.config_file = Some(control.join("empty_config"));
    std::fs::write(control.join("empty_config"), "").unwrap();
    o.known_hosts = Some(KnownHostsPolicy::Off);
    o.control_dir = Some(control.to_owned());
    o.backoff = Backoff { initial: Duration::from_millis(50), max: Duration::from_millis(100), attempts: 5 };
    o
}

/// A request for one CPU.
pub fn cpu_request() -> Request {
    Request { chip: ChipRequest::Cpu, count: 1, preferred_clusters: vec![], forbidden_clusters: vec![], host: None }
}

/// A request for one GPU of any kind.
pub fn gpu_request() -> Request {
    Request { chip: ChipRequest::AnyGpu, ..cpu_request() }
}

/// A cluster whose dirs (`/r`, `/w`) a test never reaches.
pub fn unreached_cluster() -> ClusterConfig {
    ClusterConfig { root: "/r".into(), work: "/w".into(), ..ClusterConfig::default() }
}

/// The run dir and the log file that an SSH backend's handle names.
fn handle_paths(handle: &JobHandle) -> (PathBuf, PathBuf) {
    let field = |k: &str| PathBuf::from(handle.data[k].as_str().expect("handle path"));
    (field("work_dir"), field("log_file"))
}

/// The run dirs a `reclaim` report removed.
fn reclaimed_runs(report: &ReclaimReport) -> Vec<String> {
    report.items.iter().filter(|i| i.kind == ReclaimKind::RunDir).map(|i| i.path.clone()).collect()
}

/// `reclaim` options under which every finished run is old enough.
pub fn everything_old() -> ReclaimOptions {
    ReclaimOptions { older_than: Duration::ZERO, ..ReclaimOptions::default() }
}

/// Asserts what a `reclaim` under [`everything_old`] did: `report` names exactly the code dir of
/// the `finished` run, which is gone while its log stays, and the `running` run's code dir still
/// holds `kept`.
pub fn assert_reclaimed_only_finished(report: &ReclaimReport, finished: &JobHandle, running: &JobHandle, kept: &str) {
    let (finished_work, finished_log) = handle_paths(finished);
    let (running_work, _) = handle_paths(running);
    assert_eq!(reclaimed_runs(report), [finished_work.to_str().unwrap()], "{report:?}");
    assert!(!finished_work.exists() && finished_log.exists(), "the code goes, the log stays");
    assert!(running_work.join(kept).exists(), "the queued or running run's code stays");
}

/// The lines of the run's log as they are now (no follow, every rank).
pub async fn log_lines(b: &dyn Backend, handle: &JobHandle) -> Vec<String> {
    let stream = b.logs(handle, &LogOptions { follow: false, rank: None }).await.unwrap();
    stream.map(|l| l.unwrap().text).collect().await
}

/// An error and its causes on one line.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    crate::ssh::error_chain(err)
}
