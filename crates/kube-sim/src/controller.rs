//! The Volcano job controller, level-triggered: after every store change it turns what changed
//! about each job's pods into Volcano's events (`PodFailed`, `PodEvicted`, `TaskCompleted`,
//! `TaskFailed`, as `updatePod`/`deletePod` in pkg/controllers/job/job_controller_handler.go
//! raise them), picks the action of the first matching policy (`applyPolicies` in
//! job_controller_util.go; no match: `SyncJob`), and runs it in the job's state
//! (pkg/controllers/job/state/*.go) with `syncJob`/`killJob` semantics
//! (job_controller_actions.go). Its pod creates pass the API server's admission plugins
//! (`api_admission`); a refused one records a `FailedCreate` Warning on the job and the pass
//! ends without a status write, so the job stays as it was and the next pass retries (the
//! requeue of `syncJob`'s error). Before that the garbage collector deletes finished jobs whose
//! `ttlSecondsAfterFinished` ran out (`gc.rs`); after it the scheduler session runs
//! (`scheduler.rs`), queue usage is updated, and the pod runtime reconciles.
//!
//! Divergences: events are derived by comparing passes, not from an informer; the job
//! `version` is bumped only by kills that an action starts (Volcano bumps it on every kill, even
//! the repeated ones of a `Terminating` job); `minSuccess`, `dependsOn`, partitions, delayed
//! actions (`timeout`) and `RestartTask`/`RestartPod` are not modelled.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::Shared;
use crate::discovery::known;
use crate::events;
use crate::jobpods::{Task, create_pod, ensure_job_objects, podgroup_name, str_at, tasks_of};
use crate::sched::{self, Resources};
use crate::scheduler::Scheduler;
use crate::selector::{LabelSelector, Selectors};
use crate::store::{Propagation, Store};
use crate::util;

