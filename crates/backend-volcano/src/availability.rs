//! Free GPUs of a Volcano host for the solver: the queue's capability minus what it has
//! allocated, or, when the queue caps no GPUs, the GPUs the host's nodes can still give, or,
//! when they are busy, what the scheduler would give this job back by reclaiming from queues
//! over their share or preempting lower-priority jobs of its queue (the queue weighing of
//! `shares_read`). The arithmetic is pure ([`queue_free`], [`node_free`]); [`probe`] does the
//! calls.

pub(crate) mod shares_read;

use std::collections::{BTreeMap, BTreeSet};

use crate::config::VolcanoHost;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use theseus_core::availability::Availability;
use theseus_core::shares::ShareVerdict;
use theseus_core::solver::{ChipRequest, Request};

use crate::api::Cluster;
use crate::error::VolcanoError;
use crate::quantity::Quantity;

/// Pods in these phases hold no resources.
const DONE_PHASES: &[&str] = &["Succeeded", "Failed"];

/// Free GPUs under a queue's cap: `capability[key] - allocated[key]` (an absent allocation is
/// 0), floored at 0. `None` when the queue caps no `key`: that is not zero GPUs, the caller
/// falls back to the nodes.
///
/// # Errors
/// [`VolcanoError::Quantity`] naming the queue and field when a value is not a quantity.
pub fn queue_free(
    queue: &str,
    capability: &BTreeMap<String, String>,
    allocated: &BTreeMap<String, String>,
    key: &str,
) -> Result<Option<u32>, VolcanoError> {
    let Some(cap) = capability.get(key) else {
        return Ok(None);
    };
    let cap = parse(cap, || format!("queue {queue:?} spec.capability[{key}]"))?;
    let used = match allocated.get(key) {
        Some(a) => parse(a, || format!("queue {queue:?} status.allocated[{key}]"))?,
        None => 0.0,
    };
    Ok(Some(count(cap - used)))
}

/// GPUs of a set of nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeGpus {
    /// Usable nodes (schedulable and ready) counted.
    pub nodes: u32,
    /// Their allocatable GPUs.
    pub allocatable: u32,
    /// GPUs requested by running or pending pods bound to them.
    pub requested: u32,
}

impl NodeGpus {
    /// Allocatable minus requested, floored at 0.
    pub fn free(&self) -> u32 {
        self.allocatable.saturating_sub(self.requested)
    }
}

/// Sums `key` over the usable `nodes` (schedulable, and `Ready` when they report conditions)
/// and over the requests of the non-terminal `pods` bound to them (a pod requests the larger of
/// its containers' sum and its largest init container; a limit stands in for a missing request).
///
/// # Errors
/// [`VolcanoError::Quantity`] naming the node or pod when a value is not a quantity.
pub fn node_free(nodes: &[Node], pods: &[Pod], key: &str) -> Result<NodeGpus, VolcanoError> {
    let mut out = NodeGpus::default();
    let mut names = BTreeSet::new();
    let mut allocatable = 0.0;
    for node in nodes.iter().filter(|n| usable(n)) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let value = node.status.as_ref().and_then(|s| s.allocatable.as_ref()).and_then(|a| a.get(key));
        if let Some(q) = value {
            allocatable += parse(&q.0, || format!("node {name:?} status.allocatable[{key}]"))?;
        }
        names.insert(name);
        out.nodes += 1;
    }
    let mut requested = 0.0;
    for pod in pods {
        let spec = pod.spec.as_ref();
        let on_ours = spec.and_then(|s| s.node_name.as_ref()).is_some_and(|n| names.contains(n));
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
        if !on_ours || DONE_PHASES.contains(&phase) {
            continue;
        }
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let Some(spec) = spec else { continue };
        let mut sum = 0.0;
        for c in &spec.containers {
            sum += container_request(c, key, &pod_name)?;
        }
        let mut init_max: f64 = 0.0;
        for c in spec.init_containers.iter().flatten() {
            init_max = init_max.max(container_request(c, key, &pod_name)?);
        }
        requested += sum.max(init_max);
    }
    out.allocatable = count(allocatable);
    out.requested = count(requested);
    Ok(out)
}

