//! Fault injection: failed requests (500, 429 with Retry-After), scheduling delays, the request
//! log.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use theseus_kube_sim::SimConfig;

use crate::support::{api_code, eventually, phase, start, vcjob, vcjobs};

#[tokio::test]
async fn injected_failures_then_success() {
    let ctx = start(SimConfig::default()).await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    ctx.sim.faults().fail_requests("list", "pods", 1, 500);
    let err = pods.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_code(&err), Some(500));
    pods.list(&ListParams::default()).await.expect("the next list succeeds");

    // kube-rs 5 retries 429 by default (honouring Retry-After), so the caller sees success
    // and the request log shows the retry.
    ctx.sim.faults().fail_requests("create", "jobs", 1, 429);
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &vcjob("j", 1, 1, "img", &["true"])).await.unwrap();

    let requests = ctx.sim.requests();
    let lists = requests.iter().filter(|(m, p)| m == "GET" && p.starts_with("/api/v1/namespaces/default/pods")).count();
    assert_eq!(lists, 2);
    let posts = requests
        .iter()
        .filter(|(m, p)| m == "POST" && p.starts_with("/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"));
    assert_eq!(posts.count(), 2, "one 429, one retry");
}

#[tokio::test]
async fn scheduling_delay_holds_jobs_pending() {
    let ctx = start(SimConfig::default()).await;
    ctx.sim.faults().delay_scheduling(Some(Duration::from_millis(600)));
    let jobs = vcjobs(&ctx.client, "default");
    let created = Instant::now();
    jobs.create(&PostParams::default(), &vcjob("slow", 1, 1, "img", &["true"])).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    eventually("the pod after the delay", 20, || async { pods.get("slow-worker-0").await.ok() }).await;
    assert!(created.elapsed() >= Duration::from_millis(600), "admitted after {:?}", created.elapsed());
    eventually("completion", 20, || async { (phase(&jobs.get("slow").await.ok()?) == "Completed").then_some(()) })
        .await;
}
