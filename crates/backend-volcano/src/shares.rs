//! Where a request stands among a Volcano cluster's queues, from typed snapshots of the queues,
//! the PodGroups, the PriorityClasses and the nodes ([`Snapshot`]) to a verdict and a row per
//! queue ([`weigh`]). One resource is weighed: the request's (the host's GPU key).
//!
//! What it follows, read in Volcano v1.15.1 (not run against a real scheduler):
//! - `pkg/scheduler/plugins/proportion/proportion.go`, `OnSessionOpen`: a queue's deserved share
//!   is water-filled from the cluster's total by weight, each round capped by the queue's real
//!   capability (`capability`, and the total minus the other queues' guarantees) and by its
//!   request (allocated plus pending), and never below its `guarantee`; only queues with jobs
//!   take part. Its `AllocatableFn`/`PreemptiveFn` (`queueAllocatable`): a queue takes a task
//!   only while allocated plus the task stays within deserved. `ReclaimableFn`: victims come
//!   from queues whose allocated exceeds deserved.
//! - `pkg/scheduler/plugins/capacity/capacity.go`: deserved is `spec.deserved` (unset: 0); a
//!   queue allocates up to its real capability, may reclaim while allocated plus the request
//!   stays within deserved, and loses tasks only above deserved and never below `guarantee`.
//! - `pkg/scheduler/actions/reclaim/reclaim.go`, `Execute`/`reclaimForTask`: an overused queue
//!   reclaims nothing; a task whose `preemptionPolicy` is `Never` reclaims nothing; victims are
//!   running tasks of other queues that are `Reclaimable()` (`spec.reclaimable` absent: true).
//! - `pkg/scheduler/actions/preempt/preempt.go`, `normalPreempt`/`taskEligibleToPreempt`:
//!   victims are running tasks of other jobs of the same queue with a lower priority (the
//!   priority plugin's `PreemptableFn`); `preemptionPolicy: Never` preempts nothing. Volcano's
//!   documented action order runs preempt before reclaim, and so is this verdict's.
//!
//! Which plugin a cluster runs is in the scheduler's ConfigMap, which users rarely may read: a
//! cluster whose queues set `spec.deserved` is taken to run `capacity`, else `proportion`, and
//! the report says so.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use std::collections::BTreeMap;

use theseus_core::shares::{QueueRow, QueueShares, ShareVerdict, Taken, Victim, show};

/// Below this, two amounts are equal.
const EPS: f64 = 1e-9;

/// One queue, as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSnap {
    /// Name.
    pub name: String,
    /// `status.state`.
    pub state: Option<String>,
    /// `spec.weight` (absent: 1).
    pub weight: u32,
    /// `spec.capability[resource]`.
    pub capability: Option<f64>,
    /// `spec.deserved[resource]`.
    pub deserved: Option<f64>,
    /// `spec.guarantee.resource[resource]`.
    pub guarantee: Option<f64>,
    /// `spec.reclaimable` (absent: true).
    pub reclaimable: bool,
    /// `status.allocated[resource]`.
    pub allocated: f64,
}

/// One PodGroup (a job), as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupSnap {
    /// Namespace.
    pub namespace: String,
    /// The job's name (the group's owner; else the group's own name).
    pub name: String,
    /// `spec.queue`.
    pub queue: String,
    /// `spec.priorityClassName`.
    pub priority_class: Option<String>,
    /// `status.phase`.
    pub phase: String,
    /// `spec.minResources[resource]`: what the gang holds once running, or needs to start.
    pub need: f64,
}

impl GroupSnap {
    fn pending(&self) -> bool {
        matches!(self.phase.as_str(), "Pending" | "Inqueue" | "")
    }

    fn running(&self) -> bool {
        matches!(self.phase.as_str(), "Running" | "Unknown")
    }
}

/// One PriorityClass, as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClassSnap {
    /// Name.
    pub name: String,
    /// `value`.
    pub value: i32,
    /// `globalDefault`.
    pub global_default: bool,
    /// `preemptionPolicy: Never`.
    pub never: bool,
}

