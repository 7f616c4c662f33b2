//! Issue 26 on the preempting Slurm lab (`ci/lab/slurm-lab.sh`: `gpu` is preempted with
//! REQUEUE by the other team's `urgent`): a JAX training of the resume contract runs on `gpu`, is
//! preempted mid-way by the other user's job, waits, is requeued when the preemptor ends, resumes
//! from its last checkpoint and ends with the same parameters as an uninterrupted run; `status`
//! says what happened in one line. No timed assertions: every wait is on a state, with a
//! generous deadline.
//!
//! The training is `examples/jax-train` (part `resume`): `starting at step 0` or `resumed from
//! step K (PATH, attempt N)`, `step K loss L`, `checkpoint step K` every N steps (named by an
//! atomically replaced `latest` marker), and `final params sha256 HEX`; the bootstrap gives it
//! `THESEUS_CHECKPOINT_DIR`, `THESEUS_ATTEMPT` and `THESEUS_RESTORE_FROM`.

use std::time::{Duration, Instant};

use futures::StreamExt;
use theseus_backend_slurm::SlurmHost;
use theseus_backend_slurm::config::PartitionConfig;
use theseus_core::backend::{Backend, JobHandle, JobState, JobStatus, LogOptions, SubmitOptions};
use theseus_core::job::Distributed;

use crate::slurm::{ALIAS, SlurmLab, backend, host, lab, plan, prepare_with_config};

/// Deadline of each wait: a requeued job waits for the preemptor and Slurm's `cred_expire`.
const DEADLINE: Duration = Duration::from_secs(300);

/// The JAX training of the resume contract (part `resume`), as shipped in the repository.
const TRAIN_PY: &str = include_str!("../../../../examples/jax-train/train.py");

