//! The `preempt` action of Volcano v1.15.1 (pkg/scheduler/actions/preempt/preempt.go
//! `Execute`, `preempt`, `normalPreempt`; read, not run), and the statement both it and
//! `reclaim` work in.
//!
//! Queue by queue (the queue order), the starving jobs whose PodGroup is past `Pending` (the
//! job order) try to place their pending tasks (task priority order): a task whose
//! `preemptionPolicy` is `Never` preempts nothing (`taskEligibleToPreempt`); on each node whose
//! predicates admit it, the running tasks of other jobs of the same queue are the preemptees,
//! the tiers vote on them (`Session.Preemptable`: `priority` keeps those of a lower job
//! priority, `gang` with `enablePreemptable` only those beyond the job's `minAvailable`,
//! `conformance` drops critical pods and kube-system's), and the lowest victims are evicted
//! until the queue may allocate the task and it fits the node's future idle (idle plus what is
//! being released); the task is then pipelined there. The job's evictions are committed only
//! when the job is pipelined (`JobPipelined`: gang's ready plus pipelined tasks reach
//! `minAvailable`), else discarded. The preemptor is bound by a later `allocate` once the
//! victims have released their resources.
//!
//! Divergences: nodes are tried in their order, not by node scores; topology-aware preemption
//! and preemption between tasks of one job are not modelled.

use std::collections::{BTreeMap, HashSet};

use crate::discovery::known;
use crate::evict;
use crate::order::{NodeState, Snapshot, TaskState};
use crate::sched::Resources;
use crate::schedconf::{Eviction, SchedulerConf, vote};
use crate::share::{self, QueueAttr};
use crate::store::Store;

/// A `Statement`: evictions and pipelines of one job, committed or discarded together.
pub(crate) struct Statement {
    pub(crate) nodes: Vec<(Resources, Resources)>,
    pub(crate) queues: BTreeMap<String, QueueAttr>,
    pub(crate) ready: Vec<usize>,
    pub(crate) evicted: Vec<usize>,
    pub(crate) pipelined: usize,
}

impl Statement {
    /// Opens a statement over the snapshot's current state.
    pub(crate) fn open(snap: &Snapshot) -> Statement {
        Statement {
            nodes: snap.nodes.iter().map(|n| (n.releasing.clone(), n.pipelined.clone())).collect(),
            queues: snap.queues.clone(),
            ready: snap.ready.clone(),
            evicted: Vec::new(),
            pipelined: 0,
        }
    }

    fn future_idle(&self, node: &NodeState, i: usize) -> Resources {
        let mut idle = node.alloc.clone();
        share::sub(&mut idle, &node.used);
        share::add(&mut idle, &self.nodes[i].0);
        share::sub(&mut idle, &self.nodes[i].1);
        idle
    }

    /// Evicts task `t` in the statement: its node releases it, its queue and job hold less.
    pub(crate) fn evict(&mut self, snap: &Snapshot, t: usize) {
        let task = &snap.tasks[t];
        if let Some(n) = task.node {
            share::add(&mut self.nodes[n].0, &task.req);
        }
        if let Some(q) = self.queues.get_mut(&snap.jobs[task.job].queue) {
            share::sub(&mut q.allocated, &task.req);
        }
        self.ready[task.job] = self.ready[task.job].saturating_sub(1);
        self.evicted.push(t);
    }

    /// Pipelines task `t` on node `n`.
    pub(crate) fn pipeline(&mut self, snap: &Snapshot, t: usize, n: usize) {
        let task = &snap.tasks[t];
        share::add(&mut self.nodes[n].1, &task.req);
        if let Some(q) = self.queues.get_mut(&snap.jobs[task.job].queue) {
            share::add(&mut q.allocated, &task.req);
        }
        self.pipelined += 1;
    }

    /// Whether task `t` fits node `n`'s future idle resources.
    pub(crate) fn fits(&self, snap: &Snapshot, t: usize, n: usize) -> bool {
        let req = &snap.tasks[t].req;
        let idle = self.future_idle(&snap.nodes[n], n);
        req.iter().filter(|(_, v)| **v > 0).all(|(k, v)| idle.get(k).copied().unwrap_or(0) >= *v)
    }