/// The host's availability for `request`.
///
/// CPU requests are not measured ([`Availability::NotChecked`]: the solver places CPU jobs on
/// the config alone), nor is a host without a queue (as the config documents). A queue that is
/// not `Open` has 0 free. Each call is made once ([`crate::retry::RetryPolicy::for_probe`]):
/// a refused connection fails the probe at once.
///
/// # Errors
/// [`VolcanoError::QueueNotFound`] when the queue does not exist, and the mapped call errors.
/// When the node fallback is refused by RBAC the answer is [`Availability::Unknown`] instead.
pub async fn probe(cluster: &Cluster, host: &VolcanoHost, request: &Request) -> Result<Availability, VolcanoError> {
    if host.queue.is_empty() {
        return Ok(Availability::NotChecked);
    }
    // A probe answers within its budget or says "unknown": no backoff inside it.
    let cluster = &cluster.clone().with_retry(cluster.retry_policy().for_probe());
    let name = host.queue.as_str();
    let key = host.gpu_resource_key.as_str();
    // A queue that does not exist makes the host unusable (Volcano's webhook refuses its jobs),
    // for CPU jobs too: the host is passed over with the fix, not chosen as "unknown".
    let queue = match cluster.get_queue(name).await? {
        Some(queue) => queue,
        None => return Ok(Availability::Unusable { reason: missing_queue(cluster, host).to_string() }),
    };
    // So does a queue that is not Open (Closed, Closing): the webhook refuses its jobs too. A
    // queue whose state is not set yet (the queue controller has not seen it) is not judged.
    let status = queue.status.unwrap_or_default();
    if let Some(err) = not_open(host, status.state.as_deref()) {
        return Ok(Availability::Unusable { reason: err.to_string() });
    }
    if matches!(request.chip, ChipRequest::Cpu) {
        return Ok(Availability::NotChecked);
    }
    if let Some(chips) = queue_free(name, &queue.spec.capability, &status.allocated, key)? {
        return Ok(Availability::Free { chips, source: format!("queue {name} capability minus allocated") });
    }
    let selector = host.node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    let listed = async {
        let nodes = cluster.list_nodes(&selector).await?;
        let pods = cluster.list_all_pods("status.phase!=Succeeded,status.phase!=Failed").await?;
        Ok::<_, VolcanoError>((nodes, pods))
    };
    let (nodes, pods) = match listed.await {
        Ok(found) => found,
        Err(e @ (VolcanoError::Forbidden { .. } | VolcanoError::Unauthorized { .. })) => {
            return Ok(Availability::Unknown {
                reason: format!("queue {name} caps no {key} and the nodes cannot be read: {e}"),
            });
        }
        Err(e) => return Err(e),
    };
    let gpus = node_free(&nodes, &pods, key)?;
    let matching = if selector.is_empty() { String::new() } else { format!(" matching {selector}") };
    let source = format!(
        "{} node{}{matching}: {} allocatable minus {} requested (queue {name} caps no {key})",
        gpus.nodes,
        if gpus.nodes == 1 { "" } else { "s" },
        gpus.allocatable,
        gpus.requested
    );
    if gpus.free() < request.count {
        // Busy nodes are not a full share: what other queues borrowed beyond theirs, or what
        // lower-priority jobs of this queue hold, the scheduler gives back to this job.
        if let Some(verdict) = given_back(cluster, host, request).await {
            return Ok(Availability::Free { chips: request.count, source: format!("{source}; {verdict}") });
        }
    }
    Ok(Availability::Free { chips: gpus.free(), source })
}

/// The queue verdict, when `request` fits only once the scheduler reclaims from other queues or
/// preempts lower-priority jobs (Volcano's `reclaim` and `preempt` actions); `None` otherwise,
/// or when the queues cannot be weighed (the nodes' answer stands).
async fn given_back(cluster: &Cluster, host: &VolcanoHost, request: &Request) -> Option<String> {
    match shares_read::read(cluster, host, request, request.count).await {
        Ok(Some(shares)) => match &shares.verdict {
            ShareVerdict::Reclaim { .. } | ShareVerdict::Preempt { .. } => Some(shares.verdict.describe()),
            _ => None,
        },
        Ok(None) => None,
        Err(e) => {
            tracing::debug!("the queues of {} could not be weighed: {e}", host.queue);
            None
        }
    }
}

fn usable(node: &Node) -> bool {
    if node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false) {
        return false;
    }
    match node.status.as_ref().and_then(|s| s.conditions.as_ref()) {
        Some(conditions) if !conditions.is_empty() => {
            conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
        }
        _ => true,
    }
}

fn container_request(c: &Container, key: &str, pod: &str) -> Result<f64, VolcanoError> {
    let resources = c.resources.as_ref();
    let value = resources
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(key))
        .or_else(|| resources.and_then(|r| r.limits.as_ref()).and_then(|l| l.get(key)));
    match value {
        Some(q) => parse(&q.0, || format!("pod {pod:?} container {:?} resources[{key}]", c.name)),
        None => Ok(0.0),
    }
}

fn parse(text: &str, what: impl FnOnce() -> String) -> Result<f64, VolcanoError> {
    Quantity::parse(text).map(|q| q.value()).map_err(|source| VolcanoError::Quantity { what: what(), source })
}

/// A whole, non-negative count (fractions of a GPU are not a GPU).
fn count(value: f64) -> u32 {
    if value.is_nan() || value <= 0.0 {
        0
    } else if value >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        value.floor() as u32
    }
}

/// The error of a host whose queue does not exist.
pub(crate) fn missing_queue(cluster: &Cluster, host: &VolcanoHost) -> VolcanoError {
    VolcanoError::QueueNotFound {
        queue: host.queue.clone(),
        cluster: host.cluster.clone(),
        namespace: cluster.namespace().to_owned(),
    }
}