/// Runs `command` on the login node as the lab's other user (the other team), through the same
/// SSH config as the test user's (the command line's `-l` wins over its `User`).
fn as_other_user(lab: &SlurmLab, command: &str) -> String {
    let user = std::env::var("THESEUSTEST_SLURM_OTHER_USER").expect("THESEUSTEST_SLURM_OTHER_USER (the lab's env)");
    let out = std::process::Command::new("ssh")
        .arg("-F")
        .arg(&lab.config)
        .args(["-o", "BatchMode=yes", "-l", &user, ALIAS, &format!("echo __begin__; {command}")])
        .output()
        .expect("ssh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "as {user}: {command}: {}", String::from_utf8_lossy(&out.stderr));
    stdout.split_once("__begin__\n").map(|(_, rest)| rest.trim().to_owned()).unwrap_or_default()
}

async fn log_text(b: &dyn Backend, h: &JobHandle) -> String {
    let stream = b.logs(h, &LogOptions { follow: false, rank: None }).await.expect("logs");
    let lines: Vec<_> = stream.collect().await;
    lines.into_iter().map(|l| l.expect("log line").text + "\n").collect()
}

/// Polls `status` until `done` holds (or fails after [`DEADLINE`], showing the last status).
async fn wait_status(b: &dyn Backend, h: &JobHandle, what: &str, done: impl Fn(&JobStatus) -> bool) -> JobStatus {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let status = b.status(h).await.expect("status");
        if done(&status) {
            return status;
        }
        assert!(!status.state.is_terminal(), "job {} ended before its {what}: {status:?}", h.id);
        assert!(Instant::now() < deadline, "job {}: no {what} within {DEADLINE:?}: {status:?}", h.id);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Polls the log until a line satisfies `done`.
async fn wait_log(b: &dyn Backend, h: &JobHandle, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let text = log_text(b, h).await;
        if text.lines().any(&done) {
            return text;
        }
        let status = b.status(h).await.expect("status");
        assert!(!status.state.is_terminal(), "job {} ended before {what}: {status:?}\n{text}", h.id);
        assert!(Instant::now() < deadline, "job {}: no {what} within {DEADLINE:?}\n{text}", h.id);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn checksum(log: &str) -> String {
    let sums: Vec<&str> = log.lines().filter_map(|l| l.strip_prefix("final params sha256 ")).collect();
    assert_eq!(sums.len(), 1, "one final checksum:\n{log}");
    sums[0].trim().to_owned()
}

/// A host on `partition`: the training on `gpu` (both nodes, all their GPUs: no other test's job
/// holds GPUs there, so the preemptor, which asks for node1's four, preempts only it), the
/// uninterrupted reference on `cpu`, which is never preempted, with the same process count (the
/// gradients are summed in rank order).
fn on(partition: &str) -> SlurmHost {
    SlurmHost { partitions: vec![PartitionConfig::Name(partition.into())], ..host() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_training_is_requeued_and_resumes_to_the_same_parameters() {
    let lab = match lab() {
        Some(lab) => lab,
        None => return,
    };
    let env = [("THESEUS_PYTHON", lab.remote_python.as_str()), ("JAX_PLATFORMS", "cpu")];
    let config = serde_json::json!({"steps": 200, "checkpoint_every": 20, "step_seconds": 0.25, "seed": 0});
    let files = [("train.py", TRAIN_PY)];
    let words = ["python", "train.py"];
    let jax = Distributed::Jax;

    // The reference: the same training, never interrupted.
    let (reference, _) = backend(lab, "preempt-ref", on("cpu"));
    let (job, _d1) =
        prepare_with_config(&reference, &plan("cpu", 2, 0), "jax-ref", &files, &words, &env, jax, config.clone());
    let ref_handle = reference.submit(&job, &SubmitOptions::default()).await.expect("submit the reference");

    // The training on gpu: two processes, one per node, with all four GPUs of each.
    let (b, _) = backend(lab, "preempt", on("gpu"));
    let (job, _d2) = prepare_with_config(&b, &plan("gpu", 2, 4), "jax-preempted", &files, &words, &env, jax, config);
    let h = b.submit(&job, &SubmitOptions::default()).await.expect("submit the training");
    wait_log(b.as_ref(), &h, "checkpoint at step 40", |l| l == "checkpoint step 40").await;

    // The other team's job on urgent needs node1's four GPUs: Slurm preempts the training (both
    // processes get TERM, hold through the partition's GraceTime) and requeues it.
    let preemptor = as_other_user(
        lab,
        "cd /tmp && /usr/bin/sbatch --parsable -p urgent -w node1 --gres=gpu:h100:4 --mem=300M -J preemptor \
         -o /dev/null --wrap 'sleep 15'",
    );
    assert!(preemptor.chars().all(|c| c.is_ascii_digit()) && !preemptor.is_empty(), "{preemptor:?}");
    let requeued = wait_status(b.as_ref(), &h, "requeue", |s| {
        s.state == JobState::Pending && s.message.as_deref().is_some_and(|m| m.contains("requeued"))
    })
    .await;
    assert_eq!(requeued.attempt, Some(2), "{requeued:?}");
    let line = requeued.message.clone().unwrap();
    eprintln!("status while requeued: {}: {line}", requeued.state);
    assert!(
        line.starts_with("preempted at ")
            && line.contains(&format!("(partition urgent job {preemptor} of "))
            && line.contains("; requeued, attempt 2"),
        "{line}"
    );

    // It waits for the preemptor, starts again and resumes from its last checkpoint.
    let done = wait_status(b.as_ref(), &h, "end", |s| s.state.is_terminal()).await;
    let log = log_text(b.as_ref(), &h).await;
    assert_eq!((done.state, done.exit_code), (JobState::Completed, Some(0)), "{done:?}\n{log}");
    let held = log.lines().filter(|l| l.starts_with("[theseus] preempted with a grace")).count();
    assert_eq!(held, 2, "both processes got Slurm's TERM and held through the grace:\n{log}");
    assert!(
        log.contains("CANCELLED AT ") && log.contains("DUE TO PREEMPTION"),
        "the first attempt's log stays:\n{log}"
    );
    let resumed: Vec<u32> = log
        .lines()
        .filter_map(|l| l.strip_prefix("resumed from step "))
        .map(|rest| rest.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    // SLURM_RESTART_COUNT reached the bootstrap, which made it the attempt.
    assert!(log.lines().any(|l| l.starts_with("resumed from step ") && l.ends_with(", attempt 2)")), "{log}");
    assert!(
        resumed.len() == 1 && resumed[0] >= 40 && resumed[0].is_multiple_of(20),
        "resumed from {resumed:?}:\n{log}"
    );
    let after = done.message.clone().unwrap_or_default();
    eprintln!("status at the end: {}: {after}; resumed from step {}", done.state, resumed[0]);
    assert!(after.starts_with("preempted at ") && after.ends_with("; requeued, attempt 2"), "{after}");

    let reference_done = wait_status(reference.as_ref(), &ref_handle, "end", |s| s.state.is_terminal()).await;
    let ref_log = log_text(reference.as_ref(), &ref_handle).await;
    assert_eq!(reference_done.state, JobState::Completed, "{reference_done:?}\n{ref_log}");
    assert!(ref_log.contains("starting at step 0") && !ref_log.contains("resumed from"), "{ref_log}");
    assert_eq!(checksum(&log), checksum(&ref_log), "same parameters with and without the preemption");
}
