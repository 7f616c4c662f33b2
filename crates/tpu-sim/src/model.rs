//! The simulator's state: nodes (`google.cloud.tpu.v2.Node`), queued resources
//! (`QueuedResource`), long-running operations (`google.longrunning.Operation` with
//! `google.cloud.tpu.v2.OperationMetadata`), quota and capacity per zone; and how a create
//! request's body becomes a Node (validation as the API does it: unknown fields, required
//! fields, label syntax; field names in errors as Google's `BadRequest` gives them).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value, json};

use crate::accel;
use crate::error::{ApiError, rpc_status};
use crate::workers::Running;

/// A node and what the simulator keeps beside its resource.
pub(crate) struct NodeRec {
    pub(crate) json: Value,
    /// Unique per create: a node deleted and made again under its name is another node.
    pub(crate) uid: u64,
    /// Address numbers of the workers (worker order; see `address::worker_address`).
    pub(crate) ips: Vec<u32>,
    /// The workers while the node is READY.
    pub(crate) workers: Option<Running>,
    /// Its workers are being started: their addresses stay taken until the start ends, even if
    /// the node is deleted meanwhile (the start then stops them and frees the addresses).
    pub(crate) starting: bool,
}

/// Everything the API serves.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) nodes: BTreeMap<String, NodeRec>,
    pub(crate) qrs: BTreeMap<String, Value>,
    pub(crate) ops: BTreeMap<String, Value>,
    /// Accelerator cores allowed per (project, zone); absent: no limit.
    pub(crate) quota: HashMap<(String, String), u32>,
    /// Zones out of capacity.
    pub(crate) stockout: HashSet<String>,
    next_ip: u32,
    next_uid: u64,
}

/// Top-level fields of `google.cloud.tpu.v2.Node` (JSON names); others are refused as the
/// API's JSON parser refuses them.
const NODE_FIELDS: &[&str] = &[
    "name",
    "description",
    "acceleratorType",
    "state",
    "healthDescription",
    "runtimeVersion",
    "networkConfig",
    "networkConfigs",
    "cidrBlock",
    "serviceAccount",
    "createTime",
    "schedulingConfig",
    "networkEndpoints",
    "health",
    "labels",
    "metadata",
    "tags",
    "id",
    "dataDisks",
    "apiVersion",
    "symptoms",
    "shieldedInstanceConfig",
    "acceleratorConfig",
    "queuedResource",
    "multisliceNode",
    "bootDiskConfig",
    "upcomingMaintenance",
];

/// RFC 1035 labels, as the API wants node and queued-resource ids.
pub(crate) fn valid_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && !id.ends_with('-')
}

