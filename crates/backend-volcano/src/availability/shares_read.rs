//! The reads behind `plan`'s queue report: every queue, the PodGroups (of every namespace, else
//! of the host's), the PriorityClasses and the nodes with their pods, each made once (a probe's
//! policy: no backoff) and each allowed to be refused by RBAC, which the report then says. The
//! weighing itself is pure ([`crate::shares::weigh`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use theseus_core::shares::QueueShares;
use theseus_core::solver::{ChipRequest, Request};

use super::node_free;
use crate::api::Cluster;
use crate::config::VolcanoHost;
use crate::error::VolcanoError;
use crate::quantity::Quantity;
use crate::shares::{Ask, ClassSnap, GroupSnap, QueueSnap, Snapshot, weigh};
use crate::types::{PodGroup, Queue};

/// The queue report for `total_chips` GPUs of `request` on `host` (what the plan or the solver
/// asks); `None` for a host without a queue or a CPU-only request (GPUs are what queues share
/// here).
///
/// # Errors
/// Call errors other than RBAC refusals.
pub(crate) async fn read(
    cluster: &Cluster,
    host: &VolcanoHost,
    request: &Request,
    total_chips: u32,
) -> Result<Option<QueueShares>, VolcanoError> {
    if host.queue.is_empty() || matches!(request.chip, ChipRequest::Cpu) || total_chips == 0 {
        return Ok(None);
    }
    let cluster = &cluster.clone().with_retry(cluster.retry_policy().for_probe());
    let key = host.gpu_resource_key.as_str();
    let queues = allowed(cluster.list_queues().await)?.map(|qs| qs.iter().map(|q| queue_snap(q, key)).collect());
    let (groups, groups_only_in) = match allowed(cluster.list_podgroups(true).await)? {
        Some(all) => (Some(all), None),
        None => (allowed(cluster.list_podgroups(false).await)?, Some(cluster.namespace().to_owned())),
    };
    let groups = groups.map(|gs| gs.iter().map(|g| group_snap(g, key)).collect());
    let groups_only_in = groups_only_in.filter(|_| groups.is_some());
    let classes = allowed(cluster.list_priority_classes().await)?.map(|cs| {
        cs.into_iter()
            .map(|c| ClassSnap {
                name: c.metadata.name.unwrap_or_default(),
                value: c.value,
                global_default: c.global_default.unwrap_or(false),
                never: c.preemption_policy.as_deref() == Some("Never"),
            })
            .collect()
    });
    let nodes = match allowed(cluster.list_nodes("").await)? {
        Some(nodes) => match allowed(cluster.list_all_pods("status.phase!=Succeeded,status.phase!=Failed").await)? {
            Some(pods) => {
                // The share is of the whole cluster; what is free, of the nodes the job may use.
                let all = node_free(&nodes, &pods, key)?;
                let mine: Vec<Node> = nodes.into_iter().filter(|n| selected(n, &host.node_selector)).collect();
                let usable = node_free(&mine, &pods, key)?;
                Some((f64::from(all.allocatable), f64::from(usable.free())))
            }
            None => None,
        },
        None => None,
    };
    let snapshot = Snapshot { resource: key.to_owned(), queues, groups, groups_only_in, classes, nodes };
    let ask =
        Ask { queue: host.queue.clone(), amount: f64::from(total_chips), priority_class: host.priority_class.clone() };
    Ok(Some(weigh(&snapshot, &ask)))
}

/// `None` when RBAC refuses the read.
fn allowed<T>(got: Result<T, VolcanoError>) -> Result<Option<T>, VolcanoError> {
    match got {
        Ok(found) => Ok(Some(found)),
        Err(VolcanoError::Forbidden { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn selected(node: &Node, selector: &BTreeMap<String, String>) -> bool {
    let labels = node.metadata.labels.as_ref();
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

fn amount(map: &BTreeMap<String, String>, key: &str) -> Option<f64> {
    map.get(key).and_then(|q| Quantity::parse(q).ok()).map(|q| q.value())
}

fn queue_snap(q: &Queue, key: &str) -> QueueSnap {
    let status = q.status.clone().unwrap_or_default();
    QueueSnap {
        name: q.metadata.name.clone().unwrap_or_default(),
        state: status.state.clone(),
        weight: q.spec.weight.map_or(1, |w| u32::try_from(w).unwrap_or(0)),
        capability: amount(&q.spec.capability, key),
        deserved: amount(&q.spec.deserved, key),
        guarantee: q.spec.guarantee.as_ref().and_then(|g| amount(&g.resource, key)),
        reclaimable: q.spec.reclaimable.unwrap_or(true),
        allocated: amount(&status.allocated, key).unwrap_or(0.0),
    }
}

fn group_snap(g: &PodGroup, key: &str) -> GroupSnap {
    GroupSnap {
        namespace: g.metadata.namespace.clone().unwrap_or_default(),
        // Newer Volcano names the group `<job>-<uid>`: the job is its owner.
        name: g
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Job")
            .map(|o| o.name.clone())
            .or_else(|| g.metadata.name.clone())
            .unwrap_or_default(),
        queue: g.spec.queue.clone().unwrap_or_else(|| "default".into()),
        priority_class: g.spec.priority_class_name.clone().filter(|c| !c.is_empty()),
        phase: g.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default(),
        need: amount(&g.spec.min_resources, key).unwrap_or(0.0),
    }
}
