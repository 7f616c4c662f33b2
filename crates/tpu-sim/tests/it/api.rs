//! The v2 resources and their state machine over HTTPS: nodes, operations, queued resources,
//! errors as Google gives them, the request log and injected faults.

use serde_json::json;

use crate::support::{Fixture, PARENT, v4_16};

#[tokio::test]
async fn a_node_is_created_listed_and_deleted_through_operations() {
    let fx = Fixture::api_only().await;
    let (status, op) = fx.api("POST", &format!("{PARENT}/nodes?nodeId=tpu-a"), Some(v4_16())).await;
    assert_eq!(status, 200, "{op}");
    assert_eq!(op["done"], false);
    assert_eq!(op["metadata"]["@type"], "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata");
    assert!(op["name"].as_str().unwrap().starts_with("projects/p1/locations/us-central2-b/operations/"));
    let (_, node) = fx.api("GET", &format!("{PARENT}/nodes/tpu-a"), None).await;
    assert_eq!(node["state"], "CREATING");
    let done = fx.wait_op(&op).await;
    assert_eq!(done["response"]["@type"], "type.googleapis.com/google.cloud.tpu.v2.Node");
    assert_eq!(done["response"]["state"], "READY");
    let (_, node) = fx.api("GET", &format!("{PARENT}/nodes/tpu-a"), None).await;
    assert_eq!((node["state"].as_str(), node["health"].as_str()), (Some("READY"), Some("HEALTHY")));
    assert_eq!(node["networkEndpoints"].as_array().unwrap().len(), 2, "v4-16 has two workers: {node}");
    assert_eq!(node["name"], "projects/p1/locations/us-central2-b/nodes/tpu-a");

    let (status, dup) = fx.api("POST", &format!("{PARENT}/nodes?nodeId=tpu-a"), Some(v4_16())).await;
    assert_eq!((status, dup["error"]["status"].as_str()), (409, Some("ALREADY_EXISTS")));

    fx.create_node("tpu-b", json!({"acceleratorType": "v5litepod-8", "runtimeVersion": "v2-alpha-tpuv5-lite"})).await;
    let (_, page1) = fx.api("GET", &format!("{PARENT}/nodes?pageSize=1"), None).await;
    let token = page1["nextPageToken"].as_str().expect("a second page").to_owned();
    let (_, page2) = fx.api("GET", &format!("{PARENT}/nodes?pageSize=1&pageToken={token}"), None).await;
    assert_eq!(page2["nodes"][0]["name"], "projects/p1/locations/us-central2-b/nodes/tpu-b");
    assert!(page2.get("nextPageToken").is_none());

    let (status, op) = fx.api("DELETE", &format!("{PARENT}/nodes/tpu-a"), None).await;
    assert_eq!(status, 200);
    let (_, node) = fx.api("GET", &format!("{PARENT}/nodes/tpu-a"), None).await;
    assert_eq!(node["state"], "DELETING");
    let done = fx.wait_op(&op).await;
    assert_eq!(done["response"]["@type"], "type.googleapis.com/google.protobuf.Empty");
    let (status, gone) = fx.api("GET", &format!("{PARENT}/nodes/tpu-a"), None).await;
    assert_eq!((status, gone["error"]["status"].as_str()), (404, Some("NOT_FOUND")));
}