/// GCE label rules: keys start with a lowercase letter; keys and values use `[a-z0-9_-]`
/// (and international lowercase letters, not modelled), at most 63 characters.
fn valid_label(key: &str, value: &str) -> bool {
    let ok = |s: &str| {
        s.len() <= 63 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    key.as_bytes().first().is_some_and(u8::is_ascii_lowercase) && ok(key) && ok(value)
}

fn string_map(body: &Value, field: &str, json_field: &str) -> Result<(), ApiError> {
    match body.get(json_field) {
        None => Ok(()),
        Some(Value::Object(map)) if map.values().all(Value::is_string) => Ok(()),
        Some(_) => Err(ApiError::invalid(field, format!("Invalid value at '{field}': a map of strings is expected"))),
    }
}

/// The current time as Google's JSON timestamps are written (RFC 3339, UTC).
pub(crate) fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

impl State {
    /// Takes `count` new worker addresses. Addresses are never reused in a simulator's life:
    /// a new VM never gets the address of one still being torn down, nor one a client still
    /// has a connection or known host for.
    pub(crate) fn take_ips(&mut self, count: u32) -> Option<Vec<u32>> {
        let end = self.next_ip.checked_add(count).filter(|end| *end <= crate::address::MAX_ADDRESSES)?;
        let taken = (self.next_ip..end).collect();
        self.next_ip = end;
        Some(taken)
    }

    pub(crate) fn next_uid(&mut self) -> u64 {
        self.next_uid += 1;
        // A 19-digit id as the API's; the counter keeps it unique.
        7_000_000_000_000_000_000 + self.next_uid
    }

    /// Accelerator cores in use by the nodes of a project and zone.
    pub(crate) fn cores_used(&self, project: &str, zone: &str) -> u32 {
        let prefix = format!("projects/{project}/locations/{zone}/nodes/");
        self.nodes
            .iter()
            .filter(|(name, _)| name.starts_with(&prefix))
            .filter_map(|(_, n)| n.json["acceleratorType"].as_str().and_then(accel::parse))
            .map(|a| a.size)
            .sum()
    }

    /// Refuses a create of `cores` over the zone's quota.
    pub(crate) fn check_quota(&self, project: &str, zone: &str, cores: u32) -> Result<(), ApiError> {
        let Some(&limit) = self.quota.get(&(project.to_owned(), zone.to_owned())) else { return Ok(()) };
        let used = self.cores_used(project, zone);
        if used + cores > limit { Err(ApiError::quota(project, zone, limit, cores, used)) } else { Ok(()) }
    }

    /// A new, running operation of `verb` on `target` in `parent` (`projects/P/locations/Z`).
    pub(crate) fn new_operation(&mut self, parent: &str, verb: &str, target: &str) -> String {
        let id: String = format!("operation-{}-{:016x}", time_millis(), rand::random::<u64>());
        let name = format!("{parent}/operations/{id}");
        let op = json!({
            "name": name,
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
                "createTime": now_rfc3339(),
                "target": target,
                "verb": verb,
                "cancelRequested": false,
                "apiVersion": "v2",
            },
            "done": false,
        });
        self.ops.insert(name.clone(), op);
        name
    }

    /// Ends an operation with a response or a `google.rpc.Status`.
    pub(crate) fn finish_operation(&mut self, name: &str, result: Result<Value, (i32, String)>) {
        let Some(op) = self.ops.get_mut(name) else { return };
        if op["done"] == true {
            return;
        }
        op["done"] = json!(true);
        op["metadata"]["endTime"] = json!(now_rfc3339());
        match result {
            Ok(response) => op["response"] = response,
            Err((code, message)) => op["error"] = rpc_status(code, &message),
        }
    }
}

fn time_millis() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// What a create request asks for, checked.
#[derive(Debug)]
pub(crate) struct NodeRequest {
    pub(crate) body: Map<String, Value>,
    pub(crate) accel: accel::AcceleratorType,
}

/// Checks a Node body of `nodes.create` or a queued resource's node spec; `field` prefixes
/// field names in errors (`node`, `queued_resource.tpu.node_spec[0].node`).
pub(crate) fn check_node_body(body: &Value, field: &str) -> Result<NodeRequest, ApiError> {
    let Value::Object(map) = body else {
        return Err(ApiError::invalid(field, format!("Invalid JSON payload received: '{field}' must be an object.")));
    };
    if let Some(unknown) = map.keys().find(|k| !NODE_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            field,
            format!("Invalid JSON payload received. Unknown name \"{unknown}\" at '{field}': Cannot find field."),
        ));
    }
    if map.contains_key("acceleratorConfig") && !map.contains_key("acceleratorType") {
        return Err(ApiError::invalid(
            &format!("{field}.accelerator_config"),
            "acceleratorConfig is not modelled by the simulator; give acceleratorType",
        ));
    }
    let accel_text = map.get("acceleratorType").and_then(Value::as_str).unwrap_or_default();
    if accel_text.is_empty() {
        return Err(ApiError::invalid(&format!("{field}.accelerator_type"), "Field accelerator_type is required."));
    }
    let accel = accel::parse(accel_text).ok_or_else(|| {
        ApiError::invalid(
            &format!("{field}.accelerator_type"),
            format!(
                "Accelerator type \"{accel_text}\" is not available in this zone. Valid types: {}",
                accel::all().join(", ")
            ),
        )
    })?;
    let runtime = map.get("runtimeVersion").and_then(Value::as_str).unwrap_or_default();
    if runtime.is_empty() {
        return Err(ApiError::invalid(&format!("{field}.runtime_version"), "Field runtime_version is required."));
    }
    if !accel::RUNTIME_VERSIONS.contains(&runtime) {
        return Err(ApiError::invalid(
            &format!("{field}.runtime_version"),
            format!(
                "Runtime version \"{runtime}\" is not found. Valid versions: {}",
                accel::RUNTIME_VERSIONS.join(", ")
            ),
        ));
    }
    string_map(body, &format!("{field}.labels"), "labels")?;
    string_map(body, &format!("{field}.metadata"), "metadata")?;
    if let Some(Value::Object(labels)) = map.get("labels")
        && let Some((k, _)) = labels.iter().find(|(k, v)| !valid_label(k, v.as_str().unwrap_or_default()))
    {
        return Err(ApiError::invalid(
            &format!("{field}.labels"),
            format!(
                "Invalid label \"{k}\": keys and values use lowercase letters, digits, '_' and '-', at most 63 characters; keys start with a letter."
            ),
        ));
    }
    Ok(NodeRequest { body: map.clone(), accel })
}