/// What the controller remembers about one job (by uid) between passes: the pods it has seen
/// (uid to name, task and phase), the pods it deleted itself (out of sync: their deletion is
/// no eviction), and the tasks whose `TaskFailed`/`TaskCompleted` fired.
#[derive(Default)]
struct JobMemo {
    pods: HashMap<String, (String, String, String)>,
    killed: HashSet<String>,
    tasks_fired: HashSet<(String, &'static str)>,
}

/// Runs until aborted.
pub(crate) async fn run(shared: Arc<Shared>) {
    let changed = shared.store.changed();
    let mut memos: HashMap<String, JobMemo> = HashMap::new();
    let mut scheduler = Scheduler::default();
    // The store's resourceVersion before the last pass, and when that pass ran.
    let mut seen: Option<(u64, Instant)> = None;
    // When the next finished job's `ttlSecondsAfterFinished` runs out (seconds since the epoch).
    let mut ttl_expiry: Option<u64> = None;
    loop {
        // A pass reads every job and pod, so one over an unchanged store is skipped: every
        // event that matters (an object written, a process that exited) is a store change.
        // Time-based work still runs: every tick while a scheduling delay holds gangs back,
        // at the first tick after a job's TTL runs out, and a pass at least every IDLE_PASS
        // otherwise (as informers resync).
        let rv = shared.store.current_rv();
        let ttl_due = ttl_expiry.is_some_and(|at| unix_now() >= at);
        let due = match seen {
            None => true,
            Some((last, at)) => {
                last != rv || shared.faults.scheduling_delay().is_some() || ttl_due || at.elapsed() >= IDLE_PASS
            }
        };
        if due {
            seen = Some((rv, Instant::now()));
            ttl_expiry = reconcile_all(&shared, &mut memos, &mut scheduler);
        }
        // The tick covers time-based work (scheduling delays); changes wake us at once.
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}

/// How often the controller looks whether a pass is due.
const TICK: Duration = Duration::from_millis(200);
/// The longest time between two passes over an unchanged store. A pass over a 1,024-pod job
/// takes most of a core's 200 ms on this machine; every tick, it held a core busy while nothing
/// happened.
const IDLE_PASS: Duration = Duration::from_secs(1);

/// Seconds since the epoch.
fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// One pass: the garbage collector, every job, the scheduler session, queues, the runtime.
/// Returns when the next finished job's TTL runs out.
fn reconcile_all(shared: &Arc<Shared>, memos: &mut HashMap<String, JobMemo>, scheduler: &mut Scheduler) -> Option<u64> {
    let store = &shared.store;
    let ttl_expiry = crate::gc::collect(store, unix_now());
    let (jobs, _) = store.list(known::jobs(), None, &Selectors::default());
    let uids: HashSet<String> = jobs.iter().map(|j| str_at(j, "/metadata/uid").to_owned()).collect();
    memos.retain(|uid, _| uids.contains(uid));
    for job in &jobs {
        let memo = memos.entry(str_at(job, "/metadata/uid").to_owned()).or_default();
        reconcile_job(shared, job, memo);
    }
    scheduler.session(shared);
    crate::queues::reconcile(store);
    update_queues(store);
    shared.runtime.reconcile(shared);
    ttl_expiry
}

/// A Volcano bus event about one task, with the exit code of `PodFailed`.
struct Fired {
    event: &'static str,
    task: String,
    exit_code: Option<i64>,
}

fn reconcile_job(shared: &Arc<Shared>, job: &Value, memo: &mut JobMemo) {
    let store = &shared.store;
    if job.pointer("/metadata/deletionTimestamp").is_some() {
        return;
    }
    let mut job = job.clone();
    if str_at(&job, "/status/state/phase").is_empty() {
        // initJobStatus: a new job is Pending.
        match write_status(store, &job, |s| {
            s.phase = "Pending".into();
            true
        }) {
            Some(updated) => job = updated,
            None => return,
        }
    }
    let tasks = tasks_of(&job);
    let version = job.pointer("/status/version").and_then(Value::as_u64).unwrap_or(0);
    let pods = job_pods(store, &job);
    let fired = detect_events(memo, &tasks, &pods, version);
    let action = fired
        .iter()
        .map(|f| apply_policies(&job, &tasks, f))
        .find(|a| a != "SyncJob")
        .unwrap_or_else(|| "SyncJob".to_owned());
    if action != "SyncJob" {
        // recordJobEvent in processNextReq.
        events::emit(
            store,
            &job,
            "Normal",
            "ExecuteAction",
            &format!("Start to execute action {action} "),
            "vc-controller-manager",
        );
    }
    execute(shared, &job, &tasks, &pods, memo, &action);
}

/// Compares the job's pods with the last pass and returns the events Volcano's pod handlers
/// would raise. Pods of an older job version (killed by a restart) raise none.
fn detect_events(memo: &mut JobMemo, tasks: &[Task], pods: &[Value], version: u64) -> Vec<Fired> {
    let mut fired = Vec::new();
    let current: HashMap<String, &Value> = pods.iter().map(|p| (str_at(p, "/metadata/uid").to_owned(), p)).collect();
    let current_version =
        |p: &Value| str_at(p, "/metadata/annotations/volcano.sh~1job-version").parse::<u64>().unwrap_or(0) >= version;
    // deletePod: a pod that went away without the controller deleting it was evicted.
    for (uid, (_, task, _)) in &memo.pods {
        if !current.contains_key(uid) && !memo.killed.contains(uid) {
            fired.push(Fired { event: "PodEvicted", task: task.clone(), exit_code: None });
        }
    }
    // Per task, once per pass: asked per pod, these made a pass quadratic in the job's pods.
    let (mut completed, mut failed): (HashMap<String, bool>, HashMap<String, bool>) = Default::default();
    for (uid, pod) in &current {
        let phase = str_at(pod, "/status/phase");
        let task = str_at(pod, "/metadata/annotations/volcano.sh~1task-spec").to_owned();
        let before = memo.pods.get(uid).map(|(_, _, p)| p.as_str()).unwrap_or("");
        if memo.killed.contains(uid) || !current_version(pod) || pod.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        match phase {
            "Failed" if before != "Failed" => {
                // Only the first container's exit code is looked at ("only one container pod is
                // supported by volcano").
                let code = pod.pointer("/status/containerStatuses/0/state/terminated/exitCode").and_then(Value::as_i64);
                fired.push(Fired { event: "PodFailed", task, exit_code: Some(code.unwrap_or(0)) });
            }
            "Succeeded"
                if before != "Succeeded"
                    && *completed.entry(task.clone()).or_insert_with(|| task_completed(tasks, pods, &task))
                    && memo.tasks_fired.insert((task.clone(), "TaskCompleted")) =>
            {
                fired.push(Fired { event: "TaskCompleted", task, exit_code: None });
            }
            "Running" | "Pending"
                if *failed.entry(task.clone()).or_insert_with(|| task_failed(tasks, pods, &task))
                    && memo.tasks_fired.insert((task.clone(), "TaskFailed")) =>
            {
                fired.push(Fired { event: "TaskFailed", task, exit_code: None });
            }
            _ => {}
        }
    }
    memo.pods = current
        .iter()
        .map(|(uid, p)| {
            let entry = (
                str_at(p, "/metadata/name").to_owned(),
                str_at(p, "/metadata/annotations/volcano.sh~1task-spec").to_owned(),
                str_at(p, "/status/phase").to_owned(),
            );
            (uid.clone(), entry)
        })
        .collect();
    memo.killed.retain(|uid| current.contains_key(uid));
    fired
}

fn task_pods<'a>(pods: &'a [Value], task: &'a str) -> impl Iterator<Item = &'a Value> {
    pods.iter().filter(move |p| str_at(p, "/metadata/annotations/volcano.sh~1task-spec") == task)
}

/// `TaskCompleted` in pkg/controllers/cache/cache.go: every replica of the task succeeded.
fn task_completed(tasks: &[Task], pods: &[Value], task: &str) -> bool {
    let replicas = tasks.iter().find(|t| t.name == task).map_or(0, |t| t.replicas);
    replicas > 0 && task_pods(pods, task).filter(|p| str_at(p, "/status/phase") == "Succeeded").count() >= replicas
}

/// `TaskFailed` in pkg/controllers/cache/cache.go: the container restarts of the task's
/// Running and Pending pods reach the task's `maxRetry` (0 means 3, -1 no limit).
fn task_failed(tasks: &[Task], pods: &[Value], task: &str) -> bool {
    let Some(spec) = tasks.iter().find(|t| t.name == task) else { return false };
    if spec.replicas == 0 || spec.max_retry == -1 {
        return false;
    }
    let max_retry = if spec.max_retry == 0 { 3 } else { spec.max_retry };
    let restarts: i64 = task_pods(pods, task)
        .filter(|p| matches!(str_at(p, "/status/phase"), "Running" | "Pending"))
        .flat_map(|p| {
            ["initContainerStatuses", "containerStatuses"]
                .into_iter()
                .flat_map(move |f| p["status"][f].as_array().into_iter().flatten())
        })
        .map(|c| c["restartCount"].as_i64().unwrap_or(0))
        .sum();
    restarts >= max_retry
}

/// `applyPolicies`: the task's policies first, then the job's; an event list or an exit code
/// matches; no match is `SyncJob`.
fn apply_policies(job: &Value, tasks: &[Task], fired: &Fired) -> String {
    let matches = |p: &Value| -> Option<String> {
        let action = p.get("action").and_then(Value::as_str)?.to_owned();
        let mut events: Vec<&str> =
            p.get("events").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        events.extend(p.get("event").and_then(Value::as_str));
        if events.iter().any(|e| *e == fired.event || *e == "*") {
            return Some(action);
        }
        let code = p.get("exitCode").and_then(Value::as_i64)?;
        (fired.exit_code == Some(code)).then_some(action)
    };
    let task_policies = tasks.iter().find(|t| t.name == fired.task).map(|t| t.policies.as_slice()).unwrap_or(&[]);
    let job_policies = job.pointer("/spec/policies").and_then(Value::as_array).cloned().unwrap_or_default();
    task_policies.iter().chain(job_policies.iter()).find_map(matches).unwrap_or_else(|| "SyncJob".to_owned())
}

/// The status fields the state functions read and write (`batch.JobStatus`).
#[derive(Debug, Clone, Default)]
struct Status {
    phase: String,
    pending: u64,
    running: u64,
    succeeded: u64,
    failed: u64,
    terminating: u64,
    unknown: u64,
    retry_count: u64,
    version: u64,
    task_counts: serde_json::Map<String, Value>,
}

impl Status {
    fn of(job: &Value) -> Status {
        let n = |f: &str| job["status"][f].as_u64().unwrap_or(0);
        Status {
            phase: str_at(job, "/status/state/phase").to_owned(),
            pending: n("pending"),
            running: n("running"),
            succeeded: n("succeeded"),
            failed: n("failed"),
            terminating: n("terminating"),
            unknown: n("unknown"),
            retry_count: n("retryCount"),
            version: n("version"),
            task_counts: job["status"]["taskStatusCount"].as_object().cloned().unwrap_or_default(),
        }
    }

    fn count(&mut self, pod: &Value) {
        let phase = str_at(pod, "/status/phase");
        match phase {
            "Pending" => self.pending += 1,
            "Running" => self.running += 1,
            "Succeeded" => self.succeeded += 1,
            "Failed" => self.failed += 1,
            _ => self.unknown += 1,
        }
        let task = str_at(pod, "/metadata/annotations/volcano.sh~1task-spec").to_owned();
        let entry = self.task_counts.entry(task).or_insert_with(|| json!({"phase": {}}));
        let key = if phase.is_empty() { "Unknown" } else { phase };
        let n = entry["phase"][key].as_u64().unwrap_or(0);
        entry["phase"][key] = json!(n + 1);
    }

    fn clear_counts(&mut self) {
        (self.pending, self.running, self.succeeded, self.failed, self.terminating, self.unknown) = (0, 0, 0, 0, 0, 0);
        self.task_counts.clear();
    }
}

/// Updates the job's status with `update` (which says whether the phase transition is new,
/// as an `UpdateStatusFn` does); a changed phase gets a condition. Returns the stored job.
fn write_status(store: &Store, job: &Value, update: impl FnOnce(&mut Status) -> bool) -> Option<Value> {
    write_status_from(store, job, Status::of(job), update)
}

fn write_status_from(
    store: &Store,
    job: &Value,
    mut status: Status,
    update: impl FnOnce(&mut Status) -> bool,
) -> Option<Value> {
    let uid = str_at(job, "/metadata/uid").to_owned();
    let min_available = job.pointer("/spec/minAvailable").and_then(Value::as_u64).unwrap_or(0);
    let transition = update(&mut status);
    store
        .update(known::jobs(), str_at(job, "/metadata/namespace"), str_at(job, "/metadata/name"), |obj| {
            if str_at(obj, "/metadata/uid") != uid {
                return;
            }
            let old_phase = str_at(obj, "/status/state/phase").to_owned();
            let s = &mut obj["status"];
            if transition && (old_phase != status.phase || s["state"]["lastTransitionTime"].is_null()) {
                let now = util::now_rfc3339();
                s["state"] = json!({"phase": status.phase, "lastTransitionTime": now});
                if !s["conditions"].is_array() {
                    s["conditions"] = json!([]);
                }
                if let Some(conds) = s["conditions"].as_array_mut() {
                    conds.push(json!({"status": status.phase, "lastTransitionTime": now}));
                }
            }
            s["minAvailable"] = json!(min_available);
            for (k, v) in [
                ("pending", status.pending),
                ("running", status.running),
                ("succeeded", status.succeeded),
                ("failed", status.failed),
                ("terminating", status.terminating),
                ("unknown", status.unknown),
                ("retryCount", status.retry_count),
                ("version", status.version),
            ] {
                s[k] = json!(v);
            }
            s["taskStatusCount"] = Value::Object(status.task_counts.clone());
        })
        .ok()
}

/// Runs `action` in the job's state (`NewState(...).Execute(action)`).
fn execute(shared: &Arc<Shared>, job: &Value, tasks: &[Task], pods: &[Value], memo: &mut JobMemo, action: &str) {
    let min_available = job.pointer("/spec/minAvailable").and_then(Value::as_u64).unwrap_or(0);
    let replicas: u64 = tasks.iter().map(|t| t.replicas as u64).sum();
    let kill_to = |phase: &'static str| {
        move |s: &mut Status| {
            s.phase = phase.into();
            true
        }
    };
    match str_at(job, "/status/state/phase") {
        state @ ("Pending" | "Running") => match action {
            "RestartJob" => kill(shared, job, pods, memo, false, true, |s| {
                s.retry_count += 1;
                s.phase = "Restarting".into();
                true
            }),
            "AbortJob" => kill(shared, job, pods, memo, true, true, kill_to("Aborting")),
            "TerminateJob" => kill(shared, job, pods, memo, true, true, kill_to("Terminating")),
            "CompleteJob" => kill(shared, job, pods, memo, true, true, kill_to("Completing")),
            _ if state == "Pending" => sync(shared, job, tasks, pods, |s| {
                // pendingState: running once minAvailable pods have started.
                if min_available <= s.running + s.succeeded + s.failed {
                    s.phase = "Running".into();
                    return true;
                }
                false
            }),
            _ => sync(shared, job, tasks, pods, |s| running_update(job, tasks, replicas, min_available, s)),
        },
        "Restarting" => {
            let max_retry = job.pointer("/spec/maxRetry").and_then(Value::as_u64).unwrap_or(3);
            // restartingState.restartingUpdateStatus
            let update = move |s: &mut Status| {
                if s.retry_count >= max_retry {
                    s.phase = "Failed".into();
                    return true;
                }
                if replicas.saturating_sub(s.terminating) >= min_available {
                    s.phase = "Pending".into();
                    return true;
                }
                false
            };
            if action == "SyncJob" {
                sync(shared, job, tasks, pods, update);
            } else {
                kill(shared, job, pods, memo, false, false, update);
            }
        }
        state @ ("Aborting" | "Terminating" | "Completing") => {
            let done = match state {
                "Aborting" => "Aborted",
                "Terminating" => "Terminated",
                _ => "Completed",
            };
            kill(shared, job, pods, memo, true, false, move |s| {
                if s.terminating != 0 || s.pending != 0 || s.running != 0 {
                    return false;
                }
                s.phase = done.into();
                true
            });
        }
        // Aborted, Completed, Failed, Terminated: finishedState/abortedState run killJob on the
        // job's next event, which deletes the PodGroup. A group that has not started (one that
        // a restart re-created just before the job failed) raises such an event when the
        // scheduler enqueues it; nothing else runs any more.
        _ => {
            let ns = str_at(job, "/metadata/namespace");
            let group = shared.store.get(known::podgroups(), ns, &podgroup_name(job));
            if group.is_ok_and(|g| matches!(str_at(&g, "/status/phase"), "" | "Pending" | "Inqueue")) {
                let _ = shared.store.delete(known::podgroups(), ns, &podgroup_name(job), Propagation::Background);
            }
        }
    }
}

/// runningState's `SyncJob` update.
fn running_update(job: &Value, tasks: &[Task], replicas: u64, min_available: u64, s: &mut Status) -> bool {
    if replicas == 0 {
        return false;
    }
    let total_task_min: u64 = tasks.iter().map(|t| t.min_available.unwrap_or(t.replicas) as u64).sum();
    if s.succeeded + s.failed == replicas {
        if min_available >= total_task_min {
            for task in tasks {
                let Some(task_min) = task.min_available else { continue };
                if let Some(counts) = s.task_counts.get(&task.name) {
                    let ok = counts["phase"]["Succeeded"].as_u64().unwrap_or(0);
                    if ok < task_min as u64 {
                        s.phase = "Failed".into();
                        return true;
                    }
                }
            }
        }
        s.phase = if s.succeeded >= min_available { "Completed" } else { "Failed" }.into();
        return true;
    }
    if s.pending > replicas.saturating_sub(min_available) {
        s.phase = "Pending".into();
        return true;
    }
    let _ = job;
    false
}

/// `syncJob`: makes sure the PodGroup exists; once the scheduler has enqueued it (phase past
/// Pending), creates the missing pods and counts them; then applies `update`.
fn sync(shared: &Arc<Shared>, job: &Value, tasks: &[Task], pods: &[Value], update: impl FnOnce(&mut Status) -> bool) {
    let store = &shared.store;
    let ns = str_at(job, "/metadata/namespace");
    let pg = ensure_podgroup(store, job, tasks);
    let enqueued = pg.as_ref().is_some_and(|pg| !matches!(str_at(pg, "/status/phase"), "" | "Pending"));
    if !enqueued {
        write_status(store, job, update);
        return;
    }
    ensure_job_objects(shared, job, tasks);
    let old = Status::of(job);
    let mut status =
        Status { phase: old.phase, retry_count: old.retry_count, version: old.version, ..Status::default() };
    // By name, once: a search per replica made this pass quadratic in the job's pods.
    let by_name: HashMap<&str, &Value> = pods.iter().rev().map(|p| (str_at(p, "/metadata/name"), p)).collect();
    let mut creation_errors = Vec::new();
    for task in tasks {
        for i in 0..task.replicas {
            let name = format!("{}-{}-{i}", str_at(job, "/metadata/name"), task.name);
            match by_name.get(name.as_str()).copied() {
                Some(pod) if pod.pointer("/metadata/deletionTimestamp").is_some() => status.terminating += 1,
                Some(pod) => status.count(pod),
                None => match create_pod(shared, job, tasks, task, i, status.version) {
                    Ok(()) => status.count(&json!({"status": {"phase": "Pending"}, "metadata": {"annotations": {"volcano.sh/task-spec": task.name}}})),
                    Err(error) => creation_errors.push(error),
                },
            }
        }
    }
    let _ = ns;
    if !creation_errors.is_empty() {
        // `syncJob` records one Warning for the pass and returns an error before it writes the
        // status: the job keeps its phase and the next pass (the requeue) tries again.
        let message = format!("Error creating pods: [{}]", creation_errors.join(" "));
        events::emit(store, job, "Warning", "FailedCreate", &message, "vc-controller-manager");
        return;
    }
    write_status_from(store, job, status, update);
}

/// `killJob`: deletes the pods not retained (with `soft`, Succeeded and Failed pods stay; on the
/// last retry they always stay), counts what is terminating, applies `update` and deletes the
/// PodGroup. `bump` bumps the job version (a kill an action starts).
fn kill(
    shared: &Arc<Shared>,
    job: &Value,
    pods: &[Value],
    memo: &mut JobMemo,
    soft: bool,
    bump: bool,
    update: impl FnOnce(&mut Status) -> bool,
) {
    let store = &shared.store;
    let ns = str_at(job, "/metadata/namespace");
    let mut status = Status::of(job);
    status.clear_counts();
    if bump {
        status.version += 1;
        memo.tasks_fired.clear();
    }
    let max_retry = job.pointer("/spec/maxRetry").and_then(Value::as_u64).unwrap_or(3);
    let last_retry = status.retry_count + 1 >= max_retry;
    for pod in pods {
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            status.terminating += 1;
            continue;
        }
        let finished = matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed");
        if (soft || last_retry) && finished {
            continue;
        }
        memo.killed.insert(str_at(pod, "/metadata/uid").to_owned());
        if store.delete(known::pods(), ns, str_at(pod, "/metadata/name"), Propagation::Background).is_ok() {
            status.terminating += 1;
        }
    }
    write_status_from(store, job, status, update);
    for name in [podgroup_name(job), str_at(job, "/metadata/name").to_owned()] {
        let _ = store.delete(known::podgroups(), ns, &name, Propagation::Background);
    }
}