#[tokio::test]
async fn bad_requests_get_googles_errors() {
    let fx = Fixture::api_only().await;
    let bad_type = json!({"acceleratorType": "v4-12", "runtimeVersion": "tpu-vm-base"});
    let (status, err) = fx.api("POST", &format!("{PARENT}/nodes?nodeId=x"), Some(bad_type)).await;
    assert_eq!((status, err["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")));
    assert_eq!(err["error"]["details"][0]["fieldViolations"][0]["field"], "node.accelerator_type");
    let bad_version = json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-nope"});
    let (_, err) = fx.api("POST", &format!("{PARENT}/nodes?nodeId=x"), Some(bad_version)).await;
    assert_eq!(err["error"]["details"][0]["fieldViolations"][0]["field"], "node.runtime_version");
    let (status, err) = fx.api("POST", &format!("{PARENT}/nodes?nodeId=Bad_Id"), Some(v4_16())).await;
    assert_eq!((status, err["error"]["details"][0]["fieldViolations"][0]["field"].as_str()), (400, Some("node_id")));
    let (status, err) = fx.api("GET", "v2/projects/p1/locations/mars-north1-a/nodes", None).await;
    assert_eq!((status, err["error"]["status"].as_str()), (404, Some("NOT_FOUND")));
    assert!(err["error"]["message"].as_str().unwrap().contains("mars-north1-a"));
    let spot = json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base", "schedulingConfig": {"spot": true}});
    let (status, _) = fx.api("POST", &format!("{PARENT}/nodes?nodeId=x"), Some(spot)).await;
    assert_eq!(status, 400, "spot goes through queued resources");
    for junk in [json!([1, 2]), json!("v4-8"), json!({"acceleratorType": 8, "runtimeVersion": "tpu-vm-base"})] {
        let (status, err) = fx.api("POST", &format!("{PARENT}/nodes?nodeId=junk"), Some(junk.clone())).await;
        assert_eq!((status, err["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")), "{junk}: {err}");
    }
    let auth = format!("Authorization: Bearer {}", fx.token);
    let (status, err) = crate::support::curl(
        &fx.sim.info().ca,
        "POST",
        &fx.url(&format!("{PARENT}/nodes?nodeId=junk")),
        Some("{not json".into()),
        &[&auth],
        "application/json",
    )
    .await;
    assert_eq!((status, err["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")), "{err}");
    let (status, err) = fx.api("GET", &format!("{PARENT}/operations/operation-nope"), None).await;
    assert_eq!((status, err["error"]["code"].as_u64()), (404, Some(404)));
    // Nothing was made by any of them.
    let (_, list) = fx.api("GET", &format!("{PARENT}/nodes"), None).await;
    assert_eq!(list["nodes"].as_array().map(Vec::len), Some(0), "{list}");
}

