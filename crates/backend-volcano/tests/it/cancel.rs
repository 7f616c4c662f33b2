//! `cancel` against the simulator: the job's pods are watched away once the vcjob is gone,
//! never polled (a minute between looks would hold the cancel past its timeout below).

use std::time::Duration;

use futures::StreamExt as _;
use theseus_core::backend::{JobState, LogOptions, SubmitOptions};
use theseus_core::testing;

use crate::flow::World;
use crate::follow::{harness_polling, looks};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_watches_the_pods_away() {
    let world = World::start(1).await;
    let h = harness_polling(&world, Duration::from_secs(60));
    let (job, _code) = testing::prepare(&h, "cancelled", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let mut lines = h.backend.logs(&handle, &LogOptions { follow: true, rank: None }).await.expect("logs");
    let started = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next().await {
            if line.is_ok_and(|l| l.text.starts_with("conformance: started")) {
                return;
            }
        }
    });
    started.await.expect("the job runs");
    drop(lines);
    let from = world.sim.requests().len();
    cancel_in_time(&h, &handle).await;
    // `cancel` looks at the job once (status before the delete), and the watch lists once.
    let (pod_lists, _, watches) = looks(&world, from);
    let deletes = world.sim.requests()[from..].iter().filter(|(m, p)| m == "DELETE" && p.contains("/pods/")).count();
    assert!(watches >= 1, "the pods are watched away");
    assert!(pod_lists <= 2, "the pods are not polled: {pod_lists} lists");
    assert_eq!(deletes, 0, "the garbage collector deletes the pods; theseus deletes none it had not seen left over");
    let selector = format!("volcano.sh/job-name={}", handle.data["job"].as_str().unwrap());
    assert!(world.connection().list_pods(&selector).await.unwrap().is_empty(), "no pod is left");
}

/// A watch nobody reads while the vcjob goes away falls behind, and the API server ends it with
/// `410 Gone` (here the pods' first watch after the cancel's list gets it, every time). The
/// pods' watch lists again and goes on watching; it does not fall back to listing the pods
/// every poll interval (a minute here, past the cancel's 45 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_relists_a_pod_watch_that_fell_behind_instead_of_polling() {
    let world = World::start(4).await;
    let mut h = harness_polling(&world, Duration::from_secs(60));
    h.plan = crate::flow::plan(4, 0);
    let (job, _code) = testing::prepare(&h, "behind", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let selector = format!("volcano.sh/job-name={}", handle.data["job"].as_str().unwrap());
    let running = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let pods = world.connection().list_pods(&selector).await.unwrap();
            let running = pods.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            if running.count() == 4 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    running.await.expect("the job runs");
    let from = world.sim.requests().len();
    world.sim.faults().fail_requests("watch", "pods", 1, 410);
    cancel_in_time(&h, &handle).await;
    let (_, _, watches) = looks(&world, from);
    assert!(watches >= 2, "the watch that got 410 was started again: {watches} watch requests");
    assert!(world.connection().list_pods(&selector).await.unwrap().is_empty(), "no pod is left");
}

/// Cancels `handle`, which must end `Cancelled` well within the harness's minute of polling.
async fn cancel_in_time(h: &theseus_core::testing::Harness, handle: &theseus_core::backend::JobHandle) {
    let cancelled = tokio::time::timeout(Duration::from_secs(45), h.backend.cancel(handle))
        .await
        .expect("the cancel ends without waiting a poll interval")
        .expect("cancel");
    assert_eq!(cancelled.state, JobState::Cancelled, "{cancelled:?}");
}
