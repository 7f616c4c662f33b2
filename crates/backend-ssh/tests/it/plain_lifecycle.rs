//! The plain backend's lifecycle guarantees over a real sshd: one live job per (project, group,
//! name) on a host even when submits race, `--replace` races included, and a cancel that also
//! stops children which shed the run's marker variable (`env -i`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use theseus_backend_ssh::plain::PlainBackend;
use theseus_backend_ssh::ssh::SshHost;
use theseus_backend_ssh::testing::{cancel_while_shipping, make_big, small_job};
use theseus_core::Error;
use theseus_core::backend::{Backend, JobHandle, JobState, PreparedJob, SubmitOptions};
use theseus_core::local::process::job_processes;

use crate::plain::{lab_host, plan, quick, scratch_cluster};
use crate::require_lab;
use crate::support::Lab;

/// `n` backends of one host (one cluster root), each with its own SSH connection, like `n`
/// separate `theseus` processes.
fn backends(lab: &Lab, name: &str, n: usize) -> Vec<Arc<PlainBackend>> {
    let (cluster, _) = scratch_cluster(lab, name);
    (0..n)
        .map(|i| {
            let ssh = Arc::new(SshHost::new(lab.options(&format!("{name}-{i}"))));
            Arc::new(PlainBackend::with_ssh("lab", lab_host(), cluster.clone(), ssh, quick()))
        })
        .collect()
}

/// A job named `name` (project `lifecycle`) running `words`, with a run id of its own.
fn prepare(b: &PlainBackend, name: &str, words: &[&str]) -> (PreparedJob, tempfile::TempDir) {
    small_job(b, &plan(), "lifecycle", name, words)
}

/// Runs (by run id) that still have a live process carrying their marker.
fn live_runs(jobs: &[PreparedJob]) -> Vec<String> {
    jobs.iter().map(|j| j.identity.run_id.clone()).filter(|id| !job_processes(id).is_empty()).collect()
}