#[tokio::test]
async fn quota_refuses_at_once_and_stockout_fails_the_operation() {
    let fx = Fixture::api_only().await;
    let (status, _) =
        fx.admin("POST", "quota", json!({"project": "p1", "zone": "us-central2-b", "acceleratorCores": 16})).await;
    assert_eq!(status, 200);
    fx.create_node("small", json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base"})).await;
    let (status, err) = fx.api("POST", &format!("{PARENT}/nodes?nodeId=big"), Some(v4_16())).await;
    assert_eq!((status, err["error"]["status"].as_str()), (429, Some("RESOURCE_EXHAUSTED")), "{err}");
    assert_eq!(err["error"]["details"][0]["@type"], "type.googleapis.com/google.rpc.QuotaFailure");
    let (status, _) = fx.api("GET", &format!("{PARENT}/nodes/big"), None).await;
    assert_eq!(status, 404, "nothing is created over quota");

    fx.admin("POST", "capacity", json!({"zone": "us-central2-b", "available": false})).await;
    let done = fx.create_node("out", json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base"})).await;
    assert_eq!(done["error"]["code"], 8, "{done}");
    assert!(done["error"]["message"].as_str().unwrap().contains("There is no more capacity in the zone"));
    let (status, _) = fx.api("GET", &format!("{PARENT}/nodes/out"), None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn deleting_a_creating_node_aborts_its_create() {
    let fx = Fixture::api_only().await;
    let (_, create) = fx.api("POST", &format!("{PARENT}/nodes?nodeId=quick"), Some(v4_16())).await;
    let (status, delete) = fx.api("DELETE", &format!("{PARENT}/nodes/quick"), None).await;
    assert_eq!(status, 200);
    let create = fx.wait_op(&create).await;
    assert_eq!(create["error"]["code"], 10, "{create}");
    fx.wait_op(&delete).await;
    let (status, _) = fx.api("GET", &format!("{PARENT}/nodes/quick"), None).await;
    assert_eq!(status, 404);
    // The name is free again and its addresses too.
    let again = fx.create_node("quick", v4_16()).await;
    assert_eq!(again["response"]["state"], "READY");
}

#[tokio::test]
async fn spot_goes_through_a_queued_resource_and_is_preempted() {
    let fx = Fixture::api_only().await;
    let qr = json!({
        "tpu": {"nodeSpec": [{"parent": "projects/p1/locations/us-central2-b", "nodeId": "spot-1", "node": v4_16()}]},
        "spot": {},
    });
    let (status, op) = fx.api("POST", &format!("{PARENT}/queuedResources?queuedResourceId=qr-1"), Some(qr)).await;
    assert_eq!(status, 200, "{op}");
    let done = fx.wait_op(&op).await;
    assert_eq!(done["response"]["@type"], "type.googleapis.com/google.cloud.tpu.v2.QueuedResource");
    let qr_path = format!("{PARENT}/queuedResources/qr-1");
    fx.wait_for(&qr_path, "ACTIVE", |_, q| q["state"]["state"] == "ACTIVE").await;
    let (_, node) = fx.api("GET", &format!("{PARENT}/nodes/spot-1"), None).await;
    assert_eq!(node["state"], "READY");
    assert_eq!(node["queuedResource"], "projects/p1/locations/us-central2-b/queuedResources/qr-1");
    assert_eq!(node["schedulingConfig"]["spot"], true);

    let (status, node) = fx.admin("POST", "projects/p1/locations/us-central2-b/nodes/spot-1:preempt", json!({})).await;
    assert_eq!((status, node["state"].as_str()), (200, Some("PREEMPTED")), "{node}");
    let (_, q) = fx.api("GET", &qr_path, None).await;
    assert_eq!(q["state"]["state"], "SUSPENDED");

    let (status, err) = fx.api("DELETE", &qr_path, None).await;
    assert_eq!((status, err["error"]["status"].as_str()), (400, Some("FAILED_PRECONDITION")), "{err}");
    let (status, op) = fx.api("DELETE", &format!("{qr_path}?force=true"), None).await;
    assert_eq!(status, 200);
    fx.wait_op(&op).await;
    assert_eq!(fx.api("GET", &qr_path, None).await.0, 404);
    assert_eq!(fx.api("GET", &format!("{PARENT}/nodes/spot-1"), None).await.0, 404);
}

#[tokio::test]
async fn a_queued_resource_waits_out_a_stockout() {
    let fx = Fixture::api_only().await;
    fx.admin("POST", "capacity", json!({"zone": "us-central2-b", "available": false})).await;
    let qr = json!({
        "tpu": {"nodeSpec": [{"parent": "projects/p1/locations/us-central2-b", "nodeId": "later", "node": v4_16()}]},
        "spot": {},
    });
    fx.api("POST", &format!("{PARENT}/queuedResources?queuedResourceId=qr-w"), Some(qr)).await;
    let qr_path = format!("{PARENT}/queuedResources/qr-w");
    fx.wait_for(&qr_path, "WAITING_FOR_RESOURCES", |_, q| q["state"]["state"] == "WAITING_FOR_RESOURCES").await;
    assert_eq!(fx.api("GET", &format!("{PARENT}/nodes/later"), None).await.0, 404);
    fx.admin("POST", "capacity", json!({"zone": "us-central2-b", "available": true})).await;
    fx.wait_for(&qr_path, "ACTIVE", |_, q| q["state"]["state"] == "ACTIVE").await;
}

#[tokio::test]
async fn on_demand_nodes_are_not_preempted() {
    let fx = Fixture::api_only().await;
    fx.create_node("steady", v4_16()).await;
    let (status, err) = fx.admin("POST", "projects/p1/locations/us-central2-b/nodes/steady:preempt", json!({})).await;
    assert_eq!((status, err["error"]["status"].as_str()), (400, Some("FAILED_PRECONDITION")));
    let pre =
        json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base", "schedulingConfig": {"preemptible": true}});
    fx.create_node("pre", pre).await;
    let (status, _) = fx.admin("POST", "projects/p1/locations/us-central2-b/nodes/pre:preempt", json!({})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn faults_fail_requests_and_operations_and_the_log_shows_them() {
    let fx = Fixture::api_only().await;
    let (status, _) = fx.admin("POST", "faults", json!({"method": "GET", "path": "/nodes", "status": 503})).await;
    assert_eq!(status, 200);
    let (status, err) = fx.api("GET", &format!("{PARENT}/nodes"), None).await;
    assert_eq!((status, err["error"]["status"].as_str()), (503, Some("UNAVAILABLE")));
    assert_eq!(fx.api("GET", &format!("{PARENT}/nodes"), None).await.0, 200, "a fault is used up");
    fx.admin("POST", "faults", json!({"operation": {"code": 13, "verb": "create", "message": "boom"}})).await;
    let done = fx.create_node("f1", v4_16()).await;
    assert_eq!((done["error"]["code"].as_i64(), done["error"]["message"].as_str()), (Some(13), Some("boom")));
    fx.create_node("f2", v4_16()).await;
    fx.admin("POST", "faults", json!({"operation": {"code": 14, "verb": "delete"}})).await;
    let (_, op) = fx.api("DELETE", &format!("{PARENT}/nodes/f2"), None).await;
    assert_eq!(fx.wait_op(&op).await["error"]["code"], 14);
    let (_, node) = fx.api("GET", &format!("{PARENT}/nodes/f2"), None).await;
    assert_eq!(node["state"], "READY", "a failed delete leaves the node as it was");
    // A reset after one matching request passed: the second gets no answer at all.
    fx.admin("POST", "faults", json!({"method": "GET", "path": "/nodes/f2", "reset": true, "skip": 1})).await;
    assert_eq!(fx.api("GET", &format!("{PARENT}/nodes/f2"), None).await.0, 200);
    let (ca, url, auth) = (
        fx.sim.info().ca.clone(),
        fx.url(&format!("{PARENT}/nodes/f2")),
        format!("Authorization: Bearer {}", fx.token),
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .arg("-sS")
            .arg("--cacert")
            .arg(&ca)
            .args(["-H", &auth, &url])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!out.status.success() && out.stdout.is_empty(), "no answer: {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(fx.api("GET", &format!("{PARENT}/nodes/f2"), None).await.0, 200, "a reset is used up");
    let (status, _) = fx.admin("POST", "faults", json!({"status": 200})).await;
    assert_eq!(status, 400, "a fault that is not a failure is refused");

    let (_, log) = fx.admin("GET", "requests", json!({})).await;
    let log = log.as_array().unwrap();
    let statuses: Vec<u64> = log
        .iter()
        .filter(|r| r["path"].as_str().unwrap().ends_with("/nodes"))
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [503, 200]);
    assert!(log.iter().all(|r| !r["path"].as_str().unwrap().starts_with("/sim/")), "admin calls are not logged");
    assert_eq!(fx.sim.requests().len(), log.len());
}

#[tokio::test]
async fn a_flaky_api_fails_some_reads_with_503() {
    let fx = Fixture::start(|c| {
        c.workers = false;
        c.latency = std::time::Duration::ZERO;
        c.flaky_seed = Some(42);
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..80 {
        statuses.push(fx.api("GET", &format!("{PARENT}/nodes"), None).await.0);
    }
    assert!(statuses.contains(&503) && statuses.contains(&200), "{statuses:?}");
    assert!(statuses.iter().all(|s| [200, 503].contains(s)));
    let (_, log) = fx.admin("GET", "requests", json!({})).await;
    assert_eq!(
        log.as_array().unwrap().iter().filter(|r| r["status"] == 503).count(),
        statuses.iter().filter(|s| **s == 503).count()
    );
}

#[tokio::test]
async fn labels_of_a_ready_node_are_updated_through_an_operation() {
    let fx = Fixture::api_only().await;
    let body = json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base", "labels": {"theseus-run": "r1"}});
    fx.create_node("relabel", body).await;
    let path = format!("{PARENT}/nodes/relabel?updateMask=labels");
    let (status, op) = fx.api("PATCH", &path, Some(json!({"labels": {"theseus-run": "r2"}}))).await;
    assert_eq!(status, 200, "{op}");
    assert_eq!(fx.wait_op(&op).await["response"]["labels"]["theseus-run"], "r2");
    let (_, node) = fx.api("GET", &format!("{PARENT}/nodes/relabel"), None).await;
    assert_eq!(node["labels"]["theseus-run"], "r2");
    let (status, err) = fx
        .api(
            "PATCH",
            &format!("{PARENT}/nodes/relabel?updateMask=acceleratorType"),
            Some(json!({"acceleratorType": "v4-16"})),
        )
        .await;
    assert_eq!((status, err["error"]["status"].as_str()), (400, Some("INVALID_ARGUMENT")));
    assert_eq!(fx.api("PATCH", &format!("{PARENT}/nodes/gone?updateMask=labels"), Some(json!({}))).await.0, 404);
}
