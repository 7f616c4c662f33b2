//! Placement refuses what a real scheduler refuses: node labels against `nodeSelector` and
//! required node affinity, taints against tolerations, with each scheduler's own wording when
//! no node fits.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use theseus_kube_sim::{NodeConfig, SimConfig};

use crate::support::{Ctx, events_about, eventually, phase, podgroup_of, start, vcjob, vcjobs};

fn nodes(nodes: Vec<NodeConfig>) -> SimConfig {
    SimConfig { nodes, ..SimConfig::default() }
}

/// A one-task job whose pod template also has `extra` (nodeSelector, affinity, tolerations).
fn job_with(name: &str, replicas: u32, gpus: u32, extra: Value) -> DynamicObject {
    let mut job = vcjob(name, replicas, gpus, "img", &["sleep", "30"]);
    let spec = &mut job.data["spec"]["tasks"][0]["template"]["spec"];
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    job
}

/// The gang condition of the job's PodGroup once it is `Unschedulable`: its message.
async fn unschedulable(ctx: &Ctx, job: &str) -> String {
    let pg = eventually("an unschedulable podgroup", 20, || async {
        let pg = podgroup_of(ctx, job).await;
        (pg.data["status"]["conditions"][0]["type"] == "Unschedulable").then_some(pg)
    })
    .await;
    assert_eq!(pg.data["status"]["phase"], "Inqueue");
    pg.data["status"]["conditions"][0]["message"].as_str().unwrap().to_owned()
}

/// Where the job's pods run, sorted, once all are bound.
async fn placed_on(ctx: &Ctx, job: &str, replicas: usize) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    eventually("the job's pods bound", 20, || async {
        let listed = pods.list(&ListParams::default().labels(&format!("volcano.sh/job-name={job}"))).await.ok()?;
        let mut nodes: Vec<String> =
            listed.items.into_iter().filter_map(|p| p.spec.and_then(|s| s.node_name)).collect();
        nodes.sort();
        (nodes.len() == replicas).then_some(nodes)
    })
    .await
}

#[tokio::test]
async fn gang_whose_selector_matches_no_node_stays_pending_with_the_scheduler_reason() {
    let ctx = start(nodes(vec![
        NodeConfig::new("n0", 4).with_label("gpu", "a100"),
        NodeConfig::new("n1", 4).with_label("gpu", "a100").with_label("rdma", "true"),
    ]))
    .await;
    // The Node objects carry the labels.
    let n1 = Api::<Node>::all(ctx.client.clone()).get("n1").await.unwrap();
    let labels = n1.metadata.labels.unwrap();
    assert_eq!((labels["gpu"].as_str(), labels["rdma"].as_str()), ("a100", "true"));
    assert_eq!(labels["kubernetes.io/hostname"], "n1");

    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &job_with("h100", 1, 1, json!({"nodeSelector": {"gpu": "h100"}})))
        .await
        .unwrap();
    let message = unschedulable(&ctx, "h100").await;
    assert!(
        message.ends_with("0/2 nodes are unavailable: 2 node(s) didn't match Pod's node affinity/selector."),
        "{message}"
    );
    assert_eq!(phase(&jobs.get("h100").await.unwrap()), "Pending");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let (pod, cond) = eventually("the pod's PodScheduled condition", 20, || async {
        let pod = pods.get("h100-worker-0").await.ok()?;
        let cond = pod.status.clone()?.conditions?.into_iter().find(|c| c.type_ == "PodScheduled")?;
        Some((pod, cond))
    })
    .await;
    assert!(pod.spec.unwrap().node_name.is_none(), "a pod whose selector matches no node never runs");
    assert_eq!((cond.status.as_str(), cond.reason.as_deref()), ("False", Some("Unschedulable")));
    assert_eq!(
        cond.message.as_deref(),
        Some("0/2 nodes are unavailable: 2 node(s) didn't match Pod's node affinity/selector.")
    );
    let pg_name = podgroup_of(&ctx, "h100").await.metadata.name.unwrap();
    let events = events_about(&ctx, &pg_name).await;
    assert!(
        events.iter().any(|(t, r, m)| t == "Warning" && r == "Unschedulable" && m.contains("didn't match Pod's node")),
        "{events:?}"
    );

    // The selector a node matches places the pod there; required affinity ORs its terms and
    // ANDs a term's expressions.
    jobs.create(&PostParams::default(), &job_with("rdma", 1, 1, json!({"nodeSelector": {"rdma": "true"}})))
        .await
        .unwrap();
    assert_eq!(placed_on(&ctx, "rdma", 1).await, ["n1"]);
    let terms = json!([
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]},
        {"matchExpressions": [
            {"key": "gpu", "operator": "Exists"},
            {"key": "rdma", "operator": "Exists"},
        ]},
    ]);
    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}});
    jobs.create(&PostParams::default(), &job_with("plain", 1, 1, affinity)).await.unwrap();
    // n0 has a gpu label but no rdma one: a term's expressions are ANDed.
    assert_eq!(placed_on(&ctx, "plain", 1).await, ["n1"]);
    let nowhere = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["a100"]}]}],
    }}}});
    jobs.create(&PostParams::default(), &job_with("nowhere", 1, 1, nowhere)).await.unwrap();
    let message = unschedulable(&ctx, "nowhere").await;
    assert!(message.contains("0/2 nodes are unavailable: 2 node(s) didn't match Pod's node affinity/selector."));
}