/// Best-effort cleanup: cancels every handle.
async fn cancel_all(b: &PlainBackend, handles: &[JobHandle]) {
    for h in handles {
        let _ = b.cancel(h).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_submits_of_one_name_leave_exactly_one_live_run() {
    let lab = require_lab!();
    const N: usize = 4;
    let bs = backends(lab, "race", N);
    let jobs: Vec<_> = bs.iter().map(|b| prepare(b, "race", &["sleep", "600"])).collect();
    let results = futures::future::join_all(
        bs.iter().zip(&jobs).map(|(b, (job, _))| async move { b.submit(job, &SubmitOptions::default()).await }),
    )
    .await;
    let prepared: Vec<PreparedJob> = jobs.iter().map(|(j, _)| j.clone()).collect();
    let handles: Vec<JobHandle> = results.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    let live = live_runs(&prepared);
    cancel_all(&bs[0], &handles).await;

    assert_eq!(handles.len(), 1, "exactly one submit wins: {results:?}");
    assert_eq!(live, [handles[0].id.clone()], "exactly the winner is live");
    for ((result, (job, _)), b) in results.iter().zip(&jobs).zip(&bs) {
        let Err(err) = result else { continue };
        let text = err.to_string();
        assert!(matches!(err, Error::AlreadyExists { .. }), "{err:?}");
        assert!(text.contains(&handles[0].id) && text.contains("already exists") && text.contains("`race`"), "{text}");
        let layout = b.layout(&job.identity, &plan()).unwrap();
        assert!(!std::path::Path::new(&layout.work_dir).exists(), "the loser shipped nothing: {text}");
        assert!(!std::path::Path::new(&layout.run_dir).exists(), "the loser left no run dir: {text}");
    }
    // Once the run is over, the name is free again.
    let (again, _d) = prepare(&bs[0], "race", &["true"]);
    let h = bs[0].submit(&again, &SubmitOptions::default()).await.expect("the name is free after cancel");
    wait_terminal(&bs[0], &h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_replacements_leave_exactly_one_live_run() {
    let lab = require_lab!();
    const N: usize = 3;
    let bs = backends(lab, "replace-race", N);
    for round in 0..2 {
        let (first, _d) = prepare(&bs[0], "rep", &["sleep", "600"]);
        let h0 = bs[0].submit(&first, &SubmitOptions::default()).await.unwrap_or_else(|e| panic!("round {round}: {e}"));
        let jobs: Vec<_> = bs.iter().map(|b| prepare(b, "rep", &["sleep", "600"])).collect();
        let replace = SubmitOptions { replace: true, ..SubmitOptions::default() };
        let results = futures::future::join_all(bs.iter().zip(&jobs).map(|(b, (job, _))| {
            let replace = replace.clone();
            async move { b.submit(job, &replace).await }
        }))
        .await;
        let mut all = vec![first.clone()];
        all.extend(jobs.iter().map(|(j, _)| j.clone()));
        let mut handles: Vec<JobHandle> = results.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
        let live = live_runs(&all);
        handles.push(h0.clone());
        cancel_all(&bs[0], &handles).await;
        assert!(handles.len() >= 2, "round {round}: at least one replacement succeeds: {results:?}");
        assert_eq!(live.len(), 1, "round {round}: exactly one live run, not {live:?}: {results:?}");
        assert_ne!(live[0], h0.id, "round {round}: the replaced run was stopped");
        let replaced = bs[0].status(&h0).await.unwrap();
        assert_eq!(replaced.state, JobState::Cancelled, "round {round}: {replaced:?}");
    }
}

/// PIDs of live processes whose command line is exactly `words`.
fn processes_running(words: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = words.iter().flat_map(|w| w.bytes().chain([0])).collect();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want) {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// A child started with `env -i` has no marker variable, one started with `setsid` is in another
/// session; cancel must stop both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_children_that_shed_the_marker() {
    let lab = require_lab!();
    let bs = backends(lab, "env-i", 1);
    let b = &bs[0];
    // Numbers no other test uses, so the processes can be told apart in /proc.
    let (shed, kept, left) = (["sleep", "41731"], ["sleep", "41832"], ["sleep", "41933"]);
    let (job, _d) = prepare(b, "env-i", &["sh", "-c", "env -i sleep 41731 & setsid sleep 41933 & sleep 41832"]);
    let h = b.submit(&job, &SubmitOptions::default()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while [&shed, &kept, &left].iter().any(|w| processes_running(&w[..]).is_empty()) {
        assert!(Instant::now() < deadline, "the job's three sleeps never started: {:?}", b.status(&h).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let result = b.cancel(&h).await;
    let after = [processes_running(&shed), processes_running(&kept), processes_running(&left)];
    // Clean up after a failure: these are this test's own processes, stopped by PID.
    for pid in after.iter().flatten() {
        let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
    }
    let status = result.expect("cancel");
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    assert_eq!(
        after,
        [Vec::<i32>::new(), vec![], vec![]],
        "no process of the run is left after cancel (env -i, plain, setsid)"
    );
}

async fn wait_terminal(b: &PlainBackend, h: &JobHandle) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = b.status(h).await.unwrap();
        if status.state.is_terminal() {
            return;
        }
        assert!(Instant::now() < deadline, "{status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The handle known before `submit` (recorded by the CLI as `submitting`) reads and cancels the
/// run while it is being submitted, and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planned_handle_reads_and_cancels_the_run_before_and_after_it_starts() {
    let lab = require_lab!();
    let b = backends(lab, "planned", 1).remove(0);
    let (mut job, dir) = prepare(&b, "planned", &["sleep", "600"]);
    make_big(&mut job, dir.path());
    let planned = b.planned_handle(&job).expect("a plain host knows the handle before submit");
    assert_eq!(planned.id, job.identity.run_id);
    assert!(matches!(b.status(&planned).await, Err(Error::NotFound { .. })), "nothing exists before submit");

    // The client is stuck in the middle of shipping (or was killed there).
    cancel_while_shipping(&b, &job, &planned).await;
    assert!(job_processes(&job.identity.run_id).is_empty(), "nothing of it runs");
    assert_eq!(b.status(&planned).await.unwrap().state, JobState::Cancelled);

    // The name is free again; a run that did start is read and cancelled through its planned handle.
    let (job2, _d2) = prepare(&b, "planned", &["sleep", "600"]);
    let planned2 = b.planned_handle(&job2).unwrap();
    let h2 = b.submit(&job2, &SubmitOptions::default()).await.unwrap();
    assert_eq!((h2.id.as_str(), &h2.data["run_dir"]), (planned2.id.as_str(), &planned2.data["run_dir"]));
    assert_eq!(b.status(&planned2).await.unwrap().state, JobState::Running);
    assert_eq!(b.cancel(&planned2).await.unwrap().state, JobState::Cancelled);
    assert!(job_processes(&job2.identity.run_id).is_empty());
}

/// `run_file` reads a file the run wrote in its status dir (`batch-search.json` for `status`),
/// says `None` for one that is not there, and reads nothing outside the run dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_file_reads_a_file_of_the_runs_status_dir() {
    let lab = require_lab!();
    let b = backends(lab, "runfile", 1).remove(0);
    let write = r#"printf '{"phase": "done", "chosen": 8}' > "$THESEUS_RUN_DIR/batch-search.json""#;
    let (job, _dir) = prepare(&b, "runfile", &["sh", "-c", write]);
    let h = b.submit(&job, &SubmitOptions::default()).await.unwrap();
    wait_terminal(&b, &h).await;
    let file = b.run_file(&h, "batch-search.json").await.unwrap();
    assert_eq!(file.as_deref(), Some(br#"{"phase": "done", "chosen": 8}"#.as_slice()));
    assert_eq!(b.run_file(&h, "nothing-here.json").await.unwrap(), None);
    for name in ["../runfile", "", ".lock", "a/b"] {
        assert_eq!(b.run_file(&h, name).await.unwrap(), None, "{name:?}");
    }
}