/// The job's pods: labelled with its name and controlled by its uid.
fn job_pods(store: &Store, job: &Value) -> Vec<Value> {
    let uid = str_at(job, "/metadata/uid");
    let labels =
        LabelSelector::parse(&format!("volcano.sh/job-name={}", str_at(job, "/metadata/name"))).unwrap_or_default();
    let ns = str_at(job, "/metadata/namespace");
    let (pods, _) = store.list(known::pods(), Some(ns), &Selectors { labels, ..Selectors::default() });
    pods.into_iter()
        .filter(|p| {
            p.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
        })
        .collect()
}

/// `createOrUpdatePodGroup`: the `<job>-<uid>` PodGroup with `minMember`, the queue and the
/// minimal resources of `minAvailable` pods. Returns the PodGroup.
fn ensure_podgroup(store: &Store, job: &Value, tasks: &[Task]) -> Option<Value> {
    let ns = str_at(job, "/metadata/namespace");
    let name = podgroup_name(job);
    if let Ok(pg) = store.get(known::podgroups(), ns, &name) {
        return Some(pg);
    }
    let replicas: usize = tasks.iter().map(|t| t.replicas).sum();
    let min_member = job.pointer("/spec/minAvailable").and_then(Value::as_u64).map_or(replicas, |m| m as usize);
    // CalcPGMinResources: the requests of the first `minMember` pods, tasks in spec order.
    let mut left = min_member;
    let mut min_resources = Resources::new();
    for t in tasks {
        let n = left.min(t.replicas);
        for (k, v) in sched::pod_requests(&t.template["spec"]) {
            *min_resources.entry(k).or_default() += v * n as i128;
        }
        left -= n;
    }
    let queue = job.pointer("/spec/queue").and_then(Value::as_str).unwrap_or("default");
    let mut pg = json!({
        "metadata": {
            "name": name, "namespace": ns, "ownerReferences": [crate::jobpods::owner_ref(job)],
            "labels": job["metadata"]["labels"], "annotations": job["metadata"]["annotations"],
        },
        "spec": {"minMember": min_member, "queue": queue, "minResources": sched::to_quantities(&min_resources)},
        "status": {"phase": "Pending"},
    });
    // `createOrUpdatePodGroup`: the job's PriorityClass is the PodGroup's.
    if let Some(class) = job.pointer("/spec/priorityClassName").and_then(Value::as_str).filter(|c| !c.is_empty()) {
        pg["spec"]["priorityClassName"] = json!(class);
    }
    match store.create(known::podgroups(), ns, pg) {
        Ok(pg) => Some(pg),
        Err(err) => {
            tracing::debug!(%err, "podgroup not created");
            store.get(known::podgroups(), ns, &name).ok()
        }
    }
}

fn update_queues(store: &Store) {
    let usage = sched::queue_usage(store);
    let (queues, _) = store.list(known::queues(), None, &Selectors::default());
    for q in queues {
        let name = str_at(&q, "/metadata/name").to_owned();
        let allocated = sched::to_quantities(&usage.get(&name).cloned().unwrap_or_default());
        let _ = store.update(known::queues(), "", &name, |obj| {
            obj["status"]["allocated"] = allocated;
            if obj["status"]["state"].is_null() {
                obj["status"]["state"] = json!("Open");
            }
        });
    }
}