/// [`VolcanoError::QueueNotOpen`] for a queue state other than `Open` (none yet: not judged).
fn not_open(host: &VolcanoHost, state: Option<&str>) -> Option<VolcanoError> {
    let state = state.filter(|s| !s.is_empty() && *s != "Open")?;
    Some(VolcanoError::QueueNotOpen {
        queue: host.queue.clone(),
        state: state.to_owned(),
        cluster: host.cluster.clone(),
    })
}

/// Fails with [`VolcanoError::QueueNotFound`] when the host's queue does not exist (or
/// [`VolcanoError::QueueNotOpen`] when it is not `Open`), before a
/// submit creates anything. A user who may not read queues (they are cluster-scoped) is not
/// stopped here: Volcano's admission answers for the queue then.
pub(crate) async fn require_queue(cluster: &Cluster, host: &VolcanoHost) -> Result<(), VolcanoError> {
    if host.queue.is_empty() {
        return Ok(());
    }
    match cluster.get_queue(&host.queue).await {
        Ok(Some(queue)) => match not_open(host, queue.status.and_then(|s| s.state).as_deref()) {
            Some(err) => Err(err),
            None => Ok(()),
        },
        Ok(None) => Err(missing_queue(cluster, host)),
        // Not allowed to read queues (cluster-scoped, an optional ClusterRole): Volcano's
        // admission checks the queue instead. Bad credentials are no such case.
        Err(VolcanoError::Forbidden { .. }) => {
            tracing::debug!(queue = %host.queue, "cannot read the queue; leaving its check to Volcano");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: &str = "nvidia.com/gpu";

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn queue_arithmetic() {
        let check =
            |cap: &[(&str, &str)], alloc: &[(&str, &str)]| queue_free("q", &map(cap), &map(alloc), GPU).unwrap();
        assert_eq!(check(&[(GPU, "8")], &[(GPU, "3")]), Some(5));
        assert_eq!(check(&[(GPU, "8")], &[]), Some(8));
        assert_eq!(check(&[(GPU, "8")], &[("cpu", "3")]), Some(8));
        assert_eq!(check(&[(GPU, "4")], &[(GPU, "6")]), Some(0));
        assert_eq!(check(&[(GPU, "1k")], &[(GPU, "1")]), Some(999));
        assert_eq!(check(&[(GPU, "2500m")], &[]), Some(2));
        assert_eq!(check(&[("cpu", "64")], &[(GPU, "3")]), None);
        assert_eq!(check(&[], &[]), None);
    }

    #[test]
    fn bad_quantities_name_the_queue_and_field() {
        let err = queue_free("research", &map(&[(GPU, "lots")]), &map(&[]), GPU).unwrap_err();
        assert_eq!(err.to_string(), "queue \"research\" spec.capability[nvidia.com/gpu] is not a Kubernetes quantity");
        let err = queue_free("research", &map(&[(GPU, "8")]), &map(&[(GPU, "x")]), GPU).unwrap_err();
        assert!(err.to_string().contains("status.allocated"), "{err}");
    }

    fn node(name: &str, gpus: &str, ready: bool, unschedulable: bool) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"unschedulable": unschedulable},
            "status": {
                "allocatable": {GPU: gpus, "cpu": "64"},
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
            }
        }))
        .unwrap()
    }

    fn pod(node: &str, phase: &str, gpus: &[&str], init: Option<&str>) -> Pod {
        let containers: Vec<_> = gpus
            .iter()
            .enumerate()
            .map(|(i, g)| serde_json::json!({"name": format!("c{i}"), "resources": {"limits": {GPU: g}}}))
            .collect();
        let mut spec = serde_json::json!({"nodeName": node, "containers": containers});
        if let Some(g) = init {
            spec["initContainers"] = serde_json::json!([{"name": "init", "resources": {"requests": {GPU: g}}}]);
        }
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}))
            .unwrap()
    }

    #[test]
    fn nodes_minus_active_pod_requests() {
        let nodes = [
            node("a", "8", true, false),
            node("b", "8", true, false),
            node("down", "8", false, false),
            node("cordoned", "8", true, true),
        ];
        let pods = [
            pod("a", "Running", &["2", "1"], None),
            pod("b", "Pending", &["1"], Some("4")),
            pod("b", "Succeeded", &["8"], None),
            pod("down", "Running", &["8"], None),
            pod("elsewhere", "Running", &["8"], None),
        ];
        let got = node_free(&nodes, &pods, GPU).unwrap();
        assert_eq!(got, NodeGpus { nodes: 2, allocatable: 16, requested: 7 });
        assert_eq!(got.free(), 9);
    }

    #[test]
    fn overcommitted_nodes_have_none_free() {
        let got = node_free(&[node("a", "2", true, false)], &[pod("a", "Running", &["4"], None)], GPU).unwrap();
        assert_eq!(got.free(), 0);
    }
}
