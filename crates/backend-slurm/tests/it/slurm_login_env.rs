//! Slurm jobs and the login environment (issue 23): a job submitted through a noisy login shell
//! finds a tool that only the user's `~/.profile` puts on PATH (as `srun bash -l` did in the
//! original), on a 2-node allocation, and nothing the rc files print reaches the job's log.
//! Kept apart from the Slurm suite's own modules.

use theseus_backend_ssh::testing::log_lines;
use theseus_core::backend::{Backend, JobState, SubmitOptions};
use theseus_core::job::Distributed;

use crate::slurm::{backend, host, lab, plan, prepare, wait_terminal};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slurm_job_runs_a_tool_from_the_login_path_on_every_node_and_its_log_has_no_banner() {
    let Some(lab) = lab() else { return };
    let (b, _) = backend(lab, "login-env", host());
    let plan = plan("cpu", 2, 0);
    let words = ["sh", "-c", "theseus-site-tool \"on $SLURMD_NODENAME\""];
    let (job, _dir) = prepare(&b, &plan, "login-env", &[], &words, &[], Distributed::None);
    let handle = b.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let status = wait_terminal(&b, &handle).await;
    let lines = log_lines(&*b, &handle).await;
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?} {lines:?}");
    for node in ["node1", "node2"] {
        let want = format!("site tool ok: on {node}");
        assert!(lines.iter().any(|l| l.ends_with(&want)), "no {want:?} in {lines:?}");
    }
    for noise in ["====", "quota notice", "bashrc", "profile:"] {
        assert!(lines.iter().all(|l| !l.contains(noise)), "rc-file noise ({noise:?}) in the job's log: {lines:?}");
    }
}
