//! `reclaim` of the Slurm backend against the Slurm lab: a finished run's code dir goes (its log
//! stays) and a queued or running run's code dir stays, with no live set given by the caller: the
//! backend itself sees the run live (`squeue`).

use theseus_backend_ssh::testing::{assert_reclaimed_only_finished, everything_old};
use theseus_core::backend::{Backend, JobState, SubmitOptions};
use theseus_core::job::Distributed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_reclaim_removes_a_finished_runs_code_and_keeps_a_queued_or_running_one() {
    let Some(lab) = crate::slurm::lab() else { return };
    let (b, _ssh) = crate::slurm::backend(lab, "reclaim", crate::slurm::host());
    let plan = crate::slurm::plan("cpu", 1, 0);
    let files = [("x", "")];
    let (sleeper, _a) =
        crate::slurm::prepare(&b, &plan, "reclaim-running", &files, &["sleep", "600"], &[], Distributed::None);
    let (done, _b) = crate::slurm::prepare(&b, &plan, "reclaim-done", &files, &["true"], &[], Distributed::None);
    let running = b.submit(&sleeper, &SubmitOptions::default()).await.unwrap();
    let finished = b.submit(&done, &SubmitOptions::default()).await.unwrap();
    let status = crate::slurm::wait_terminal(&b, &finished).await;

    let report = b.reclaim(&everything_old()).await;
    let _ = b.cancel(&running).await;

    assert_eq!(status.state, JobState::Completed, "{status:?}");
    assert_reclaimed_only_finished(&report.unwrap(), &finished, &running, "x");
}