/// What theseus could read; `None`: RBAC refused it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The resource weighed.
    pub resource: String,
    /// Every queue.
    pub queues: Option<Vec<QueueSnap>>,
    /// PodGroups.
    pub groups: Option<Vec<GroupSnap>>,
    /// `Some(namespace)` when only the groups of that namespace could be read.
    pub groups_only_in: Option<String>,
    /// Every PriorityClass.
    pub classes: Option<Vec<ClassSnap>>,
    /// The usable nodes' allocatable and free amounts, in all.
    pub nodes: Option<(f64, f64)>,
}

/// The request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ask {
    /// Its queue.
    pub queue: String,
    /// How much of the resource, in all.
    pub amount: f64,
    /// Its PriorityClass.
    pub priority_class: Option<String>,
}

/// The sharing rule the cluster is taken to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Model {
    Proportion,
    Capacity,
}

/// A queue's numbers once the request is counted in its queue.
#[derive(Debug, Clone, Default)]
struct Attr {
    deserved: Option<f64>,
    /// What the queue may allocate up to (proportion: deserved; capacity: real capability).
    limit: Option<f64>,
    pending: Option<f64>,
}

/// The verdict and the table for `ask` among the queues of `snap`.
pub fn weigh(snap: &Snapshot, ask: &Ask) -> QueueShares {
    let mut unknown = Vec::new();
    let empty = |model: &str, verdict| QueueShares {
        resource: snap.resource.clone(),
        queue: ask.queue.clone(),
        model: model.to_owned(),
        verdict,
        queues: Vec::new(),
        unknown: Vec::new(),
    };
    let Some(queues) = &snap.queues else {
        let reason = "the queues cannot be read (RBAC: listing queues.scheduling.volcano.sh needs a ClusterRole)";
        let mut out = empty("unknown", ShareVerdict::Unknown { reason: reason.into() });
        out.unknown.push(format!("{reason}: capability, deserved, guarantee and allocated of every queue"));
        return out;
    };
    let model = if queues.iter().any(|q| q.deserved.is_some()) { Model::Capacity } else { Model::Proportion };
    let model_text = match model {
        Model::Capacity => "capacity (a queue sets spec.deserved: each queue's share is its deserved)",
        Model::Proportion => "proportion (no queue sets spec.deserved: shares are water-filled by weight)",
    };
    match &snap.groups_only_in {
        _ if snap.groups.is_none() => unknown.push(
            "the PodGroups cannot be read (RBAC): pending work, priority classes and preemptible jobs of every queue"
                .to_owned(),
        ),
        Some(ns) => unknown.push(format!(
            "only the PodGroups of namespace {ns:?} can be read (RBAC): jobs of other namespaces are not counted in \
             pending work, priority classes or preemptible jobs"
        )),
        None => {}
    }
    if snap.classes.is_none() {
        unknown.push("the PriorityClasses cannot be read (RBAC): job priorities are not known".to_owned());
    }
    if snap.nodes.is_none() {
        unknown.push(format!("the nodes cannot be read (RBAC): free and total {} are not known", snap.resource));
    }
    let attrs = attributes(snap, queues, ask, model);
    let rows = rows(snap, queues, &attrs);
    let verdict = match queues.iter().find(|q| q.name == ask.queue) {
        None => ShareVerdict::Unknown { reason: format!("queue {:?} is not among the queues read", ask.queue) },
        Some(mine) => verdict(snap, queues, &attrs, mine, ask, model),
    };
    QueueShares {
        resource: snap.resource.clone(),
        queue: ask.queue.clone(),
        model: model_text.to_owned(),
        verdict,
        queues: rows,
        unknown,
    }
}

