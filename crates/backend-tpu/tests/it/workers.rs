//! The backend's worker half over real sshds (see [`crate::support`]): the conformance suite on
//! a VM of two workers, rank wiring from each worker's metadata server, logs merged per worker,
//! a preempted VM, cancel deleting a VM theseus created, and submit refusing to create unconfirmed.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use theseus_backend_tpu::backend::{KIND, TpuHandleData};
use theseus_core::backend::{Backend, JobHandle, JobState, LogOptions, SubmitOptions};
use theseus_core::testing::{self, Harness, ProcessProbe};

use crate::require_lab;
use crate::support::{self, WORKERS, ready_node};

/// The workers run on this machine: their processes are in the local `/proc`, found by the
/// marker the plain runs carry.
struct LocalProcProbe;

#[async_trait]
impl ProcessProbe for LocalProcProbe {
    async fn alive(&self, handle: &JobHandle) -> theseus_core::Result<usize> {
        Ok(theseus_core::local::process::job_processes(&handle.id).len())
    }
}

/// Submit options of a user who confirmed the creation, with `--keep` or not.
fn confirmed(keep: bool) -> SubmitOptions {
    SubmitOptions { create_confirmed: true, keep, ..SubmitOptions::default() }
}

fn harness(backend: Arc<theseus_backend_tpu::backend::TpuBackend>, processes: u32) -> Harness {
    let mut plan = testing::cpu_plan("tpu", KIND, 1);
    plan.nodes = processes;
    Harness { backend, plan, probe: Arc::new(LocalProcProbe), timeout: Duration::from_secs(90) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_passes_the_conformance_suite_on_worker_0_of_two() {
    let lab = require_lab!();
    let (backend, vm) = support::backend(lab, "conformance", Some(ready_node("1", false)));
    // A one-process plan runs on worker 0 only (the fit rule plans every worker of the slice).
    testing::run_all(&harness(backend, 1)).await;
    let s = vm.0.lock().unwrap();
    assert_eq!((s.creates, s.deletes), (0, 0), "a READY VM of the user is used as it is");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_runs_the_job_wired_from_its_metadata_server_and_logs_are_merged_per_worker() {
    let lab = require_lab!();
    let (backend, _vm) = support::backend(lab, "wired", Some(ready_node("1", false)));
    let h = harness(backend.clone(), WORKERS as u32);
    let script = "print(__import__('os').environ.get('RANK'), __import__('os').environ.get('WORLD_SIZE'), \
                  __import__('os').environ.get('JAX_COORDINATOR_ADDRESS'), __import__('os').environ.get('THESEUS_TPU_WORKER'), \
                  __import__('os').environ.get('THESEUS_TPU_MODE'), __import__('os').environ['HOME'])";
    let (job, _dir) = testing::prepare(&h, "wired", &[], vec![], serde_json::json!({})).await.unwrap();
    let mut job = job;
    // The job prints its wiring instead of running job.py.
    for f in &mut job.bootstrap.files {
        f.contents = f
            .contents
            .replace("theseus_args=(job.py", &format!("theseus_args=(-c {}", theseus_core::shell::quote(script)));
    }
    let handle = backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let status = testing::wait_terminal(&h, &handle).await;
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}");
    assert_eq!(status.ranks.len(), WORKERS);
    let lines: Vec<_> = backend
        .logs(&handle, &LogOptions::default())
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let port = theseus_backend_ssh::paths::coordinator_port(&handle.id);
    for w in 0..WORKERS {
        let home = lab.dir.join(format!("w{w}"));
        let want = format!("{w} {WORKERS} 127.0.0.1:{port} {w} 1 {}", home.display());
        assert!(
            lines.iter().any(|l| l.text == want
                && l.rank == Some(w as u32)
                && l.source.as_deref() == Some(&format!("worker-{w}"))),
            "worker {w} should print `{want}`: {lines:?}"
        );
    }
    // One worker's log only.
    let one: Vec<_> =
        backend.logs(&handle, &LogOptions { follow: false, rank: Some(1) }).await.unwrap().collect::<Vec<_>>().await;
    assert!(one.iter().all(|l| l.as_ref().unwrap().rank == Some(1)) && !one.is_empty());
    // Each worker's code is in its own home.
    let data: TpuHandleData = serde_json::from_value(handle.data.clone()).unwrap();
    for (w, run) in data.workers.iter().enumerate() {
        assert!(run.run.work_dir.starts_with(&lab.dir.join(format!("w{w}")).display().to_string()), "{run:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_vm_ends_the_run_as_preempted_and_a_recreated_one_too() {
    let lab = require_lab!();
    let (backend, vm) = support::backend(lab, "preempted", Some(ready_node("1", false)));
    let h = harness(backend.clone(), 1);
    let (job, _dir) = testing::prepare(&h, "preempted", &["sleep", "60"], vec![], serde_json::json!({})).await.unwrap();
    let handle = backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    vm.0.lock().unwrap().node.as_mut().unwrap().state = "PREEMPTED".into();
    let status = backend.status(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Preempted, "{status:?}");
    assert!(status.message.as_deref().unwrap_or("").contains("PREEMPTED"), "{status:?}");
    vm.0.lock().unwrap().node.as_mut().unwrap().state = "REPAIRING".into();
    let status = backend.status(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Unknown, "{status:?}");
    assert!(status.message.as_deref().unwrap_or("").contains("REPAIRING"), "{status:?}");
    vm.0.lock().unwrap().node = Some(ready_node("2", false));
    let status = backend.status(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Preempted, "{status:?}");
    assert!(status.message.as_deref().unwrap_or("").contains("created again"), "{status:?}");
    // The old incarnation's processes are still here (the fake VM does not kill them): stop them.
    vm.0.lock().unwrap().node = Some(ready_node("1", false));
    backend.cancel(&handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_creates_only_when_confirmed_and_cancel_deletes_what_it_created_unless_kept() {
    let lab = require_lab!();
    let (backend, vm) = support::backend(lab, "create", None);
    let h = harness(backend.clone(), 1);
    let (job, _dir) = testing::prepare(&h, "create", &["sleep", "60"], vec![], serde_json::json!({})).await.unwrap();
    assert_eq!(backend.creates(&job).await.unwrap().len(), 1, "plan shows the VM it would create");
    let err = backend.submit(&job, &SubmitOptions::default()).await.unwrap_err().to_string();
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(vm.0.lock().unwrap().creates, 0, "nothing created without confirmation");

    let handle = backend.submit(&job, &confirmed(false)).await.expect("submit");
    assert_eq!(vm.0.lock().unwrap().creates, 1);
    let data: TpuHandleData = serde_json::from_value(handle.data.clone()).unwrap();
    assert!(data.created && !data.keep);
    let status = backend.cancel(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    assert!(status.message.as_deref().unwrap_or("").contains("deleted"), "{status:?}");
    assert_eq!(vm.0.lock().unwrap().deletes, 1, "cancel deletes the VM the run created");

    // --keep: the VM stays.
    let (job, _dir) =
        testing::prepare(&h, "create-keep", &["sleep", "60"], vec![], serde_json::json!({})).await.unwrap();
    let handle = backend.submit(&job, &confirmed(true)).await.expect("submit");
    backend.cancel(&handle).await.unwrap();
    let s = vm.0.lock().unwrap();
    assert_eq!((s.creates, s.deletes), (2, 1), "a kept VM stays");
    assert!(s.node.is_some());
}

/// Worker 0 of a VM the run created deletes it through the API once the job ended, with the
/// token of the VM's service account from its metadata server; worker 1 does not, nor does a
/// kept VM's worker 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_0_deletes_the_vm_the_run_created_when_the_job_ends_unless_kept() {
    let lab = require_lab!();
    let (backend, vm) = support::backend(lab, "self-delete", None);
    let backend = Arc::new(Arc::into_inner(backend).unwrap().with_self_delete(Duration::ZERO));
    let h = harness(backend.clone(), WORKERS as u32);
    let deletes = || {
        support::API_REQUESTS
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.starts_with("DELETE /v2/projects/p/locations/us-central2-b/nodes/tpu "))
            .cloned()
            .collect::<Vec<_>>()
    };
    let before = deletes().len();
    let (job, _dir) = testing::prepare(&h, "self-delete-keep", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let handle = backend.submit(&job, &confirmed(true)).await.expect("submit");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);

    let (job, _dir) = testing::prepare(&h, "self-delete", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    // The VM stands (kept): make it look created by this run's submit.
    vm.0.lock().unwrap().node = None;
    let handle = backend.submit(&job, &confirmed(false)).await.expect("submit");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while deletes().len() == before && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seen = deletes();
    assert_eq!(seen.len(), before + 1, "one delete, from worker 0 of the created VM only: {seen:?}");
    assert!(seen.last().unwrap().ends_with(&format!("Bearer {}", support::TOKEN)), "{seen:?}");
    // The deleter is not the job: the run ended when the job did.
    assert_eq!(theseus_core::local::process::job_processes(&handle.id).len(), 0);
}

/// A preempted VM theseus created is created anew by the next `status`, and the run starts
/// again on it from the code and bootstrap the client kept, as attempt 2 (the bootstrap's
/// resume reads the restart count); a cancelled run is not started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_recreates_a_preempted_vm_theseus_created_and_restarts_the_run_as_attempt_2() {
    let lab = require_lab!();
    let (backend, vm) = support::backend(lab, "resume", None);
    let h = harness(backend.clone(), WORKERS as u32);
    // Attempt 1 of worker 0 writes a checkpoint and its `latest` marker, then waits to be
    // preempted.
    let script = "import os, time; a = os.environ['THESEUS_ATTEMPT']; w = os.environ['THESEUS_TPU_WORKER']; \
                  c = os.environ['THESEUS_CHECKPOINT_DIR']; \
                  (a == '1' and w == '0') and (os.makedirs(c + '/step_1', exist_ok=True), \
                  open(c + '/latest', 'w').write('step_1')); time.sleep(1); \
                  print('attempt', a, 'worker', w, flush=True); time.sleep(60 if a == '1' else 2)";
    let (mut job, _dir) = testing::prepare(&h, "resume", &[], vec![], serde_json::json!({})).await.unwrap();
    for f in &mut job.bootstrap.files {
        f.contents = f
            .contents
            .replace("theseus_args=(job.py", &format!("theseus_args=(-c {}", theseus_core::shell::quote(script)));
    }
    let handle = backend.submit(&job, &confirmed(false)).await.expect("submit");
    wait_for(&backend, &handle, "attempt 1 worker 1").await;
    // The preemption: the VM's state, and its processes gone.
    vm.0.lock().unwrap().node.as_mut().unwrap().state = "PREEMPTED".into();
    kill_run(&handle.id);
    let status = backend.status(&handle).await.unwrap();
    // Attempt 2 lasts 2 s; a slow machine may see it over already.
    assert!(matches!(status.state, JobState::Running | JobState::Completed), "{status:?}");
    assert_eq!(status.attempt, Some(2), "{status:?}");
    let message = status.message.clone().unwrap_or_default();
    assert!(message.contains("was preempted") && message.contains("attempt 2"), "{status:?}");
    assert_eq!(vm.0.lock().unwrap().creates, 2, "the VM was created anew");
    // Had the VM gone away before anyone saw the run's end, its status would not fall back to
    // the interruption the restart recovered from.
    let node = vm.0.lock().unwrap().node.take();
    let gone = backend.status(&handle).await.unwrap();
    assert_ne!(gone.state, JobState::Preempted, "{gone:?}");
    vm.0.lock().unwrap().node = node;
    let status = testing::wait_terminal(&h, &handle).await;
    assert_eq!((status.state, status.attempt), (JobState::Completed, Some(2)), "{status:?}");
    wait_for(&backend, &handle, "attempt 2 worker 1").await;
    // Worker 0's attempt 2 resumes from the checkpoint attempt 1 wrote, as its own (the run dir
    // that told the bootstrap so went with the VM; the wrapper put its resume base back).
    let lines: Vec<_> = backend.logs(&handle, &LogOptions::default()).await.unwrap().collect::<Vec<_>>().await;
    assert!(
        lines.iter().flatten().any(|l| l.rank == Some(0)
            && l.text.contains("attempt 2: resuming from")
            && l.text.contains("(latest, written by this run)")),
        "{lines:#?}"
    );

    // A VM created anew for the run by a client that stopped before starting the run again
    // (READY, new incarnation, labelled with the run): the next status starts it there.
    let (mut job, _dir) = testing::prepare(&h, "resume-stopped", &[], vec![], serde_json::json!({})).await.unwrap();
    for f in &mut job.bootstrap.files {
        f.contents = f
            .contents
            .replace("theseus_args=(job.py", &format!("theseus_args=(-c {}", theseus_core::shell::quote(script)));
    }
    vm.0.lock().unwrap().node = None;
    let handle = backend.submit(&job, &confirmed(false)).await.expect("submit");
    wait_for(&backend, &handle, "attempt 1 worker 1").await;
    kill_run(&handle.id);
    let mut anew = ready_node("anew", true);
    anew.labels.insert("theseus-run".into(), handle.id.clone());
    vm.0.lock().unwrap().node = Some(anew);
    let status = backend.status(&handle).await.unwrap();
    assert_eq!(status.attempt, Some(2), "{status:?}");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);

    // Cancelled, then preempted: not started again.
    let (mut job, _dir) = testing::prepare(&h, "resume-cancel", &[], vec![], serde_json::json!({})).await.unwrap();
    for f in &mut job.bootstrap.files {
        f.contents = f
            .contents
            .replace("theseus_args=(job.py", &format!("theseus_args=(-c {}", theseus_core::shell::quote(script)));
    }
    vm.0.lock().unwrap().node = None;
    let handle = backend.submit(&job, &confirmed(true)).await.expect("submit");
    backend.cancel(&handle).await.unwrap();
    vm.0.lock().unwrap().node.as_mut().unwrap().state = "PREEMPTED".into();
    let status = backend.status(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Preempted, "{status:?}");
    assert_eq!(vm.0.lock().unwrap().creates, 4, "a cancelled run's VM is not created anew");
}

/// Kills every process of run `run` on this machine (a preemption of the fake VM).
fn kill_run(run: &str) {
    for pid in theseus_core::local::process::job_processes(run) {
        let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
    }
}

/// Waits until the run's logs have a line `text`.
async fn wait_for(backend: &theseus_backend_tpu::backend::TpuBackend, handle: &JobHandle, text: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let lines: Vec<_> = backend.logs(handle, &LogOptions::default()).await.unwrap().collect::<Vec<_>>().await;
        if lines.iter().any(|l| l.as_ref().is_ok_and(|l| l.text == text)) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "no line `{text}`: {lines:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A submit that cannot start on every worker leaves nothing: the workers where it started
/// stop again and the VM it created is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_failing_on_one_worker_stops_the_others_and_deletes_the_vm_it_created() {
    let lab = require_lab!();
    let (backend, vm) = support::backend(lab, "half", None);
    let h = harness(backend.clone(), WORKERS as u32);
    let (job, _dir) = testing::prepare(&h, "half", &["sleep", "60"], vec![], serde_json::json!({})).await.unwrap();
    vm.0.lock().unwrap().unreachable_worker = Some(1);
    let err = backend.submit(&job, &confirmed(false)).await.unwrap_err();
    let text = theseus_backend_ssh::testing::error_chain(&err);
    assert!(text.contains("worker 1"), "{text}");
    let s = vm.0.lock().unwrap();
    assert_eq!((s.creates, s.deletes), (1, 1), "the VM the submit created is deleted");
    assert_eq!(theseus_core::local::process::job_processes(&job.identity.run_id).len(), 0);
}

/// `gc` finds a VM theseus created whose run is over (no process of it on worker 0), e.g. after
/// the client was killed during the create, and deletes it; a VM whose run lives stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_are_vms_theseus_created_whose_run_is_over() {
    let lab = require_lab!();
    let (backend, vm) = support::backend(lab, "leftovers", None);
    let h = harness(backend.clone(), 1);
    let (job, _dir) = testing::prepare(&h, "leftovers", &["sleep", "60"], vec![], serde_json::json!({})).await.unwrap();
    let handle = backend.submit(&job, &confirmed(false)).await.expect("submit");
    let live = backend.leftovers(Duration::ZERO, true).await.unwrap().unwrap();
    assert!(live.is_empty(), "a VM whose run lives is no leftover: {live:?}");
    let user_vm = support::ready_node("user", false);
    let mut orphan = support::ready_node("orphan", true);
    orphan.labels.insert("theseus-run".into(), "20200101-000000-abcdef".into());
    vm.0.lock().unwrap().node = Some(user_vm);
    assert!(backend.leftovers(Duration::ZERO, false).await.unwrap().unwrap().is_empty(), "the user's VM stays");
    vm.0.lock().unwrap().node = Some(orphan);
    let listed = backend.leftovers(Duration::from_secs(3600), true).await.unwrap().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].contains("20200101-000000-abcdef"), "{listed:?}");
    assert_eq!(vm.0.lock().unwrap().deletes, 0, "a dry run deletes nothing");
    backend.leftovers(Duration::from_secs(3600), false).await.unwrap();
    assert_eq!(vm.0.lock().unwrap().deletes, 1);
    // Still CREATING when its client was killed: a leftover too, once old enough.
    let mut creating = support::ready_node("creating", true);
    creating.state = "CREATING".into();
    creating.labels.insert("theseus-run".into(), "20200101-000000-abcdef".into());
    vm.0.lock().unwrap().node = Some(creating);
    let listed = backend.leftovers(Duration::ZERO, true).await.unwrap().unwrap();
    assert!(listed.len() == 1 && listed[0].contains("CREATING"), "{listed:?}");
    kill_run(&handle.id);
}

/// Once the VM a run created is deleted after the run (worker 0's self-delete), `status` answers
/// the final status it saw and `logs` the logs kept then, per worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_logs_outlive_the_vm_deleted_after_the_run() {
    let lab = require_lab!();
    let (backend, vm) = support::backend(lab, "outlive", None);
    let h = harness(backend.clone(), WORKERS as u32);
    let (job, _dir) =
        testing::prepare(&h, "outlive", &["ok"], vec![], serde_json::json!({"greeting": "bye"})).await.unwrap();
    let handle = backend.submit(&job, &confirmed(false)).await.expect("submit");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);
    vm.0.lock().unwrap().node = None;
    let status = backend.status(&handle).await.unwrap();
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}");
    assert!(status.message.as_deref().unwrap_or("").contains("deleted"), "{status:?}");
    let lines: Vec<_> =
        backend.logs(&handle, &LogOptions { follow: false, rank: Some(1) }).await.unwrap().collect().await;
    let lines: Vec<_> = lines.into_iter().map(Result::unwrap).collect();
    assert!(
        lines.iter().any(|l| l.text == "conformance: ok bye" && l.source.as_deref() == Some("worker-1")),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| l.rank == Some(1)), "{lines:?}");
}

