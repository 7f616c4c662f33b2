//! Resource accounting for scheduling: pod requests, node allocatable, first-fit placement and
//! the scheduler's "0/N nodes are unavailable" message.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::discovery::known;
use crate::jobpods::str_at;
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

/// Node capacity minus what bound pods use.
pub(crate) struct Cluster {
    nodes: Vec<(String, Resources, Resources)>,
}

impl Cluster {
    /// Reads nodes and bound pods from the store.
    pub(crate) fn from_store(store: &Store) -> Self {
        let (nodes, _) = store.list(known::nodes(), None, &Selectors::default());
        let (pods, _) = store.list(known::pods(), None, &Selectors::default());
        let mut cluster = Cluster {
            nodes: nodes
                .iter()
                .map(|n| {
                    let name = n.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
                    (name, parse_map(n.pointer("/status/allocatable")), Resources::new())
                })
                .collect(),
        };
        for pod in pods.iter().filter(|p| holds_resources(p)) {
            if let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str) {
                cluster.reserve(node, &pod_requests(&pod["spec"]));
            }
        }
        cluster
    }

    /// The nodes' allocatable resources, summed.
    pub(crate) fn allocatable(&self) -> Resources {
        let mut total = Resources::new();
        for (_, alloc, _) in &self.nodes {
            for (k, v) in alloc {
                *total.entry(k.clone()).or_default() += v;
            }
        }
        total
    }

    /// What bound pods use, summed over the nodes.
    pub(crate) fn used(&self) -> Resources {
        let mut total = Resources::new();
        for (_, _, used) in &self.nodes {
            for (k, v) in used {
                *total.entry(k.clone()).or_default() += v;
            }
        }
        total
    }

    fn reserve(&mut self, node: &str, req: &Resources) {
        if let Some((_, _, used)) = self.nodes.iter_mut().find(|(n, _, _)| n == node) {
            for (k, v) in req {
                *used.entry(k.clone()).or_default() += v;
            }
        }
    }

    /// Places a pod on the first node with room and reserves it, or explains why no node fits.
    pub(crate) fn place(&mut self, req: &Resources) -> Result<String, String> {
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut chosen = None;
        for (name, alloc, used) in &self.nodes {
            let short: Vec<&String> = req
                .iter()
                .filter(|(k, v)| {
                    **v > 0 && alloc.get(*k).copied().unwrap_or(0) - used.get(*k).copied().unwrap_or(0) < **v
                })
                .map(|(k, _)| k)
                .collect();
            if short.is_empty() {
                chosen = Some(name.clone());
                break;
            }
            for k in short {
                *reasons.entry(format!("Insufficient {k}")).or_default() += 1;
            }
        }
        match chosen {
            Some(node) => {
                self.reserve(&node, req);
                Ok(node)
            }
            None => {
                let parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
                let detail =
                    if parts.is_empty() { "no nodes available to schedule pods".to_owned() } else { parts.join(", ") };
                Err(format!("0/{} nodes are unavailable: {detail}.", self.nodes.len()))
            }
        }
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
