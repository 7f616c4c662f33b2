//! The Cloud TPU API v2 REST surface (`google/cloud/tpu/v2/cloud_tpu.proto`, service `Tpu`):
//! `nodes` (list/get/create/delete), `queuedResources` (list/get/create/delete), `operations`
//! (get/list), `acceleratorTypes` and `runtimeVersions` (list/get) and `locations` (list), all
//! under `/v2/projects/{project}/locations/{zone}/`. Lists page with `pageSize`/`pageToken`
//! and answer `nextPageToken` (default page size 50 here; Google does not document one).
//! `PATCH nodes/ID?updateMask=` (UpdateNode) changes `description`, `labels`, `metadata`,
//! `tags` of a READY node (at once; its operation is done 100 ms later).
//! `nodes:getGuestAttributes` serves the `hostkeys/` namespace (each worker's sshd host key, as
//! the guest agent publishes it and gcloud reads it into known_hosts); other custom methods
//! (`:stop`, `:start`, ...) answer UNIMPLEMENTED (501).
//!
//! An unknown zone is `404 NOT_FOUND` ("Location Z is not found or access is unauthorized.",
//! the message Google's front ends give an unknown location; the code is one of the two the
//! contract allows: not verified against the live API). Any project is accepted.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::Shared;
use crate::error::ApiError;
use crate::lifecycle;
use crate::model::{self, NodeRec};

const DEFAULT_PAGE: usize = 50;

/// Serves `/v2/...` (already authenticated): `(status, body)`.
pub(crate) async fn route(
    shared: &Arc<Shared>,
    method: &http::Method,
    path: &str,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<(u16, Value), ApiError> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let get = *method == http::Method::GET;
    match segments.as_slice() {
        ["v2", "projects", project, "locations"] if get => {
            let locations: Vec<Value> = shared
                .config
                .zones
                .iter()
                .map(|z| json!({"name": format!("projects/{project}/locations/{z}"), "locationId": z}))
                .collect();
            Ok((200, json!({"locations": locations})))
        }
        ["v2", "projects", project, "locations", zone, rest @ ..] => {
            if !shared.config.zones.iter().any(|z| z == zone) {
                return Err(ApiError::new(404, format!("Location {zone} is not found or access is unauthorized.")));
            }
            let parent = format!("projects/{project}/locations/{zone}");
            located(shared, method, &parent, project, zone, rest, query, body).await
        }
        _ => Err(ApiError::new(404, format!("The requested URL {path} was not found on this server."))),
    }
}