/// Two submits of one name at once on a VM of two workers: at most one runs (on every worker;
/// each worker's claim decides, so when each wins a worker both are refused), a refused one
/// names the live run, and no refused run leaves a process behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_submits_of_one_name_at_once_leave_at_most_one_live_run() {
    let lab = require_lab!();
    let (backend, _vm) = support::backend(lab, "race", Some(ready_node("1", false)));
    let h = harness(backend.clone(), WORKERS as u32);
    let (a, _da) = testing::prepare(&h, "race", &["sleep", "60"], vec![], serde_json::json!({})).await.unwrap();
    let (b, _db) = testing::prepare(&h, "race", &["sleep", "60"], vec![], serde_json::json!({})).await.unwrap();
    let options = SubmitOptions::default();
    let (ra, rb) = tokio::join!(backend.submit(&a, &options), backend.submit(&b, &options));
    assert!(!(ra.is_ok() && rb.is_ok()), "two live runs of one name");
    for (job, result) in [(&a, &ra), (&b, &rb)] {
        match result {
            Ok(won) => assert_eq!(backend.status(won).await.unwrap().state, JobState::Running),
            Err(e) => {
                let text = theseus_backend_ssh::testing::error_chain(e);
                assert!(text.contains("live run"), "{text}");
                let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
                while !theseus_core::local::process::job_processes(&job.identity.run_id).is_empty() {
                    assert!(tokio::time::Instant::now() < deadline, "a refused run left processes");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
    for won in [&ra, &rb].into_iter().flatten() {
        backend.cancel(won).await.unwrap();
    }
}

/// When creating the preempted VM anew fails (after the old one was deleted), the run ends
/// preempted saying why and what to do, now and once the VM is gone; no further attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_cannot_create_the_vm_ends_the_run_preempted_saying_why() {
    let lab = require_lab!();
    let (backend, vm) = support::backend(lab, "resume-fails", None);
    let h = harness(backend.clone(), 1);
    let (job, _dir) =
        testing::prepare(&h, "resume-fails", &["sleep", "60"], vec![], serde_json::json!({})).await.unwrap();
    let handle = backend.submit(&job, &confirmed(false)).await.expect("submit");
    {
        let mut s = vm.0.lock().unwrap();
        s.node.as_mut().unwrap().state = "PREEMPTED".into();
        s.recreate_fails = true;
    }
    kill_run(&handle.id);
    let status = backend.status(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Preempted, "{status:?}");
    let message = status.message.unwrap_or_default();
    assert!(message.contains("version is not set") && message.contains("submit it again"), "{message}");
    let status = backend.status(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Preempted, "the VM is gone, the run stays preempted: {status:?}");
    assert_eq!(vm.0.lock().unwrap().creates, 1, "no further attempt");
}

/// `gc` frees on every worker of a READY VM what the plain backend frees there: a finished
/// run's code dir on each worker, named with its worker; a running one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_frees_a_finished_runs_code_on_every_worker() {
    let lab = require_lab!();
    let (backend, _vm) = support::backend(lab, "reclaim", Some(ready_node("1", false)));
    let h = harness(backend.clone(), WORKERS as u32);
    let (job, _dir) = testing::prepare(&h, "reclaim", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let handle = backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);
    // `du`: both workers' stores, summed.
    let usage = backend.usage().await.unwrap();
    assert_eq!(usage.run_dirs, WORKERS as u64, "the run's code dir on each worker: {usage:?}");
    let report = backend.reclaim(&theseus_backend_ssh::testing::everything_old()).await.unwrap();
    for w in 0..WORKERS {
        let prefix = format!("worker-{w}:");
        assert!(
            report.items.iter().any(|i| i.path.starts_with(&prefix) && i.path.ends_with(&handle.id)),
            "worker {w}'s code dir of the run: {report:#?}"
        );
    }
    assert!(report.failed.is_empty(), "{report:#?}");
}
