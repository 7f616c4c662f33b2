//! Issue 26 on the preempting Slurm lab (`ci/lab/slurm-lab.sh`: `gpu` is preempted with
//! REQUEUE by the other team's `urgent`): a JAX training of the resume contract runs on `gpu`, is
//! preempted mid-way by the other user's job, waits, is requeued when the preemptor ends, resumes
//! from its last checkpoint and ends with the same parameters as an uninterrupted run; `status`
//! says what happened in one line. No timed assertions: every wait is on a state, with a
//! generous deadline.
//!
//! The training is a stand-in of `examples/jax-train` (part `resume`) with the same contract:
//! `starting at step 0` or `resumed from step K`, `step K loss L`, a checkpoint every N steps
//! named by an atomically replaced `latest` marker, and `final params sha256 HEX`.

use std::time::{Duration, Instant};

use futures::StreamExt;
use theseus_backend_slurm::SlurmHost;
use theseus_backend_slurm::config::PartitionConfig;
use theseus_core::backend::{Backend, JobHandle, JobState, JobStatus, LogOptions, SubmitOptions};
use theseus_core::job::Distributed;

use crate::slurm::{ALIAS, SlurmLab, backend, host, lab, plan, prepare};

/// Deadline of each wait: a requeued job waits for the preemptor and Slurm's `cred_expire`.
const DEADLINE: Duration = Duration::from_secs(300);

/// The stand-in training (see the module doc). Deterministic: the data of step k depends on k
/// only, and a checkpoint holds the exact parameters.
const TRAIN_PY: &str = r#"
import hashlib, json, os, sys, time
import numpy as np
import jax, jax.numpy as jnp

steps = int(os.environ["TRAIN_STEPS"])
every = int(os.environ["TRAIN_CHECKPOINT_EVERY"])
pause = float(os.environ.get("TRAIN_STEP_SECONDS", "0"))
ckpt = os.environ.get("THESEUS_CHECKPOINT_DIR") or os.path.join(
    os.environ["THESEUS_CHECKPOINTS_DIR"], os.environ.get("THESEUS_PROJECT") or "default",
    os.environ.get("THESEUS_GROUP") or "default", os.environ["THESEUS_JOB_NAME"])
os.makedirs(ckpt, exist_ok=True)
print("attempt", os.environ.get("THESEUS_ATTEMPT", "?"), "SLURM_RESTART_COUNT", os.environ.get("SLURM_RESTART_COUNT", "unset"), flush=True)

restore = os.environ.get("THESEUS_RESTORE_FROM")
if not restore and os.path.exists(os.path.join(ckpt, "latest")):
    with open(os.path.join(ckpt, "latest")) as f:
        restore = os.path.join(ckpt, f.readline().strip())
w = jnp.zeros((8,), jnp.float32)
start = 0
if restore:
    w = jnp.asarray(np.load(os.path.join(restore, "params.npy")))
    with open(os.path.join(restore, "step")) as f:
        start = int(f.read())
    print("resumed from step", start, flush=True)
else:
    print("starting at step 0", flush=True)

true_w = jnp.arange(8, dtype=jnp.float32) / 8.0
key = jax.random.PRNGKey(0)

@jax.jit
def update(w, k):
    x = jax.random.normal(jax.random.fold_in(key, k), (32, 8))
    y = x @ true_w
    loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - 0.05 * g, loss

for k in range(start, steps):
    w, loss = update(w, k)
    done = k + 1
    print("step", done, "loss", float(loss), flush=True)
    if done % every == 0 and done < steps:
        d = os.path.join(ckpt, "step-%06d" % done)
        tmp = d + ".tmp.%d" % os.getpid()
        os.makedirs(tmp)
        np.save(os.path.join(tmp, "params.npy"), np.asarray(w))
        with open(os.path.join(tmp, "step"), "w") as f:
            f.write(str(done))
        os.replace(tmp, d) if not os.path.exists(d) else None
        with open(os.path.join(ckpt, "latest.tmp"), "w") as f:
            f.write(os.path.basename(d) + "\n")
        os.replace(os.path.join(ckpt, "latest.tmp"), os.path.join(ckpt, "latest"))
        print("checkpoint step", done, flush=True)
    time.sleep(pause)
