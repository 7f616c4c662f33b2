//! `logs --follow` against the simulator's faults: log streams reset while the pod runs, and API
//! outages. Every line arrives once, in order, and the stream ends only when the job has.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use theseus_backend_volcano::Settings;
use theseus_core::backend::{JobHandle, LogOptions, SubmitOptions};
use theseus_core::testing::{self, Harness, ProcessProbe};
use theseus_kube_sim::Outage;

use crate::flow::{World, plan};

struct NoProbe;

#[async_trait::async_trait]
impl ProcessProbe for NoProbe {
    async fn alive(&self, _handle: &JobHandle) -> theseus_core::Result<usize> {
        Ok(0)
    }
}

fn harness(world: &World) -> Harness {
    let settings = Settings {
        helper_start_timeout: Duration::from_secs(20),
        ship_timeout: Duration::from_secs(120),
        delete_timeout: Duration::from_secs(30),
        poll_interval: Duration::from_millis(200),
        ..Settings::default()
    };
    let backend = world.backend().with_settings(settings);
    Harness { backend: Arc::new(backend), plan: plan(1, 0), probe: Arc::new(NoProbe), timeout: Duration::from_secs(60) }
}

/// Follows the job to its end; returns the lines and whether the stream ended with an error.
async fn follow(h: &Harness, handle: &JobHandle) -> (Vec<String>, Option<String>) {
    let mut stream = h.backend.logs(handle, &LogOptions { follow: true, rank: None }).await.expect("logs");
    let mut lines = Vec::new();
    let collect = async {
        while let Some(item) = stream.next().await {
            match item {
                Ok(line) => lines.push(line.text),
                Err(e) => return Some(e.to_string()),
            }
        }
        None
    };
    let error = tokio::time::timeout(Duration::from_secs(120), collect).await.expect("the follow ends");
    (lines, error)
}

fn expected(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("conformance: line {i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_resumes_reset_log_streams_without_gaps_or_repeats() {
    let world = World::start(1).await;
    let h = harness(&world);
    world.sim.faults().cut_log_streams_after(Some(Duration::from_millis(700)));
    let (job, _code) = testing::prepare(&h, "cut", &["count", "40"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let (lines, error) = follow(&h, &handle).await;
    assert_eq!(error, None);
    let lines: Vec<String> = lines.into_iter().filter(|l| l.starts_with("conformance: line")).collect();
    assert_eq!(lines, expected(40), "every line once, in order");
    assert!(h.backend.status(&handle).await.unwrap().state.is_terminal(), "the follow ended with the job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_rides_out_an_api_outage() {
    let world = World::start(1).await;
    let h = harness(&world);
    let (job, _code) = testing::prepare(&h, "outage", &["count", "40"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let faults = world.sim.faults();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        faults.outage(Outage::Refuse, Some(Duration::from_secs(3)));
        tokio::time::sleep(Duration::from_secs(3)).await;
        faults.outage(Outage::Hang, Some(Duration::from_secs(2)));
    });
    let (lines, error) = follow(&h, &handle).await;
    assert_eq!(error, None, "an outage does not end the follow");
    let lines: Vec<String> = lines.into_iter().filter(|l| l.starts_with("conformance: line")).collect();
    assert_eq!(lines, expected(40), "every line once, in order");
    assert!(h.backend.status(&handle).await.unwrap().state.is_terminal(), "the follow ended with the job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_reads_to_the_end_when_a_stream_went_silent() {
    let world = World::start(1).await;
    let h = harness(&world);
    let (job, _code) = testing::prepare(&h, "silent", &["count", "30"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let faults = world.sim.faults();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        faults.stall_log_streams();
    });
    let (lines, error) = follow(&h, &handle).await;
    assert_eq!(error, None);
    let lines: Vec<String> = lines.into_iter().filter(|l| l.starts_with("conformance: line")).collect();
    assert_eq!(lines, expected(30), "the silent stream's lines are read once the job has ended");
}
