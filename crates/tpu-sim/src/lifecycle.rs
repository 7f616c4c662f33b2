//! The state machine in time: a created node is CREATING for `create_seconds`, then its
//! workers start and it is READY (or, out of capacity, the operation ends with code 8 and the
//! node is gone); a deleted node is DELETING, its workers stop, then it is gone; a preempted
//! one is PREEMPTED with its workers stopped; a queued resource goes ACCEPTED ->
//! (WAITING_FOR_RESOURCES while the zone is out of capacity) -> PROVISIONING -> ACTIVE once its
//! node is READY, FAILED if the node cannot be made, SUSPENDED when its node is preempted or
//! deleted (the QueuedResourceState values of cloud_tpu.proto).
//!
//! A node deleted while CREATING: its create operation ends ABORTED (code 10), and workers a
//! racing start made are stopped. Operations end with their resource as `response`
//! (`@type` `google.cloud.tpu.v2.Node`/`QueuedResource`) or `google.protobuf.Empty` for deletes.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::Shared;
use crate::error::ApiError;
use crate::metadata::Instance;
use crate::model::NodeRec;
use crate::sshd::parse_ssh_keys;
use crate::workers::{Running, WorkerSpec};

pub(crate) const NODE_TYPE: &str = "type.googleapis.com/google.cloud.tpu.v2.Node";
const QR_TYPE: &str = "type.googleapis.com/google.cloud.tpu.v2.QueuedResource";
const EMPTY_TYPE: &str = "type.googleapis.com/google.protobuf.Empty";

/// `projects/P/locations/Z/...` -> (P, Z).
pub(crate) fn project_zone(name: &str) -> (String, String) {
    let parts: Vec<&str> = name.split('/').collect();
    (parts.get(1).copied().unwrap_or_default().to_owned(), parts.get(3).copied().unwrap_or_default().to_owned())
}

pub(crate) fn with_type(mut value: Value, type_url: &str) -> Value {
    if let Some(map) = value.as_object_mut() {
        map.insert("@type".into(), json!(type_url));
    }
    value
}

/// The message of an operation ended by a stockout (what the API says; code 8).
pub(crate) fn stockout_message(zone: &str) -> String {
    format!(
        "There is no more capacity in the zone \"{zone}\"; you can try in another zone where Cloud TPU Nodes are \
         offered (see https://cloud.google.com/tpu/docs/regions) [EC: 1702]"
    )
}

fn set_qr_state(shared: &Shared, qr: &str, state: &str, data: Option<(&str, Value)>) {
    let mut st = shared.lock();
    if let Some(q) = st.qrs.get_mut(qr) {
        let mut s = json!({"state": state, "stateInitiator": "SERVICE"});
        if let Some((key, value)) = data {
            s[key] = value;
        }
        q["state"] = s;
    }
}

/// Runs a node's creation: after `create_seconds`, workers and READY, or the failure.
pub(crate) fn spawn_create(shared: Arc<Shared>, name: String, uid: u64, op: Option<String>, qr: Option<String>) {
    tokio::spawn(async move {
        tokio::time::sleep(shared.config.create_seconds).await;
        let result = create(&shared, &name, uid).await;
        if let Some(q) = &qr {
            match &result {
                Ok(_) => set_qr_state(&shared, q, "ACTIVE", Some(("activeData", json!({})))),
                Err((code, message)) => {
                    let error = crate::error::rpc_status(*code, message);
                    set_qr_state(&shared, q, "FAILED", Some(("failedData", json!({"error": error}))));
                }
            }
        }
        if let Some(op) = op {
            shared.lock().finish_operation(&op, result.map(|node| with_type(node, NODE_TYPE)));
        }
    });
}

fn still_creating(rec: Option<&NodeRec>, uid: u64) -> bool {
    rec.is_some_and(|n| n.uid == uid && n.json["state"] == "CREATING")
}