print("final params sha256", hashlib.sha256(np.asarray(w).tobytes()).hexdigest(), flush=True)
"#;

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

/// A host on `partition` that keeps off node `exclude`: the training runs on node1 (where the
/// preemptor asks for every GPU), the uninterrupted reference on node2 in `cpu`, which is never
/// preempted.
fn on(partition: &str, exclude: &str) -> SlurmHost {
    SlurmHost { partitions: vec![PartitionConfig::Name(partition.into())], exclude: vec![exclude.into()], ..host() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_training_is_requeued_and_resumes_to_the_same_parameters() {
    let lab = match lab() {
        Some(lab) => lab,
        None => return,
    };
    let env = [
        ("THESEUS_PYTHON", lab.remote_python.as_str()),
        ("JAX_PLATFORMS", "cpu"),
        ("TRAIN_STEPS", "200"),
        ("TRAIN_CHECKPOINT_EVERY", "20"),
        ("TRAIN_STEP_SECONDS", "0.1"),
    ];
    let files = [("train.py", TRAIN_PY)];
    let words = ["python", "train.py"];

    // The reference: the same training, never interrupted.
    let (reference, _) = backend(lab, "preempt-ref", on("cpu", "node1"));
    let (job, _d1) = prepare(&reference, &plan("cpu", 1, 0), "jax-ref", &files, &words, &env, Distributed::None);
    let ref_handle = reference.submit(&job, &SubmitOptions::default()).await.expect("submit the reference");

    // The training on gpu, node1, all four GPUs.
    let (b, _) = backend(lab, "preempt", on("gpu", "node2"));
    let (job, _d2) = prepare(&b, &plan("gpu", 1, 4), "jax-preempted", &files, &words, &env, Distributed::None);
    let h = b.submit(&job, &SubmitOptions::default()).await.expect("submit the training");
    wait_log(b.as_ref(), &h, "checkpoint at step 40", |l| l == "checkpoint step 40").await;

    // The other team's job on urgent needs node1's four GPUs: Slurm requeues the training.
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
    assert!(log.contains("[theseus] received SIGTERM"), "the bootstrap got Slurm's TERM:\n{log}");
    assert!(
        log.contains("CANCELLED AT ") && log.contains("DUE TO PREEMPTION"),
        "the first attempt's log stays:\n{log}"
    );
    assert!(log.contains("SLURM_RESTART_COUNT 1"), "the requeued job reaches the bootstrap with its count:\n{log}");
    let resumed: Vec<u32> =
        log.lines().filter_map(|l| l.strip_prefix("resumed from step ")).map(|k| k.trim().parse().unwrap()).collect();
    assert!(resumed.len() == 1 && resumed[0] >= 40 && resumed[0] % 20 == 0, "resumed from {resumed:?}:\n{log}");
    let after = done.message.clone().unwrap_or_default();
    eprintln!("status at the end: {}: {after}; resumed from step {}", done.state, resumed[0]);
    assert!(after.starts_with("preempted at ") && after.ends_with("; requeued, attempt 2"), "{after}");

    let reference_done = wait_status(reference.as_ref(), &ref_handle, "end", |s| s.state.is_terminal()).await;
    let ref_log = log_text(reference.as_ref(), &ref_handle).await;
    assert_eq!(reference_done.state, JobState::Completed, "{reference_done:?}\n{ref_log}");
    assert!(ref_log.contains("starting at step 0") && !ref_log.contains("resumed from"), "{ref_log}");
    assert_eq!(checksum(&log), checksum(&ref_log), "same parameters with and without the preemption");
}