/// Applies `nodes.patch` (UpdateNode) to a node: the fields of `update_mask` (JSON or proto
/// names) are taken from `body`; only the user's own fields may change (`description`,
/// `labels`, `metadata`, `tags`); anything else is INVALID_ARGUMENT, as the API refuses output
/// and immutable fields. Workers see metadata as of their start (a divergence: the guest agent
/// would apply new `ssh-keys`).
pub(crate) fn apply_update(node: &mut Value, body: &Value, update_mask: &str) -> Result<(), ApiError> {
    let Value::Object(_) = body else {
        return Err(ApiError::invalid("node", "Invalid JSON payload received: 'node' must be an object."));
    };
    let fields: Vec<&str> = update_mask.split(',').map(str::trim).filter(|f| !f.is_empty()).collect();
    if fields.is_empty() {
        return Err(ApiError::invalid("update_mask", "Field update_mask is required."));
    }
    let mut updated = node.clone();
    for field in fields {
        let json = match field {
            "description" => "description",
            "labels" => "labels",
            "metadata" => "metadata",
            "tags" => "tags",
            other => {
                return Err(ApiError::invalid(
                    "update_mask",
                    format!("Field \"{other}\" cannot be updated (updatable: description, labels, metadata, tags)."),
                ));
            }
        };
        match body.get(json) {
            Some(v) => updated[json] = v.clone(),
            None => {
                if let Some(map) = updated.as_object_mut() {
                    map.remove(json);
                }
            }
        }
    }
    string_map(&updated, "node.labels", "labels")?;
    string_map(&updated, "node.metadata", "metadata")?;
    if let Some(Value::Object(labels)) = updated.get("labels")
        && let Some((k, _)) = labels.iter().find(|(k, v)| !valid_label(k, v.as_str().unwrap_or_default()))
    {
        return Err(ApiError::invalid("node.labels", format!("Invalid label \"{k}\".")));
    }
    *node = updated;
    Ok(())
}

/// The Node resource for a checked request, in state CREATING.
pub(crate) fn new_node(
    req: &NodeRequest,
    name: &str,
    project: &str,
    uid: u64,
    ips: &[u32],
    net: u8,
    queued_resource: Option<&str>,
) -> Value {
    let mut node = Value::Object(req.body.clone());
    let region = zone_region(name.split('/').nth(3).unwrap_or_default());
    let network = node["networkConfig"].as_object().cloned().unwrap_or_default();
    let external = network.get("enableExternalIps").and_then(Value::as_bool).unwrap_or(false);
    node["networkConfig"] = json!({
        "network": network.get("network").cloned().unwrap_or_else(|| json!(format!("projects/{project}/global/networks/default"))),
        "subnetwork": network.get("subnetwork").cloned().unwrap_or_else(|| json!(format!("projects/{project}/regions/{region}/subnetworks/default"))),
        "enableExternalIps": external,
    });
    if node.get("serviceAccount").is_none() {
        node["serviceAccount"] = json!({
            "email": format!("{project}-compute@developer.gserviceaccount.com"),
            "scope": [crate::auth::CLOUD_PLATFORM],
        });
    }
    let endpoints: Vec<Value> = ips
        .iter()
        .map(|ip| {
            let address = crate::address::worker_address(net, *ip);
            // In the simulator the "external" address is the internal one: both are reached
            // through the `ssh_proxy` (a documented divergence).
            if external {
                json!({"ipAddress": address, "port": 8470, "accessConfig": {"externalIp": address}})
            } else {
                json!({"ipAddress": address, "port": 8470})
            }
        })
        .collect();
    node["name"] = json!(name);
    node["state"] = json!("CREATING");
    node["networkEndpoints"] = json!(endpoints);
    node["cidrBlock"] = json!(format!("10.{net}.0.0/16"));
    node["createTime"] = json!(now_rfc3339());
    node["id"] = json!(uid.to_string());
    node["apiVersion"] = json!("V2");
    if let Some(qr) = queued_resource {
        node["queuedResource"] = json!(qr);
    }
    for output_only in ["health", "healthDescription", "symptoms", "multisliceNode"] {
        if let Some(map) = node.as_object_mut() {
            map.remove(output_only);
        }
    }
    node
}

