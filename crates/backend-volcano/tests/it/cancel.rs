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
    let cancelled = tokio::time::timeout(Duration::from_secs(45), h.backend.cancel(&handle))
        .await
        .expect("the cancel ends without waiting a poll interval")
        .expect("cancel");
    assert_eq!(cancelled.state, JobState::Cancelled, "{cancelled:?}");
    // `cancel` looks at the job once (status before the delete), and the watch lists once.
    let (pod_lists, _, watches) = looks(&world, from);
    let deletes = world.sim.requests()[from..].iter().filter(|(m, p)| m == "DELETE" && p.contains("/pods/")).count();
    assert!(watches >= 1, "the pods are watched away");
    assert!(pod_lists <= 2, "the pods are not polled: {pod_lists} lists");
    assert_eq!(deletes, 0, "the garbage collector deletes the pods; theseus deletes none it had not seen left over");
    let selector = format!("volcano.sh/job-name={}", handle.data["job"].as_str().unwrap());
    assert!(world.connection().list_pods(&selector).await.unwrap().is_empty(), "no pod is left");
}