async fn create(shared: &Arc<Shared>, name: &str, uid: u64) -> Result<Value, (i32, String)> {
    let aborted = || (10, format!("The node {name} was deleted while it was being created."));
    let (project, zone) = project_zone(name);
    let specs = {
        let mut st = shared.lock();
        if !still_creating(st.nodes.get(name), uid) {
            return Err(aborted());
        }
        let failure = if st.stockout.contains(&zone) {
            Some((8, stockout_message(&zone)))
        } else {
            shared.faults.take_operation("create")
        };
        if let Some(failure) = failure {
            st.nodes.remove(name);
            return Err(failure);
        }
        let rec = st.nodes.get_mut(name).expect("checked above");
        rec.starting = shared.net.is_some();
        worker_specs(shared, rec, &zone)
    };
    let running = match &shared.net {
        Some(_) => {
            let sh = shared.clone();
            let rt = tokio::runtime::Handle::current();
            let project2 = project.clone();
            let made = tokio::task::spawn_blocking(move || {
                let net = sh.net.as_ref().expect("checked above");
                net.up(specs, &project2, &sh.auth, &rt)
            })
            .await
            .map_err(|e| (13, format!("the simulator's worker start panicked: {e}")))?;
            match made {
                Ok(running) => Some(running),
                Err(err) => {
                    tracing::error!(node = name, %err, "cannot start the node's workers");
                    let mut st = shared.lock();
                    match st.nodes.get_mut(name).filter(|n| n.uid == uid) {
                        Some(rec) if rec.json["state"] == "CREATING" => {
                            st.nodes.remove(name);
                        }
                        Some(rec) => rec.starting = false,
                        None => {}
                    }
                    return Err((13, format!("the simulator could not start the workers: {err}")));
                }
            }
        }
        None => None,
    };
    let leftover = {
        let mut st = shared.lock();
        match st.nodes.get_mut(name).filter(|n| n.uid == uid) {
            Some(rec) => {
                rec.starting = false;
                rec.workers = running;
                if rec.json["state"] == "CREATING" {
                    rec.json["state"] = json!("READY");
                    rec.json["health"] = json!("HEALTHY");
                    return Ok(rec.json.clone());
                }
                // Being deleted: its deletion stops the workers when it removes the node.
                return Err(aborted());
            }
            None => running,
        }
    };
    // Deleted (and removed) while its workers started: stop them, then free the addresses.
    if let Some(running) = leftover {
        stop_workers(shared, running, Duration::ZERO, true).await;
    }
    Err(aborted())
}

