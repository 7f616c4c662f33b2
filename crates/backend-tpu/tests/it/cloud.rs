//! The VM's lifecycle against the fake API: reuse, create after confirmation only, spot through
//! a queued resource, recreate after a preemption, nothing left behind after quota or stockout,
//! delete, and the list `gc` reads. Requests are counted, not timed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use theseus_backend_tpu::api::transport::Http;
use theseus_backend_tpu::api::{AccessToken, ErrorKind, Retry};
use theseus_backend_tpu::auth::{Env, StaticToken};
use theseus_backend_tpu::cloud::{Cloud, Waits, labels};
use theseus_backend_tpu::config::TpuSettings;

use crate::fake::{FakeTpu, TOKEN};

pub(crate) fn settings(endpoint: &str) -> TpuSettings {
    TpuSettings {
        cluster: "gcp".into(),
        zone: "us-central2-b".into(),
        project: Some("p".into()),
        accelerator_type: "v4-16".into(),
        version: "tpu-ubuntu2204-base".into(),
        api_endpoint: Some(format!("{endpoint}/")),
        ..TpuSettings::default()
    }
}

pub(crate) fn cloud_for(settings: &TpuSettings) -> Cloud {
    let http = Http::new(None, None).unwrap();
    Cloud::with_tokens("t", settings, &Env::default(), http, Arc::new(StaticToken(AccessToken::new(TOKEN))))
        .unwrap()
        .with_waits(Waits {
            poll: Duration::from_millis(1),
            ready: Duration::from_secs(20),
            delete: Duration::from_secs(20),
        })
        .with_retry(Retry { attempts: 3, first_wait: Duration::from_millis(1), max_wait: Duration::from_millis(2) })
}

/// A progress sink that keeps the lines.
fn lines() -> (Arc<Mutex<Vec<String>>>, impl Fn(&str) + Send + Sync) {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let sink = kept.clone();
    (kept, move |line: &str| sink.lock().unwrap().push(line.to_owned()))
}

const NODE: &str = "/v2/projects/p/locations/us-central2-b/nodes";
const QUEUED: &str = "/v2/projects/p/locations/us-central2-b/queuedResources";

#[tokio::test]
async fn an_absent_vm_is_not_created_without_confirmation() {
    let (server, fake) = FakeTpu::start().await;
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let e = cloud.ensure_ready(false, &labels("r1", "me"), &[], &progress).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Refused);
    assert!(e.message.contains("--yes"), "{e}");
    assert_eq!(fake.count("POST"), 0);
}

#[tokio::test]
async fn a_confirmed_create_waits_for_ready_and_labels_the_vm() {
    let (server, fake) = FakeTpu::start().await;
    fake.with(|s| s.creating_polls = 2);
    let cloud = cloud_for(&settings(&server.uri()));
    let (kept, progress) = lines();
    let keys = vec!["me:ssh-ed25519 AAAAC3Nza me@box".to_owned()];
    let ensured = cloud.ensure_ready(true, &labels("Run-1", "me"), &keys, &progress).await.unwrap();
    assert!(ensured.created);
    assert!(ensured.node.is_ready() && ensured.node.created_by_theseus);
    assert_eq!(ensured.node.workers.len(), 2);
    assert_eq!(ensured.node.labels["theseus-run"], "run-1");
    assert_eq!(ensured.node.metadata["ssh-keys"], "me:ssh-ed25519 AAAAC3Nza me@box");
    assert_eq!(fake.count(&format!("POST {NODE}?nodeId=t")), 1);
    let kept = kept.lock().unwrap();
    assert!(kept[0].starts_with("creating TPU VM t (v4-16: 8 chips on 2 workers, on-demand"), "{kept:?}");
    // Each state once, not once per poll.
    assert_eq!(kept.iter().filter(|l| l.ends_with(": CREATING")).count(), 1, "{kept:?}");
    assert!(kept.last().unwrap().contains("READY (2 workers)"), "{kept:?}");
}

#[tokio::test]
async fn a_ready_vm_is_reused() {
    let (server, fake) = FakeTpu::start().await;
    fake.put_node("t", "READY", false);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let ensured = cloud.ensure_ready(false, &labels("r", "me"), &[], &progress).await.unwrap();
    assert!(!ensured.created && !ensured.node.created_by_theseus);
    assert_eq!(fake.log(), vec![format!("GET {NODE}/t")]);
    assert_eq!(cloud.plan_creation().await.unwrap(), None);
}

