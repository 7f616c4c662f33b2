//! The enqueue action (pkg/scheduler/actions/enqueue/enqueue.go; read, not run): a `Pending`
//! PodGroup becomes `Inqueue` when the configured `jobEnqueueableFn`s admit its
//! `minResources` (see `scheduler` for the rules and their wording).

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::discovery::known;
use crate::events;
use crate::jobpods::str_at;
use crate::sched::{self, Cluster, Resources};
use crate::schedconf::SchedulerConf;
use crate::selector::Selectors;
use crate::share::{self, add};
use crate::store::Store;

/// The pods of a group: in its namespace, annotated with its name.
pub(crate) fn group_pods(store: &Store, group: &Value) -> Vec<Value> {
    let name = str_at(group, "/metadata/name");
    let (pods, _) = store.list(known::pods(), Some(str_at(group, "/metadata/namespace")), &Selectors::default());
    pods.into_iter()
        .filter(|p| str_at(p, "/metadata/annotations/scheduling.k8s.io~1group-name") == name)
        .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
        .collect()
}

pub(crate) fn bound(pod: &Value) -> bool {
    !str_at(pod, "/spec/nodeName").is_empty()
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
pub(crate) fn enqueue(store: &Store, conf: &SchedulerConf, group: &Value) {
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
    // The real capability: the cluster less every queue's guarantee, plus this queue's.
    let (queues, _) = store.list(known::queues(), None, &Selectors::default());
    let mut guarantees = Resources::new();
    for q in &queues {
        add(&mut guarantees, &sched::from_quantities(q.pointer("/spec/guarantee/resource")));
    }
    let mut real = share::exceeded_part(&total, &guarantees);
    add(&mut real, &sched::from_quantities(queue.pointer("/spec/guarantee/resource")));
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
