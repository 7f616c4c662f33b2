//! Shared clusters as Volcano v1.15.1's scheduler runs them: priority order within a queue,
//! `preempt` (whole gangs as the tiers allow, `preemptionPolicy: Never`), `reclaim` from queues
//! over their deserved share (`reclaimable: false`), `guarantee`, and what an eviction leaves
//! (events, conditions, the job controller's `PodEvicted -> RestartJob`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use theseus_kube_sim::{NodeConfig, SchedulerConf, SimConfig};

use crate::support::{
    Ctx, events_about, eventually, phase, podgroup_of, queue_resource, start, vcjob, vcjobs, wait_phase,
};

/// What a site that preempts and reclaims runs (the e2e's conf has the same actions and tiers).
const SHARED: &str = include_str!("shared-cluster.conf");

#[test]
fn the_e2e_scheduler_conf_parses_as_is() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../xtask/e2e/volcano-scheduler.conf");
    let e2e = SchedulerConf::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ours = SchedulerConf::parse(SHARED).unwrap();
    assert_eq!(e2e.actions, ["allocate", "preempt", "reclaim", "backfill"]);
    assert_eq!(e2e, ours);
}

fn config(conf: &str, gpus: u32) -> SimConfig {
    SimConfig {
        nodes: vec![NodeConfig::new("n0", gpus)],
        scheduler: SchedulerConf::parse(conf).unwrap(),
        max_grace_period: std::time::Duration::from_secs(2),
        ..SimConfig::default()
    }
}

async fn priority_class(ctx: &Ctx, name: &str, value: i32, policy: Option<&str>) {
    let classes: Api<PriorityClass> = Api::all(ctx.client.clone());
    let mut class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value});
    if let Some(policy) = policy {
        class["preemptionPolicy"] = json!(policy);
    }
    classes.create(&PostParams::default(), &serde_json::from_value(class).unwrap()).await.unwrap();
}

async fn queue(ctx: &Ctx, name: &str, spec: Value) {
    let queues = Api::<DynamicObject>::all_with(ctx.client.clone(), &queue_resource());
    let q = json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec});
    queues.create(&PostParams::default(), &serde_json::from_value(q).unwrap()).await.unwrap();
}