#[allow(clippy::too_many_arguments)]
async fn located(
    shared: &Arc<Shared>,
    method: &http::Method,
    parent: &str,
    project: &str,
    zone: &str,
    rest: &[&str],
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<(u16, Value), ApiError> {
    use http::Method;
    match (method.clone(), rest) {
        (Method::GET, ["nodes"]) => {
            let st = shared.lock();
            let items: Vec<Value> = st
                .nodes
                .iter()
                .filter(|(n, _)| n.starts_with(&format!("{parent}/nodes/")))
                .map(|(_, r)| r.json.clone())
                .collect();
            page(items, query, "nodes")
        }
        (Method::POST, ["nodes"]) => create_node(shared, parent, project, zone, query, body).map(|op| (200, op)),
        (Method::GET, ["nodes", id]) if !id.contains(':') => {
            let name = format!("{parent}/nodes/{id}");
            let st = shared.lock();
            st.nodes.get(&name).map(|r| (200, r.json.clone())).ok_or_else(|| ApiError::not_found(&name))
        }
        (Method::PATCH, ["nodes", id]) if !id.contains(':') => {
            let name = format!("{parent}/nodes/{id}");
            let mask = query.get("updateMask").map(String::as_str).unwrap_or_default();
            update_node(shared, &name, parent, &parse_body(body)?, mask).map(|op| (200, op))
        }
        (Method::DELETE, ["nodes", id]) => {
            delete_node(shared, &format!("{parent}/nodes/{id}"), parent).map(|op| (200, op))
        }
        (Method::GET, ["queuedResources"]) => {
            let st = shared.lock();
            let items: Vec<Value> = st
                .qrs
                .iter()
                .filter(|(n, _)| n.starts_with(&format!("{parent}/queuedResources/")))
                .map(|(_, q)| q.clone())
                .collect();
            page(items, query, "queuedResources")
        }
        (Method::POST, ["queuedResources"]) => create_queued(shared, parent, project, query, body).map(|op| (200, op)),
        (Method::GET, ["queuedResources", id]) => {
            let name = format!("{parent}/queuedResources/{id}");
            shared.lock().qrs.get(&name).map(|q| (200, q.clone())).ok_or_else(|| ApiError::not_found(&name))
        }
        (Method::DELETE, ["queuedResources", id]) => {
            let force = query.get("force").is_some_and(|v| v == "true");
            delete_queued(shared, &format!("{parent}/queuedResources/{id}"), parent, force).map(|op| (200, op))
        }
        (Method::GET, ["operations"]) => {
            let st = shared.lock();
            let items: Vec<Value> =
                st.ops.iter().filter(|(n, _)| n.starts_with(&format!("{parent}/"))).map(|(_, o)| o.clone()).collect();
            page(items, query, "operations")
        }
        (Method::GET, ["operations", id]) => {
            let name = format!("{parent}/operations/{id}");
            shared.lock().ops.get(&name).map(|o| (200, o.clone())).ok_or_else(|| ApiError::not_found(&name))
        }
        (Method::GET, ["acceleratorTypes"]) => {
            let items: Vec<Value> = crate::accel::all().iter().map(|t| accelerator_type(parent, t)).collect();
            page(items, query, "acceleratorTypes")
        }
        (Method::GET, ["acceleratorTypes", id]) => crate::accel::parse(id)
            .map(|_| (200, accelerator_type(parent, id)))
            .ok_or_else(|| ApiError::not_found(&format!("{parent}/acceleratorTypes/{id}"))),
        (Method::GET, ["runtimeVersions"]) => {
            let items: Vec<Value> = crate::accel::RUNTIME_VERSIONS.iter().map(|v| runtime_version(parent, v)).collect();
            page(items, query, "runtimeVersions")
        }
        (Method::GET, ["runtimeVersions", id]) if crate::accel::RUNTIME_VERSIONS.contains(id) => {
            Ok((200, runtime_version(parent, id)))
        }
        (Method::POST, ["nodes", id]) if id.ends_with(":getGuestAttributes") => {
            let name = format!("{parent}/nodes/{}", id.trim_end_matches(":getGuestAttributes"));
            guest_attributes(shared, &name, &parse_body(body)?).map(|v| (200, v))
        }
        (_, ["nodes", id]) if id.contains(':') => Err(ApiError::new(
            501,
            format!("Method {} is not implemented by the simulator.", id.split(':').nth(1).unwrap_or("")),
        )),
        _ => Err(ApiError::new(
            404,
            format!("The requested URL {parent}/{} was not found on this server.", rest.join("/")),
        )),
    }
}

/// `GetGuestAttributesResponse`: one `GuestAttributes` per worker (in worker order, or those
/// `workerIds` names), with the `hostkeys/` entries (`{namespace, key, value}`) of a READY node.
fn guest_attributes(shared: &Shared, name: &str, body: &Value) -> Result<Value, ApiError> {
    let path = body["queryPath"].as_str().unwrap_or("");
    let wanted: Option<Vec<String>> =
        body["workerIds"].as_array().map(|ids| ids.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect());
    let st = shared.lock();
    let rec = st.nodes.get(name).ok_or_else(|| ApiError::not_found(name))?;
    let workers = rec.workers.as_ref().map(|r| r.workers.as_slice()).unwrap_or_default();
    let list: Vec<Value> = workers
        .iter()
        .enumerate()
        .filter(|(i, _)| wanted.as_ref().is_none_or(|w| w.is_empty() || w.contains(&i.to_string())))
        .map(|(_, w)| {
            let (kind, key) = w.host_key.split_once(' ').unwrap_or(("ssh-ed25519", ""));
            let entry = json!({"namespace": "hostkeys", "key": kind, "value": key});
            let items: Vec<Value> =
                if "hostkeys/".starts_with(path) || path.starts_with("hostkeys") { vec![entry] } else { vec![] };
            json!({"queryPath": path, "queryValue": {"items": items}})
        })
        .collect();
    Ok(json!({"guestAttributes": list}))
}

fn accelerator_type(parent: &str, t: &str) -> Value {
    json!({"name": format!("{parent}/acceleratorTypes/{t}"), "type": t})
}

fn runtime_version(parent: &str, v: &str) -> Value {
    json!({"name": format!("{parent}/runtimeVersions/{v}"), "version": v})
}

/// One page of `items` under `key`, with `nextPageToken` when more follow.
fn page(items: Vec<Value>, query: &HashMap<String, String>, key: &str) -> Result<(u16, Value), ApiError> {
    let size = match query.get("pageSize") {
        None => DEFAULT_PAGE,
        Some(s) => match s.parse::<usize>() {
            Ok(0) => DEFAULT_PAGE,
            Ok(n) => n,
            Err(_) => {
                return Err(ApiError::invalid(
                    "page_size",
                    format!("Invalid value at 'page_size' (TYPE_INT32), \"{s}\""),
                ));
            }
        },
    };
    let start = match query.get("pageToken").filter(|t| !t.is_empty()) {
        None => 0,
        Some(token) => token
            .strip_prefix("sim-")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= items.len())
            .ok_or_else(|| ApiError::invalid("page_token", "Invalid page token."))?,
    };
    let end = (start + size).min(items.len());
    let mut out = json!({ key: items[start..end].to_vec() });
    if end < items.len() {
        out["nextPageToken"] = json!(format!("sim-{end}"));
    }
    Ok((200, out))
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::new(400, format!("Invalid JSON payload received. {e}")))
}