fn worker_specs(shared: &Shared, rec: &NodeRec, zone: &str) -> Vec<WorkerSpec> {
    let node = &rec.json;
    let node_id = node["name"].as_str().unwrap_or_default().rsplit('/').next().unwrap_or_default().to_owned();
    let net = shared.net_octet;
    let ip = |n: u32| crate::address::worker_address(net, n);
    let short = format!("{:08x}", rec.uid as u32);
    let endpoints: Vec<String> = rec.ips.iter().enumerate().map(|(i, o)| format!("{short}:{i}:{}", ip(*o))).collect();
    let user_meta: Vec<(String, String)> = node["metadata"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
        .unwrap_or_default();
    let ssh_keys = user_meta.iter().find(|(k, _)| k == "ssh-keys").map(|(_, v)| v.clone()).unwrap_or_default();
    let email = node["serviceAccount"]["email"].as_str().unwrap_or_default().to_owned();
    let project = project_zone(node["name"].as_str().unwrap_or_default()).0;
    let mut hosts = String::from("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n");
    for (i, octet) in rec.ips.iter().enumerate() {
        let name = format!("t1v-n-{short}-w-{i}");
        hosts.push_str(&format!("{} {name}.{zone}.c.{project}.internal {name}  # Added by Google\n", ip(*octet)));
    }
    hosts.push_str("169.254.169.254 metadata.google.internal metadata  # Added by Google\n");
    rec.ips
        .iter()
        .enumerate()
        .map(|(i, octet)| {
            let mut attributes: std::collections::BTreeMap<String, String> = user_meta.iter().cloned().collect();
            attributes.insert("agent-worker-number".into(), i.to_string());
            attributes.insert("worker-network-endpoints".into(), endpoints.join(","));
            attributes.insert("accelerator-type".into(), node["acceleratorType"].as_str().unwrap_or_default().into());
            attributes.insert("ssh-keys".into(), ssh_keys.clone());
            // `KEY: 'value'` lines, as JAX's `get_tpu_env_value` parses them; no
            // MEGASCALE_* keys: one slice.
            let accelerator = node["acceleratorType"].as_str().unwrap_or_default();
            attributes.insert(
                "tpu-env".into(),
                format!("ACCELERATOR_TYPE: '{accelerator}'\nNODE_ID: '{node_id}'\nWORKER_ID: '{i}'\nZONE: '{zone}'\n"),
            );
            WorkerSpec {
                node_id: node_id.clone(),
                index: i as u32,
                ip: *octet,
                users: parse_ssh_keys(&ssh_keys),
                hosts: hosts.clone(),
                instance: Instance {
                    name: format!("t1v-n-{short}-w-{i}"),
                    id: format!("{}{i}", rec.uid),
                    zone: zone.to_owned(),
                    ip: ip(*octet),
                    email: email.clone(),
                    attributes,
                },
            }
        })
        .collect()
}

/// Stops workers off the async threads.
/// `wipe`: their disks go too (a deleted VM's do; a preempted one keeps them until deleted).
pub(crate) async fn stop_workers(shared: &Arc<Shared>, running: Running, grace: Duration, wipe: bool) {
    if shared.net.is_none() {
        return;
    }
    let sh = shared.clone();
    let _ = tokio::task::spawn_blocking(move || {
        if let Some(net) = &sh.net {
            net.down(running, grace, wipe);
        }
    })
    .await;
}

/// Runs a node's deletion: workers stop, `delete_seconds` later it is gone.
pub(crate) fn spawn_delete(shared: Arc<Shared>, name: String, uid: u64, op: String, before: Value) {
    tokio::spawn(async move {
        if let Some(failure) = shared.faults.take_operation("delete") {
            let mut st = shared.lock();
            if let Some(rec) = st.nodes.get_mut(&name).filter(|n| n.uid == uid) {
                rec.json["state"] = before;
            }
            st.finish_operation(&op, Err(failure));
            return;
        }
        delete_node(&shared, &name, uid).await;
        shared.lock().finish_operation(&op, Ok(json!({"@type": EMPTY_TYPE})));
    });
}

/// Stops a node's workers and removes it (its queued resource, if any, is SUSPENDED).
pub(crate) async fn delete_node(shared: &Arc<Shared>, name: &str, uid: u64) {
    let running = shared.lock().nodes.get_mut(name).filter(|n| n.uid == uid).and_then(|n| n.workers.take());
    if let Some(running) = running {
        stop_workers(shared, running, Duration::from_secs(1), true).await;
    }
    tokio::time::sleep(shared.config.delete_seconds).await;
    let removed = {
        let mut st = shared.lock();
        match st.nodes.get(name).filter(|n| n.uid == uid) {
            Some(_) => {
                let mut rec = st.nodes.remove(name).expect("checked");
                let qr = rec.json["queuedResource"].as_str().map(str::to_owned);
                let suspend = qr.filter(|qr| st.qrs.get(qr).is_some_and(|q| q["state"]["state"] != "DELETING"));
                Some((rec.workers.take(), suspend))
            }
            None => None,
        }
    };
    let Some((late_workers, suspend)) = removed else { return };
    if let Some(net) = &shared.net {
        net.wipe(name.rsplit('/').next().unwrap_or_default());
    }
    if let Some(qr) = suspend {
        set_qr_state(shared, &qr, "SUSPENDED", Some(("suspendedData", json!({}))));
    }
    // Workers whose start ended while the node was DELETING.
    if let Some(running) = late_workers {
        stop_workers(shared, running, Duration::ZERO, true).await;
    }
}

/// Preempts a READY spot or preemptible node (admin API): PREEMPTED at once, its workers'
/// processes get SIGTERM and, after the grace, SIGKILL; the answer comes when they are gone.
pub(crate) async fn preempt(shared: &Arc<Shared>, name: &str) -> Result<Value, ApiError> {
    let (running, node, qr) = {
        let mut st = shared.lock();
        let rec = st.nodes.get_mut(name).ok_or_else(|| ApiError::not_found(name))?;
        if rec.json["state"] != "READY" {
            return Err(ApiError::precondition(format!(
                "node {name} is {}; only a READY node is preempted",
                rec.json["state"].as_str().unwrap_or("?")
            )));
        }
        let qr = rec.json["queuedResource"].as_str().map(str::to_owned);
        if !crate::model::is_spot_or_preemptible(&rec.json) && qr.is_none() {
            return Err(ApiError::precondition(format!("node {name} is neither spot nor preemptible")));
        }
        rec.json["state"] = json!("PREEMPTED");
        if let Some(map) = rec.json.as_object_mut() {
            map.remove("health");
        }
        (rec.workers.take(), rec.json.clone(), qr)
    };
    if let Some(qr) = qr {
        set_qr_state(shared, &qr, "SUSPENDED", Some(("suspendedData", json!({}))));
    }
    if let Some(running) = running {
        stop_workers(shared, running, shared.config.preempt_grace, false).await;
    }
    Ok(node)
}

/// Runs a queued resource: accepted, waiting while the zone is out of capacity, then its node.
pub(crate) fn spawn_queued(
    shared: Arc<Shared>,
    qr: String,
    op: String,
    spec: crate::model::NodeRequest,
    node_name: String,
) {
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        {
            let mut st = shared.lock();
            let Some(q) = st.qrs.get(&qr).cloned() else { return };
            st.finish_operation(&op, Ok(with_type(q, QR_TYPE)));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (project, zone) = project_zone(&qr);
        loop {
            let waiting = {
                let st = shared.lock();
                match st.qrs.get(&qr) {
                    None => return,
                    Some(q) if q["state"]["state"] == "DELETING" => return,
                    Some(_) => st.stockout.contains(&zone),
                }
            };
            if !waiting {
                break;
            }
            set_qr_state(&shared, &qr, "WAITING_FOR_RESOURCES", None);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let made = {
            let mut st = shared.lock();
            if st.qrs.get(&qr).is_none_or(|q| q["state"]["state"] == "DELETING") {
                return;
            }
            if st.nodes.contains_key(&node_name) {
                Err(format!("node {node_name} already exists"))
            } else if let Some(ips) = st.take_ips(shared.workers_of(&spec.accel)) {
                let uid = st.next_uid();
                let mut node =
                    crate::model::new_node(&spec, &node_name, &project, uid, &ips, shared.net_octet, Some(&qr));
                node["schedulingConfig"]["spot"] = json!(st.qrs[&qr].get("spot").is_some());
                st.nodes.insert(node_name.clone(), NodeRec { json: node, uid, ips, workers: None, starting: false });
                Ok(uid)
            } else {
                Err("the simulator's subnet has no free addresses".to_owned())
            }
        };
        match made {
            Ok(uid) => {
                set_qr_state(&shared, &qr, "PROVISIONING", Some(("provisioningData", json!({}))));
                spawn_create(shared, node_name, uid, None, Some(qr));
            }
            Err(message) => {
                let error = crate::error::rpc_status(9, &message);
                set_qr_state(&shared, &qr, "FAILED", Some(("failedData", json!({"error": error}))));
            }
        }
    });
}

/// Deletes a queued resource (and, forced, its node).
pub(crate) fn spawn_delete_queued(shared: Arc<Shared>, qr: String, op: String, node: Option<(String, u64)>) {
    tokio::spawn(async move {
        if let Some((name, uid)) = node {
            delete_node(&shared, &name, uid).await;
        } else {
            tokio::time::sleep(shared.config.delete_seconds).await;
        }
        let mut st = shared.lock();
        st.qrs.remove(&qr);
        st.finish_operation(&op, Ok(json!({"@type": EMPTY_TYPE})));
    });
}