/// Deserved and limit per queue, the request counted in its queue.
fn attributes(snap: &Snapshot, queues: &[QueueSnap], ask: &Ask, model: Model) -> BTreeMap<String, Attr> {
    let pending = |q: &str| {
        snap.groups.as_ref().map(|gs| gs.iter().filter(|g| g.queue == q && g.pending()).map(|g| g.need).sum::<f64>())
    };
    let total_guarantee: f64 = queues.iter().filter_map(|q| q.guarantee).sum();
    // realCapability: the capability, within the total less the other queues' guarantees.
    let real_cap = |q: &QueueSnap| {
        let within = snap.nodes.map(|(total, _)| (total - total_guarantee).max(0.0) + q.guarantee.unwrap_or(0.0));
        match (q.capability, within) {
            (Some(c), Some(w)) => Some(c.min(w)),
            (c, w) => c.or(w),
        }
    };
    let mut out: BTreeMap<String, Attr> = BTreeMap::new();
    match model {
        Model::Capacity => {
            for q in queues {
                let deserved = Some(q.deserved.unwrap_or(0.0).max(q.guarantee.unwrap_or(0.0)));
                out.insert(q.name.clone(), Attr { deserved, limit: real_cap(q), pending: pending(&q.name) });
            }
        }
        Model::Proportion => {
            // Requests: allocated plus pending, the ask counted in its queue.
            let request = |q: &QueueSnap| {
                let mut r = q.allocated + pending(&q.name).unwrap_or(0.0);
                if q.name == ask.queue {
                    r += ask.amount;
                }
                r
            };
            let deserved = snap.nodes.map(|(total, _)| water_fill(queues, total, &request, &real_cap));
            for q in queues {
                let d = deserved.as_ref().map(|d| d.get(&q.name).copied().unwrap_or(q.guarantee.unwrap_or(0.0)));
                out.insert(q.name.clone(), Attr { deserved: d, limit: d, pending: pending(&q.name) });
            }
        }
    }
    out
}

/// proportion's rounds: each queue still wanting gets the remaining total by weight, capped by
/// its real capability and its request, never below its guarantee.
fn water_fill(
    queues: &[QueueSnap],
    total: f64,
    request: &dyn Fn(&QueueSnap) -> f64,
    real_cap: &dyn Fn(&QueueSnap) -> Option<f64>,
) -> BTreeMap<String, f64> {
    // Only queues with jobs (a request) take part, as only they have attributes upstream.
    let taking: Vec<&QueueSnap> = queues.iter().filter(|q| request(q) > EPS).collect();
    let mut deserved: BTreeMap<String, f64> = taking.iter().map(|q| (q.name.clone(), 0.0)).collect();
    let mut met: Vec<String> = Vec::new();
    let mut remaining = total;
    for _ in 0..64 {
        let weight: u32 = taking.iter().filter(|q| !met.contains(&q.name)).map(|q| q.weight).sum();
        if weight == 0 {
            break;
        }
        let (mut increased, mut decreased) = (0.0, 0.0);
        let round: Vec<&QueueSnap> = taking.iter().filter(|q| !met.contains(&q.name)).copied().collect();
        for q in round {
            let old = deserved[&q.name];
            let mut d = old + remaining * f64::from(q.weight) / f64::from(weight);
            if let Some(cap) = real_cap(q) {
                d = d.min(cap);
            }
            d = d.min(request(q)).max(q.guarantee.unwrap_or(0.0));
            if request(q) <= d + EPS || (d - old).abs() < EPS {
                met.push(q.name.clone());
            }
            if d > old {
                increased += d - old;
            } else {
                decreased += old - d;
            }
            deserved.insert(q.name.clone(), d);
        }
        let next = (remaining + decreased - increased).max(0.0);
        if next < EPS || (next - remaining).abs() < EPS {
            break;
        }
        remaining = next;
    }
    deserved
}

fn rows(snap: &Snapshot, queues: &[QueueSnap], attrs: &BTreeMap<String, Attr>) -> Vec<QueueRow> {
    queues
        .iter()
        .map(|q| {
            let attr = attrs.get(&q.name).cloned().unwrap_or_default();
            let mut classes: BTreeMap<String, u32> = BTreeMap::new();
            for g in snap.groups.iter().flatten().filter(|g| g.queue == q.name && (g.pending() || g.running())) {
                *classes.entry(g.priority_class.clone().unwrap_or_else(|| "none".into())).or_default() += 1;
            }
            let pending = attr.pending;
            let (owed, borrowed) = match attr.deserved {
                Some(d) => {
                    let owed = (d - q.allocated).max(0.0).min(pending.unwrap_or(0.0));
                    (owed, (q.allocated - d).max(0.0))
                }
                None => (0.0, 0.0),
            };
            QueueRow {
                name: q.name.clone(),
                state: q.state.clone(),
                weight: q.weight,
                capability: q.capability,
                deserved: attr.deserved,
                guarantee: q.guarantee,
                allocated: q.allocated,
                owed,
                borrowed,
                reclaimable: q.reclaimable,
                pending,
                classes: classes.into_iter().collect(),
            }
        })
        .collect()
}

