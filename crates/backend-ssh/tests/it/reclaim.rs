//! `reclaim` of the plain backend against the lab: a finished run's code dir goes (its log
//! stays) and a running run's code dir stays, with no live set given by the caller: the backend
//! itself sees the run running (a process on the plain host).

use std::path::PathBuf;
use std::time::Duration;

use theseus_core::backend::{Backend, JobHandle, JobState, ReclaimKind, ReclaimOptions, ReclaimReport, SubmitOptions};
use theseus_core::testing;

use crate::require_lab;

fn paths(handle: &JobHandle) -> (PathBuf, PathBuf) {
    let field = |k: &str| PathBuf::from(handle.data[k].as_str().expect("handle path"));
    (field("work_dir"), field("log_file"))
}

fn reclaimed_runs(report: &ReclaimReport) -> Vec<String> {
    report.items.iter().filter(|i| i.kind == ReclaimKind::RunDir).map(|i| i.path.clone()).collect()
}

fn everything_old() -> ReclaimOptions {
    ReclaimOptions { older_than: Duration::ZERO, ..ReclaimOptions::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_reclaim_removes_a_finished_runs_code_and_keeps_a_running_one() {
    let lab = require_lab!();
    let s = crate::plain::setup(lab, "reclaim", crate::plain::quick());
    let h = crate::plain::harness(&s);
    let (sleeper, _a) =
        testing::prepare(&h, "reclaim-running", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    let (done, _b) = testing::prepare(&h, "reclaim-done", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let running = s.backend.submit(&sleeper, &SubmitOptions::default()).await.unwrap();
    let finished = s.backend.submit(&done, &SubmitOptions::default()).await.unwrap();
    let status = testing::wait_terminal(&h, &finished).await;

    let report = s.backend.reclaim(&everything_old()).await;
    let used = s.backend.usage().await;
    let _ = s.backend.cancel(&running).await;

    assert_eq!(status.state, JobState::Completed, "{status:?}");
    let report = report.unwrap();
    let (finished_work, finished_log) = paths(&finished);
    let (running_work, _) = paths(&running);
    assert_eq!(reclaimed_runs(&report), [finished_work.to_str().unwrap()], "{report:?}");
    assert!(!finished_work.exists() && finished_log.exists(), "the code goes, the log stays");
    assert!(running_work.join("job.py").exists(), "the running run's code stays");
    assert_eq!(used.unwrap().run_dirs, 1);
}
