//! Resource accounting for scheduling: pod requests, node allocatable, first-fit placement
//! through the node filters of `predicates`, and why no node fits in each scheduler's words
//! (Volcano's "0/N nodes are unavailable", the default scheduler's "0/N nodes are available").

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::discovery::known;
use crate::jobpods::str_at;
use crate::predicates;
use crate::quantity;
use crate::selector::Selectors;
use crate::store::Store;

/// Resource name to milli-units.
pub(crate) type Resources = BTreeMap<String, i128>;

fn parse_map(map: Option<&Value>) -> Resources {
    let mut out = Resources::new();
    for (name, value) in map.and_then(Value::as_object).into_iter().flatten() {
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match quantity::parse_milli(&text) {
            Ok(milli) => {
                out.insert(name.clone(), milli);
            }
            Err(err) => tracing::warn!(%err, resource = %name, "ignoring an unparsable quantity"),
        }
    }
    out
}

/// What one container asks for: `requests`, with `limits` filling in missing requests (as the
/// apiserver defaults them).
fn container_requests(container: &Value) -> Resources {
    let mut req = parse_map(container.pointer("/resources/limits"));
    req.extend(parse_map(container.pointer("/resources/requests")));
    req
}

/// What a pod (or pod spec) asks for: the sum over its containers.
pub(crate) fn pod_requests(pod_spec: &Value) -> Resources {
    let mut total = Resources::new();
    for c in pod_spec.get("containers").and_then(Value::as_array).into_iter().flatten() {
        for (k, v) in container_requests(c) {
            *total.entry(k).or_default() += v;
        }
    }
    total
}

/// Whether a pod still holds its resources (it is not Succeeded or Failed).
pub(crate) fn holds_resources(pod: &Value) -> bool {
    !matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"))
}

/// One node as the schedulers see it: its object (labels, taints), what it offers and what
/// bound pods use of it.
struct Node {
    name: String,
    object: Value,
    alloc: Resources,
    used: Resources,
}

impl Node {
    /// The resources `req` asks for more of than the node has free, cpu and memory first, then
    /// the others by name.
    fn short_of<'r>(&self, req: &'r Resources) -> Vec<&'r str> {
        let mut names: Vec<&str> = req
            .iter()
            .filter(|(k, v)| {
                **v > 0 && self.alloc.get(*k).copied().unwrap_or(0) - self.used.get(*k).copied().unwrap_or(0) < **v
            })
            .map(|(k, _)| k.as_str())
            .collect();
        names.sort_by_key(|k| (*k != "cpu", *k != "memory", *k));
        names
    }
}

/// Node capacity minus what bound pods use.
pub(crate) struct Cluster {
    nodes: Vec<Node>,
}

impl Cluster {
    /// Reads nodes and bound pods from the store.
    pub(crate) fn from_store(store: &Store) -> Self {
        Self::from_store_future(store, false)
    }

