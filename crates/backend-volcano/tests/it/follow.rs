//! `logs --follow` against the simulator's faults: log streams reset while the pod runs, API
//! outages, watches cut or expired. Every line arrives once, in order, and the stream ends only
//! when the job has; the job and its pods are watched, not polled.

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
    harness_polling(world, Duration::from_millis(200))
}

pub(crate) fn harness_polling(world: &World, poll_interval: Duration) -> Harness {
    let settings = Settings {
        helper_start_timeout: Duration::from_secs(20),
        ship_timeout: Duration::from_secs(120),
        delete_timeout: Duration::from_secs(30),
        poll_interval,
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

/// The requests the simulator served from `from` on that list the job's pods (not watches),
/// read the vcjob, and watch anything.
pub(crate) fn looks(world: &World, from: usize) -> (usize, usize, usize) {
    let requests = world.sim.requests();
    let requests = &requests[from.min(requests.len())..];
    let watch = |p: &str| p.contains("watch=true") || p.contains("watch=1");
    let pod_lists = requests
        .iter()
        .filter(|(m, p)| m == "GET" && p.contains("/pods?") && p.contains("volcano.sh%2Fjob-name") && !watch(p))
        .count();
    let job_gets = requests.iter().filter(|(m, p)| m == "GET" && p.contains("/jobs/")).count();
    let watches = requests.iter().filter(|(_, p)| watch(p)).count();
    (pod_lists, job_gets, watches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_is_watched_not_polled() {
    let world = World::start(1).await;
    // Polling every minute would keep the follow past its timeout below.
    let h = harness_polling(&world, Duration::from_secs(60));
    let (job, _code) = testing::prepare(&h, "watched", &["count", "5"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let from = world.sim.requests().len();
    let (lines, error) = tokio::time::timeout(Duration::from_secs(45), follow(&h, &handle))
        .await
        .expect("the follow ends with the job, without waiting a poll interval");
    assert_eq!(error, None);
    let lines: Vec<String> = lines.into_iter().filter(|l| l.starts_with("conformance: line")).collect();
    assert_eq!(lines, expected(5));
    let (pod_lists, job_gets, watches) = looks(&world, from);
    assert!(watches >= 2, "the pods and the job are watched ({watches} watches)");
    // `logs` reads the job once before following; the watches' first lists add one each.
    assert!(pod_lists <= 2, "the pods are not polled: {pod_lists} lists");
    assert!(job_gets <= 2, "the job is not polled: {job_gets} reads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_resumes_cut_watches_without_gaps_or_repeats() {
    let world = World::start(1).await;
    let h = harness_polling(&world, Duration::from_secs(60));
    let (job, _code) = testing::prepare(&h, "cutwatch", &["count", "40"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let faults = world.sim.faults();
    let cutter = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            faults.drop_watches();
        }
    });
    let from = world.sim.requests().len();
    let (lines, error) = follow(&h, &handle).await;
    cutter.abort();
    assert_eq!(error, None);
    let lines: Vec<String> = lines.into_iter().filter(|l| l.starts_with("conformance: line")).collect();
    assert_eq!(lines, expected(40), "every line once, in order");
    assert!(h.backend.status(&handle).await.unwrap().state.is_terminal(), "the follow ended with the job");
    let (pod_lists, _, watches) = looks(&world, from);
    assert!(watches > 4, "cut watches were watched again ({watches} watches)");
    assert!(pod_lists <= 2, "a cut watch resumes from its resourceVersion, without listing again: {pod_lists} lists");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_lists_again_when_its_watch_expired() {
    // The simulator keeps one change: a cut watch's resourceVersion is soon too old (410 Gone).
    let world = World::start_with(1, |config| config.watch_history = 1).await;
    let h = harness_polling(&world, Duration::from_secs(60));
    let (job, _code) = testing::prepare(&h, "gone", &["count", "30"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let faults = world.sim.faults();
    let secrets = world.connection().secrets();
    let cutter = tokio::spawn(async move {
        for i in 0.. {
            tokio::time::sleep(Duration::from_millis(500)).await;
            faults.drop_watches();
            // Other writes move the history past the cut watches' resourceVersions.
            let secret: k8s_openapi::api::core::v1::Secret =
                serde_json::from_value(serde_json::json!({"metadata": {"name": format!("churn-{i}")}})).unwrap();
            let _ = secrets.create(&Default::default(), &secret).await;
        }
    });
    let from = world.sim.requests().len();
    let (lines, error) = follow(&h, &handle).await;
    cutter.abort();
    assert_eq!(error, None);
    let lines: Vec<String> = lines.into_iter().filter(|l| l.starts_with("conformance: line")).collect();
    assert_eq!(lines, expected(30), "every line once, in order");
    assert!(h.backend.status(&handle).await.unwrap().state.is_terminal(), "the follow ended with the job");
    let (pod_lists, _, _) = looks(&world, from);
    assert!(pod_lists > 2, "an expired watch lists the pods again: {pod_lists} lists");
}

/// `logs` without `-f` of a gang with more pods than it reads ahead: every pod's log whole and
/// in order, the pods one after the other in rank order, each line with its rank.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_a_gang_print_every_pod_whole_in_rank_order() {
    let ranks = 6u32;
    let world = World::start(ranks as usize).await;
    let mut h = harness_polling(&world, Duration::from_millis(200));
    h.plan = plan(ranks, 0);
    let (job, _code) = testing::prepare(&h, "dump", &["count", "5"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    testing::wait_terminal(&h, &handle).await;
    let stream = h.backend.logs(&handle, &LogOptions { follow: false, rank: None }).await.expect("logs open");
    let lines = tokio::time::timeout(Duration::from_secs(60), stream.collect::<Vec<_>>()).await.expect("logs end");
    let lines: Vec<(Option<u32>, String)> = lines
        .into_iter()
        .map(|l| l.expect("log line"))
        .filter(|l| l.text.starts_with("conformance: line"))
        .map(|l| (l.rank, l.text))
        .collect();
    let wanted: Vec<(Option<u32>, String)> =
        (0..ranks).flat_map(|r| expected(5).into_iter().map(move |t| (Some(r), t))).collect();
    assert_eq!(lines, wanted);
}
