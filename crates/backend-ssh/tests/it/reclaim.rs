//! `reclaim` of the plain backend against the lab: a finished run's code dir goes (its log
//! stays) and a running run's code dir stays, with no live set given by the caller: the backend
//! itself sees the run running (a process on the plain host).

use theseus_backend_ssh::testing::{assert_reclaimed_only_finished, everything_old};
use theseus_core::backend::{Backend, JobState, SubmitOptions};
use theseus_core::testing;

use crate::require_lab;

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
    assert_reclaimed_only_finished(&report.unwrap(), &finished, &running, "job.py");
    assert_eq!(used.unwrap().run_dirs, 1);
}