fn create_node(
    shared: &Arc<Shared>,
    parent: &str,
    project: &str,
    zone: &str,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let id = query.get("nodeId").map(String::as_str).unwrap_or_default();
    if !model::valid_id(id) {
        return Err(ApiError::invalid(
            "node_id",
            format!(
                "Invalid node id \"{id}\": it must be 1-63 characters of lowercase letters, digits and '-', starting with a letter and not ending with '-'."
            ),
        ));
    }
    let req = model::check_node_body(&parse_body(body)?, "node")?;
    if req.body.get("schedulingConfig").is_some_and(|s| s["spot"] == true) {
        // The simulator makes spot TPUs through queued resources only (contract §1; a
        // divergence: Google also takes spot in nodes.create for some generations).
        return Err(ApiError::invalid(
            "node.scheduling_config.spot",
            "Spot TPUs are created through queued resources (queuedResources.create with `spot: {}`).",
        ));
    }
    let name = format!("{parent}/nodes/{id}");
    let mut st = shared.lock();
    if st.nodes.contains_key(&name) {
        return Err(ApiError::new(409, format!("Resource '{name}' already exists")));
    }
    same_id_elsewhere(shared, &st, id)?;
    st.check_quota(project, zone, req.accel.size)?;
    let ips = st
        .take_ips(shared.workers_of(&req.accel))
        .ok_or_else(|| ApiError::new(429, "The simulator's subnet has no free addresses for the node's workers."))?;
    let uid = st.next_uid();
    let node = model::new_node(&req, &name, project, uid, &ips, shared.net_octet, None);
    st.nodes.insert(name.clone(), NodeRec { json: node, uid, ips, workers: None, starting: false });
    let op = st.new_operation(parent, "create", &name);
    let answer = st.ops[&op].clone();
    drop(st);
    lifecycle::spawn_create(shared.clone(), name, uid, Some(op), None);
    Ok(answer)
}

/// Workers are named by node id (`ROOT/workers/NODE`, namespace `PREFIX-NODE-wN`), so with
/// workers one simulator holds one node of an id across its projects and zones (a divergence:
/// Google scopes ids by project and zone).
fn same_id_elsewhere(shared: &Shared, st: &model::State, id: &str) -> Result<(), ApiError> {
    let suffix = format!("/nodes/{id}");
    match st.nodes.keys().find(|k| k.ends_with(&suffix)) {
        Some(other) if shared.net.is_some() => Err(ApiError::new(
            409,
            format!("The simulator already has a node '{other}'; with real workers node ids are unique per simulator."),
        )),
        _ => Ok(()),
    }
}

/// UpdateNode: a READY node's user fields change; the operation ends with the node.
fn update_node(shared: &Arc<Shared>, name: &str, parent: &str, body: &Value, mask: &str) -> Result<Value, ApiError> {
    let mut st = shared.lock();
    let rec = st.nodes.get_mut(name).ok_or_else(|| ApiError::not_found(name))?;
    if rec.json["state"] != "READY" {
        return Err(ApiError::precondition(format!(
            "node {name} is {}; only a READY node is updated",
            rec.json["state"].as_str().unwrap_or("?")
        )));
    }
    model::apply_update(&mut rec.json, body, mask)?;
    let node = rec.json.clone();
    let op = st.new_operation(parent, "update", name);
    let answer = st.ops[&op].clone();
    drop(st);
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let result = match shared.faults.take_operation("update") {
            Some(failure) => Err(failure),
            None => Ok(lifecycle::with_type(node, lifecycle::NODE_TYPE)),
        };
        shared.lock().finish_operation(&op, result);
    });
    Ok(answer)
}

fn delete_node(shared: &Arc<Shared>, name: &str, parent: &str) -> Result<Value, ApiError> {
    let mut st = shared.lock();
    let rec = st.nodes.get_mut(name).ok_or_else(|| ApiError::not_found(name))?;
    let before = rec.json["state"].clone();
    rec.json["state"] = json!("DELETING");
    let uid = rec.uid;
    let op = st.new_operation(parent, "delete", name);
    let answer = st.ops[&op].clone();
    drop(st);
    lifecycle::spawn_delete(shared.clone(), name.to_owned(), uid, op, before);
    Ok(answer)
}

