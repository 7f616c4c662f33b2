//! The Volcano controller and gang scheduler, level-triggered: after every store change it
//! reconciles every `batch.volcano.sh/v1alpha1` Job (PodGroup, gang admission against the
//! nodes and the queue's `spec.capability`, pods, svc/env plugins, phases and policies), queue
//! usage, and then the pod runtime.
//!
//! Divergences: the PodGroup is named after the job (not `<job>-<uid>`); a gang is admitted only
//! when every replica fits; deleted pods keep a `deletionTimestamp` until their processes are gone;
//! a pod failure with no matching policy fails the job (`AbortJob`-like, phase `Failed`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Shared;
use crate::discovery::known;
use crate::events;
use crate::sched::{self, Cluster, Resources};
use crate::selector::{LabelSelector, Selectors};
use crate::store::Store;
use crate::util;

/// What the controller remembers about one job (by uid) between passes.
#[derive(Default)]
struct JobMemo {
    first_seen: Option<Instant>,
    admitted: bool,
    created: BTreeSet<String>,
    handled_failures: HashSet<String>,
    completed_tasks: HashSet<String>,
}

/// One task of a job spec.
struct Task {
    name: String,
    replicas: usize,
    template: Value,
    policies: Vec<Value>,
}

/// Runs until aborted.
pub(crate) async fn run(shared: Arc<Shared>) {
    let changed = shared.store.changed();
    let mut memos: HashMap<String, JobMemo> = HashMap::new();
    loop {
        reconcile_all(&shared, &mut memos);
        // The tick covers time-based work (scheduling delays); changes wake us at once.
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

fn reconcile_all(shared: &Arc<Shared>, memos: &mut HashMap<String, JobMemo>) {
    let store = &shared.store;
    let (jobs, _) = store.list(known::jobs(), None, &Selectors::default());
    let uids: HashSet<String> = jobs.iter().map(|j| str_at(j, "/metadata/uid").to_owned()).collect();
    memos.retain(|uid, _| uids.contains(uid));
    for job in &jobs {
        let memo = memos.entry(str_at(job, "/metadata/uid").to_owned()).or_default();
        reconcile_job(shared, job, memo);
    }
    update_queues(store);
    shared.runtime.reconcile(shared);
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn tasks_of(job: &Value) -> Vec<Task> {
    job.pointer("/spec/tasks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| Task {
            name: t.get("name").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| format!("default{i}")),
            replicas: t.get("replicas").and_then(Value::as_u64).unwrap_or(1) as usize,
            template: t.get("template").cloned().unwrap_or(json!({})),
            policies: t.get("policies").and_then(Value::as_array).cloned().unwrap_or_default(),
        })
        .collect()
}

fn is_terminal(phase: &str) -> bool {
    matches!(phase, "Completed" | "Aborted" | "Terminated" | "Failed")
}

fn owner_ref(job: &Value) -> Value {
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
    })
}