/// `us-central2-b` -> `us-central2`.
pub(crate) fn zone_region(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}

/// A node's spot or preemptible setting (a queued resource's node is spot when the QR is).
pub(crate) fn is_spot_or_preemptible(node: &Value) -> bool {
    let sc = &node["schedulingConfig"];
    sc["spot"] == true || sc["preemptible"] == true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: Value) -> Result<NodeRequest, ApiError> {
        check_node_body(&body, "node")
    }

    #[test]
    fn node_bodies_are_checked_as_the_api_does() {
        let good = json!({"acceleratorType": "v4-16", "runtimeVersion": "tpu-ubuntu2204-base", "labels": {"theseus-run": "r1_x"}});
        assert_eq!(req(good).unwrap().accel.workers, 2);
        let field = |body: Value| req(body).unwrap_err().details[0]["fieldViolations"][0]["field"].clone();
        assert_eq!(field(json!({"runtimeVersion": "tpu-vm-base"})), "node.accelerator_type");
        assert_eq!(field(json!({"acceleratorType": "v4-7", "runtimeVersion": "tpu-vm-base"})), "node.accelerator_type");
        assert_eq!(field(json!({"acceleratorType": "v4-8"})), "node.runtime_version");
        assert_eq!(field(json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-9"})), "node.runtime_version");
        let bad_label = json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base", "labels": {"Run": "x"}});
        assert_eq!(field(bad_label), "node.labels");
        let unknown =
            req(json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base", "zone": "x"})).unwrap_err();
        assert!(unknown.message.contains("Unknown name \"zone\""), "{}", unknown.message);
        assert!(valid_id("my-tpu-1") && !valid_id("My") && !valid_id("1a") && !valid_id("a-") && !valid_id(""));
    }

    #[test]
    fn updates_touch_only_the_masked_user_fields() {
        let mut node = json!({"name": "n", "state": "READY", "labels": {"a": "1"}, "description": "old"});
        apply_update(&mut node, &json!({"labels": {"theseus-run": "r2"}, "description": "new"}), "labels").unwrap();
        assert_eq!((node["labels"]["theseus-run"].as_str(), node["description"].as_str()), (Some("r2"), Some("old")));
        apply_update(&mut node, &json!({}), "description").unwrap();
        assert!(node.get("description").is_none(), "a masked field absent from the body is cleared");
        let before = node.clone();
        for (body, mask) in
            [(json!({"state": "X"}), "state"), (json!({"labels": {"Bad": "x"}}), "labels"), (json!({}), "")]
        {
            assert_eq!(apply_update(&mut node, &body, mask).unwrap_err().http, 400, "{mask}");
        }
        assert_eq!(node, before, "a refused update changes nothing");
    }

    #[test]
    fn a_new_node_has_one_endpoint_per_worker_and_output_fields() {
        let r = req(json!({"acceleratorType": "v4-16", "runtimeVersion": "tpu-vm-base", "state": "READY"})).unwrap();
        let node = new_node(&r, "projects/p/locations/us-central2-b/nodes/n", "p", 7, &[0, 1], 77, None);
        assert_eq!(node["state"], "CREATING");
        assert_eq!(node["networkEndpoints"][1]["ipAddress"], "10.77.0.3");
        assert!(node["networkEndpoints"][0].get("accessConfig").is_none());
        assert_eq!(node["networkConfig"]["subnetwork"], "projects/p/regions/us-central2/subnetworks/default");
        let mut state = State::default();
        assert_eq!(state.take_ips(2), Some(vec![0, 1]));
        assert_eq!(state.take_ips(1), Some(vec![2]), "never reused");
        assert_eq!(
            (
                crate::address::worker_address(77, 0),
                crate::address::worker_address(77, 252),
                crate::address::worker_address(77, 253)
            ),
            ("10.77.0.2".into(), "10.77.0.254".into(), "10.77.1.2".into())
        );
        assert_eq!(crate::address::worker_address(77, crate::address::MAX_ADDRESSES - 1), "10.77.255.254");
        assert_eq!(state.take_ips(crate::address::MAX_ADDRESSES), None);
    }
}