/// The priority of a class name: its value, the global default's for none, 0 without either.
/// `None` when the classes cannot be read.
fn priority(snap: &Snapshot, class: Option<&str>) -> Option<(i32, bool)> {
    let classes = snap.classes.as_ref()?;
    let found = match class {
        Some(name) => classes.iter().find(|c| c.name == name),
        None => classes.iter().find(|c| c.global_default),
    };
    Some(found.map_or((0, false), |c| (c.value, c.never)))
}

fn verdict(
    snap: &Snapshot,
    queues: &[QueueSnap],
    attrs: &BTreeMap<String, Attr>,
    mine: &QueueSnap,
    ask: &Ask,
    model: Model,
) -> ShareVerdict {
    let key = &snap.resource;
    let amount = ask.amount;
    let name = &mine.name;
    if let Some(cap) = mine.capability.filter(|cap| amount > cap + EPS) {
        return ShareVerdict::Never {
            reason: format!(
                "it needs {} {key} and queue {name} caps {key} at {} (spec.capability)",
                show(amount),
                show(cap)
            ),
        };
    }
    if let Some((total, _)) = snap.nodes.filter(|(total, _)| amount > total + EPS) {
        return ShareVerdict::Never {
            reason: format!("it needs {} {key} and the usable nodes have {} in all", show(amount), show(total)),
        };
    }
    let attr = attrs.get(name).cloned().unwrap_or_default();
    let Some(limit) = attr.limit.or(match model {
        Model::Capacity => Some(f64::INFINITY),
        Model::Proportion => None,
    }) else {
        return ShareVerdict::Unknown {
            reason: format!(
                "queue {name}'s deserved share needs the cluster's total {key}, and the nodes cannot be read"
            ),
        };
    };
    let room = limit - mine.allocated;
    let limit_text = match model {
        Model::Proportion => format!("deserved {}", show(limit)),
        Model::Capacity if limit.is_finite() => format!("capability {}", show(limit)),
        Model::Capacity => "no capability".to_owned(),
    };
    let Some((_, free)) = snap.nodes else {
        return ShareVerdict::Unknown {
            reason: format!(
                "queue {name} has room for {} ({limit_text}, allocated {}), but the nodes cannot be read, so whether \
                 they have {} {key} free is not known",
                show(room.max(0.0)),
                show(mine.allocated),
                show(amount)
            ),
        };
    };
    if amount <= room + EPS && amount <= free + EPS {
        return ShareVerdict::FitsNow {
            reason: format!(
                "queue {name} has room for {} ({limit_text}, allocated {}) and the nodes have {} {key} free",
                show(room),
                show(mine.allocated),
                show(free)
            ),
        };
    }
    let mine_priority = priority(snap, ask.priority_class.as_deref());
    let never = mine_priority.is_some_and(|(_, never)| never);
    let mut why_not = Vec::new();
    if never {
        why_not.push(format!(
            "its PriorityClass {} has preemptionPolicy Never, so it neither preempts nor reclaims",
            ask.priority_class.as_deref().unwrap_or("(default)")
        ));
    }
    if !never {
        match preempt(snap, mine, ask, mine_priority, limit, free) {
            Ok(victims) => {
                let reason = format!(
                    "the nodes have {} {key} free and queue {name} room for {}; its lower-priority jobs hold the rest",
                    show(free),
                    show(room.max(0.0))
                );
                return ShareVerdict::Preempt { victims, reason };
            }
            Err(why) => why_not.push(why),
        }
        match reclaim(queues, attrs, mine, ask, model, free) {
            Ok(from) => {
                let reason = format!(
                    "queue {name} stays within its deserved {} with it, the nodes have {} {key} free, and the other \
                     queues hold beyond their share",
                    show(attr.deserved.unwrap_or(limit)),
                    show(free)
                );
                return ShareVerdict::Reclaim { from, reason };
            }
            Err(why) => why_not.push(why),
        }
    }
    let short = if amount > room + EPS {
        format!("queue {name} has room for {} ({limit_text}, allocated {})", show(room.max(0.0)), show(mine.allocated))
    } else {
        format!("the nodes have {} {key} free", show(free))
    };
    ShareVerdict::Waits {
        reason: format!(
            "it needs {} {key} and {short}; it waits for jobs to finish ({})",
            show(amount),
            why_not.join("; ")
        ),
    }
}