    /// Whether the evicted tasks and `victims` together would make room for `t` on `n`
    /// (`ValidateVictims`).
    /// On node `n`, evicts `victims` (the lowest first) until task `t` fits there and `room`
    /// (what the action asks of the task's queue) holds, then pipelines `t` there. When they
    /// cannot make room, this node's evictions are discarded. Whether `t` was placed.
    pub(crate) fn evict_for(
        &mut self,
        snap: &Snapshot,
        t: usize,
        n: usize,
        mut victims: Vec<usize>,
        room: impl Fn(&Statement) -> bool,
    ) -> bool {
        if victims.is_empty() || !self.victims_make_room(snap, t, n, &victims) {
            return false;
        }
        snap.sort_victims(&mut victims);
        let before = self.evicted.len();
        let saved = (self.nodes[n].clone(), self.queues.clone(), self.ready.clone());
        for v in victims {
            if room(self) && self.fits(snap, t, n) {
                break;
            }
            self.evict(snap, v);
        }
        if room(self) && self.fits(snap, t, n) {
            self.pipeline(snap, t, n);
            return true;
        }
        self.evicted.truncate(before);
        (self.nodes[n], self.queues, self.ready) = saved;
        false
    }

    pub(crate) fn victims_make_room(&self, snap: &Snapshot, t: usize, n: usize, victims: &[usize]) -> bool {
        let mut idle = self.future_idle(&snap.nodes[n], n);
        for v in victims {
            share::add(&mut idle, &snap.tasks[*v].req);
        }
        snap.tasks[t].req.iter().filter(|(_, v)| **v > 0).all(|(k, v)| idle.get(k).copied().unwrap_or(0) >= *v)
    }

    /// Makes the statement the snapshot's state and evicts its tasks in the store.
    pub(crate) fn commit(self, store: &Store, snap: &mut Snapshot, reason: &str) {
        for (i, (releasing, pipelined)) in self.nodes.into_iter().enumerate() {
            snap.nodes[i].releasing = releasing;
            snap.nodes[i].pipelined = pipelined;
        }
        snap.queues = self.queues;
        snap.ready = self.ready;
        for t in self.evicted {
            let task = &mut snap.tasks[t];
            task.state = TaskState::Releasing;
            let group = store.get(known::podgroups(), &task.ns, &snap.jobs[task.job].name).ok();
            evict::evict(store, &task.pod, group.as_ref(), reason);
        }
    }
}

/// `JobStarving` over the tiers: `gang` (ready plus pipelined below `minAvailable`) and
/// `priority` (below the job's task count) must both say so; without either plugin no job
/// starves.
/// The starving jobs past `Pending` of known queues, both actions' preemptors and
/// reclaimers: per queue in the queue order, each queue's jobs in the job order.
pub(crate) fn starving_by_queue(conf: &SchedulerConf, snap: &Snapshot) -> Vec<(String, Vec<usize>)> {
    let candidates: Vec<usize> = (0..snap.jobs.len())
        .filter(|j| !matches!(snap.jobs[*j].phase.as_str(), "" | "Pending"))
        .filter(|j| snap.queues.contains_key(&snap.jobs[*j].queue))
        .filter(|j| starving(conf, snap, snap.ready[*j], *j))
        .collect();
    let mut queues: Vec<String> = candidates.iter().map(|j| snap.jobs[*j].queue.clone()).collect();
    queues.sort();
    queues.dedup();
    queues.sort_by(|a, b| snap.queue_order(a, b));
    queues
        .into_iter()
        .map(|queue| {
            let mut jobs: Vec<usize> = candidates.iter().copied().filter(|j| snap.jobs[*j].queue == queue).collect();
            jobs.sort_by(|a, b| snap.job_order(*a, *b));
            (queue, jobs)
        })
        .collect()
}

pub(crate) fn starving(conf: &SchedulerConf, snap: &Snapshot, have: usize, job: usize) -> bool {
    let gang = conf.plugin("gang").is_some();
    let priority = conf.plugin("priority").is_some();
    let tasks = snap.jobs[job].tasks.iter().filter(|t| snap.tasks[**t].state != TaskState::Gone).count();
    (gang || priority) && (!gang || have < snap.jobs[job].min_member) && (!priority || have < tasks)
}

