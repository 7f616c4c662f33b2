//! One Volcano scheduler session over every PodGroup, as the default `volcano-scheduler.conf` of
//! the 1.15 chart runs it (`actions: "enqueue, allocate, backfill"`, tier 2 starting with
//! `overcommit`, then `proportion`):
//!
//! - enqueue (pkg/scheduler/actions/enqueue/enqueue.go): a `Pending` PodGroup becomes `Inqueue`
//!   when the `jobEnqueueableFn`s of pkg/scheduler/plugins/overcommit (cluster allocatable x 1.2
//!   minus what is used and what other enqueued groups still need) and
//!   pkg/scheduler/plugins/proportion (the queue's capability, at most the cluster) admit its
//!   `minResources`; a rejection is a `Normal` `Unschedulable` event on the PodGroup
//!   (`resource in cluster is overused: overused <res>` or `queue resource quota insufficient:
//!   insufficient <res>`). Every session also records `RecordJobStatusEvent`'s `Warning`
//!   `Unschedulable` event for a group still pending (`0/0 tasks in gang unschedulable: pod group
//!   is not ready, N minAvailable` when it has no pods). A group that is not enqueued gets no
//!   condition: the gang plugin skips jobs without tasks (`OnSessionClose` in plugins/gang).
//! - allocate: the pods of an enqueued group are bound all together (first fit, on a node with
//!   room whose labels and taints the pod's `nodeSelector`, required node affinity and
//!   tolerations accept: the `predicates` plugin, see [`crate::sched::Cluster::place`]) once all
//!   fit, or none are, and the group gets the gang plugin's `Unschedulable` condition with the
//!   job's fit error (`0/N nodes are unavailable: 2 node(s) didn't match Pod's node
//!   affinity/selector.`), its pods `PodScheduled=False` and a `FailedScheduling` event
//!   (`taskUnschedulable` in pkg/scheduler/cache/cache.go). A claim named in
//!   [`crate::SimConfig::missing_pvcs`] fails volume binding's PreFilter with
//!   `persistentvolumeclaim "<name>" not found`.
//!
//! Divergences: resources compare per dimension with the job's dimensions only, as Volcano's
//! `LessEqualWithDimensionAndResourcesName` does, but guarantees, elastic resources and
//! hierarchical queues are not modelled; a queue's `spec.deserved` is validated by its CRD
//! schema and kept, but the chart's proportion plugin derives deserved shares from weights and
//! never reads it (pkg/scheduler/plugins/capacity, which replaces proportion, does), so this
//! session does not either; the fit error's task histogram is simplified.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::Shared;
use crate::discovery::known;
use crate::events;
use crate::jobpods::str_at;
use crate::order::Snapshot;
use crate::sched::{self, Cluster, Resources};
use crate::schedconf::SchedulerConf;
use crate::selector::Selectors;
use crate::share::{self, QueueAttr};
use crate::store::Store;
use crate::util;

/// Scheduler state between sessions: when each PodGroup (by uid) was first seen, for
/// [`crate::Faults::delay_scheduling`].
#[derive(Default)]
pub(crate) struct Scheduler {
    first_seen: HashMap<String, Instant>,
}