fn create_queued(
    shared: &Arc<Shared>,
    parent: &str,
    project: &str,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Value, ApiError> {
    let id = query.get("queuedResourceId").map(String::as_str).unwrap_or_default();
    if !model::valid_id(id) {
        return Err(ApiError::invalid("queued_resource_id", format!("Invalid queued resource id \"{id}\".")));
    }
    let body = parse_body(body)?;
    let specs = body["tpu"]["nodeSpec"].as_array().cloned().unwrap_or_default();
    let [spec] = specs.as_slice() else {
        return Err(ApiError::invalid(
            "queued_resource.tpu.node_spec",
            "Exactly one node_spec is supported by the simulator (multislice is not modelled).",
        ));
    };
    if spec["parent"].as_str() != Some(parent) {
        return Err(ApiError::invalid(
            "queued_resource.tpu.node_spec[0].parent",
            format!("node_spec parent must be \"{parent}\"."),
        ));
    }
    let node_id = spec["nodeId"].as_str().unwrap_or_default();
    if !model::valid_id(node_id) {
        return Err(ApiError::invalid(
            "queued_resource.tpu.node_spec[0].node_id",
            format!("Invalid node id \"{node_id}\"."),
        ));
    }
    let req = model::check_node_body(&spec["node"], "queued_resource.tpu.node_spec[0].node")?;
    let name = format!("{parent}/queuedResources/{id}");
    let node_name = format!("{parent}/nodes/{node_id}");
    let (_, zone) = lifecycle::project_zone(parent);
    let mut st = shared.lock();
    if st.qrs.contains_key(&name) {
        return Err(ApiError::new(409, format!("Resource '{name}' already exists")));
    }
    if st.nodes.contains_key(&node_name) {
        return Err(ApiError::new(409, format!("Resource '{node_name}' already exists")));
    }
    same_id_elsewhere(shared, &st, node_id)?;
    st.check_quota(project, &zone, req.accel.size)?;
    let mut qr = json!({
        "name": name,
        "createTime": model::now_rfc3339(),
        "tpu": body["tpu"],
        "state": {"state": "ACCEPTED", "stateInitiator": "USER", "acceptedData": {}},
    });
    for key in ["spot", "guaranteed", "bestEffort", "queueingPolicy", "reservationName"] {
        if let Some(v) = body.get(key) {
            qr[key] = v.clone();
        }
    }
    st.qrs.insert(name.clone(), qr);
    let op = st.new_operation(parent, "create", &name);
    let answer = st.ops[&op].clone();
    drop(st);
    lifecycle::spawn_queued(shared.clone(), name, op, req, node_name);
    Ok(answer)
}

fn delete_queued(shared: &Arc<Shared>, name: &str, parent: &str, force: bool) -> Result<Value, ApiError> {
    let mut st = shared.lock();
    let qr = st.qrs.get(name).ok_or_else(|| ApiError::not_found(name))?;
    let node_name = qr["tpu"]["nodeSpec"][0]["nodeId"].as_str().map(|id| format!("{parent}/nodes/{id}"));
    let node =
        node_name.and_then(|n| st.nodes.get(&n).filter(|r| r.json["queuedResource"] == name).map(|r| (n, r.uid)));
    if node.is_some() && !force {
        return Err(ApiError::precondition(format!(
            "Queued resource {name} has a node; delete the node first or delete with force=true."
        )));
    }
    if let Some((n, _)) = &node
        && let Some(rec) = st.nodes.get_mut(n)
    {
        rec.json["state"] = json!("DELETING");
    }
    if let Some(q) = st.qrs.get_mut(name) {
        q["state"] = json!({"state": "DELETING", "stateInitiator": "USER"});
    }
    let op = st.new_operation(parent, "delete", name);
    let answer = st.ops[&op].clone();
    drop(st);
    lifecycle::spawn_delete_queued(shared.clone(), name.to_owned(), op, node);
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_carry_a_token_until_the_end() {
        let items: Vec<Value> = (0..5).map(|i| json!(i)).collect();
        let q = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let (_, first) = page(items.clone(), &q(&[("pageSize", "2")]), "nodes").unwrap();
        assert_eq!((first["nodes"].as_array().unwrap().len(), first["nextPageToken"].as_str()), (2, Some("sim-2")));
        let (_, last) = page(items.clone(), &q(&[("pageSize", "2"), ("pageToken", "sim-4")]), "nodes").unwrap();
        assert_eq!((last["nodes"].as_array().unwrap().len(), last.get("nextPageToken")), (1, None));
        assert_eq!(page(items.clone(), &q(&[("pageToken", "x")]), "nodes").unwrap_err().http, 400);
        assert_eq!(page(items, &q(&[("pageSize", "-1")]), "nodes").unwrap_err().http, 400);
    }
}
