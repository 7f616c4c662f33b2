//! The `reclaim` action of Volcano v1.15.1 (pkg/scheduler/actions/reclaim/reclaim.go `Execute`
//! and `reclaimForTask`; read, not run): a queue that is not overused (proportion:
//! `deserved <= allocated` on every dimension) takes back, for the pending tasks of its starving
//! jobs, what other queues hold beyond their deserved share.
//!
//! Per task: `preemptionPolicy: Never` reclaims nothing; the queue must be able to take the
//! task (`Preemptive`: proportion, allocated plus the task within deserved; capacity, within the
//! real capability and under deserved on some dimension); on each node whose predicates admit
//! the task, the running, preemptable tasks of other queues whose `spec.reclaimable` is not
//! false are the reclaimees; the tiers vote (`Session.Reclaimable`: `gang` keeps tasks beyond
//! `minAvailable`, `conformance` drops critical pods; an empty vote ends only its tier;
//! `proportion` keeps tasks while their queue's allocated exceeds its deserved; `capacity`
//! also never takes a queue below its `guarantee`), and the lowest victims are evicted until
//! the task fits the node's future idle; it is then pipelined. A job's evictions are committed
//! only when it is pipelined.
//!
//! Divergences: nodes are tried in their order; capacity's hierarchy, its ancestor reclaim and
//! `shouldSkipReclaimee` (reclaimees without a dimension the reclaimer asks for) are not
//! modelled.

use crate::order::{Snapshot, TaskState};
use crate::preempt::{Statement, gang_vote, pipelined, starving, starving_by_queue, with_zeros};
use crate::sched::Resources;
use crate::schedconf::{Eviction, SchedulerConf, vote};
use crate::share;
use crate::store::Store;

/// Runs the action over the snapshot.
pub(crate) fn run(store: &Store, conf: &SchedulerConf, snap: &mut Snapshot) {
    for (queue, jobs) in starving_by_queue(conf, snap) {
        // Only proportion has an `OverusedFn`.
        if conf.queue_plugin() == Some("proportion") && snap.queues.get(&queue).is_some_and(|q| q.overused()) {
            continue;
        }
        for job in jobs {
            let mut st = Statement::open(snap);
            for t in snap.pending_tasks(job) {
                if !starving(conf, snap, st.ready[job] + st.pipelined, job) {
                    break;
                }
                if snap.tasks[t].never_preempts || !preemptive(conf, &st, &queue, &snap.tasks[t].req) {
                    continue;
                }
                reclaim_task(conf, snap, &mut st, t);
            }
            if st.pipelined > 0 && pipelined(conf, snap, &st, job) {
                st.commit(store, snap, "reclaim");
            }
        }
    }
}

/// `Session.Preemptive` of the reclaiming queue for one task.
fn preemptive(conf: &SchedulerConf, st: &Statement, queue: &str, req: &Resources) -> bool {
    let Some(q) = st.queues.get(queue) else { return false };
    let mut future = q.allocated.clone();
    share::add(&mut future, req);
    match conf.queue_plugin() {
        Some("proportion") => q.open && share::fits_in(&future, &with_zeros(&q.deserved, req), req),
        Some(_) => {
            q.open
                && share::fits_in(&future, &q.real_capability, req)
                && req
                    .iter()
                    .filter(|(_, v)| **v > 0)
                    .any(|(k, _)| future.get(k).copied().unwrap_or(0) <= q.deserved.get(k).copied().unwrap_or(0))
        }
        None => true,
    }
}

/// `reclaimForTask`: the first node where evicting victims of other queues makes room.
fn reclaim_task(conf: &SchedulerConf, snap: &Snapshot, st: &mut Statement, t: usize) {
    let task = &snap.tasks[t];
    let queue = &snap.jobs[task.job].queue;
    let evicted: std::collections::HashSet<usize> = st.evicted.iter().copied().collect();
    for (n, node) in snap.nodes.iter().enumerate() {
        if !node.admits(&task.pod["spec"]) {
            continue;
        }
        let reclaimees: Vec<usize> = snap.on_node[n]
            .iter()
            .copied()
            .filter(|i| !evicted.contains(i))
            .filter(|i| {
                let v = &snap.tasks[*i];
                let vq = &snap.jobs[v.job].queue;
                v.state == TaskState::Bound
                    && v.pod.pointer("/status/phase").and_then(|p| p.as_str()) == Some("Running")
                    && v.preemptable
                    && vq != queue
                    && st.queues.get(vq).is_some_and(|q| q.reclaimable)
            })
            .collect();
        if reclaimees.is_empty() {
            continue;
        }
        let victims = vote(conf, Eviction::Reclaim, |plugin| match plugin {
            "gang" => Some(gang_vote(snap, st, &reclaimees)),
            "conformance" => Some(reclaimees.iter().copied().filter(|v| !snap.tasks[*v].critical).collect()),
            "proportion" | "capacity" => Some(queue_vote(snap, st, &reclaimees, plugin == "capacity")),
            _ => None,
        });
        if st.evict_for(snap, t, n, victims, |_| true) {
            return;
        }
    }
}

/// proportion's (and capacity's) `ReclaimableFn`: a task while its queue, less the victims
/// chosen before it, still holds more than it deserves; capacity also keeps the queue at its
/// guarantee.
fn queue_vote(snap: &Snapshot, st: &Statement, reclaimees: &[usize], capacity: bool) -> Vec<usize> {
    let mut allocations: std::collections::BTreeMap<&str, Resources> = Default::default();
    let mut victims = Vec::new();
    for &v in reclaimees {
        let task = &snap.tasks[v];
        let qname = snap.jobs[task.job].queue.as_str();
        let Some(attr) = st.queues.get(qname) else { continue };
        let allocated = allocations.entry(qname).or_insert_with(|| attr.allocated.clone());
        if capacity {
            let mut after = allocated.clone();
            share::sub(&mut after, &task.req);
            let keeps_guarantee = attr.guarantee.iter().all(|(k, g)| after.get(k).copied().unwrap_or(0) >= *g);
            let over = task
                .req
                .iter()
                .filter(|(_, r)| **r > 0)
                .any(|(k, _)| allocated.get(k).copied().unwrap_or(0) > attr.deserved.get(k).copied().unwrap_or(0));
            if keeps_guarantee && over {
                *allocated = after;
                victims.push(v);
            }
        } else if !share::less_equal(allocated, &attr.deserved) {
            share::sub(allocated, &task.req);
            victims.push(v);
        }
    }
    victims
}
