//! A session's view of the cluster, read once from the store: jobs (PodGroups) with their
//! tasks (pods), nodes with what is used and what is being released, queues with their shares
//! (`share`); and the orders the actions take them in.
//!
//! Orders followed (read, not run): jobs by the `priority` plugin's `JobOrderFn` (the
//! PodGroup's `spec.priorityClassName` resolved to its PriorityClass value; the job controller
//! copies the job's class there, `createOrUpdatePodGroup`), then the `gang` plugin's (a job not
//! yet ready first), then the framework's fallback (creation time, then uid; the simulator puts
//! the order it first saw the groups in before the uid, creation times having whole seconds;
//! pkg/scheduler/framework/session_plugins.go `JobOrderFn`); queues by proportion's or
//! capacity's `QueueOrderFn` (`spec.priority` higher first, then the smaller share); victims
//! by `BuildVictimsPriorityQueue` (the job order reversed, then the lower task priority).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::discovery::known;
use crate::jobpods::str_at;
use crate::predicates;
use crate::sched::{self, Resources};
use crate::schedconf::SchedulerConf;
use crate::selector::Selectors;
use crate::share::{self, QueueAttr};
use crate::store::Store;

/// Where a task stands, as the scheduler's `TaskStatus` groups it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskState {
    /// Not bound, not being deleted.
    Pending,
    /// Bound and holding resources (`AllocatedStatus`).
    Bound,
    /// Being deleted while it still holds resources (`Releasing`).
    Releasing,
    Succeeded,
    /// Failed, or unbound and being deleted: holds nothing.
    Gone,
}

pub(crate) struct Task {
    pub(crate) ns: String,
    pub(crate) name: String,
    pub(crate) job: usize,
    pub(crate) node: Option<usize>,
    pub(crate) req: Resources,
    pub(crate) priority: i64,
    pub(crate) state: TaskState,
    /// `volcano.sh/preemptable` (annotation, then label; default true: `GetPodPreemptable`).
    pub(crate) preemptable: bool,
    /// conformance: a `system-cluster-critical`/`system-node-critical` pod or one in kube-system.
    pub(crate) critical: bool,
    /// `spec.preemptionPolicy: Never`.
    pub(crate) never_preempts: bool,
    pub(crate) pod: Value,
}

pub(crate) struct Job {
    pub(crate) ns: String,
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) queue: String,
    pub(crate) priority: i64,
    pub(crate) created: String,
    /// When the scheduler first saw the group: the order within one second of creation.
    pub(crate) seen: Option<std::time::Instant>,
    pub(crate) min_member: usize,
    pub(crate) phase: String,
    pub(crate) tasks: Vec<usize>,
}

pub(crate) struct NodeState {
    pub(crate) object: Value,
    pub(crate) alloc: Resources,
    pub(crate) used: Resources,
    pub(crate) releasing: Resources,
    /// Tasks pipelined onto it in this session.
    pub(crate) pipelined: Resources,
}

impl NodeState {
    pub(crate) fn name(&self) -> &str {
        str_at(&self.object, "/metadata/name")
    }

    /// The predicates the preempt and reclaim actions check before resources
    /// (`PredicateForPreemptAction`): node affinity and taints.
    pub(crate) fn admits(&self, pod_spec: &Value) -> bool {
        predicates::matches_node_affinity(pod_spec, &self.object)
            && predicates::untolerated_taint(pod_spec, &self.object).is_none()
    }
}

pub(crate) struct Snapshot {
    pub(crate) jobs: Vec<Job>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) nodes: Vec<NodeState>,
    pub(crate) queues: BTreeMap<String, QueueAttr>,
    /// `ReadyTaskNum` per job: bound tasks and succeeded ones.
    pub(crate) ready: Vec<usize>,
    /// The tasks of each node that hold resources there, by node index.
    pub(crate) on_node: Vec<Vec<usize>>,
}

fn parse_bool(v: &Value) -> Option<bool> {
    v.as_str().map(|s| s.parse::<bool>().unwrap_or(false))
}