fn reconcile_job(shared: &Arc<Shared>, job: &Value, memo: &mut JobMemo) {
    let store = &shared.store;
    let ns = str_at(job, "/metadata/namespace");
    let name = str_at(job, "/metadata/name");
    let uid = str_at(job, "/metadata/uid");
    let phase = str_at(job, "/status/state/phase");
    let tasks = tasks_of(job);
    let total: usize = tasks.iter().map(|t| t.replicas).sum();
    let min_available = job.pointer("/spec/minAvailable").and_then(Value::as_u64).map_or(total, |m| m as usize);
    let queue = job.pointer("/spec/queue").and_then(Value::as_str).unwrap_or("default").to_owned();
    ensure_podgroup(store, job, min_available, &queue);
    if is_terminal(phase) {
        return;
    }
    if !memo.admitted {
        let first_seen = *memo.first_seen.get_or_insert_with(Instant::now);
        if let Some(delay) = shared.faults.scheduling_delay()
            && first_seen.elapsed() < delay
        {
            set_job_status(store, job, "Pending", "", "", &[], None);
            return;
        }
        match admit(shared, job, &tasks, &queue) {
            Ok(placements) => {
                create_job_objects(shared, job, &tasks, &queue, &placements, memo);
                memo.admitted = true;
                set_podgroup(store, ns, name, "Inqueue", None);
            }
            Err(message) => {
                set_podgroup(store, ns, name, "Pending", Some(&message));
                if let Ok(pg) = store.get(known::podgroups(), ns, name) {
                    events::emit(store, &pg, "Warning", "Unschedulable", &message, "volcano");
                }
                set_job_status(store, job, "Pending", "Unschedulable", &message, &[], None);
                return;
            }
        }
    }
    let pods = job_pods(store, ns, name, uid);
    let mut fired: Vec<(&'static str, String, Option<i64>)> = Vec::new();
    for missing in memo.created.iter().filter(|n| !pods.iter().any(|p| str_at(p, "/metadata/name") == n.as_str())) {
        fired.push(("PodEvicted", task_of_pod_name(name, missing, &tasks), None));
    }
    for pod in pods.iter().filter(|p| str_at(p, "/status/phase") == "Failed") {
        if memo.handled_failures.insert(str_at(pod, "/metadata/uid").to_owned()) {
            let code = pod.pointer("/status/containerStatuses/0/state/terminated/exitCode").and_then(Value::as_i64);
            fired.push(("PodFailed", str_at(pod, "/metadata/labels/volcano.sh~1task-spec").to_owned(), code));
        }
    }
    for task in &tasks {
        let done = pods
            .iter()
            .filter(|p| {
                str_at(p, "/metadata/labels/volcano.sh~1task-spec") == task.name
                    && str_at(p, "/status/phase") == "Succeeded"
            })
            .count();
        if task.replicas > 0 && done == task.replicas && memo.completed_tasks.insert(task.name.clone()) {
            fired.push(("TaskCompleted", task.name.clone(), None));
        }
    }
    for (event, task_name, code) in &fired {
        let task_policies = tasks.iter().find(|t| t.name == *task_name).map(|t| t.policies.as_slice()).unwrap_or(&[]);
        let job_policies = job.pointer("/spec/policies").and_then(Value::as_array).cloned().unwrap_or_default();
        let action = find_action(task_policies, event, *code).or_else(|| find_action(&job_policies, event, *code));
        let message = format!("{event} of task {task_name}");
        match (action.as_deref(), *event) {
            (Some("CompleteJob"), _) => return finish(store, job, &pods, "Completed", event, &message),
            (Some("AbortJob"), _) => return finish(store, job, &pods, "Aborted", event, &message),
            (Some("TerminateJob"), _) => return finish(store, job, &pods, "Terminated", event, &message),
            (Some("RestartJob"), _) => return restart(store, job, &pods, memo, event),
            (_, "PodFailed") => return finish(store, job, &pods, "Failed", event, &message),
            _ => {}
        }
    }
    // An evicted pod with no policy is recreated, as Volcano's SyncJob does.
    let evicted = fired.iter().any(|(e, _, _)| *e == "PodEvicted");
    if evicted {
        let placements = memo.created.iter().map(|n| (n.clone(), String::new())).collect::<Vec<_>>();
        create_pods(shared, job, &tasks, &queue, &placements, memo);
    }
    let pods = job_pods(store, ns, name, uid);
    let count = |phase: &str| pods.iter().filter(|p| str_at(p, "/status/phase") == phase).count();
    let (running, succeeded, failed) = (count("Running"), count("Succeeded"), count("Failed"));
    let finished = succeeded + failed;
    let new_phase = if !pods.is_empty() && finished == pods.len() && pods.len() >= total {
        if succeeded >= min_available { "Completed" } else { "Failed" }
    } else if running + succeeded >= min_available && running > 0 {
        "Running"
    } else {
        "Pending"
    };
    if new_phase == "Completed" || new_phase == "Failed" {
        return finish(store, job, &pods, new_phase, "PodsFinished", "all pods finished");
    }
    set_podgroup(store, ns, name, if new_phase == "Running" { "Running" } else { "Inqueue" }, None);
    set_job_status(store, job, new_phase, "", "", &pods, None);
}

fn task_of_pod_name(job: &str, pod: &str, tasks: &[Task]) -> String {
    tasks
        .iter()
        .find(|t| pod.strip_prefix(&format!("{job}-{}-", t.name)).is_some_and(|i| i.parse::<usize>().is_ok()))
        .map(|t| t.name.clone())
        .unwrap_or_default()
}

/// The action of the first policy matching `event` (or `exitCode`).
fn find_action(policies: &[Value], event: &str, code: Option<i64>) -> Option<String> {
    policies.iter().find_map(|p| {
        let action = p.get("action").and_then(Value::as_str)?.to_owned();
        if let Some(want) = p.get("exitCode").and_then(Value::as_i64) {
            return (event == "PodFailed" && code == Some(want)).then_some(action);
        }
        let mut events: Vec<&str> =
            p.get("events").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        events.extend(p.get("event").and_then(Value::as_str));
        events.iter().any(|e| *e == event || *e == "*" || *e == "Any").then_some(action)
    })
}

fn job_pods(store: &Store, ns: &str, job: &str, uid: &str) -> Vec<Value> {
    let labels = LabelSelector::parse(&format!("volcano.sh/job-name={job}")).unwrap_or_default();
    let (pods, _) = store.list(known::pods(), Some(ns), &Selectors { labels, ..Selectors::default() });
    pods.into_iter()
        .filter(|p| {
            p.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
        })
        .collect()
}

/// Moves the job to a terminal phase and deletes its pods that have not finished (finished
/// pods stay, so their logs can be read).
fn finish(store: &Store, job: &Value, pods: &[Value], phase: &str, reason: &str, message: &str) {
    let ns = str_at(job, "/metadata/namespace");
    for pod in pods.iter().filter(|p| sched::holds_resources(p)) {
        let _ = store.delete(known::pods(), ns, str_at(pod, "/metadata/name"), crate::store::Propagation::Background);
    }
    let remaining = job_pods(store, ns, str_at(job, "/metadata/name"), str_at(job, "/metadata/uid"));
    set_job_status(store, job, phase, reason, message, &remaining, None);
    let pg_phase = if phase == "Completed" { "Completed" } else { "Unknown" };
    set_podgroup(store, ns, str_at(job, "/metadata/name"), pg_phase, None);
}

fn restart(store: &Store, job: &Value, pods: &[Value], memo: &mut JobMemo, event: &str) {
    let ns = str_at(job, "/metadata/namespace");
    let retries = job.pointer("/status/retryCount").and_then(Value::as_u64).unwrap_or(0) + 1;
    let max_retry = job.pointer("/spec/maxRetry").and_then(Value::as_u64).unwrap_or(3);
    if retries > max_retry {
        return finish(store, job, pods, "Failed", "MaxRetryReached", &format!("job restarted {max_retry} times"));
    }
    for pod in pods {
        let _ = store.delete(known::pods(), ns, str_at(pod, "/metadata/name"), crate::store::Propagation::Background);
    }
    *memo = JobMemo::default();
    set_job_status(store, job, "Restarting", event, &format!("restarting after {event}"), &[], Some(retries));
}

fn set_job_status(
    store: &Store,
    job: &Value,
    phase: &str,
    reason: &str,
    message: &str,
    pods: &[Value],
    retries: Option<u64>,
) {
    let ns = str_at(job, "/metadata/namespace");
    let name = str_at(job, "/metadata/name");
    let uid = str_at(job, "/metadata/uid").to_owned();
    let count = |phase: &str| pods.iter().filter(|p| str_at(p, "/status/phase") == phase).count();
    let mut task_counts = serde_json::Map::new();
    for pod in pods {
        let task = str_at(pod, "/metadata/labels/volcano.sh~1task-spec").to_owned();
        let entry = task_counts.entry(task).or_insert_with(|| json!({"phase": {}}));
        let p = str_at(pod, "/status/phase").to_owned();
        let n = entry["phase"][&p].as_u64().unwrap_or(0);
        entry["phase"][&p] = json!(n + 1);
    }
    let total: u64 = tasks_of(job).iter().map(|t| t.replicas as u64).sum();
    let min_available = job.pointer("/spec/minAvailable").and_then(Value::as_u64).unwrap_or(total);
    let _ = store.update(known::jobs(), ns, name, |obj| {
        if str_at(obj, "/metadata/uid") != uid {
            return;
        }
        let old_phase = str_at(obj, "/status/state/phase").to_owned();
        let status = &mut obj["status"];
        let now = util::now_rfc3339();
        let mut state = json!({"phase": phase});
        if !reason.is_empty() {
            state["reason"] = json!(reason);
        }
        if !message.is_empty() {
            state["message"] = json!(message);
        }
        let keep_time = old_phase == phase
            && status["state"]["reason"] == state["reason"]
            && status["state"]["message"] == state["message"];
        state["lastTransitionTime"] =
            if keep_time { status["state"]["lastTransitionTime"].clone() } else { json!(now) };
        status["state"] = state;
        if old_phase != phase {
            if !status["conditions"].is_array() {
                status["conditions"] = json!([]);
            }
            if let Some(conds) = status["conditions"].as_array_mut() {
                conds.push(json!({"status": phase, "lastTransitionTime": now}));
            }
        }
        status["minAvailable"] = json!(min_available);
        status["pending"] = json!(count("Pending"));
        status["running"] = json!(count("Running"));
        status["succeeded"] = json!(count("Succeeded"));
        status["failed"] = json!(count("Failed"));
        status["unknown"] = json!(0);
        status["terminating"] = json!(0);
        status["taskStatusCount"] = Value::Object(task_counts);
        if let Some(r) = retries {
            status["retryCount"] = json!(r);
        } else if status["retryCount"].is_null() {
            status["retryCount"] = json!(0);
        }
    });
}

fn ensure_podgroup(store: &Store, job: &Value, min_member: usize, queue: &str) {
    let ns = str_at(job, "/metadata/namespace");
    let name = str_at(job, "/metadata/name");
    if store.get(known::podgroups(), ns, name).is_ok() {
        return;
    }
    let min_resources: Resources = tasks_of(job).iter().fold(Resources::new(), |mut acc, t| {
        for (k, v) in sched::pod_requests(&t.template["spec"]) {
            *acc.entry(k).or_default() += v * t.replicas as i128;
        }
        acc
    });
    let pg = json!({
        "metadata": {
            "name": name, "namespace": ns, "ownerReferences": [owner_ref(job)],
            "annotations": {"scheduling.k8s.io/group-name": name},
        },
        "spec": {"minMember": min_member, "queue": queue, "minResources": sched::to_quantities(&min_resources)},
        "status": {"phase": "Pending"},
    });
    if let Err(err) = store.create(known::podgroups(), ns, pg) {
        tracing::debug!(%err, "podgroup not created");
    }
}

fn set_podgroup(store: &Store, ns: &str, name: &str, phase: &str, unschedulable: Option<&str>) {
    let _ = store.update(known::podgroups(), ns, name, |pg| {
        pg["status"]["phase"] = json!(phase);
        let now = util::now_rfc3339();
        let cond = match unschedulable {
            Some(message) => {
                json!({"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": message})
            }
            None => json!({"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready to be scheduled"}),
        };
        let same = pg
            .pointer("/status/conditions/0")
            .is_some_and(|c| c["type"] == cond["type"] && c["message"] == cond["message"]);
        if !same {
            let mut cond = cond;
            cond["lastTransitionTime"] = json!(now);
            cond["transitionID"] = json!(util::new_uid());
            pg["status"]["conditions"] = json!([cond]);
        }
    });
}

/// Gang admission: every replica must fit on the nodes and within the queue's capability.
/// Returns (pod name, node) placements.
fn admit(shared: &Shared, job: &Value, tasks: &[Task], queue: &str) -> Result<Vec<(String, String)>, String> {
    let store = &shared.store;
    let name = str_at(job, "/metadata/name");
    let q = store.get(known::queues(), "", queue).map_err(|_| format!("queue \"{queue}\" not found"))?;
    let state = str_at(&q, "/status/state");
    if !state.is_empty() && state != "Open" {
        return Err(format!("queue \"{queue}\" is {state}"));
    }
    let mut job_total = Resources::new();
    let mut cluster = Cluster::from_store(store);
    let mut placements = Vec::new();
    for task in tasks {
        let req = sched::pod_requests(&task.template["spec"]);
        for i in 0..task.replicas {
            let node = cluster.place(&req)?;
            placements.push((format!("{name}-{}-{i}", task.name), node));
            for (k, v) in &req {
                *job_total.entry(k.clone()).or_default() += v;
            }
        }
    }
    let capability = sched::from_quantities(q.pointer("/spec/capability"));
    let used = queue_usage(store).remove(queue).unwrap_or_default();
    for (res, cap) in &capability {
        let want = job_total.get(res).copied().unwrap_or(0);
        let have = used.get(res).copied().unwrap_or(0);
        if want > 0 && have + want > *cap {
            return Err(format!(
                "queue \"{queue}\" resource quota insufficient: {res} requested {}, allocated {}, capability {}",
                crate::quantity::format_milli(want),
                crate::quantity::format_milli(have),
                crate::quantity::format_milli(*cap)
            ));
        }
    }
    Ok(placements)
}

/// Resources held by pods, per queue (`volcano.sh/queue-name` label).
fn queue_usage(store: &Store) -> HashMap<String, Resources> {
    let (pods, _) = store.list(known::pods(), None, &Selectors::default());
    let mut usage: HashMap<String, Resources> = HashMap::new();
    for pod in pods.iter().filter(|p| sched::holds_resources(p)) {
        let queue = str_at(pod, "/metadata/labels/volcano.sh~1queue-name");
        if queue.is_empty() {
            continue;
        }
        let entry = usage.entry(queue.to_owned()).or_default();
        for (k, v) in sched::pod_requests(&pod["spec"]) {
            *entry.entry(k).or_default() += v;
        }
    }
    usage
}

fn update_queues(store: &Store) {
    let usage = queue_usage(store);
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

fn plugins(job: &Value) -> HashSet<String> {
    let mut set: HashSet<String> =
        job.pointer("/spec/plugins").and_then(Value::as_object).into_iter().flatten().map(|(k, _)| k.clone()).collect();
    if ["pytorch", "mpi", "tensorflow", "ray"].iter().any(|p| set.contains(*p)) {
        set.insert("svc".into());
    }
    set
}

fn env_key(task: &str) -> String {
    task.to_uppercase().replace('-', "_")
}

fn hosts_of(shared: &Shared, job: &str, task: &Task) -> Vec<String> {
    (0..task.replicas)
        .map(|i| {
            if shared.config.host_aliases_to_loopback {
                "127.0.0.1".to_owned()
            } else {
                format!("{job}-{}-{i}.{job}", task.name)
            }
        })
        .collect()
}

fn create_job_objects(
    shared: &Shared,
    job: &Value,
    tasks: &[Task],
    queue: &str,
    placements: &[(String, String)],
    memo: &mut JobMemo,
) {
    let store = &shared.store;
    let ns = str_at(job, "/metadata/namespace");
    let name = str_at(job, "/metadata/name");
    if plugins(job).contains("svc") {
        let mut data = serde_json::Map::new();
        for t in tasks {
            let hosts = hosts_of(shared, name, t);
            data.insert(format!("{}.host", t.name), json!(hosts.join("\n")));
            data.insert(format!("VC_{}_HOSTS", env_key(&t.name)), json!(hosts.join(",")));
            data.insert(format!("VC_{}_NUM", env_key(&t.name)), json!(t.replicas.to_string()));
        }
        let cm =
            json!({"metadata": {"name": format!("{name}-svc"), "ownerReferences": [owner_ref(job)]}, "data": data});
        let _ = store.create(known::configmaps(), ns, cm);
        let svc = json!({
            "metadata": {"name": name, "ownerReferences": [owner_ref(job)]},
            "spec": {"clusterIP": "None", "selector": {"volcano.sh/job-name": name}, "ports": [{"name": "placeholder-volcano", "port": 1, "protocol": "TCP"}]},
        });
        let _ = store.create(known::services(), ns, svc);
    }
    create_pods(shared, job, tasks, queue, placements, memo);
}

/// Creates the pods named in `placements` that do not exist (an empty node leaves binding to
/// the runtime's default scheduler).
fn create_pods(
    shared: &Shared,
    job: &Value,
    tasks: &[Task],
    queue: &str,
    placements: &[(String, String)],
    memo: &mut JobMemo,
) {
    let store = &shared.store;
    let ns = str_at(job, "/metadata/namespace");
    let name = str_at(job, "/metadata/name");
    let plugins = plugins(job);
    let mut svc_env = Vec::new();
    for t in tasks {
        svc_env.push(
            json!({"name": format!("VC_{}_HOSTS", env_key(&t.name)), "value": hosts_of(shared, name, t).join(",")}),
        );
        svc_env.push(json!({"name": format!("VC_{}_NUM", env_key(&t.name)), "value": t.replicas.to_string()}));
    }
    for task in tasks {
        for i in 0..task.replicas {
            let pod_name = format!("{name}-{}-{i}", task.name);
            let Some((_, node)) = placements.iter().find(|(p, _)| *p == pod_name) else { continue };
            let mut pod = json!({"metadata": task.template.get("metadata").cloned().unwrap_or(json!({})), "spec": task.template.get("spec").cloned().unwrap_or(json!({}))});
            let meta = &mut pod["metadata"];
            meta["name"] = json!(pod_name);
            meta["namespace"] = json!(ns);
            for (k, v) in [
                ("volcano.sh/job-name", name.to_owned()),
                ("volcano.sh/task-spec", task.name.clone()),
                ("volcano.sh/task-index", i.to_string()),
                ("volcano.sh/queue-name", queue.to_owned()),
                ("volcano.sh/job-namespace", ns.to_owned()),
            ] {
                meta["labels"][k] = json!(v);
            }
            meta["annotations"]["scheduling.k8s.io/group-name"] = json!(name);
            meta["annotations"]["volcano.sh/job-name"] = json!(name);
            meta["annotations"]["volcano.sh/task-spec"] = json!(task.name);
            meta["ownerReferences"] = json!([owner_ref(job)]);
            let spec = &mut pod["spec"];
            if !node.is_empty() {
                spec["nodeName"] = json!(node);
            }
            if spec["schedulerName"].is_null() {
                spec["schedulerName"] = json!("volcano");
            }
            let mut extra_env = Vec::new();
            if plugins.contains("env") {
                extra_env.push(json!({"name": "VK_TASK_INDEX", "value": i.to_string()}));
                extra_env.push(json!({"name": "VC_TASK_INDEX", "value": i.to_string()}));
            }
            if plugins.contains("svc") {
                if spec["hostname"].is_null() {
                    spec["hostname"] = json!(pod_name);
                }
                if spec["subdomain"].is_null() {
                    spec["subdomain"] = json!(name);
                }
                extra_env.extend(svc_env.iter().cloned());
                let volume = json!({"name": format!("{name}-svc"), "configMap": {"name": format!("{name}-svc")}});
                match spec["volumes"].as_array_mut() {
                    Some(v) => v.push(volume),
                    None => spec["volumes"] = json!([volume]),
                }
            }
            for field in ["containers", "initContainers"] {
                for c in spec[field].as_array_mut().into_iter().flatten() {
                    match c["env"].as_array_mut() {
                        Some(env) => env.extend(extra_env.iter().cloned()),
                        None => c["env"] = json!(extra_env),
                    }
                    if plugins.contains("svc") {
                        let mount = json!({"name": format!("{name}-svc"), "mountPath": "/etc/volcano"});
                        match c["volumeMounts"].as_array_mut() {
                            Some(m) => m.push(mount),
                            None => c["volumeMounts"] = json!([mount]),
                        }
                    }
                }
            }
            pod["status"] = json!({"phase": "Pending"});
            match store.create(known::pods(), ns, pod) {
                Ok(_) => {
                    memo.created.insert(pod_name);
                }
                Err(err) if err.code == 409 => {
                    memo.created.insert(pod_name);
                }
                Err(err) => tracing::warn!(%err, pod = %pod_name, "could not create a job pod"),
            }
        }
    }
}