/// The lower-priority running jobs of the queue whose eviction makes room, lowest first.
fn preempt(
    snap: &Snapshot,
    mine: &QueueSnap,
    ask: &Ask,
    mine_priority: Option<(i32, bool)>,
    limit: f64,
    free: f64,
) -> Result<Vec<Victim>, String> {
    let Some(groups) = &snap.groups else {
        return Err("its queue's jobs cannot be read, so preemption is not weighed".to_owned());
    };
    let Some((value, _)) = mine_priority else {
        return Err("the PriorityClasses cannot be read, so preemption is not weighed".to_owned());
    };
    let mut lower: Vec<Victim> = groups
        .iter()
        .filter(|g| g.queue == mine.name && g.running() && g.need > EPS)
        .filter_map(|g| {
            let (p, _) = priority(snap, g.priority_class.as_deref())?;
            (p < value).then(|| Victim {
                namespace: g.namespace.clone(),
                job: g.name.clone(),
                queue: g.queue.clone(),
                priority_class: g.priority_class.clone(),
                priority: p,
                amount: g.need,
            })
        })
        .collect();
    lower.sort_by(|a, b| a.priority.cmp(&b.priority).then(b.amount.total_cmp(&a.amount)));
    let (mut freed, mut victims) = (0.0, Vec::new());
    for v in lower {
        if ask.amount <= free + freed + EPS && mine.allocated - freed + ask.amount <= limit + EPS {
            break;
        }
        freed += v.amount;
        victims.push(v);
    }
    if victims.is_empty() || ask.amount > free + freed + EPS || mine.allocated - freed + ask.amount > limit + EPS {
        return Err(format!("queue {} has not enough lower-priority running jobs to preempt", mine.name));
    }
    Ok(victims)
}

/// What the other queues hold beyond their share that a reclaim would take, queue by queue.
fn reclaim(
    queues: &[QueueSnap],
    attrs: &BTreeMap<String, Attr>,
    mine: &QueueSnap,
    ask: &Ask,
    model: Model,
    free: f64,
) -> Result<Vec<Taken>, String> {
    let deserved = attrs.get(&mine.name).and_then(|a| a.deserved).unwrap_or(0.0);
    if mine.allocated + ask.amount > deserved + EPS {
        return Err(format!(
            "queue {} would hold {} with it, beyond its deserved {}, so it reclaims nothing",
            mine.name,
            show(mine.allocated + ask.amount),
            show(deserved)
        ));
    }
    if model == Model::Capacity
        && let Some(limit) = attrs.get(&mine.name).and_then(|a| a.limit)
        && mine.allocated + ask.amount > limit + EPS
    {
        return Err(format!("queue {} would pass its capability", mine.name));
    }
    let mut short = ask.amount - free;
    let mut from = Vec::new();
    for q in queues.iter().filter(|q| q.name != mine.name && q.reclaimable) {
        if short <= EPS {
            break;
        }
        let attr = attrs.get(&q.name).cloned().unwrap_or_default();
        let keep = attr.deserved.unwrap_or(0.0).max(q.guarantee.unwrap_or(0.0));
        let over = q.allocated - keep;
        if over > EPS {
            let take = over.min(short);
            short -= take;
            from.push(Taken { queue: q.name.clone(), amount: take });
        }
    }
    if short > EPS {
        let locked: Vec<_> =
            queues.iter().filter(|q| !q.reclaimable && q.name != mine.name).map(|q| q.name.as_str()).collect();
        let also = if locked.is_empty() { String::new() } else { format!(" ({} not reclaimable)", locked.join(", ")) };
        return Err(format!("the other queues hold too little beyond their share{also}"));
    }
    Ok(from)
}

#[cfg(test)]
mod tests;