    /// Reads nodes and bound pods from the store; with `future`, what pods being deleted hold
    /// counts as free (a node's `FutureIdle` in Volcano).
    pub(crate) fn from_store_future(store: &Store, future: bool) -> Self {
        let (nodes, _) = store.list(known::nodes(), None, &Selectors::default());
        let (pods, _) = store.list(known::pods(), None, &Selectors::default());
        let mut cluster = Cluster {
            nodes: nodes
                .into_iter()
                .map(|n| Node {
                    name: str_at(&n, "/metadata/name").to_owned(),
                    alloc: parse_map(n.pointer("/status/allocatable")),
                    used: Resources::new(),
                    object: n,
                })
                .collect(),
        };
        let counts = |p: &&Value| holds_resources(p) && !(future && p.pointer("/metadata/deletionTimestamp").is_some());
        for pod in pods.iter().filter(counts) {
            if let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str) {
                cluster.reserve(node, &pod_requests(&pod["spec"]));
            }
        }
        cluster
    }

    /// The nodes' allocatable resources, summed.
    pub(crate) fn allocatable(&self) -> Resources {
        let mut total = Resources::new();
        for node in &self.nodes {
            for (k, v) in &node.alloc {
                *total.entry(k.clone()).or_default() += v;
            }
        }
        total
    }

    /// What bound pods use, summed over the nodes.
    pub(crate) fn used(&self) -> Resources {
        let mut total = Resources::new();
        for node in &self.nodes {
            for (k, v) in &node.used {
                *total.entry(k.clone()).or_default() += v;
            }
        }
        total
    }

    /// Counts `req` as used on `node`.
    pub(crate) fn reserve(&mut self, node: &str, req: &Resources) {
        if let Some(n) = self.nodes.iter_mut().find(|n| n.name == node) {
            for (k, v) in req {
                *n.used.entry(k.clone()).or_default() += v;
            }
        }
    }

    /// Places a pod (its spec) on the first node that passes the Volcano allocate action's
    /// `predicate` and reserves it there, or says why no node does as Volcano's `FitErrors`
    /// does: `0/N nodes are unavailable: <histogram>.`, one reason per node
    /// (pkg/scheduler/api/unschedule_info.go). Per node, resources come first, named by their
    /// first short resource (`alloc.predicate` and `WrapInsufficientResourceReason` in
    /// pkg/scheduler/actions/allocate/allocate.go), then the predicates plugin's stable filters
    /// in its order, NodeAffinity before TaintToleration, each refusal ending the node's
    /// checks (`InitPlugin` and `Predicate` in pkg/scheduler/plugins/predicates/predicates.go,
    /// `ShouldAbort`: both return `UnschedulableAndUnresolvable`).
    pub(crate) fn place(&mut self, pod_spec: &Value) -> Result<String, String> {
        let req = pod_requests(pod_spec);
        let mut reasons: Vec<String> = Vec::new();
        let mut chosen = None;
        for node in &self.nodes {
            let reason = if let Some(first) = node.short_of(&req).first() {
                format!("Insufficient {first}")
            } else if !predicates::matches_node_affinity(pod_spec, &node.object) {
                predicates::AFFINITY_MISMATCH.to_owned()
            } else if predicates::untolerated_taint(pod_spec, &node.object).is_some() {
                predicates::UNTOLERATED_TAINTS.to_owned()
            } else {
                chosen = Some(node.name.clone());
                break;
            };
            reasons.push(reason);
        }
        if let Some(node) = chosen {
            self.reserve(&node, &req);
            return Ok(node);
        }
        let head = format!("0/{} nodes are unavailable", reasons.len());
        if reasons.is_empty() {
            return Err(head);
        }
        Err(format!("{head}: {}.", predicates::histogram(reasons.iter().map(String::as_str))))
    }

    /// Places a pod as the default scheduler (kube-scheduler of the served v1.33) does, or says
    /// why not in its `FitError` wording (pkg/scheduler/framework/types.go):
    /// `0/N nodes are available: <histogram>. preemption: 0/N nodes are available: <histogram>.`
    /// Per node the default profile's filters run in order until one refuses: TaintToleration,
    /// NodeAffinity, NodeResourcesFit (every short resource a reason). The default preemption
    /// PostFilter then finds preemption not helpful on a node a filter refused as unresolvable
    /// and no victims on the others (no pod has a lower priority here).
    /// Read, not run.
    pub(crate) fn place_default(&mut self, pod_spec: &Value) -> Result<String, String> {
        let req = pod_requests(pod_spec);
        let (mut reasons, mut preemption): (Vec<String>, Vec<&str>) = (Vec::new(), Vec::new());
        let mut chosen = None;
        for node in &self.nodes {
            if let Some(taint) = predicates::untolerated_taint(pod_spec, &node.object) {
                reasons.push(predicates::untolerated_taint_named(taint));
                preemption.push("Preemption is not helpful for scheduling");
            } else if !predicates::matches_node_affinity(pod_spec, &node.object) {
                reasons.push(predicates::AFFINITY_MISMATCH.to_owned());
                preemption.push("Preemption is not helpful for scheduling");
            } else {
                let short = node.short_of(&req);
                if short.is_empty() {
                    chosen = Some(node.name.clone());
                    break;
                }
                reasons.extend(short.iter().map(|k| format!("Insufficient {k}")));
                preemption.push("No preemption victims found for incoming pod");
            }
        }
        if let Some(node) = chosen {
            self.reserve(&node, &req);
            return Ok(node);
        }
        let n = self.nodes.len();
        if n == 0 {
            // `ErrNoNodesAvailable` in pkg/scheduler/schedule_one.go.
            return Err("no nodes available to schedule pods".to_owned());
        }
        Err(format!(
            "0/{n} nodes are available: {}. preemption: 0/{n} nodes are available: {}.",
            predicates::histogram(reasons.iter().map(String::as_str)),
            predicates::histogram(preemption)
        ))
    }
}

/// Renders milli-unit resources as a quantity map (`{"cpu": "2", "nvidia.com/gpu": "8"}`).
pub(crate) fn to_quantities(res: &Resources) -> Value {
    Value::Object(res.iter().map(|(k, v)| (k.clone(), Value::String(quantity::format_milli(*v)))).collect())
}

/// Parses a quantity map such as a queue's `spec.capability`.
pub(crate) fn from_quantities(map: Option<&Value>) -> Resources {
    parse_map(map)
}

/// Resources held by pods, per queue (`volcano.sh/queue-name` label).
pub(crate) fn queue_usage(store: &Store) -> HashMap<String, Resources> {
    let (pods, _) = store.list(known::pods(), None, &Selectors::default());
    let mut usage: HashMap<String, Resources> = HashMap::new();
    for pod in pods.iter().filter(|p| holds_resources(p) && !str_at(p, "/spec/nodeName").is_empty()) {
        let queue = str_at(pod, "/metadata/labels/volcano.sh~1queue-name");
        if queue.is_empty() {
            continue;
        }
        let entry = usage.entry(queue.to_owned()).or_default();
        for (k, v) in pod_requests(&pod["spec"]) {
            *entry.entry(k).or_default() += v;
        }
    }
    usage
}
