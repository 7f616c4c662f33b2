//! One Volcano scheduler session over every PodGroup, running the actions of
//! [`crate::SimConfig::scheduler`] in order (`volcano-scheduler.conf`; by default the 1.15
//! chart's `actions: "enqueue, allocate, backfill"`, see `schedconf`). Shared clusters add
//! `preempt` (`preempt.rs`) and `reclaim` (`reclaim.rs`); their evictions are `evict.rs`'s.
//!
//! - enqueue (pkg/scheduler/actions/enqueue/enqueue.go): queue by queue (`order.rs`), jobs in
//!   the job order (priority, then creation), a `Pending` PodGroup becomes `Inqueue` when the
//!   configured `jobEnqueueableFn`s of pkg/scheduler/plugins/overcommit (cluster allocatable x
//!   the `overcommit-factor`, 1.2 by default, minus what is used and what other enqueued
//!   groups still need) and of the queue plugin (the queue's real capability: the cluster less
//!   every queue's `guarantee` plus its own, at most its `capability`) admit its
//!   `minResources`; a rejection is a `Normal` `Unschedulable` event on the PodGroup
//!   (`resource in cluster is overused: overused <res>` or `queue resource quota insufficient:
//!   insufficient <res>`). Every session also records `RecordJobStatusEvent`'s `Warning`
//!   `Unschedulable` event for a group still pending (`0/0 tasks in gang unschedulable: pod group
//!   is not ready, N minAvailable` when it has no pods). A group that is not enqueued gets no
//!   condition: the gang plugin skips jobs without tasks (`OnSessionClose` in plugins/gang).
//!   Without an enqueue action, allocate moves `Pending` groups to `Inqueue` itself
//!   (allocate.go `Execute`).
//! - allocate: queue by queue in the queue order (queue `spec.priority`, then the smaller share
//!   of its deserved), jobs in the job order (`priority` plugin: the PodGroup's PriorityClass
//!   value; `gang`: a job not yet ready first; then creation time), the pods of an enqueued group
//!   are bound all together once all fit, or none are. A pod is taken only while its queue may
//!   allocate it (`Session.Allocatable`: proportion, allocated plus the pod within the queue's
//!   deserved share; capacity, within its real capability), and on the first node with room
//!   whose labels and taints the pod's `nodeSelector`, required node affinity and tolerations
//!   accept (the `predicates` plugin, see [`crate::sched::Cluster::place`]). A gang that does not
//!   fit but would once the pods being deleted are gone is pipelined: what it needs is held from
//!   the jobs after it in the session. A group that does not fit gets the gang plugin's
//!   `Unschedulable` condition with the job's fit error (`0/N nodes are unavailable: 2 node(s)
//!   didn't match Pod's node affinity/selector.`), its pods `PodScheduled=False` and a
//!   `FailedScheduling` event (`taskUnschedulable` in pkg/scheduler/cache/cache.go). A claim named
//!   in [`crate::SimConfig::missing_pvcs`] fails volume binding's PreFilter with
//!   `persistentvolumeclaim "<name>" not found`.
//! - backfill: accepted and does nothing of its own; allocate already places pods without
//!   requests.
//!
//! Divergences: resources compare per dimension with the job's dimensions only, as Volcano's
//! `LessEqualWithDimensionAndResourcesName` does; nodes are tried first fit, not by the
//! `nodeorder`/`binpack` scores (placement is the same whenever one node's worth of room is
//! what decides, as in these scenarios); hierarchical queues, elastic resources, `drf`, `sla`,
//! `tdm`, the `gangpreempt`/`gangreclaim` actions and network topology are not modelled (the
//! conf refuses actions it does not run); a queue that is overused is not skipped as a whole by
//! allocate, each pod is checked against it instead; the fit error's task histogram is
//! simplified. Followed from the source, read, not run.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::Shared;
use crate::discovery::known;
use crate::enqueue::{bound, group_pods};
use crate::events;
use crate::jobpods::str_at;
use crate::order::Snapshot;
use crate::sched::{self, Cluster, Resources};
use crate::selector::Selectors;
use crate::share::{self, QueueAttr, add};
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
        let build = |store: &Store| {
            let mut snap = Snapshot::build(store, conf);
            snap.set_seen(&self.first_seen);
            snap
        };
        for action in &conf.actions {
            match action.as_str() {
                "enqueue" if groups.iter().any(|g| matches!(phase_of(g).as_str(), "" | "Pending")) => {
                    let mut snap = build(store);
                    for j in snap.allocation_order(&["", "Pending"]) {
                        let job = &snap.jobs[j];
                        if held.contains(&job.uid) {
                            continue;
                        }
                        if let Ok(group) = store.get(known::podgroups(), &job.ns, &job.name) {
                            crate::enqueue::enqueue(store, conf, &group);
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
                    // Only groups with pods to bind take part: a pass over a cluster whose pods
                    // are all bound reads the pods once.
                    let waiting = waiting_groups(store);
                    if waiting.is_empty() {
                        continue;
                    }
                    let mut snap = build(store);
                    let order = snap.allocation_order(&["Inqueue", "Running"]);
                    let mut queues = snap.queues.clone();
                    let mut pipelined = Vec::new();
                    for j in order {
                        let job = &snap.jobs[j];
                        if held.contains(&job.uid) || !waiting.contains(&(job.ns.clone(), job.name.clone())) {
                            continue;
                        }
                        // Re-read: an earlier group of this session may have changed what is free.
                        if let Ok(group) = store.get(known::podgroups(), &job.ns, &job.name) {
                            let gate = conf.queue_plugin().map(|plugin| (plugin, queues.get_mut(&job.queue)));
                            allocate(shared, &group, gate, &mut pipelined);
                        }
                    }
                }
                // Preemptors and reclaimers are jobs with pods to bind.
                "preempt" if !waiting_groups(store).is_empty() => {
                    crate::preempt::run(store, conf, &mut build(store));
                }
                "reclaim" if !waiting_groups(store).is_empty() => {
                    crate::reclaim::run(store, conf, &mut build(store));
                }
                _ => {}
            }
        }
    }
}