/// `JobPipelined`: gang's ready plus pipelined tasks reach `minAvailable` (permitted without gang).
pub(crate) fn pipelined(conf: &SchedulerConf, snap: &Snapshot, st: &Statement, job: usize) -> bool {
    conf.plugin("gang").is_none() || st.ready[job] + st.pipelined >= snap.jobs[job].min_member
}

/// Whether the queue may take task `t` (`Session.Allocatable`: proportion against deserved,
/// capacity against its real capability; both need an `Open` queue).
pub(crate) fn allocatable(conf: &SchedulerConf, snap: &Snapshot, st: &Statement, t: usize) -> bool {
    let task = &snap.tasks[t];
    let Some(q) = st.queues.get(&snap.jobs[task.job].queue) else { return true };
    let mut future = q.allocated.clone();
    share::add(&mut future, &task.req);
    match conf.queue_plugin() {
        Some("proportion") => q.open && share::fits_in(&future, &with_zeros(&q.deserved, &task.req), &task.req),
        Some(_) => q.open && share::fits_in(&future, &q.real_capability, &task.req),
        None => true,
    }
}

/// `limit` with a zero for every dimension of `req` it lacks (a deserved share that does not
/// name a resource grants none of it).
pub(crate) fn with_zeros(limit: &Resources, req: &Resources) -> Resources {
    let mut out = limit.clone();
    for k in req.keys() {
        out.entry(k.clone()).or_insert(0);
    }
    out
}

/// The gang plugin's vote (`preemptableFn`, also its `ReclaimableFn`): a task only while its
/// job keeps more ready tasks than `minAvailable`.
pub(crate) fn gang_vote(snap: &Snapshot, st: &Statement, preemptees: &[usize]) -> Vec<usize> {
    let mut occupied: BTreeMap<usize, usize> = BTreeMap::new();
    let mut victims = Vec::new();
    for &t in preemptees {
        let job = snap.tasks[t].job;
        let left = occupied.entry(job).or_insert(st.ready[job]);
        if *left > snap.jobs[job].min_member {
            *left -= 1;
            victims.push(t);
        }
    }
    victims
}

/// Runs the action over the snapshot.
pub(crate) fn run(store: &Store, conf: &SchedulerConf, snap: &mut Snapshot) {
    for (_, jobs) in starving_by_queue(conf, snap) {
        for job in jobs {
            let mut st = Statement::open(snap);
            for t in snap.pending_tasks(job) {
                if !starving(conf, snap, st.ready[job] + st.pipelined, job) {
                    break;
                }
                // taskEligibleToPreempt: `preemptionPolicy: Never` preempts nothing.
                if snap.tasks[t].never_preempts {
                    continue;
                }
                preempt_task(conf, snap, &mut st, t);
            }
            if st.pipelined > 0 && pipelined(conf, snap, &st, job) {
                st.commit(store, snap, "preempt");
            }
        }
    }
}

/// `preempt`/`normalPreempt` for one task: the first node where evicting victims makes room.
fn preempt_task(conf: &SchedulerConf, snap: &Snapshot, st: &mut Statement, t: usize) {
    let preemptor = &snap.tasks[t];
    let job = &snap.jobs[preemptor.job];
    let evicted: HashSet<usize> = st.evicted.iter().copied().collect();
    for (n, node) in snap.nodes.iter().enumerate() {
        if !node.admits(&preemptor.pod["spec"]) {
            continue;
        }
        let preemptees: Vec<usize> = snap.on_node[n]
            .iter()
            .copied()
            .filter(|i| snap.tasks[*i].state == TaskState::Bound && !evicted.contains(i))
            .filter(|i| {
                let v = &snap.tasks[*i];
                v.preemptable && v.job != preemptor.job && snap.jobs[v.job].queue == job.queue
            })
            .collect();
        let victims = vote(conf, Eviction::Preempt, |plugin| match plugin {
            "priority" => Some(
                preemptees.iter().copied().filter(|v| snap.jobs[snap.tasks[*v].job].priority < job.priority).collect(),
            ),
            "gang" => Some(gang_vote(snap, st, &preemptees)),
            "conformance" => Some(preemptees.iter().copied().filter(|v| !snap.tasks[*v].critical).collect()),
            _ => None,
        });
        if st.evict_for(snap, t, n, victims, |st| allocatable(conf, snap, st, t)) {
            return;
        }
    }
}