#[tokio::test]
async fn a_preempted_vm_theseus_made_is_deleted_and_made_again() {
    let (server, fake) = FakeTpu::start().await;
    fake.put_node("t", "PREEMPTED", true);
    let cloud = cloud_for(&settings(&server.uri()));
    let (kept, progress) = lines();
    let ensured = cloud.ensure_ready(true, &labels("r2", "me"), &[], &progress).await.unwrap();
    assert!(ensured.created);
    assert_eq!(ensured.node.labels["theseus-run"], "r2");
    assert_eq!(fake.count(&format!("DELETE {NODE}/t")), 1);
    assert_eq!(fake.count("POST"), 1);
    assert!(kept.lock().unwrap()[0].contains("is PREEMPTED: deleting it to create it again"));
}

#[tokio::test]
async fn a_vm_lost_after_a_failed_repair_is_made_again() {
    let (server, fake) = FakeTpu::start().await;
    fake.put_node("t", "UNKNOWN", true);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    assert!(cloud.plan_creation().await.unwrap().is_some());
    let ensured = cloud.ensure_ready(true, &labels("r3", "me"), &[], &progress).await.unwrap();
    assert!(ensured.created && ensured.node.is_ready());
    assert_eq!(fake.count(&format!("DELETE {NODE}/t")), 1);
}

#[tokio::test]
async fn a_preempted_vm_of_someone_else_is_left_alone() {
    let (server, fake) = FakeTpu::start().await;
    fake.put_node("t", "TERMINATED", false);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let e = cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Refused);
    assert!(
        e.message.contains("theseus did not create it") && e.message.contains("gcloud compute tpus tpu-vm delete t"),
        "{e}"
    );
    assert_eq!(fake.count("DELETE") + fake.count("POST"), 0);
}

#[tokio::test]
async fn a_stopped_vm_is_refused() {
    let (server, fake) = FakeTpu::start().await;
    fake.put_node("t", "STOPPED", true);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let e = cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.unwrap_err();
    assert!(e.message.contains("is STOPPED") && e.message.contains("tpu-vm start t"), "{e}");
}

#[tokio::test]
async fn quota_is_one_line_and_nothing_is_made() {
    let (server, fake) = FakeTpu::start().await;
    fake.with(|s| s.quota = true);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let e = cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Quota);
    assert!(e.message.starts_with("quota exceeded for TPU v4 cores in us-central2-b of project p:"), "{e}");
    assert!(!e.message.contains('\n'));
    // Refused at once: not retried, nothing to delete.
    assert_eq!(fake.count("POST"), 1);
    assert_eq!(fake.count("DELETE"), 0);
    assert!(fake.with(|s| s.nodes.is_empty()));
}

#[tokio::test]
async fn a_stockout_deletes_what_the_create_left() {
    let (server, fake) = FakeTpu::start().await;
    fake.with(|s| s.stockout = true);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let e = cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Stockout);
    assert!(
        e.message.starts_with("no capacity for v4-16 in us-central2-b now (Google: There is no more capacity"),
        "{e}"
    );
    assert_eq!(fake.count(&format!("DELETE {NODE}/t")), 1);
    assert!(fake.with(|s| s.nodes.is_empty()), "nothing left behind");
}

#[tokio::test]
async fn spot_goes_through_a_queued_resource() {
    let (server, fake) = FakeTpu::start().await;
    fake.with(|s| s.accepted_polls = 2);
    let cloud = cloud_for(&TpuSettings { spot: true, ..settings(&server.uri()) });
    let (kept, progress) = lines();
    let ensured = cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.unwrap();
    assert!(ensured.created && ensured.node.spot);
    assert_eq!(ensured.node.queued_resource.as_deref(), Some("t"));
    assert_eq!(fake.count(&format!("POST {QUEUED}?queuedResourceId=t")), 1);
    assert_eq!(fake.count(&format!("POST {NODE}")), 0);
    let body = fake.with(|s| s.queued["t"].clone());
    assert_eq!(body["spot"], serde_json::json!({}));
    assert_eq!(body["tpu"]["nodeSpec"][0]["parent"], "projects/p/locations/us-central2-b");
    assert_eq!(body["tpu"]["nodeSpec"][0]["node"]["labels"]["theseus-created"], "true");
    assert!(kept.lock().unwrap().iter().any(|l| l.ends_with("queued resource ACCEPTED")));

    // Deleting it goes through the queued resource, with its node.
    let (_, progress) = lines();
    assert!(cloud.delete(&progress).await.unwrap());
    assert_eq!(fake.count(&format!("DELETE {QUEUED}/t?force=true")), 1);
    assert!(fake.with(|s| s.nodes.is_empty() && s.queued.is_empty()));
}