/// The (namespace, PodGroup) of every pod waiting to be bound.
fn waiting_groups(store: &Store) -> HashSet<(String, String)> {
    let (pods, _) = store.list(known::pods(), None, &Selectors::default());
    pods.iter()
        .filter(|p| !bound(p) && str_at(p, "/status/phase") == "Pending")
        .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
        .map(|p| {
            let group = str_at(p, "/metadata/annotations/scheduling.k8s.io~1group-name");
            (str_at(p, "/metadata/namespace").to_owned(), group.to_owned())
        })
        .filter(|(_, group)| !group.is_empty())
        .collect()
}

/// The allocate action for one enqueued group: binds all its unbound pods or none. `gate` is
/// the queue plugin and the group's queue: a pod is taken only while the queue may allocate
/// it (`Session.Allocatable`: proportion, allocated plus the pod within deserved; capacity,
/// within the real capability; an `Open` queue), and what is bound is added to the queue.
///
/// A gang that does not fit what is idle but fits what is idle once pods being deleted are
/// gone is pipelined (allocate.go: tasks placed on `FutureIdle` are `Pipelined`): what it
/// would take is added to `pipelined` and held from the groups after it in this session.
fn allocate(
    shared: &Arc<Shared>,
    group: &Value,
    gate: Option<(&str, Option<&mut QueueAttr>)>,
    pipelined: &mut Vec<(String, Resources)>,
) {
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
    for (node, req) in pipelined.iter() {
        cluster.reserve(node, req);
    }
    let mut placed: Vec<(&Value, String)> = Vec::new();
    let mut failures: BTreeMap<String, String> = BTreeMap::new();
    let (plugin, queue) = match gate {
        Some((plugin, queue)) => (plugin, queue),
        None => ("", None),
    };
    let mut taken = Resources::new();
    let mut gated = false;
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
                gated = true;
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
        if let Some(q) = queue {
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
    // A gang a missing claim holds back waits for no resources.
    let claim_missing = failures.values().any(|m| m.starts_with("persistentvolumeclaim "));
    if !gated && !claim_missing {
        pipeline(store, &unbound, ready, min_member, pipelined);
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

/// Holds what the gang would take on the nodes' future idle resources when it fits there.
fn pipeline(
    store: &Store,
    unbound: &[&Value],
    ready: usize,
    min_member: usize,
    pipelined: &mut Vec<(String, Resources)>,
) {
    let mut future = Cluster::from_store_future(store, true);
    for (node, req) in pipelined.iter() {
        future.reserve(node, req);
    }
    let mut held = Vec::new();
    for pod in unbound {
        if let Ok(node) = future.place(&pod["spec"]) {
            held.push((node, sched::pod_requests(&pod["spec"])));
        }
    }
    if ready + held.len() >= min_member.max(1) {
        pipelined.extend(held);
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
