//! The scenarios of what a cluster refuses and how it recovers:
//!
//! 5. a job to a queue that does not exist: `plan` passes the host over, `submit --host` fails
//!    naming the queue before anything is created (no helper, no vcjob);
//! 6. a job to a Closed queue: the same, naming the state;
//! 7. an evicted pod (deleted by someone else) restarts the whole job (`PodEvicted ->
//!    RestartJob`), and `status` says it was evicted and which attempt runs; then `cancel` ends it.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::api::names;
use super::{CLOSED_QUEUE, CLOSED_QUEUE_HOST, HOST, NO_QUEUE_HOST, World, text, wait_for, wait_seen};

/// The commands of scenarios 5 to 7, for `--dry-run`.
pub(crate) fn commands(n: u32) -> Vec<String> {
    match n {
        5 => vec![
            format!(
                "plan e2e-lost hello.yaml --host {NO_QUEUE_HOST} --chip cpu   # passed over: the queue does not exist"
            ),
            format!(
                "submit e2e-lost hello.yaml --code . --host {NO_QUEUE_HOST} --chip cpu --no-check   # fails; no vcjob"
            ),
        ],
        6 => vec![
            format!("# the harness creates queue {CLOSED_QUEUE} and closes it (a CloseQueue Command)"),
            format!(
                "submit e2e-shut hello.yaml --code . --host {CLOSED_QUEUE_HOST} --chip cpu --no-check   # fails; no vcjob"
            ),
        ],
        _ => vec![
            format!("submit e2e-evict sleep.yaml --code . --host {HOST} --chip cpu"),
            "# the harness deletes the running pod; status must say running, evicted, attempt 2".to_owned(),
            "cancel e2e-evict".to_owned(),
        ],
    }
}

/// vcjobs in the namespace whose name contains `needle`, helpers included.
fn vcjobs_named(world: &World, needle: &str) -> Result<Vec<String>> {
    let jobs = world.api.list(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{}/jobs", world.namespace))?;
    Ok(names(&jobs).into_iter().filter(|n| n.contains(needle)).collect())
}

/// `theseus submit` to `host` fails with one of `needles` in its error (theseus's own words
/// when it may read queues, else Volcano's admission webhook's) and creates no vcjob.
fn refused(world: &World, name: &str, host: &str, needles: &[&str]) -> Result<()> {
    let helpers_before = vcjobs_named(world, "theseus-ship-")?;
    let out =
        world.theseus(&["submit", name, "hello.yaml", "--code", ".", "--host", host, "--chip", "cpu", "--no-check"])?;
    let stderr = text(&out.stderr);
    ensure!(out.status.code() == Some(2), "the submit should fail with exit code 2 ({}):\n{stderr}", out.status);
    ensure!(needles.iter().any(|n| stderr.contains(n)), "the error says none of {needles:?}:\n{stderr}");
    let error = stderr.lines().filter(|l| l.starts_with("error")).collect::<Vec<_>>().join(" / ");
    eprintln!("e2e:       theseus said: {error}");
    // Refused before a helper started: theseus says when it starts one.
    ensure!(!stderr.contains("starting helper"), "a helper was started for {name} before the refusal:\n{stderr}");
    ensure!(vcjobs_named(world, name)?.is_empty(), "a vcjob of {name} was created");
    ensure!(vcjobs_named(world, "theseus-ship-")? == helpers_before, "a helper was created for {name}");
    Ok(())
}

pub(crate) fn missing_queue(world: &World) -> Result<()> {
    let plan = world.theseus(&["plan", "e2e-lost", "hello.yaml", "--host", NO_QUEUE_HOST, "--chip", "cpu"])?;
    let all = text(&plan.stdout) + &text(&plan.stderr);
    let row = all.lines().find(|l| l.starts_with(NO_QUEUE_HOST)).unwrap_or_default();
    // A user without the optional ClusterRole cannot read queues: plan says so instead.
    let passed_over = row.contains("passed") && row.contains("does not exist");
    ensure!(passed_over || all.contains("RBAC refused"), "plan neither passed the host over nor said why not:\n{all}");
    refused(world, "e2e-lost", NO_QUEUE_HOST, &["\"e2e-no-such-queue\" does not exist", "unable to find job queue"])
}

pub(crate) fn closed_queue(world: &World) -> Result<()> {
    world.api.create_queue(CLOSED_QUEUE)?;
    world.api.close_queue(CLOSED_QUEUE)?;
    wait_for("the queue to be Closed", Duration::from_secs(60), Duration::from_millis(500), || {
        let queue = world.api.get(&format!("/apis/scheduling.volcano.sh/v1beta1/queues/{CLOSED_QUEUE}"))?;
        Ok((queue["status"]["state"] == "Closed").then_some(()))
    })?;
    let result =
        refused(world, "e2e-shut", CLOSED_QUEUE_HOST, &["is Closed", "can only submit job to queue with state `Open`"]);
    world.api.delete(&format!("/apis/scheduling.volcano.sh/v1beta1/queues/{CLOSED_QUEUE}"))?;
    result
}

/// The job's `status --output json`.
fn status(world: &World, job: &str) -> Result<Value> {
    let out = world.theseus_ok(&["status", job, "--output", "json"])?;
    serde_json::from_str(&out).with_context(|| format!("status of {job} is not JSON: {out}"))
}

pub(crate) fn evicted_pod_restarts(world: &World) -> Result<()> {
    world.theseus_ok(&["submit", "e2e-evict", "sleep.yaml", "--code", ".", "--host", HOST, "--chip", "cpu"])?;
    let ns = &world.namespace;
    let pod = wait_seen("the job's pod to run", Duration::from_secs(180), Duration::from_millis(500), || {
        let v = status(world, "e2e-evict")?;
        let state = v["status"]["state"].as_str().unwrap_or("").to_owned();
        if state != "running" {
            return Ok(Err(format!("state {state}")));
        }
        let pods = world.api.list(&format!("/api/v1/namespaces/{ns}/pods"))?;
        let running: Vec<String> = pods
            .iter()
            .filter(|p| p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|p| p["metadata"]["name"].as_str())
            .filter(|n| n.contains("e2e-evict") && !n.starts_with("theseus-ship-"))
            .map(str::to_owned)
            .collect();
        Ok(running.first().cloned().ok_or_else(|| "no running pod yet".to_owned()))
    })?;
    world.api.delete(&format!("/api/v1/namespaces/{ns}/pods/{pod}"))?;
    let message =
        wait_seen("status to show the restart", Duration::from_secs(180), Duration::from_millis(500), || {
            let v = status(world, "e2e-evict")?;
            let state = v["status"]["state"].as_str().unwrap_or("").to_owned();
            let message = v["status"]["message"].as_str().unwrap_or("").to_owned();
            // Deleted by someone else, not by the scheduler: "evicted from its node at T;
            // running again, attempt 2 of N".
            Ok(if state == "running" && message.contains("evicted") && message.contains("attempt 2 of") {
                Ok(message)
            } else {
                Err(format!("{state}: `{message}`"))
            })
        })?;
    eprintln!("e2e:       after the eviction: {message}");
    let cancel = world.theseus_ok(&["cancel", "e2e-evict"])?;
    ensure!(cancel.contains("cancelled"), "cancel: {cancel}");
    Ok(())
}
