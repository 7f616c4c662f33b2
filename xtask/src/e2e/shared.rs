//! The scenarios of a cluster many teams share, run against a Volcano whose scheduler runs the
//! multi-team configuration of `xtask/e2e/volcano-scheduler.conf` (enqueue, allocate, preempt,
//! reclaim, backfill), with the PriorityClasses and queues of [`setup`]:
//!
//! 8. a JAX training at PriorityClass `e2e-dev` is preempted in the middle by another team's
//!    gang at `e2e-prod` in the same queue; `status` says by whom and what happens next; the
//!    training is restarted when the preemptor ends, resumes from its last checkpoint, and ends
//!    with the same final parameters as the same training run without preemption;
//! 9. a job of queue `e2e-team-a` that borrowed all the GPUs loses what it borrowed when queue
//!    `e2e-team-b`'s owner submits: `status` says `reclaimed by queue e2e-team-b`;
//! 10. a job whose node selector no node matches stays pending, and `status` and
//!     `submit --follow` give the scheduler's reason; then `cancel` ends it.
//!
//! The other team's jobs are vcjobs the harness creates as an admin, not through theseus.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

use super::{World, text, wait_for, wait_seen};

/// Host of the trainings of scenario 8: the `e2e` host at PriorityClass `e2e-dev`.
pub(crate) const DEV_HOST: &str = "e2e-dev";
/// Host submitting to queue `e2e-team-a` (scenario 9).
pub(crate) const TEAM_A_HOST: &str = "e2e-team-a";
/// Host whose node selector no node matches (scenario 10).
pub(crate) const NOWHERE_HOST: &str = "e2e-nowhere";
/// The node selector of [`NOWHERE_HOST`].
pub(crate) const NOWHERE_SELECTOR: (&str, &str) = ("e2e.theseus.dev/pool", "nowhere");
/// Low and high PriorityClasses (name, value).
const DEV_CLASS: (&str, i64) = ("e2e-dev", 100);
const PROD_CLASS: (&str, i64) = ("e2e-prod", 100_000);
/// The two team queues of scenario 9.
pub(crate) const TEAM_A: &str = "e2e-team-a";
const TEAM_B: &str = "e2e-team-b";
/// How long a training may take, preemption included.
const TRAIN_TIMEOUT: Duration = Duration::from_secs(900);
/// How long a state change may take to show.
const SHOW_TIMEOUT: Duration = Duration::from_secs(180);

/// The training's experiment: 160 steps of a tenth of a second, a checkpoint every 20.
pub(crate) const TRAIN_YAML: &str = "entrypoint: python train.py\ndistributed: jax\nenv:\n  JAX_PLATFORMS: cpu\n\
config:\n  steps: 160\n  checkpoint_every: 20\n  step_seconds: 0.1\n  seed: 7\n";

/// The commands of scenarios 8 to 10, for `--dry-run`.
pub(crate) fn commands(n: u32) -> Vec<String> {
    match n {
        8 => vec![
            format!("submit e2e-train-ref train.yaml --code . --host {DEV_HOST} --chip h100 -n 8   # uninterrupted"),
            format!("submit e2e-train train.yaml --code . --host {DEV_HOST} --chip h100 -n 8"),
            "# at a checkpoint past step 40, the harness creates another team's 8-GPU gang at e2e-prod".to_owned(),
            "status e2e-train   # until `preempted by ... (priority e2e-prod)`; then completed".to_owned(),
            "logs e2e-train   # `resumed from step K`, K > 0, and the reference run's checksum".to_owned(),
        ],
        9 => vec![
            format!("submit e2e-borrow sleep.yaml --code . --host {TEAM_A_HOST} --chip h100 -n 8"),
            format!("# the harness submits a 4-GPU job to queue {TEAM_B}"),
            format!("status e2e-borrow   # until `reclaimed by queue {TEAM_B}`"),
            "cancel e2e-borrow".to_owned(),
        ],
        _ => vec![
            format!(
                "submit e2e-nowhere sleep.yaml --code . --host {NOWHERE_HOST} --chip h100 -n 4 --no-check --follow   # pending"
            ),
            "status e2e-nowhere   # the scheduler's reason: node affinity/selector".to_owned(),
            "cancel e2e-nowhere".to_owned(),
        ],
    }
}