#[tokio::test]
async fn a_failed_spot_request_is_deleted() {
    let (server, fake) = FakeTpu::start().await;
    fake.with(|s| s.stockout = true);
    let cloud = cloud_for(&TpuSettings { spot: true, ..settings(&server.uri()) });
    let (_, progress) = lines();
    let e = cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Stockout, "{e}");
    assert_eq!(fake.count(&format!("DELETE {QUEUED}/t?force=true")), 1);
    assert!(fake.with(|s| s.queued.is_empty()));
}

#[tokio::test]
async fn delete_of_an_absent_vm_is_no_op() {
    let (server, fake) = FakeTpu::start().await;
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    assert!(!cloud.delete(&progress).await.unwrap());
    assert_eq!(fake.count("DELETE"), 0);
    fake.put_node("t", "READY", true);
    assert!(cloud.delete(&progress).await.unwrap());
    assert_eq!(fake.count(&format!("DELETE {NODE}/t")), 1);
}

#[tokio::test]
async fn gc_lists_only_what_theseus_created() {
    let (server, fake) = FakeTpu::start().await;
    fake.put_node("a", "READY", true);
    fake.put_node("b", "READY", false);
    fake.put_node("c", "PREEMPTED", true);
    let cloud = cloud_for(&settings(&server.uri()));
    let names: Vec<String> = cloud.created_nodes().await.unwrap().into_iter().map(|n| n.name).collect();
    assert_eq!(names, ["a", "c"]);
}

#[tokio::test]
async fn gc_lists_a_spot_vm_still_queued_and_delete_removes_it() {
    let (server, fake) = FakeTpu::start().await;
    // The client was killed while its queued resource waited for capacity.
    fake.with(|s| s.accepted_polls = 1000);
    let cloud = cloud_for(&TpuSettings { spot: true, ..settings(&server.uri()) });
    let run = labels("r", "me");
    let waiting = async {
        while fake.count(&format!("GET {QUEUED}/t")) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::select! {
        _ = cloud.ensure_ready(true, &run, &[], &|_: &str| {}) => panic!("the queued resource is never served"),
        () = waiting => {}
    }
    let found = cloud.created_nodes().await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].name.as_str(), found[0].state.as_str()), ("t", "QUEUED"));
    assert!(found[0].created_by_theseus && found[0].spot);
    assert!(cloud.delete(&|_: &str| {}).await.unwrap());
    assert!(fake.with(|s| s.queued.is_empty()));
}

#[tokio::test]
async fn plan_names_what_would_be_created() {
    let (server, fake) = FakeTpu::start().await;
    let cloud = cloud_for(&TpuSettings { spot: true, ..settings(&server.uri()) });
    assert_eq!(
        cloud.plan_creation().await.unwrap().unwrap(),
        "TPU VM t (v4-16: 8 chips on 2 workers, spot, runtime tpu-ubuntu2204-base) in us-central2-b of project p"
    );
    fake.put_node("t", "PREEMPTED", true);
    assert!(cloud.plan_creation().await.unwrap().is_some(), "a preempted VM is made again");
    let cloud = cloud_for(&TpuSettings { version: String::new(), ..settings(&server.uri()) });
    let e = cloud.plan_creation().await.unwrap_err();
    assert!(e.message.starts_with("hosts.t.version is not set"), "{e}");
}

