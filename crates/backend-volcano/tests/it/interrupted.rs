//! `status` of a run Volcano interrupted, on the simulator: the eviction is made by hand the way
//! Volcano v1.15.1's evictor leaves it (`Scheduled` event of the bind, `Warning` `Evict` on the
//! pod, `Normal` `Evict` on the PodGroup, then the pod deleted), and the simulator's job
//! controller restarts the job (`PodEvicted -> RestartJob`, `retryCount` + 1).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use serde_json::json;
use theseus_backend_volcano::{Cluster, RetryPolicy, VolcanoBackend};
use theseus_core::backend::{Backend, JobHandle, JobState, SubmitOptions};
use theseus_core::testing::{self, Harness};

use crate::flow::{RunProbe, World, plan, sim_client};

fn stamp(ago: Duration) -> String {
    let t = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::try_from(ago).unwrap();
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

async fn event(world: &World, kind: &str, name: &str, type_: &str, reason: &str, message: &str, at: &str) {
    let events: Api<Event> = Api::namespaced(sim_client(&world.sim), "default");
    let event: Event = serde_json::from_value(json!({
        "metadata": {"generateName": format!("{name}.")},
        "involvedObject": {"kind": kind, "name": name, "namespace": "default"},
        "type": type_, "reason": reason, "message": message,
        "firstTimestamp": at, "lastTimestamp": at, "source": {"component": "volcano"}
    }))
    .unwrap();
    events.create(&Default::default(), &event).await.unwrap();
}

/// The job's one pod once it runs.
async fn running_pod(world: &World, job: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(sim_client(&world.sim), "default");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let list =
            pods.list(&kube::api::ListParams::default().labels(&format!("volcano.sh/job-name={job}"))).await.unwrap();
        let running = list.items.into_iter().find(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.metadata.deletion_timestamp.is_none()
        });
        if let Some(pod) = running {
            return pod;
        }
        assert!(tokio::time::Instant::now() < deadline, "{job} never ran");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `status` of `handle` says `want`, and returns the message.
async fn message_with(backend: &Arc<VolcanoBackend>, handle: &JobHandle, want: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = backend.status(handle).await.unwrap();
        let message = status.message.clone().unwrap_or_default();
        if message.contains(want) {
            return message;
        }
        assert!(tokio::time::Instant::now() < deadline, "status never said {want:?}: {status:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_who_preempted_the_run_and_which_attempt_comes_next() {
    let world = World::start(1).await;
    let client = sim_client(&world.sim);
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [("dev", 10), ("prod", 1000)] {
        let class: PriorityClass = serde_json::from_value(json!({"metadata": {"name": name}, "value": value})).unwrap();
        classes.create(&Default::default(), &class).await.unwrap();
    }
    let mut host = world.host.clone();
    host.priority_class = Some("dev".into());
    host.max_retry = 4;
    let connection =
        Cluster::from_client(client.clone(), "default").with_server(world.sim.url()).with_retry(RetryPolicy::fast());
    let backend = Arc::new(VolcanoBackend::with_cluster("sim", host, world.cluster.clone(), connection));
    let h = Harness {
        backend: backend.clone(),
        plan: plan(1, 4),
        probe: Arc::new(RunProbe),
        timeout: Duration::from_secs(60),
    };
    let (job, _code) = testing::prepare(&h, "long", &["sleep"], vec![], json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let data: theseus_backend_volcano::HandleData = serde_json::from_value(handle.data.clone()).unwrap();
    let pod = running_pod(&world, &data.job).await;
    let pod_name = pod.metadata.name.clone().unwrap();
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let status = backend.status(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Running);
    assert!(status.message.as_deref().is_some_and(|m| m.starts_with("1/1 pods running")), "{status:?}");

    // Volcano's evictor makes room for a production job of the same queue.
    let group = world.sim.objects("scheduling.volcano.sh/v1beta1", "PodGroup")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let bound = format!("Successfully assigned default/{pod_name} to {node}");
    event(&world, "Pod", &pod_name, "Normal", "Scheduled", &bound, &stamp(Duration::from_secs(30))).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let evicted_at = stamp(Duration::ZERO);
    event(&world, "Pod", &pod_name, "Warning", "Evict", "Pod is evicted, because of preempt", &evicted_at).await;
    event(&world, "PodGroup", &group, "Normal", "Evict", "preempt", &evicted_at).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.delete(&pod_name, &Default::default()).await.unwrap();
    // The preemptor's pod, bound to the freed node after the eviction.
    let serve: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "serve-main-0",
            "labels": {"volcano.sh/job-name": "serve"},
            "annotations": {"volcano.sh/queue-name": "default"}
        },
        "spec": {
            "nodeName": node, "priorityClassName": "prod",
            "containers": [{"name": "main", "image": "theseus-test:local", "command": ["sleep", "600"],
                            "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
        }
    }))
    .unwrap();
    pods.create(&Default::default(), &serve).await.unwrap();

    let message = message_with(&backend, &handle, "attempt 2 of 4").await;
    assert_eq!(
        message.split(" at ").next(),
        Some("preempted by serve (priority prod)"),
        "who, and its PriorityClass: {message}"
    );
    assert!(message.contains(&format!(" at {evicted_at}; ")), "when: {message}");
    assert!(
        message.ends_with("restarting, attempt 2 of 4") || message.ends_with("running again, attempt 2 of 4"),
        "{message}"
    );

    // The preemptor ends (its pod deleted, nothing left to tell it by); the job runs again, and
    // status still names who preempted it (recorded when it was first told).
    pods.delete("serve-main-0", &Default::default()).await.unwrap();
    let message = message_with(&backend, &handle, "running again, attempt 2 of 4").await;
    assert!(message.starts_with(&format!("preempted by serve (priority prod) at {evicted_at}; ")), "{message}");
    // A plain drain (no Evict) interrupts it next.
    let pod = running_pod(&world, &data.job).await;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let pod_name = pod.metadata.name.clone().unwrap();
    let bound = format!("Successfully assigned default/{pod_name} to {node}");
    event(&world, "Pod", &pod_name, "Normal", "Scheduled", &bound, &stamp(Duration::ZERO)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    pods.delete(&pod_name, &Default::default()).await.unwrap();
    let message = message_with(&backend, &handle, "attempt 3 of 4").await;
    assert!(message.starts_with(&format!("evicted from node {node} at ")), "{message}");
    backend.cancel(&handle).await.unwrap();
}

/// A job of `backend` of one 4-GPU pod running the conformance job with `args`.
async fn start(backend: &Arc<VolcanoBackend>, name: &str, args: &[&str]) -> JobHandle {
    let h = Harness {
        backend: backend.clone(),
        plan: plan(1, 4),
        probe: Arc::new(RunProbe),
        timeout: Duration::from_secs(60),
    };
    let (job, _code) = testing::prepare(&h, name, args, vec![], json!({})).await.unwrap();
    h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_job_the_simulators_preempt_action_ran_instead() {
    // The scheduler as a shared cluster runs it: preempt and reclaim on.
    let conf = include_str!("../../../../xtask/e2e/volcano-scheduler.conf");
    let world =
        World::start_with(2, |c| c.scheduler = theseus_kube_sim::SchedulerConf::parse(conf).expect("the e2e conf"))
            .await;
    let client = sim_client(&world.sim);
    let classes: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [("dev", 10), ("prod", 1000)] {
        let class: PriorityClass = serde_json::from_value(json!({"metadata": {"name": name}, "value": value})).unwrap();
        classes.create(&Default::default(), &class).await.unwrap();
    }
    world.sim.put_queue("team-b", "Open");
    let backend_of = |queue: &str, class: Option<&str>| {
        let mut host = world.host.clone();
        host.queue = queue.into();
        host.priority_class = class.map(str::to_owned);
        host.max_retry = 4;
        let connection = Cluster::from_client(client.clone(), "default")
            .with_server(world.sim.url())
            .with_retry(RetryPolicy::fast());
        Arc::new(VolcanoBackend::with_cluster("sim", host, world.cluster.clone(), connection))
    };
    // Another team holds one node; a dev experiment of queue default the other.
    let (team_b, dev, prod) =
        (backend_of("team-b", None), backend_of("default", Some("dev")), backend_of("default", Some("prod")));
    let other = start(&team_b, "other-team", &["sleep"]).await;
    let other_job: theseus_backend_volcano::HandleData = serde_json::from_value(other.data.clone()).unwrap();
    running_pod(&world, &other_job.job).await;
    // It runs for 15 s, each attempt.
    let experiment = start(&dev, "experiment", &["last", "15"]).await;
    let data: theseus_backend_volcano::HandleData = serde_json::from_value(experiment.data.clone()).unwrap();
    running_pod(&world, &data.job).await;
    // A production job of queue default (which has room for it, the nodes have none): the
    // preempt action evicts the experiment for it.
    let serve = start(&prod, "serve", &["sleep"]).await;
    let serve_job: theseus_backend_volcano::HandleData = serde_json::from_value(serve.data.clone()).unwrap();
    running_pod(&world, &serve_job.job).await;
    let message = message_with(&dev, &experiment, "attempt 2 of 4").await;
    assert!(
        message.starts_with(&format!("preempted by {} (priority prod) at 20", serve_job.job)),
        "the preemptor, named from what the simulator left: {message}"
    );
    assert!(message.ends_with("; restarting, attempt 2 of 4"), "it waits for a node: {message}");
    // The preemptor is cancelled (its pods gone): the experiment runs again and completes, and
    // its status still says who preempted it.
    prod.cancel(&serve).await.unwrap();
    let message = message_with(&dev, &experiment, "completed on attempt 2 of 4").await;
    assert_eq!(
        message.split(" at ").next(),
        Some(
            format!("completed on attempt 2 of 4 after being preempted by {} (priority prod)", serve_job.job).as_str()
        ),
        "{message}"
    );
    team_b.cancel(&other).await.unwrap();
}