/// The PriorityClasses and queues the scenarios need (left in place for the next scenario).
fn setup(world: &World) -> Result<()> {
    for (name, value) in [DEV_CLASS, PROD_CLASS] {
        world.api.create_if_absent(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            &json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value, "globalDefault": false,
                "description": "theseus e2e: a team's priority",
            }),
        )?;
    }
    for queue in [TEAM_A, TEAM_B] {
        world.api.create_if_absent(
            "/apis/scheduling.volcano.sh/v1beta1/queues",
            &json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                "metadata": {"name": queue}, "spec": {"weight": 1, "reclaimable": true},
            }),
        )?;
    }
    Ok(())
}

/// Another team's gang: `pods` pods of `gpus` GPUs each, sleeping `seconds`, in `queue` at
/// PriorityClass `class` (none when `None`).
fn other_team_job(
    world: &World,
    name: &str,
    queue: &str,
    class: Option<&str>,
    pods: u32,
    gpus: u32,
    seconds: u32,
) -> Result<()> {
    let ns = &world.namespace;
    let mut spec = json!({
        "schedulerName": "volcano", "queue": queue, "minAvailable": pods,
        "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
        "tasks": [{
            "name": "worker", "replicas": pods,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main", "image": world.job_image, "command": ["sleep", seconds.to_string()],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": gpus.to_string()},
                        "limits": {"nvidia.com/gpu": gpus.to_string()},
                    },
                }],
            }},
        }],
    });
    if let Some(class) = class {
        spec["priorityClassName"] = json!(class);
    }
    let body = json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"team": "other"}},
        "spec": spec,
    });
    world.api.create_if_absent(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"), &body)
}

