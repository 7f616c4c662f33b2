//! Whether a pending gang job can ever start as the cluster is: its pods' requests against the
//! largest node, the nodes' sum and the queue's capability. `submit --follow` gives up at once
//! on a job that cannot (issue 23: it used to wait the whole start timeout for a reason known
//! in the first second); one that only waits for others to finish is left to wait.
//!
//! The nodes are those the job may use (the host's `node_selector`), as they are now: a
//! cluster autoscaler that would add larger nodes is not foreseen, but when no node matches at
//! all the job is left to wait (a pool that scales from zero has no node until a pod waits for
//! one), with the scheduler's reason in `status`. Pure: objects in, a reason out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PodSpec};

use crate::quantity::Quantity;
use crate::types::Job;

/// Requests of one pod, summed over its containers (a container's limit stands for a missing
/// request, as Kubernetes defaults it). Unparsable quantities are left out.
fn pod_requests(spec: &PodSpec) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for c in &spec.containers {
        let resources = c.resources.as_ref();
        let requests = resources.and_then(|r| r.requests.clone()).unwrap_or_default();
        let limits = resources.and_then(|r| r.limits.clone()).unwrap_or_default();
        let mut merged = limits;
        merged.extend(requests);
        for (key, q) in merged {
            if let Ok(q) = Quantity::parse(&q.0) {
                *out.entry(key).or_default() += q.value();
            }
        }
    }
    out
}

fn allocatable(node: &Node, key: &str) -> f64 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(key))
        .and_then(|q| Quantity::parse(&q.0).ok())
        .map_or(0.0, |q| q.value())
}

fn show(value: f64) -> String {
    if value.fract() == 0.0 { format!("{value:.0}") } else { format!("{value}") }
}

/// Why `job` can never start on `nodes` (`None` when the nodes could not be read) under a
/// queue `(name, capability)`, or `None` when it may.
pub fn never_fits(
    job: &Job,
    nodes: Option<&[Node]>,
    queue: Option<(&str, &BTreeMap<String, String>)>,
) -> Option<String> {
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    let mut per_pod: Vec<(String, f64, BTreeMap<String, f64>)> = Vec::new();
    for task in &job.spec.tasks {
        let replicas = f64::from(task.replicas.unwrap_or(1).max(0));
        let Some(spec) = task.template.as_ref().and_then(|t| t.spec.as_ref()) else { continue };
        let pod = pod_requests(spec);
        for (key, value) in &pod {
            *total.entry(key.clone()).or_default() += value * replicas;
        }
        per_pod.push((task.name.clone().unwrap_or_default(), replicas, pod));
    }
    if let Some((name, capability)) = queue {
        for (key, need) in &total {
            let cap = capability.get(key).and_then(|c| Quantity::parse(c).ok()).map(|q| q.value());
            if let Some(cap) = cap.filter(|cap| need > cap) {
                return Some(format!(
                    "the job needs {} {key} in all and queue {name:?} caps {key} at {} (spec.capability): \
                     ask for fewer, or use a queue with more",
                    show(*need),
                    show(cap)
                ));
            }
        }
    }
    let nodes = nodes?;
    // No node matches the selector (yet): a node pool that scales from zero adds its first node
    // only for a pending pod, so this waits with the scheduler's reason instead of giving up.
    if nodes.is_empty() {
        return None;
    }
    for (task, _, pod) in &per_pod {
        for (key, need) in pod {
            let largest = nodes.iter().map(|n| allocatable(n, key)).fold(0.0, f64::max);
            if *need > largest {
                return Some(format!(
                    "each pod of task {task:?} needs {} {key} and the largest of the {} node{} it may use has {}: \
                     ask for fewer per node (chips per node in the host's config)",
                    show(*need),
                    nodes.len(),
                    if nodes.len() == 1 { "" } else { "s" },
                    show(largest)
                ));
            }
        }
    }
    for (key, need) in &total {
        let all: f64 = nodes.iter().map(|n| allocatable(n, key)).sum();
        if *need > all {
            return Some(format!(
                "the job needs {} {key} in all and the {} node{} it may use have {} together: ask for fewer",
                show(*need),
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" },
                show(all)
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(replicas: i32, gpus: &str) -> Job {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": {"containers": [
                {"name": "main", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"cpu": "1"}}}
            ]}}}]}
        }))
        .unwrap()
    }

    fn node(gpus: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": gpus, "cpu": "16"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_job_over_any_node_the_cluster_or_the_queue_never_fits() {
        let nodes = [node("4"), node("4")];
        assert_eq!(never_fits(&job(2, "4"), Some(&nodes), None), None, "fits, perhaps later");
        let per_pod = never_fits(&job(1, "8"), Some(&nodes), None).unwrap();
        assert!(
            per_pod.contains("needs 8 nvidia.com/gpu and the largest of the 2 nodes it may use has 4"),
            "{per_pod}"
        );
        let all = never_fits(&job(3, "4"), Some(&nodes), None).unwrap();
        assert!(all.contains("needs 12 nvidia.com/gpu in all and the 2 nodes it may use have 8 together"), "{all}");
        let cap: BTreeMap<String, String> = [("nvidia.com/gpu".to_owned(), "4".to_owned())].into();
        let queue = never_fits(&job(2, "4"), None, Some(("research", &cap))).unwrap();
        assert!(queue.contains("queue \"research\" caps nvidia.com/gpu at 4"), "{queue}");
        assert_eq!(never_fits(&job(1, "4"), None, Some(("research", &cap))), None);
    }

    #[test]
    fn a_selector_no_node_matches_yet_is_left_to_wait() {
        assert_eq!(never_fits(&job(1, "4"), Some(&[]), None), None, "a pool scaling from zero has no node yet");
    }
}