impl Scheduler {
    /// One session: the configured actions in order ([`crate::SimConfig::scheduler`]).
    pub(crate) fn session(&mut self, shared: &Arc<Shared>) {
        let store = &shared.store;
        let conf = &shared.config.scheduler;
        let (mut groups, _) = store.list(known::podgroups(), None, &Selectors::default());
        groups.retain(|g| g.pointer("/metadata/deletionTimestamp").is_none());
        if groups.is_empty() {
            self.first_seen.clear();
            return;
        }
        let uids: HashSet<String> = groups.iter().map(|g| str_at(g, "/metadata/uid").to_owned()).collect();
        self.first_seen.retain(|uid, _| uids.contains(uid));
        // Groups a scheduling delay still holds back.
        let mut held = HashSet::new();
        for group in &groups {
            let uid = str_at(group, "/metadata/uid");
            let first = *self.first_seen.entry(uid.to_owned()).or_insert_with(Instant::now);
            if shared.faults.scheduling_delay().is_some_and(|d| first.elapsed() < d) {
                held.insert(uid.to_owned());
            }
        }
        let phase_of = |g: &Value| str_at(g, "/status/phase").to_owned();
        for action in &conf.actions {
            match action.as_str() {
                "enqueue" if groups.iter().any(|g| matches!(phase_of(g).as_str(), "" | "Pending")) => {
                    let mut snap = Snapshot::build(store, conf);
                    for j in snap.allocation_order(&["", "Pending"]) {
                        let job = &snap.jobs[j];
                        if held.contains(&job.uid) {
                            continue;
                        }
                        if let Ok(group) = store.get(known::podgroups(), &job.ns, &job.name) {
                            enqueue(store, conf, &group);
                        }
                    }
                }
                "allocate" => {
                    if !conf.runs("enqueue") {
                        // allocate.go: without an enqueue action a Pending group becomes Inqueue.
                        for g in groups.iter().filter(|g| matches!(phase_of(g).as_str(), "" | "Pending")) {
                            if !held.contains(str_at(g, "/metadata/uid")) {
                                let (ns, name) = (str_at(g, "/metadata/namespace"), str_at(g, "/metadata/name"));
                                let _ = store.update(known::podgroups(), ns, name, |pg| {
                                    pg["status"]["phase"] = json!("Inqueue");
                                });
                            }
                        }
                    }
                    let mut snap = Snapshot::build(store, conf);
                    let order = snap.allocation_order(&["Inqueue", "Running"]);
                    let mut queues = snap.queues.clone();
                    for j in order {
                        let job = &snap.jobs[j];
                        if held.contains(&job.uid) {
                            continue;
                        }
                        // Re-read: an earlier group of this session may have changed what is free.
                        if let Ok(group) = store.get(known::podgroups(), &job.ns, &job.name) {
                            let gate = conf.queue_plugin().map(|plugin| (plugin, queues.get_mut(&job.queue)));
                            allocate(shared, &group, gate);
                        }
                    }
                }
                "preempt" => crate::preempt::run(store, conf, &mut Snapshot::build(store, conf)),
                "reclaim" => crate::reclaim::run(store, conf, &mut Snapshot::build(store, conf)),
                _ => {}
            }
        }
    }
}

/// The pods of a group: in its namespace, annotated with its name.
fn group_pods(store: &Store, group: &Value) -> Vec<Value> {
    let name = str_at(group, "/metadata/name");
    let (pods, _) = store.list(known::pods(), Some(str_at(group, "/metadata/namespace")), &Selectors::default());
    pods.into_iter()
        .filter(|p| str_at(p, "/metadata/annotations/scheduling.k8s.io~1group-name") == name)
        .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
        .collect()
}

fn bound(pod: &Value) -> bool {
    !str_at(pod, "/spec/nodeName").is_empty()
}

fn add(into: &mut Resources, from: &Resources) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// What enqueued groups still need beyond what their bound pods hold (`GetInqueueResource`),
/// in total and per queue. Only `Inqueue` groups count: a `Running` one counts only while its
/// allocated pods reach `minMember`, and then it holds what it needs already (the overcommit
/// and proportion plugins' `OnSessionOpen`).
fn inqueue_resources(store: &Store, except: &str) -> (Resources, HashMap<String, Resources>) {
    let (groups, _) = store.list(known::podgroups(), None, &Selectors::default());
    let mut total = Resources::new();
    let mut per_queue: HashMap<String, Resources> = HashMap::new();
    for g in groups.iter().filter(|g| str_at(g, "/metadata/uid") != except) {
        if str_at(g, "/status/phase") != "Inqueue" {
            continue;
        }
        let mut need = sched::from_quantities(g.pointer("/spec/minResources"));
        for pod in group_pods(store, g).iter().filter(|p| bound(p) && sched::holds_resources(p)) {
            for (k, v) in sched::pod_requests(&pod["spec"]) {
                let e = need.entry(k).or_default();
                *e = (*e - v).max(0);
            }
        }
        add(&mut total, &need);
        add(per_queue.entry(str_at(g, "/spec/queue").to_owned()).or_default(), &need);
    }
    (total, per_queue)
}

/// The resource names of `want` (its positive dimensions) that exceed `limit`, cpu and memory
/// first (`LessEqualWithDimensionAndResourcesName` in pkg/scheduler/api/resource_info.go).
fn exceeded(want: &Resources, limit: &Resources, wanted: &Resources) -> Vec<String> {
    let mut names: Vec<&String> = wanted.iter().filter(|(_, v)| **v > 0).map(|(k, _)| k).collect();
    names.sort_by_key(|k| (k.as_str() != "cpu", k.as_str() != "memory", (*k).clone()));
    names
        .into_iter()
        .filter(|k| want.get(*k).copied().unwrap_or(0) > limit.get(*k).copied().unwrap_or(0))
        .cloned()
        .collect()
}

/// `FormatResourceNames` in pkg/scheduler/plugins/util/util.go.
fn format_names(prefix: &str, verb: &str, names: &[String]) -> String {
    if names.is_empty() {
        return prefix.to_owned();
    }
    let parts: Vec<String> = names.iter().map(|n| format!("{verb} {n}")).collect();
    format!("{prefix}: {}", parts.join(", "))
}