#[tokio::test]
async fn taints_refuse_pods_without_a_toleration_and_prefer_no_schedule_never_does() {
    let ctx = start(nodes(vec![
        NodeConfig::new("n0", 4).with_taint("dedicated", "ml", "NoSchedule"),
        NodeConfig::new("n1", 4).with_taint("spot", "", "PreferNoSchedule"),
    ]))
    .await;
    let n0 = Api::<Node>::all(ctx.client.clone()).get("n0").await.unwrap();
    let taint = n0.spec.unwrap().taints.unwrap().remove(0);
    assert_eq!(
        (taint.key.as_str(), taint.value.as_deref(), taint.effect.as_str()),
        ("dedicated", Some("ml"), "NoSchedule")
    );

    // Two pods of 4 GPUs: one fits n1 (its taint only prefers), none may go to n0. Per node one
    // reason, resources first: the second pod finds n1 full and n0 tainted.
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &job_with("untolerated", 2, 4, json!({}))).await.unwrap();
    let message = unschedulable(&ctx, "untolerated").await;
    assert!(
        message
            .ends_with("0/2 nodes are unavailable: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint(s)."),
        "{message}"
    );
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    for i in 0..2 {
        let pod = pods.get(&format!("untolerated-worker-{i}")).await.unwrap();
        assert!(pod.spec.unwrap().node_name.is_none(), "the gang is placed whole or not at all");
    }
    jobs.delete("untolerated", &Default::default()).await.unwrap();

    // With the toleration (Equal and the value), the gang takes both nodes.
    let toleration =
        json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]});
    jobs.create(&PostParams::default(), &job_with("tolerated", 2, 4, toleration)).await.unwrap();
    assert_eq!(placed_on(&ctx, "tolerated", 2).await, ["n0", "n1"]);
}

#[tokio::test]
async fn the_default_scheduler_refuses_in_its_own_words() {
    let ctx = start(nodes(vec![
        NodeConfig::new("n0", 4).with_taint("dedicated", "ml", "NoExecute"),
        NodeConfig::new("n1", 4),
    ]))
    .await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    // A pod without `schedulerName: volcano`, as a helper pod: n0's taint and n1's labels
    // refuse it, each counted once.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "helper"},
        "spec": {
            "nodeSelector": {"gpu": "h100"},
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "30"]}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let want = "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, \
                1 node(s) had untolerated taint {dedicated: ml}. preemption: 0/2 nodes are available: \
                2 Preemption is not helpful for scheduling.";
    let message = eventually("the pod unschedulable", 20, || async {
        let pod = pods.get("helper").await.ok()?;
        let cond = pod.status?.conditions?.into_iter().find(|c| c.type_ == "PodScheduled")?;
        (cond.status == "False").then_some(cond.message.unwrap_or_default())
    })
    .await;
    assert_eq!(message, want);
    let events = events_about(&ctx, "helper").await;
    assert!(events.iter().any(|(_, r, m)| r == "FailedScheduling" && m == want), "{events:?}");
    assert!(pods.get("helper").await.unwrap().spec.unwrap().node_name.is_none());
}
