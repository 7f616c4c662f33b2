//! Fault injection: failed requests (500, 429 with Retry-After), scheduling delays, the request
//! log, and API outages as a TLS client sees them.

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

/// Every message of an error's chain, lower case.
fn chain(err: &kube::Error) -> String {
    let mut text = String::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        text.push_str(&e.to_string().to_lowercase());
        text.push('\n');
        cause = e.source();
    }
    text
}

#[tokio::test]
async fn outages_over_tls_reset_connections_or_hold_requests_then_answer() {
    let ctx = start(SimConfig::default()).await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    // Refused: a reset, as from a port nobody listens on, never a TLS failure (which clients
    // rightly do not retry).
    ctx.sim.faults().outage(theseus_kube_sim::Outage::Refuse, None);
    for _ in 0..5 {
        let text = chain(&pods.list(&ListParams::default()).await.unwrap_err());
        assert!(text.contains("reset") && !text.contains("tls") && !text.contains("handshake"), "{text}");
    }
    // Hung: the TLS handshake completes and the request waits; once the outage ends it is
    // answered on the same connection.
    ctx.sim.faults().outage(theseus_kube_sim::Outage::Hang, Some(Duration::from_millis(700)));
    pods.list(&ListParams::default()).await.expect("answered once the hang ends");
    assert_eq!(ctx.sim.faults().current_outage(), None);
}