/// The enqueue action for one `Pending` group.
fn enqueue(store: &Store, conf: &SchedulerConf, group: &Value) {
    let ns = str_at(group, "/metadata/namespace");
    let name = str_at(group, "/metadata/name");
    let min_member = group.pointer("/spec/minMember").and_then(Value::as_u64).unwrap_or(0);
    let pods = group_pods(store, group);
    // RecordJobStatusEvent, every session for a group that is not scheduled.
    let pending_tasks = pods.iter().filter(|p| !bound(p)).count();
    let mut histogram = vec![format!("{min_member} minAvailable")];
    if pending_tasks > 0 {
        histogram.push(format!("{pending_tasks} Pending"));
    }
    histogram.sort();
    events::emit(
        store,
        group,
        "Warning",
        "Unschedulable",
        &format!(
            "{pending_tasks}/{} tasks in gang unschedulable: pod group is not ready, {}",
            pods.len(),
            histogram.join(", ")
        ),
        "volcano",
    );
    let queue_name = str_at(group, "/spec/queue");
    let Ok(queue) = store.get(known::queues(), "", queue_name) else {
        // enqueue.go: "Failed to find Queue" is only logged.
        return;
    };
    let min = sched::from_quantities(group.pointer("/spec/minResources"));
    if let Err(message) = enqueueable(store, conf, group, &queue, &min) {
        if !message.is_empty() {
            events::emit(store, group, "Normal", "Unschedulable", &message, "volcano");
        }
        return;
    }
    let _ = store.update(known::podgroups(), ns, name, |pg| pg["status"]["phase"] = json!("Inqueue"));
}

/// The configured `jobEnqueueableFn`s in order: overcommit (with its factor), then the queue
/// plugin (proportion's capability check; capacity's is the same for a flat queue). `Err` is
/// the event message of the rejecting plugin (empty when it records none).
fn enqueueable(
    store: &Store,
    conf: &SchedulerConf,
    group: &Value,
    queue: &Value,
    min: &Resources,
) -> Result<(), String> {
    let state = str_at(queue, "/status/state");
    if min.values().all(|v| *v <= 0) {
        return Ok(());
    }
    let cluster = Cluster::from_store(store);
    let total = cluster.allocatable();
    let used = cluster.used();
    let (inqueue, inqueue_per_queue) = inqueue_resources(store, str_at(group, "/metadata/uid"));
    // overcommit: inqueue + min <= total x factor - used.
    if let Some(factor) = conf.overcommit_percent() {
        let mut idle = Resources::new();
        for (k, v) in &total {
            idle.insert(k.clone(), v * factor / 100 - used.get(k).copied().unwrap_or(0));
        }
        let mut want = inqueue.clone();
        add(&mut want, min);
        let over = exceeded(&want, &idle, min);
        if !over.is_empty() {
            return Err(format_names("resource in cluster is overused", "overused", &over));
        }
    }
    if conf.queue_plugin().is_none() {
        return Ok(());
    }
    // proportion: a queue that is not open takes nothing (only logged).
    if !state.is_empty() && state != "Open" {
        return Err(String::new());
    }
    let capability = sched::from_quantities(queue.pointer("/spec/capability"));
    let mut real = total.clone();
    for (k, cap) in &capability {
        if matches!(k.as_str(), "cpu" | "memory") && *cap <= 0 {
            continue;
        }
        let t = real.entry(k.clone()).or_insert(*cap);
        *t = (*t).min(*cap);
    }
    let queue_name = str_at(group, "/spec/queue");
    let mut want = min.clone();
    add(&mut want, &sched::queue_usage(store).remove(queue_name).unwrap_or_default());
    add(&mut want, &inqueue_per_queue.get(queue_name).cloned().unwrap_or_default());
    let short = exceeded(&want, &real, min);
    if !short.is_empty() {
        return Err(format_names("queue resource quota insufficient", "insufficient", &short));
    }
    Ok(())
}