#[tokio::test]
async fn transient_failures_are_tried_again() {
    let (server, fake) = FakeTpu::start().await;
    fake.put_node("t", "READY", false);
    fake.with(|s| s.fail_next = vec![503, 503]);
    let cloud = cloud_for(&settings(&server.uri()));
    assert!(cloud.node().await.unwrap().is_some());
    assert_eq!(fake.count("GET"), 3);
    // More failures than attempts: the last one is the answer.
    fake.with(|s| s.fail_next = vec![503, 503, 503, 503]);
    let e = cloud.node().await.unwrap_err();
    assert!(e.is_transient() && e.message.contains("HTTP 503"), "{e}");
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_is_still_ours() {
    let (server, fake) = FakeTpu::start().await;
    fake.with(|s| s.lose_posts = 1);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let ensured = cloud.ensure_ready(true, &labels("r9", "me"), &[], &progress).await.unwrap();
    // The retried POST met the node the first one made: this run made it, so it deletes it.
    assert_eq!(fake.count("POST"), 2);
    assert!(ensured.created);
}

#[tokio::test]
async fn a_create_that_never_answers_leaves_nothing() {
    let (server, fake) = FakeTpu::start().await;
    // Every attempt is done by the API but its answer lost: the first makes the VM.
    fake.with(|s| s.lose_posts = 3);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let e = cloud.ensure_ready(true, &labels("r9", "me"), &[], &progress).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(fake.count("POST"), 3);
    assert_eq!(fake.count(&format!("DELETE {NODE}/t")), 1);
    assert!(fake.with(|s| s.nodes.is_empty()), "nothing left behind");
}

#[tokio::test]
async fn a_vm_made_meanwhile_by_another_run_is_not_ours() {
    let (server, fake) = FakeTpu::start().await;
    fake.put_node("t", "CREATING", true);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let ensured = cloud.ensure_ready(true, &labels("r9", "me"), &[], &progress).await.unwrap();
    assert!(!ensured.created, "a VM this call did not make is not deleted by it");
    assert_eq!(fake.count("POST"), 0);
}

#[tokio::test]
async fn an_ended_queued_resource_is_replaced() {
    let (server, fake) = FakeTpu::start().await;
    let stale = serde_json::json!({
        "name": "projects/p/locations/us-central2-b/queuedResources/t",
        "tpu": {"nodeSpec": [{"parent": "projects/p/locations/us-central2-b", "nodeId": "t", "node": {}}]},
        "spot": {},
        "state": {"state": "SUSPENDED"}
    });
    fake.with(|s| s.queued.insert("t".into(), stale));
    let cloud = cloud_for(&TpuSettings { spot: true, ..settings(&server.uri()) });
    let (_, progress) = lines();
    let ensured = cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.unwrap();
    assert!(ensured.created && ensured.node.is_ready());
    assert_eq!(fake.count(&format!("DELETE {QUEUED}/t?force=true")), 1);
    assert_eq!(fake.count(&format!("POST {QUEUED}")), 2);
}

#[tokio::test]
async fn a_queued_resource_of_another_submit_is_followed_not_owned() {
    for (run, ours) in [("other-run", false), ("r", true)] {
        let (server, fake) = FakeTpu::start().await;
        let queued = serde_json::json!({
            "name": "projects/p/locations/us-central2-b/queuedResources/t",
            "tpu": {"nodeSpec": [{"parent": "projects/p/locations/us-central2-b", "nodeId": "t",
                "node": {"labels": {"theseus-created": "true", "theseus-run": run}}}]},
            "spot": {},
            "state": {"state": "ACCEPTED"}
        });
        fake.with(|s| s.queued.insert("t".into(), queued));
        let cloud = cloud_for(&TpuSettings { spot: true, ..settings(&server.uri()) });
        let (_, progress) = lines();
        let ensured = cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.unwrap();
        assert!(ensured.node.is_ready(), "{run}");
        assert_eq!(ensured.created, ours, "{run}: only this run's own request is its VM");
        assert_eq!(fake.count("DELETE"), 0, "{run}");
    }
}

#[tokio::test]
async fn an_unknown_zone_is_not_an_absent_vm() {
    let (server, fake) = FakeTpu::start().await;
    let cloud = cloud_for(&TpuSettings { zone: "us-x1-a".into(), ..settings(&server.uri()) });
    let e = cloud.plan_creation().await.unwrap_err();
    assert!(
        e.message.contains("Location us-x1-a is not found") && e.message.contains("check the host's `zone` (us-x1-a)"),
        "{e}"
    );
    let (_, progress) = lines();
    assert!(cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.is_err());
    assert_eq!(fake.count("POST"), 0);
}

#[tokio::test]
async fn a_forgotten_operation_is_followed_through_the_vm() {
    let (server, fake) = FakeTpu::start().await;
    fake.with(|s| s.forget_ops = true);
    let cloud = cloud_for(&settings(&server.uri()));
    let (_, progress) = lines();
    let ensured = cloud.ensure_ready(true, &labels("r", "me"), &[], &progress).await.unwrap();
    assert!(ensured.created && ensured.node.is_ready());
    assert!(cloud.delete(&progress).await.unwrap());
    assert!(fake.with(|s| s.nodes.is_empty()));
}
