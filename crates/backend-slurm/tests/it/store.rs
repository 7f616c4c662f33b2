//! Shipping through the content-addressed store to the Slurm lab: run dirs hold exactly the
//! snapshot, and a re-submit after a one-line edit sends one object and links the rest.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use theseus_backend_slurm::slurm::SlurmHandleData;
use theseus_backend_ssh::testing::{Seen, assert_run_dir_is, code_tree, job_of, write_file};
use theseus_core::backend::{Backend, JobState, PreparedJob};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_run_dirs_hold_exactly_the_snapshot_and_share_unchanged_files() {
    let Some(lab) = crate::slurm::lab() else { return };
    let (b, _) = crate::slurm::backend(lab, "store", crate::slurm::host());
    let plan = crate::slurm::plan("cpu", 1, 0);
    let code = code_tree();
    let extra = |job: &PreparedJob| {
        let mut extra: Vec<String> = job.bootstrap.files.iter().map(|f| f.path.clone()).collect();
        extra.push(theseus_backend_slurm::slurm::BATCH_SCRIPT.into());
        // Issue 26: the script the bootstrap asks whether a signal is a preemption with a grace.
        let hold = Path::new(&job.bootstrap.entry).with_file_name(theseus_backend_slurm::sbatch::PREEMPT_HOLD_FILE);
        extra.push(hold.display().to_string());
        extra
    };
    let seen = Seen::default();
    let job1 = job_of(&*b, &plan, "store", code.path(), &["sh", "run.sh"]);
    let h1 = b.submit(&job1, &seen.options()).await.unwrap();
    let run1 = PathBuf::from(serde_json::from_value::<SlurmHandleData>(h1.data.clone()).unwrap().work_dir);
    assert_run_dir_is(code.path(), &run1, &extra(&job1));
    let status = crate::slurm::wait_terminal(&b, &h1).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    assert_run_dir_is(code.path(), &run1, &extra(&job1));
    assert_eq!(seen.reports().iter().map(|r| r.objects_sent).collect::<Vec<_>>(), [6]);

    write_file(&code.path().join("train.py"), b"print('changed')\n", 0o644);
    let seen2 = Seen::default();
    let job2 = job_of(&*b, &plan, "store", code.path(), &["sh", "run.sh"]);
    let h2 = b.submit(&job2, &seen2.options()).await.unwrap();
    let run2 = PathBuf::from(serde_json::from_value::<SlurmHandleData>(h2.data.clone()).unwrap().work_dir);
    assert_run_dir_is(code.path(), &run2, &extra(&job2));
    assert_eq!(seen2.reports().iter().map(|r| (r.files_present, r.objects_sent)).collect::<Vec<_>>(), [(6, 1)]);
    let ino = |run: &Path, f: &str| std::fs::metadata(run.join(f)).unwrap().ino();
    assert_eq!(ino(&run1, "run.sh"), ino(&run2, "run.sh"));
    assert_eq!(crate::slurm::wait_terminal(&b, &h2).await.state, JobState::Completed);
}