/// The state of a Volcano job of the other team.
fn vcjob_phase(world: &World, name: &str) -> Result<String> {
    let job = world.api.get(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{}/jobs/{name}", world.namespace))?;
    Ok(job["status"]["state"]["phase"].as_str().unwrap_or("").to_owned())
}

fn status(world: &World, job: &str) -> Result<Value> {
    let out = world.theseus_ok(&["status", job, "--output", "json"])?;
    serde_json::from_str(&out).with_context(|| format!("status of {job} is not JSON: {out}"))
}

/// The job's logs, stdout and stderr.
fn logs(world: &World, job: &str) -> Result<String> {
    let out = world.theseus(&["logs", job])?;
    Ok(text(&out.stdout) + &text(&out.stderr))
}

/// Submits a training and waits for it to end; returns its final status and logs.
fn train_to_end(world: &World, job: &str) -> Result<(Value, String)> {
    let v = wait_for(&format!("{job} to end"), TRAIN_TIMEOUT, Duration::from_secs(1), || {
        let v = status(world, job)?;
        let state = v["status"]["state"].as_str().unwrap_or("");
        Ok(matches!(state, "completed" | "failed" | "cancelled" | "lost").then_some(v))
    })?;
    let logs = logs(world, job)?;
    ensure!(v["status"]["state"] == "completed", "{job} ended {}:\n{v:#}\nlogs:\n{logs}", v["status"]["state"]);
    Ok((v, logs))
}

/// The `final params sha256` of a training's log.
fn checksum(logs: &str) -> Result<String> {
    logs.lines()
        .find_map(|l| l.split_once("final params sha256 ").map(|(_, hex)| hex.trim().to_owned()))
        .with_context(|| format!("no `final params sha256` line in:\n{logs}"))
}

/// The largest `checkpoint step K` a log shows.
fn last_checkpoint(logs: &str) -> Option<u64> {
    logs.lines().filter_map(|l| l.split_once("checkpoint step ")?.1.split_whitespace().next()?.parse().ok()).max()
}

/// Scenario 8; on a failure the trainings still running are cancelled, so that the next
/// scenarios find the GPUs free.
pub(crate) fn preempted_training_resumes(world: &World) -> Result<()> {
    let result = preempt_and_resume(world);
    if result.is_err() {
        for job in ["e2e-train-ref", "e2e-train"] {
            let _ = world.theseus(&["cancel", job]);
        }
    }
    result
}

fn preempt_and_resume(world: &World) -> Result<()> {
    setup(world)?;
    let submit = |job: &str| {
        world.theseus_ok(&["submit", job, "train.yaml", "--code", ".", "--host", DEV_HOST, "--chip", "h100", "-n", "8"])
    };
    submit("e2e-train-ref")?;
    let (_, reference_logs) = train_to_end(world, "e2e-train-ref")?;
    let reference = checksum(&reference_logs)?;
    eprintln!("e2e:       uninterrupted: final params sha256 {reference}");

    submit("e2e-train")?;
    let at = wait_seen("a checkpoint past step 40", TRAIN_TIMEOUT, Duration::from_millis(500), || {
        let logs = logs(world, "e2e-train")?;
        Ok(match last_checkpoint(&logs) {
            Some(k) if k >= 40 => Ok(k),
            other => Err(format!("last checkpoint {other:?}")),
        })
    })?;
    eprintln!("e2e:       checkpoint at step {at}: another team submits at {}", PROD_CLASS.0);
    other_team_job(world, "e2e-prod-burst", &world.queue, Some(PROD_CLASS.0), 2, 4, 8)?;
    let line = wait_seen("status to say the training was preempted", SHOW_TIMEOUT, Duration::from_millis(500), || {
        let v = status(world, "e2e-train")?;
        let message = v["status"]["message"].as_str().unwrap_or("").to_owned();
        // The preemptor is known once its pods are bound where the training ran: until then
        // status may say only that the training was preempted.
        Ok(if message.contains("preempted by e2e-prod-burst") { Ok(message) } else { Err(message) })
    })?;
    eprintln!("e2e:       status: {line}");
    ensure!(
        line.contains(&format!("(priority {})", PROD_CLASS.0)),
        "status does not name the preemptor's class: {line}"
    );
    ensure!(line.contains("attempt 2"), "status does not say which attempt comes next: {line}");
    wait_for("the preemptor to complete", SHOW_TIMEOUT, Duration::from_millis(500), || {
        Ok((vcjob_phase(world, "e2e-prod-burst")? == "Completed").then_some(()))
    })?;
    let (v, logs) = train_to_end(world, "e2e-train")?;
    let resumed = logs
        .lines()
        .find_map(|l| l.split_once("resumed from step ")?.1.split_whitespace().next()?.parse::<u64>().ok())
        .with_context(|| format!("the restarted training did not say where it resumed:\n{logs}"))?;
    ensure!(resumed >= 40, "resumed from step {resumed}, before the checkpoint at step {at} the log showed");
    let after = checksum(&logs)?;
    ensure!(after == reference, "preempted and resumed: {after}; uninterrupted: {reference}");
    eprintln!("e2e:       resumed from step {resumed}; same final params; status: {}", v["status"]["message"]);
    Ok(())
}

/// Scenario 9; the borrowing job is cancelled whatever happens.
pub(crate) fn borrowed_share_is_reclaimed(world: &World) -> Result<()> {
    let result = borrow_and_lose(world);
    if result.is_err() {
        let _ = world.theseus(&["cancel", "e2e-borrow"]);
    }
    result
}

fn borrow_and_lose(world: &World) -> Result<()> {
    setup(world)?;
    world.theseus_ok(&[
        "submit",
        "e2e-borrow",
        "sleep.yaml",
        "--code",
        ".",
        "--host",
        TEAM_A_HOST,
        "--chip",
        "h100",
        "-n",
        "8",
    ])?;
    wait_for("e2e-borrow to run", SHOW_TIMEOUT, Duration::from_millis(500), || {
        Ok((status(world, "e2e-borrow")?["status"]["state"] == "running").then_some(()))
    })?;
    other_team_job(world, "e2e-team-b-job", TEAM_B, None, 1, 4, 8)?;
    let line = wait_seen("status to say the share was reclaimed", SHOW_TIMEOUT, Duration::from_millis(500), || {
        let v = status(world, "e2e-borrow")?;
        let message = v["status"]["message"].as_str().unwrap_or("").to_owned();
        Ok(if message.contains("reclaimed by queue") { Ok(message) } else { Err(message) })
    })?;
    eprintln!("e2e:       status: {line}");
    ensure!(line.contains(TEAM_B), "status does not name the queue that took its share back: {line}");
    wait_for("the other team's job to complete", SHOW_TIMEOUT, Duration::from_millis(500), || {
        Ok((vcjob_phase(world, "e2e-team-b-job")? == "Completed").then_some(()))
    })?;
    let cancel = world.theseus_ok(&["cancel", "e2e-borrow"])?;
    ensure!(cancel.contains("cancelled"), "cancel: {cancel}");
    Ok(())
}

/// Scenario 10.
pub(crate) fn unmatched_node_selector_stays_pending(world: &World) -> Result<()> {
    let stderr_file = world.home.join("e2e-nowhere.follow.stderr");
    let mut follow = world
        .theseus_cmd(&[
            "submit",
            "e2e-nowhere",
            "sleep.yaml",
            "--code",
            ".",
            "--host",
            NOWHERE_HOST,
            "--chip",
            "h100",
            "-n",
            "4",
            "--no-check",
            "--follow",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_file)?)
        .spawn()
        .context("cannot start theseus submit --follow")?;
    // `--no-check`: theseus's own check reads the nodes' labels and refuses the job before the
    // cluster sees it; this is the job of a user who skips that check (or lacks the RBAC to
    // read nodes).
    let checked = pending_with_reason(world, &stderr_file, &mut follow);
    // Whatever happened, the job is cancelled and the follow ends with it.
    let cancel = world.theseus_ok(&["cancel", "e2e-nowhere"]);
    let ended = wait_for("submit --follow to end", SHOW_TIMEOUT, Duration::from_millis(200), || Ok(follow.try_wait()?));
    if ended.is_err() {
        let _ = follow.kill();
        let _ = follow.wait();
    }
    checked?;
    ensure!(cancel?.contains("cancelled"), "cancel did not say cancelled");
    ended?;
    Ok(())
}

/// Waits until `status` says pending with the scheduler's reason, then checks that the follow's
/// stderr (in `stderr_file`) gave it too.
fn pending_with_reason(world: &World, stderr_file: &std::path::Path, follow: &mut std::process::Child) -> Result<()> {
    let reason = wait_seen("status to give the scheduler's reason", SHOW_TIMEOUT, Duration::from_millis(500), || {
        if let Some(exit) = follow.try_wait()? {
            let stderr = std::fs::read_to_string(stderr_file).unwrap_or_default();
            anyhow::bail!("submit --follow ended ({exit}) while the job should be pending:\n{stderr}");
        }
        let v = match status(world, "e2e-nowhere") {
            Ok(v) => v,
            Err(e) => return Ok(Err(format!("{e:#}"))),
        };
        let message = v["status"]["message"].as_str().unwrap_or("").to_owned();
        let pending = v["status"]["state"] == "pending";
        Ok(if pending && message.contains("node affinity/selector") { Ok(message) } else { Err(message) })
    })?;
    eprintln!("e2e:       status: {reason}");
    wait_seen("submit --follow to give the reason", SHOW_TIMEOUT, Duration::from_millis(500), || {
        let stderr = std::fs::read_to_string(stderr_file).unwrap_or_default();
        Ok(if stderr.contains("node affinity/selector") { Ok(()) } else { Err(stderr) })
    })
}
