//! `plan`'s queue report on the simulator: two queues share 16 GPUs, one borrowing beyond its
//! share, a low-priority job holding the other's; the report says who would be reclaimed or
//! preempted, and what RBAC hides.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::scheduling::v1::PriorityClass;
use theseus_backend_volcano::{Cluster, RetryPolicy, VolcanoBackend, VolcanoHost};
use theseus_core::backend::{Backend, JobHandle, JobState, SubmitOptions};
use theseus_core::shares::ShareVerdict;
use theseus_core::solver::{ChipRequest, Request};
use theseus_core::testing::{self, Harness};

use crate::flow::{RunProbe, World, plan, sim_client};

fn backend(world: &World, change: impl FnOnce(&mut VolcanoHost)) -> VolcanoBackend {
    let mut host = world.host.clone();
    change(&mut host);
    let connection = Cluster::from_client(sim_client(&world.sim), "default")
        .with_server(world.sim.url())
        .with_retry(RetryPolicy::fast());
    VolcanoBackend::with_cluster("sim", host, world.cluster.clone(), connection)
}

/// Submits a sleeping 8-GPU job with `backend` and waits until it runs.
async fn running(backend: VolcanoBackend, name: &str) -> JobHandle {
    let h = Harness {
        backend: Arc::new(backend),
        plan: plan(2, 4),
        probe: Arc::new(RunProbe),
        timeout: Duration::from_secs(60),
    };
    let (job, _code) = testing::prepare(&h, name, &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = h.backend.status(&handle).await.unwrap();
        if status.state == JobState::Running {
            return handle;
        }
        assert!(tokio::time::Instant::now() < deadline, "{name} never ran: {status:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn gpus(count: u32) -> Request {
    Request {
        chip: ChipRequest::Chip(theseus_core::chips::parse("h100").unwrap()),
        count,
        preferred_clusters: vec![],
        forbidden_clusters: vec![],
        host: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_says_who_would_be_reclaimed_or_preempted() {
    let world = World::start(4).await;
    let classes: kube::Api<PriorityClass> = kube::Api::all(sim_client(&world.sim));
    for (name, value) in [("dev", 10), ("prod", 1000)] {
        let class: PriorityClass =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "value": value})).unwrap();
        classes.create(&Default::default(), &class).await.unwrap();
    }
    world.sim.put_queue("team-b", "Open");
    world.sim.put_queue("team-c", "Open");
    // team-b borrows 8 of 16; a dev experiment holds the other 8 in default.
    let borrower = running(backend(&world, |h| h.queue = "team-b".into()), "borrower").await;
    let dev = running(backend(&world, |h| h.priority_class = Some("dev".into())), "dev-exp").await;

    // A production job of default: preempts the dev experiment of its own queue.
    let prod = backend(&world, |h| h.priority_class = Some("prod".into()));
    let shares = prod.shares(&gpus(4), &plan(1, 4)).await.unwrap().expect("a report");
    let ShareVerdict::Preempt { victims, .. } = &shares.verdict else {
        panic!("preempt expected: {}", shares.verdict.describe());
    };
    assert_eq!(victims.len(), 1, "{victims:?}");
    assert!(victims[0].job.contains("dev-exp") && !victims[0].job.contains('/'), "{victims:?}");
    assert_eq!(victims[0].priority_class.as_deref(), Some("dev"));
    let row = |name: &str| shares.queues.iter().find(|q| q.name == name).cloned().expect(name);
    assert_eq!(row("team-b").allocated, 8.0);
    assert_eq!(row("default").classes, vec![("dev".to_owned(), 1)]);

    // A job of the idle team-c: owed its share, it reclaims from both queues over theirs.
    let idle = backend(&world, |h| h.queue = "team-c".into());
    let shares = idle.shares(&gpus(4), &plan(1, 4)).await.unwrap().expect("a report");
    let ShareVerdict::Reclaim { from, .. } = &shares.verdict else {
        panic!("reclaim expected: {}", shares.verdict.describe());
    };
    let taken: Vec<_> = from.iter().map(|t| (t.queue.as_str(), t.amount)).collect();
    assert_eq!(taken, vec![("default", 2.0), ("team-b", 2.0)], "{}", shares.verdict.describe());
    assert!(shares.unknown.is_empty(), "{:?}", shares.unknown);

    // A user who may not list PodGroups or PriorityClasses cluster-wide: said, not guessed.
    world.sim.faults().fail_requests("list", "podgroups", 100, 403);
    world.sim.faults().fail_requests("list", "priorityclasses", 100, 403);
    let shares = prod.shares(&gpus(4), &plan(1, 4)).await.unwrap().expect("a report");
    assert!(matches!(shares.verdict, ShareVerdict::Waits { .. }), "{}", shares.verdict.describe());
    assert!(shares.verdict.describe().contains("preemption is not weighed"), "{}", shares.verdict.describe());
    assert!(shares.unknown.iter().any(|u| u.contains("PodGroups cannot be read")), "{:?}", shares.unknown);
    assert!(shares.unknown.iter().any(|u| u.contains("PriorityClasses cannot be read")), "{:?}", shares.unknown);
    world.sim.faults().clear_request_faults();

    for (handle, b) in [(borrower, backend(&world, |_| {})), (dev, backend(&world, |_| {}))] {
        b.cancel(&handle).await.unwrap();
    }
}