/// A gang of `replicas` one-GPU pods running `secs` seconds, in `queue` with `class`, that
/// restarts when a pod is evicted (theseus's policies).
fn gang(name: &str, replicas: u32, min: u32, class: Option<&str>, queue: &str, secs: u32) -> DynamicObject {
    let script = format!("echo retry=$RC queue=$Q; exec sleep {secs}");
    let mut job = vcjob(name, replicas, 1, "img", &["sh", "-c", &script]);
    // The downward API: the retry count the job controller annotates, the queue label.
    job.data["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = json!([
        {"name": "RC", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['volcano.sh/job-retry-count']"}}},
        {"name": "Q", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['volcano.sh/queue-name']"}}},
    ]);
    let spec = &mut job.data["spec"];
    spec["minAvailable"] = json!(min);
    spec["queue"] = json!(queue);
    spec["maxRetry"] = json!(3);
    spec["policies"] =
        json!([{"event": "PodEvicted", "action": "RestartJob"}, {"event": "TaskCompleted", "action": "CompleteJob"}]);
    if let Some(class) = class {
        spec["priorityClassName"] = json!(class);
    }
    job
}

/// The names of the job's pods bound to a node.
async fn bound(ctx: &Ctx, job: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let listed =
        pods.list(&kube::api::ListParams::default().labels(&format!("volcano.sh/job-name={job}"))).await.unwrap();
    let mut names: Vec<String> = listed
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

async fn wait_bound(ctx: &Ctx, job: &str, n: usize) {
    eventually(&format!("{n} pods of {job} bound"), 30, || async { (bound(ctx, job).await.len() == n).then_some(()) })
        .await;
}

#[tokio::test]
async fn within_a_queue_the_higher_priority_gang_goes_first() {
    // The chart's default conf: enqueue, allocate, backfill.
    let ctx = start(SimConfig { nodes: vec![NodeConfig::new("n0", 4)], ..SimConfig::default() }).await;
    priority_class(&ctx, "high", 1000, None).await;
    priority_class(&ctx, "low", 10, None).await;
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &gang("first", 4, 4, None, "default", 2)).await.unwrap();
    wait_bound(&ctx, "first", 4).await;
    // Both wait for the cluster; the older one has the lower priority.
    jobs.create(&PostParams::default(), &gang("older-low", 4, 4, Some("low"), "default", 30)).await.unwrap();
    jobs.create(&PostParams::default(), &gang("newer-high", 4, 4, Some("high"), "default", 30)).await.unwrap();
    wait_bound(&ctx, "newer-high", 4).await;
    assert!(bound(&ctx, "older-low").await.is_empty());
    assert_eq!(phase(&jobs.get("older-low").await.unwrap()), "Pending");
}

#[tokio::test]
async fn preempt_evicts_a_lower_priority_gang_that_restarts_once_the_preemptor_ends() {
    let ctx = start(config(SHARED, 4)).await;
    priority_class(&ctx, "high", 1000, None).await;
    priority_class(&ctx, "low", 10, None).await;
    let jobs = vcjobs(&ctx.client, "default");
    // dev's ranks note the SIGTERM the eviction's graceful delete sends them.
    let dir = tempfile::tempdir().unwrap();
    let mut dev = gang("dev", 4, 4, Some("low"), "default", 120);
    let script = format!(
        "trap 'touch {}/term-$VC_TASK_INDEX; exit 143' TERM; echo retry=$RC queue=$Q; sleep 120 & wait",
        dir.path().display()
    );
    dev.data["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"] = json!(["sh", "-c", script]);
    jobs.create(&PostParams::default(), &dev).await.unwrap();
    wait_bound(&ctx, "dev", 4).await;
    let dev_group = podgroup_of(&ctx, "dev").await.metadata.name.unwrap();
    jobs.create(&PostParams::default(), &gang("prod", 2, 2, Some("high"), "default", 2)).await.unwrap();

    // What the eviction leaves: the pod's Warning and conditions, the PodGroup's Normal event.
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let evicted = eventually("an evicted dev pod", 30, || async {
        for i in 0..4 {
            let name = format!("dev-worker-{i}");
            let events = events_about(&ctx, &name).await;
            if events
                .iter()
                .any(|e| e == &("Warning".into(), "Evict".into(), "Pod is evicted, because of preempt".into()))
            {
                return Some(name);
            }
        }
        None
    })
    .await;
    let events = events_about(&ctx, &dev_group).await;
    assert!(events.contains(&("Normal".into(), "Evict".into(), "preempt".into())), "{events:?}");
    let _ = pods.get(&evicted).await.map(|pod| {
        // Still terminating: the scheduler's conditions are there.
        let conds = pod.status.unwrap().conditions.unwrap();
        let ready = conds.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("Evict")));
        let target = conds.iter().find(|c| c.type_ == "DisruptionTarget").unwrap();
        assert_eq!((target.status.as_str(), target.reason.as_deref()), ("True", Some("PreemptionByScheduler")));
        assert_eq!(target.message.as_deref(), Some("volcano: preempting to accommodate a higher priority pod"));
    });

    eventually("an evicted rank's SIGTERM", 20, || async {
        let terms = std::fs::read_dir(dir.path()).ok()?.count();
        (terms > 0).then_some(())
    })
    .await;
    // PodEvicted -> RestartJob: the dev gang restarts (retry 1) and waits while prod runs.
    let dev = eventually("dev restarted", 30, || async {
        let job = jobs.get("dev").await.ok()?;
        (job.data["status"]["retryCount"] == 1).then_some(job)
    })
    .await;
    assert!(matches!(phase(&dev).as_str(), "Restarting" | "Pending"), "{}", phase(&dev));
    wait_bound(&ctx, "prod", 2).await;
    wait_phase(&jobs, "prod", "Completed").await;
    // Once prod ends, dev's pods come back with the retry count Volcano gives them.
    wait_bound(&ctx, "dev", 4).await;
    let pod = pods.get("dev-worker-0").await.unwrap();
    let annotations = pod.metadata.annotations.unwrap();
    assert_eq!(annotations["volcano.sh/job-retry-count"], "1");
    let log = eventually("the restarted pod's log", 20, || async {
        let log = pods.logs("dev-worker-0", &Default::default()).await.ok()?;
        (!log.is_empty()).then_some(log)
    })
    .await;
    assert_eq!(log, "retry=1 queue=default\n");
    assert_eq!(phase(&jobs.get("dev").await.unwrap()), "Running");
}

#[tokio::test]
async fn a_preempted_gang_at_its_max_retry_fails() {
    let ctx = start(config(SHARED, 4)).await;
    priority_class(&ctx, "high", 1000, None).await;
    priority_class(&ctx, "low", 10, None).await;
    let jobs = vcjobs(&ctx.client, "default");
    let mut dev = gang("dev", 4, 4, Some("low"), "default", 120);
    dev.data["spec"]["maxRetry"] = json!(1);
    jobs.create(&PostParams::default(), &dev).await.unwrap();
    wait_bound(&ctx, "dev", 4).await;
    jobs.create(&PostParams::default(), &gang("prod", 4, 4, Some("high"), "default", 30)).await.unwrap();
    let dev = wait_phase(&jobs, "dev", "Failed").await;
    assert_eq!(dev.data["status"]["retryCount"], 1);
    wait_bound(&ctx, "prod", 4).await;
}

