//! A job whose namespace, ServiceAccount or PriorityClass does not exist is refused before
//! anything is created or shipped, naming the object and the config key; a check RBAC refuses
//! is no refusal (the submit says it could not check).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use theseus_core::backend::SubmitOptions;
use theseus_core::testing::{self, Harness};

use theseus_backend_volcano::{Cluster, RetryPolicy, VolcanoBackend, VolcanoHost};

use crate::flow::{RunProbe, World, plan, sim_client};

fn harness(world: &World, host: VolcanoHost) -> Harness {
    let connection = Cluster::from_client(sim_client(&world.sim), host.namespace.clone())
        .with_server(world.sim.url())
        .with_retry(RetryPolicy::fast());
    let backend = VolcanoBackend::with_cluster("sim", host, world.cluster.clone(), connection);
    Harness {
        backend: Arc::new(backend),
        plan: plan(1, 0),
        probe: Arc::new(RunProbe),
        timeout: Duration::from_secs(60),
    }
}

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Submits a job of `host` and returns the error and the write requests it made.
async fn refused(world: &World, host: VolcanoHost) -> (String, Vec<(String, String)>) {
    let h = harness(world, host);
    let (job, _code) = testing::prepare(&h, "named", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let before = world.sim.requests().len();
    let err = h.backend.submit(&job, &SubmitOptions::default()).await.expect_err("refused");
    let writes: Vec<_> = world.sim.requests()[before..].iter().filter(|(method, _)| method != "GET").cloned().collect();
    (format!("{err}"), writes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_namespace_service_account_or_priority_class_is_refused_before_anything_ships() {
    let world = World::start(1).await;
    let (text, writes) = refused(&world, world_host(&world, |h| h.namespace = "nope".into())).await;
    assert!(text.contains("namespace \"nope\" does not exist") && text.contains("`namespace`"), "{text}");
    assert!(writes.is_empty(), "nothing created: {writes:?}");

    let (text, writes) = refused(&world, world_host(&world, |h| h.service_account = Some("trainer".into()))).await;
    assert!(
        text.contains("serviceaccount \"trainer\" in namespace \"default\" does not exist")
            && text.contains("`service_account`"),
        "{text}"
    );
    assert!(writes.is_empty(), "nothing created: {writes:?}");

    let (text, writes) = refused(&world, world_host(&world, |h| h.priority_class = Some("urgent".into()))).await;
    assert!(text.contains("priorityclass \"urgent\" does not exist") && text.contains("`priority_class`"), "{text}");
    assert!(writes.is_empty(), "nothing created: {writes:?}");
    assert_eq!(entries(world.pvc()), 0, "nothing written to the PVC");
}

fn world_host(world: &World, change: impl FnOnce(&mut VolcanoHost)) -> VolcanoHost {
    let mut host = world.host.clone();
    change(&mut host);
    host
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_rbac_refuses_is_said_and_the_submit_goes_on() {
    let world = World::start(1).await;
    // Reading namespaces and PriorityClasses is refused; the class exists, so the cluster takes the job.
    world.sim.faults().fail_requests("get", "namespaces", 100, 403);
    world.sim.faults().fail_requests("get", "priorityclasses", 100, 403);
    let host = world_host(&world, |h| h.priority_class = Some("system-cluster-critical".into()));
    let h = harness(&world, host);
    let (job, _code) = testing::prepare(&h, "unchecked", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let notes = Arc::new(Mutex::new(Vec::<String>::new()));
    let options = SubmitOptions {
        status: Some({
            let notes = notes.clone();
            Arc::new(move |n: &str| notes.lock().unwrap().push(n.to_owned()))
        }),
        ..SubmitOptions::default()
    };
    h.backend.submit(&job, &options).await.expect("not refused: the objects exist");
    let notes = notes.lock().unwrap().clone();
    assert!(notes.iter().any(|n| n.contains("could not check that namespace \"default\" exists")), "{notes:?}");
    assert!(
        notes.iter().any(|n| n.contains("could not check that priorityclass \"system-cluster-critical\" exists")),
        "{notes:?}"
    );
}