/// The allocate action for one enqueued group: binds all its unbound pods or none. `gate` is
/// the queue plugin and the group's queue: a pod is taken only while the queue may allocate
/// it (`Session.Allocatable`: proportion, allocated plus the pod within deserved; capacity,
/// within the real capability; an `Open` queue), and what is bound is added to the queue.
fn allocate(shared: &Arc<Shared>, group: &Value, gate: Option<(&str, Option<&mut QueueAttr>)>) {
    let store = &shared.store;
    let ns = str_at(group, "/metadata/namespace");
    let name = str_at(group, "/metadata/name");
    let min_member = group.pointer("/spec/minMember").and_then(Value::as_u64).unwrap_or(0) as usize;
    let pods = group_pods(store, group);
    let unbound: Vec<&Value> = pods.iter().filter(|p| !bound(p) && str_at(p, "/status/phase") == "Pending").collect();
    if pods.is_empty() {
        return;
    }
    let mut cluster = Cluster::from_store(store);
    let mut placed: Vec<(&Value, String)> = Vec::new();
    let mut failures: BTreeMap<String, String> = BTreeMap::new();
    let (plugin, mut queue) = match gate {
        Some((plugin, queue)) => (plugin, queue),
        None => ("", None),
    };
    let mut taken = Resources::new();
    for pod in &unbound {
        let req = sched::pod_requests(&pod["spec"]);
        if let Some(q) = queue.as_deref() {
            let mut future = q.allocated.clone();
            add(&mut future, &taken);
            add(&mut future, &req);
            let limit = if plugin == "proportion" {
                crate::preempt::with_zeros(&q.deserved, &req)
            } else {
                q.real_capability.clone()
            };
            if !q.open || !share::fits_in(&future, &limit, &req) {
                continue;
            }
        }
        let missing_pvc = pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.pointer("/persistentVolumeClaim/claimName").and_then(Value::as_str))
            .find(|claim| shared.config.missing_pvcs.contains(*claim));
        let result = match missing_pvc {
            // volumebinding's PreFilter (pkg/scheduler/capabilities/volumebinding).
            Some(claim) => Err(format!("persistentvolumeclaim \"{claim}\" not found")),
            None => cluster.place(&pod["spec"]),
        };
        match result {
            Ok(node) => {
                add(&mut taken, &req);
                placed.push((pod, node));
            }
            Err(message) => {
                failures.insert(str_at(pod, "/metadata/name").to_owned(), message);
            }
        }
    }
    let ready = pods.len() - unbound.len();
    if ready + placed.len() >= min_member.max(1) {
        if let Some(q) = queue.as_deref_mut() {
            add(&mut q.allocated, &taken);
        }
        for (pod, node) in &placed {
            let _ = store.update(known::pods(), ns, str_at(pod, "/metadata/name"), |obj| {
                obj["spec"]["nodeName"] = json!(node);
            });
        }
        // jobStatus in pkg/scheduler/framework/session.go: Running once the allocated (bound)
        // and succeeded pods reach minMember.
        let allocated = ready + placed.len();
        let phase = if allocated >= min_member.max(1) { "Running" } else { "Inqueue" };
        set_condition(store, ns, name, phase, None);
        return;
    }
    // gang OnSessionClose and RecordJobStatusEvent.
    let pending = unbound.len();
    let (first_pod, first_error) = failures.iter().next().map(|(p, e)| (p.clone(), e.clone())).unwrap_or_default();
    let mut histogram = [format!("{pending} Pending"), format!("{min_member} minAvailable")];
    histogram.sort();
    // `FitError`: without a task's fit error (the queue refused the tasks) only the histogram.
    let fit = if failures.is_empty() {
        format!("pod group is not ready, {}", histogram.join(", "))
    } else {
        format!(
            "pod group is not ready, {}; Pending: {pending} Unschedulable. Origin reason is {first_pod}: {first_error}",
            histogram.join(", ")
        )
    };
    let unready = min_member.saturating_sub(ready);
    set_condition(
        store,
        ns,
        name,
        "Inqueue",
        Some(&format!("{unready}/{} tasks in gang unschedulable: {fit}", pods.len())),
    );
    events::emit(
        store,
        group,
        "Warning",
        "Unschedulable",
        &format!("{pending}/{} tasks in gang unschedulable: {fit}", pods.len()),
        "volcano",
    );
    for pod in &unbound {
        let pod_name = str_at(pod, "/metadata/name");
        let message = failures.get(pod_name).cloned().unwrap_or_else(|| fit.clone());
        let now = util::now_rfc3339();
        let cond = json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message});
        let updated = store.update(known::pods(), ns, pod_name, |obj| {
            let same = obj.pointer("/status/conditions/0").is_some_and(|c| c["message"] == cond["message"]);
            if !same {
                let mut cond = cond.clone();
                cond["lastTransitionTime"] = json!(now);
                obj["status"]["conditions"] = json!([cond]);
            }
        });
        if let Ok(obj) = updated {
            events::emit(store, &obj, "Warning", "FailedScheduling", &message, "volcano");
        }
    }
}

/// Sets the group's phase and its one gang condition: `Unschedulable` with `message`, or
/// `Scheduled`.
fn set_condition(store: &Store, ns: &str, name: &str, phase: &str, unschedulable: Option<&str>) {
    let _ = store.update(known::podgroups(), ns, name, |pg| {
        pg["status"]["phase"] = json!(phase);
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
            cond["lastTransitionTime"] = json!(util::now_rfc3339());
            cond["transitionID"] = json!(util::new_uid());
            pg["status"]["conditions"] = json!([cond]);
        }
    });
}