#[tokio::test]
async fn a_class_that_never_preempts_waits_and_equal_priority_preempts_nothing() {
    let ctx = start(config(SHARED, 4)).await;
    priority_class(&ctx, "polite", 1000, Some("Never")).await;
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &gang("dev", 4, 4, None, "default", 120)).await.unwrap();
    wait_bound(&ctx, "dev", 4).await;
    jobs.create(&PostParams::default(), &gang("polite", 2, 2, Some("polite"), "default", 2)).await.unwrap();
    jobs.create(&PostParams::default(), &gang("same", 2, 2, None, "default", 2)).await.unwrap();
    // Both are unschedulable sessions on end; dev keeps every pod.
    for job in ["polite", "same"] {
        eventually("an unschedulable gang", 30, || async {
            let pg = podgroup_of(&ctx, job).await;
            (pg.data["status"]["conditions"][0]["type"] == "Unschedulable").then_some(())
        })
        .await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(bound(&ctx, "dev").await.len(), 4);
    assert_eq!(jobs.get("dev").await.unwrap().data["status"]["retryCount"], 0);
}

#[tokio::test]
async fn with_gang_voting_a_full_gang_is_not_preempted_but_pods_beyond_min_available_are() {
    // gang's enablePreemptable left at its default (on): its vote keeps minAvailable pods.
    let conf = SHARED.replace("  - name: gang\n    enablePreemptable: false\n", "  - name: gang\n");
    let ctx = start(config(&conf, 4)).await;
    priority_class(&ctx, "high", 1000, None).await;
    priority_class(&ctx, "low", 10, None).await;
    let jobs = vcjobs(&ctx.client, "default");
    // 4 pods, minAvailable 2, no restart on eviction (an elastic job).
    let mut elastic = gang("elastic", 4, 2, Some("low"), "default", 120);
    elastic.data["spec"]["policies"] = json!([]);
    jobs.create(&PostParams::default(), &elastic).await.unwrap();
    wait_bound(&ctx, "elastic", 4).await;
    jobs.create(&PostParams::default(), &gang("prod", 2, 2, Some("high"), "default", 120)).await.unwrap();
    wait_bound(&ctx, "prod", 2).await;
    assert_eq!(bound(&ctx, "elastic").await.len(), 2);
    // Now elastic holds exactly minAvailable: another high gang finds no victim.
    jobs.create(&PostParams::default(), &gang("prod2", 2, 2, Some("high"), "default", 120)).await.unwrap();
    eventually("prod2 unschedulable", 30, || async {
        let pg = podgroup_of(&ctx, "prod2").await;
        (pg.data["status"]["conditions"][0]["type"] == "Unschedulable").then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(bound(&ctx, "elastic").await.len(), 2);
    assert!(bound(&ctx, "prod2").await.is_empty());
}

#[tokio::test]
async fn reclaim_takes_back_a_share_lent_to_another_queue_unless_it_is_not_reclaimable() {
    for reclaimable in [true, false] {
        let ctx = start(config(SHARED, 4)).await;
        queue(&ctx, "team-a", json!({"weight": 1, "reclaimable": reclaimable})).await;
        queue(&ctx, "team-b", json!({"weight": 1})).await;
        let jobs = vcjobs(&ctx.client, "default");
        // team-a borrows all 4 GPUs while team-b asks for nothing.
        jobs.create(&PostParams::default(), &gang("borrower", 4, 4, None, "team-a", 120)).await.unwrap();
        wait_bound(&ctx, "borrower", 4).await;
        jobs.create(&PostParams::default(), &gang("owner", 2, 2, None, "team-b", 120)).await.unwrap();
        if !reclaimable {
            eventually("owner unschedulable", 30, || async {
                let pg = podgroup_of(&ctx, "owner").await;
                (pg.data["status"]["conditions"][0]["type"] == "Unschedulable").then_some(())
            })
            .await;
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            assert_eq!(bound(&ctx, "borrower").await.len(), 4, "a queue with reclaimable: false keeps what it holds");
            continue;
        }
        // team-b deserves 2: it gets them back, evicting team-a's pods "because of reclaim".
        wait_bound(&ctx, "owner", 2).await;
        let group = podgroup_of(&ctx, "borrower").await.metadata.name.unwrap();
        let events = events_about(&ctx, &group).await;
        let reclaimed: Vec<_> = (0..4).map(|i| format!("borrower-worker-{i}")).collect();
        let mut found = false;
        for pod in &reclaimed {
            found |= events_about(&ctx, pod)
                .await
                .iter()
                .any(|(_, r, m)| r == "Evict" && m == "Pod is evicted, because of reclaim");
        }
        assert!(found || events.iter().any(|(_, r, m)| r == "Evict" && m == "reclaim"), "{events:?}");
        // The borrower restarted and now deserves only 2 of its 4: its gang waits.
        let borrower = jobs.get("borrower").await.unwrap();
        assert_eq!(borrower.data["status"]["retryCount"], 1);
        assert!(bound(&ctx, "borrower").await.len() < 4);
    }
}

#[tokio::test]
async fn a_queue_guarantee_is_kept_from_other_queues() {
    // The chart's default conf: enqueue's proportion check reserves team-b's guarantee.
    let ctx = start(SimConfig { nodes: vec![NodeConfig::new("n0", 4)], ..SimConfig::default() }).await;
    queue(&ctx, "team-a", json!({"weight": 1})).await;
    queue(&ctx, "team-b", json!({"weight": 1, "guarantee": {"resource": {"nvidia.com/gpu": "2"}}})).await;
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &gang("greedy", 3, 3, None, "team-a", 120)).await.unwrap();
    let group = podgroup_of(&ctx, "greedy").await.metadata.name.unwrap();
    eventually("the quota event", 30, || async {
        let events = events_about(&ctx, &group).await;
        events
            .iter()
            .any(|(t, r, m)| {
                t == "Normal"
                    && r == "Unschedulable"
                    && m == "queue resource quota insufficient: insufficient nvidia.com/gpu"
            })
            .then_some(())
    })
    .await;
    assert!(bound(&ctx, "greedy").await.is_empty());
    jobs.create(&PostParams::default(), &gang("fits", 2, 2, None, "team-a", 120)).await.unwrap();
    wait_bound(&ctx, "fits", 2).await;
}

#[tokio::test]
async fn with_the_capacity_plugin_reclaim_follows_the_queues_spec_deserved() {
    // capacity replaces proportion: a queue's deserved share is its `spec.deserved`.
    let conf = SHARED.replace("  - name: proportion\n", "  - name: capacity\n");
    let ctx = start(config(&conf, 4)).await;
    queue(&ctx, "small", json!({"weight": 1, "deserved": {"nvidia.com/gpu": "1"}})).await;
    queue(&ctx, "big", json!({"weight": 1, "deserved": {"nvidia.com/gpu": "3"}})).await;
    let jobs = vcjobs(&ctx.client, "default");
    // small borrows the whole node while big asks for nothing.
    jobs.create(&PostParams::default(), &gang("borrower", 4, 4, None, "small", 120)).await.unwrap();
    wait_bound(&ctx, "borrower", 4).await;
    jobs.create(&PostParams::default(), &gang("owner", 3, 3, None, "big", 120)).await.unwrap();
    wait_bound(&ctx, "owner", 3).await;
    let borrower = eventually("the borrower restarted", 30, || async {
        let job = jobs.get("borrower").await.ok()?;
        (job.data["status"]["retryCount"] == 1).then_some(job)
    })
    .await;
    assert_ne!(phase(&borrower), "Running");
    let events = events_about(&ctx, &podgroup_of(&ctx, "owner").await.metadata.name.unwrap()).await;
    assert!(!events.iter().any(|(_, r, _)| r == "Evict"), "the reclaimer is not evicted: {events:?}");
}

#[tokio::test]
async fn conformance_keeps_kube_system_pods_from_preemption() {
    // Without conformance in the tiers the same pods are evicted (checked by hand).
    let ctx = start(config(SHARED, 4)).await;
    priority_class(&ctx, "high", 1000, None).await;
    let system = vcjobs(&ctx.client, "kube-system");
    system.create(&PostParams::default(), &gang("agent", 4, 4, None, "default", 120)).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "kube-system");
    eventually("the kube-system gang bound", 30, || async {
        let listed = pods.list(&Default::default()).await.ok()?;
        let n = listed.items.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count();
        (n == 4).then_some(())
    })
    .await;
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &gang("prod", 2, 2, Some("high"), "default", 120)).await.unwrap();
    eventually("prod unschedulable", 30, || async {
        let pg = podgroup_of(&ctx, "prod").await;
        (pg.data["status"]["conditions"][0]["type"] == "Unschedulable").then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let listed = pods.list(&Default::default()).await.unwrap();
    assert!(listed.items.iter().all(|p| p.metadata.deletion_timestamp.is_none()), "no kube-system pod is evicted");
    assert!(bound(&ctx, "prod").await.is_empty());
}
