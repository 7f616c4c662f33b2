//! Volcano's garbage collector: a finished vcjob with `ttlSecondsAfterFinished` is deleted,
//! with its pods, once that many seconds have passed since it finished; one without stays.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use theseus_kube_sim::{NodeConfig, SimConfig};

use crate::support::{eventually, start, vcjob, vcjobs, wait_phase};

#[tokio::test]
async fn finished_jobs_are_deleted_after_ttl_seconds_after_finished() {
    let ctx = start(SimConfig { nodes: vec![NodeConfig::new("n0", 4)], ..SimConfig::default() }).await;
    let jobs = vcjobs(&ctx.client, "default");
    let mut job = vcjob("short", 1, 1, "img", &["true"]);
    job.data["spec"]["ttlSecondsAfterFinished"] = json!(2);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    jobs.create(&PostParams::default(), &vcjob("kept", 1, 1, "img", &["true"])).await.unwrap();
    let done = wait_phase(&jobs, "short", "Completed").await;
    let finished = done.data["status"]["state"]["lastTransitionTime"].as_str().unwrap().to_owned();
    assert_eq!(rfc3339_secs("2023-11-14T22:13:20Z"), 1_700_000_000);
    let finished = rfc3339_secs(&finished);
    eventually("the job collected", 20, || async { jobs.get("short").await.is_err().then_some(()) }).await;
    assert!(now_secs() >= finished + 2, "deleted {} s after it finished, before its TTL", now_secs() - finished);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    eventually("its pods collected", 20, || async {
        let listed = pods.list(&ListParams::default().labels("volcano.sh/job-name=short")).await.ok()?;
        listed.items.is_empty().then_some(())
    })
    .await;
    // A job without a TTL stays.
    wait_phase(&jobs, "kept", "Completed").await;
    assert!(jobs.get("kept").await.is_ok());
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Seconds since the epoch of an RFC 3339 UTC timestamp (`2026-01-02T03:04:05Z`).
fn rfc3339_secs(text: &str) -> u64 {
    let n: Vec<i64> = text.trim_end_matches('Z').split(['-', 'T', ':']).map(|p| p.parse().unwrap()).collect();
    let (y, m, d) = (n[0] - i64::from(n[1] <= 2), n[1], n[2]);
    // Days from the civil date (Howard Hinnant's algorithm).
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    u64::try_from(days * 86_400 + n[3] * 3600 + n[4] * 60 + n[5]).unwrap()
}