impl Snapshot {
    /// Reads PodGroups, pods, nodes, queues and PriorityClasses once.
    pub(crate) fn build(store: &Store, conf: &SchedulerConf) -> Snapshot {
        let all = Selectors::default();
        let (classes, _) = store.list(known::priorityclasses(), None, &all);
        let class_value: HashMap<&str, i64> = classes
            .iter()
            .map(|c| (str_at(c, "/metadata/name"), c.get("value").and_then(Value::as_i64).unwrap_or(0)))
            .collect();
        let default_priority = classes
            .iter()
            .find(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
            .and_then(|c| c.get("value").and_then(Value::as_i64))
            .unwrap_or(0);
        let (groups, _) = store.list(known::podgroups(), None, &all);
        let mut jobs: Vec<Job> = Vec::new();
        let mut by_name: HashMap<(String, String), usize> = HashMap::new();
        for g in groups.iter().filter(|g| g.pointer("/metadata/deletionTimestamp").is_none()) {
            let class = str_at(g, "/spec/priorityClassName");
            by_name.insert(
                (str_at(g, "/metadata/namespace").to_owned(), str_at(g, "/metadata/name").to_owned()),
                jobs.len(),
            );
            jobs.push(Job {
                ns: str_at(g, "/metadata/namespace").to_owned(),
                name: str_at(g, "/metadata/name").to_owned(),
                uid: str_at(g, "/metadata/uid").to_owned(),
                queue: str_at(g, "/spec/queue").to_owned(),
                priority: class_value.get(class).copied().unwrap_or(default_priority),
                created: str_at(g, "/metadata/creationTimestamp").to_owned(),
                seen: None,
                min_member: g.pointer("/spec/minMember").and_then(Value::as_u64).unwrap_or(0) as usize,
                phase: str_at(g, "/status/phase").to_owned(),
                tasks: Vec::new(),
            });
        }
        let (node_objs, _) = store.list(known::nodes(), None, &all);
        let mut nodes: Vec<NodeState> = node_objs
            .into_iter()
            .map(|n| NodeState {
                alloc: sched::from_quantities(n.pointer("/status/allocatable")),
                object: n,
                used: Resources::new(),
                releasing: Resources::new(),
                pipelined: Resources::new(),
            })
            .collect();
        let node_index: HashMap<String, usize> =
            nodes.iter().enumerate().map(|(i, n)| (n.name().to_owned(), i)).collect();
        let (pods, _) = store.list(known::pods(), None, &all);
        let mut tasks = Vec::new();
        for pod in pods {
            let node = node_index.get(str_at(&pod, "/spec/nodeName")).copied();
            let holds = sched::holds_resources(&pod);
            let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
            let req = sched::pod_requests(&pod["spec"]);
            if let (Some(n), true) = (node, holds) {
                share::add(&mut nodes[n].used, &req);
                if deleting {
                    share::add(&mut nodes[n].releasing, &req);
                }
            }
            let key = (
                str_at(&pod, "/metadata/namespace").to_owned(),
                str_at(&pod, "/metadata/annotations/scheduling.k8s.io~1group-name").to_owned(),
            );
            let Some(&job) = by_name.get(&key) else { continue };
            let state = match (str_at(&pod, "/status/phase"), node.is_some(), deleting) {
                ("Succeeded", _, _) => TaskState::Succeeded,
                ("Failed", _, _) => TaskState::Gone,
                (_, true, true) => TaskState::Releasing,
                (_, true, false) => TaskState::Bound,
                (_, false, true) => TaskState::Gone,
                (_, false, false) => TaskState::Pending,
            };
            let flag = pod
                .pointer("/metadata/annotations/volcano.sh~1preemptable")
                .or_else(|| pod.pointer("/metadata/labels/volcano.sh~1preemptable"));
            let class = str_at(&pod, "/spec/priorityClassName");
            jobs[job].tasks.push(tasks.len());
            tasks.push(Task {
                ns: key.0.clone(),
                name: str_at(&pod, "/metadata/name").to_owned(),
                job,
                node,
                req,
                priority: pod.pointer("/spec/priority").and_then(Value::as_i64).unwrap_or(0),
                state,
                preemptable: flag.is_none_or(|v| parse_bool(v).unwrap_or(false)),
                critical: matches!(class, "system-cluster-critical" | "system-node-critical") || key.0 == "kube-system",
                never_preempts: str_at(&pod, "/spec/preemptionPolicy") == "Never",
                pod,
            });
        }
        let ready = jobs
            .iter()
            .map(|j| {
                j.tasks.iter().filter(|t| matches!(tasks[**t].state, TaskState::Bound | TaskState::Succeeded)).count()
            })
            .collect();
        let mut on_node = vec![Vec::new(); nodes.len()];
        for (i, t) in tasks.iter().enumerate() {
            if let (Some(n), TaskState::Bound | TaskState::Releasing) = (t.node, t.state) {
                on_node[n].push(i);
            }
        }
        let mut snapshot = Snapshot { jobs, tasks, nodes, queues: BTreeMap::new(), ready, on_node };
        snapshot.queues = snapshot.queue_attrs(store, conf);
        snapshot
    }

    fn queue_attrs(&self, store: &Store, conf: &SchedulerConf) -> BTreeMap<String, QueueAttr> {
        let (queues, _) = store.list(known::queues(), None, &Selectors::default());
        let mut total_guarantee = Resources::new();
        let mut specs: HashMap<&str, &Value> = HashMap::new();
        for q in &queues {
            share::add(&mut total_guarantee, &sched::from_quantities(q.pointer("/spec/guarantee/resource")));
            specs.insert(str_at(q, "/metadata/name"), q);
        }
        let mut attrs: BTreeMap<String, QueueAttr> = BTreeMap::new();
        for job in &self.jobs {
            let Some(q) = specs.get(job.queue.as_str()) else { continue };
            let attr = attrs.entry(job.queue.clone()).or_insert_with(|| QueueAttr {
                weight: q.pointer("/spec/weight").and_then(Value::as_i64).unwrap_or(1) as i128,
                priority: q.pointer("/spec/priority").and_then(Value::as_i64).unwrap_or(0),
                open: matches!(str_at(q, "/status/state"), "" | "Open"),
                reclaimable: q.pointer("/spec/reclaimable").and_then(Value::as_bool).unwrap_or(true),
                capability: q.pointer("/spec/capability").map(|c| sched::from_quantities(Some(c))),
                guarantee: sched::from_quantities(q.pointer("/spec/guarantee/resource")),
                spec_deserved: sched::from_quantities(q.pointer("/spec/deserved")),
                ..QueueAttr::default()
            });
            for &t in &job.tasks {
                let task = &self.tasks[t];
                // `AllocatedStatus`: a releasing task no longer counts for its queue.
                match task.state {
                    TaskState::Bound => {
                        share::add(&mut attr.allocated, &task.req);
                        share::add(&mut attr.request, &task.req);
                    }
                    TaskState::Pending => share::add(&mut attr.request, &task.req),
                    _ => {}
                }
            }
        }
        let mut total = Resources::new();
        for n in &self.nodes {
            share::add(&mut total, &n.alloc);
        }
        if let Some(plugin) = conf.queue_plugin() {
            share::compute(&mut attrs, &total, &total_guarantee, plugin);
        }
        attrs
    }

    /// The job's pending tasks, highest task priority first (`TaskOrderFn`), then by name.
    pub(crate) fn pending_tasks(&self, job: usize) -> Vec<usize> {
        let mut pending: Vec<usize> =
            self.jobs[job].tasks.iter().copied().filter(|t| self.tasks[*t].state == TaskState::Pending).collect();
        pending.sort_by(|a, b| {
            self.tasks[*b]
                .priority
                .cmp(&self.tasks[*a].priority)
                .then_with(|| self.tasks[*a].name.cmp(&self.tasks[*b].name))
        });
        pending
    }

    /// Notes when the scheduler first saw each group (by uid).
    pub(crate) fn set_seen(&mut self, seen: &HashMap<String, std::time::Instant>) {
        for job in &mut self.jobs {
            job.seen = seen.get(&job.uid).copied();
        }
    }

    /// Whether job `a` goes before job `b`.
    pub(crate) fn job_order(&self, a: usize, b: usize) -> Ordering {
        let (ja, jb) = (&self.jobs[a], &self.jobs[b]);
        let ready = |j: usize| self.ready[j] >= self.jobs[j].min_member;
        jb.priority
            .cmp(&ja.priority)
            .then_with(|| ready(a).cmp(&ready(b)))
            .then_with(|| ja.created.cmp(&jb.created))
            .then_with(|| ja.seen.cmp(&jb.seen))
            .then_with(|| ja.uid.cmp(&jb.uid))
    }

    /// Whether queue `a` goes before queue `b`.
    pub(crate) fn queue_order(&self, a: &str, b: &str) -> Ordering {
        match (self.queues.get(a), self.queues.get(b)) {
            (Some(qa), Some(qb)) => qb
                .priority
                .cmp(&qa.priority)
                .then_with(|| qa.share().partial_cmp(&qb.share()).unwrap_or(Ordering::Equal))
                .then_with(|| a.cmp(b)),
            _ => a.cmp(b),
        }
    }

    /// Victims in the order they are evicted: the lowest job first, then the lowest task.
    pub(crate) fn sort_victims(&self, victims: &mut [usize]) {
        victims.sort_by(|a, b| {
            let (ta, tb) = (&self.tasks[*a], &self.tasks[*b]);
            self.job_order(tb.job, ta.job)
                .then_with(|| ta.priority.cmp(&tb.priority))
                .then_with(|| ta.name.cmp(&tb.name))
        });
    }

    /// The jobs in allocation order: queue by queue as the queue order picks them (one job at a
    /// time, the share updated by what it asks), jobs within a queue by the job order.
    pub(crate) fn allocation_order(&mut self, phases: &[&str]) -> Vec<usize> {
        let mut per_queue: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, job) in self.jobs.iter().enumerate() {
            if phases.contains(&job.phase.as_str()) {
                per_queue.entry(job.queue.clone()).or_default().push(i);
            }
        }
        for jobs in per_queue.values_mut() {
            jobs.sort_by(|a, b| self.job_order(*b, *a));
        }
        let saved = self.queues.clone();
        let mut order = Vec::new();
        while !per_queue.is_empty() {
            let mut names: Vec<&String> = per_queue.keys().collect();
            names.sort_by(|a, b| self.queue_order(a, b));
            let name = names[0].clone();
            let Some(jobs) = per_queue.get_mut(&name) else { break };
            let Some(job) = jobs.pop() else { break };
            if jobs.is_empty() {
                per_queue.remove(&name);
            }
            let want: Resources = {
                let mut r = Resources::new();
                for t in self.pending_tasks(job) {
                    share::add(&mut r, &self.tasks[t].req);
                }
                r
            };
            if let Some(q) = self.queues.get_mut(&name) {
                share::add(&mut q.allocated, &want);
            }
            order.push(job);
        }
        self.queues = saved;
        order
    }
}
