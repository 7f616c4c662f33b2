//! The Cloud TPU API v2 resources theseus reads and writes, in Google's JSON mapping of the
//! proto (camelCase, enums as their names, absent fields at their defaults): `Node`,
//! `QueuedResource`, `google.longrunning.Operation` and `google.rpc.Status`. Plain data.
//!
//! Fields follow googleapis `google/cloud/tpu/v2/cloud_tpu.proto` (read at commit 9415ba04:
//! messages `Node`, `NetworkEndpoint`, `SchedulingConfig`, `QueuedResource`,
//! `QueuedResourceState` with its `failedData.error`, `OperationMetadata.statusDetail`) and
//! `google/longrunning/operations.proto` (`Operation`); unknown fields are ignored, as Google's
//! clients do, so newer API fields do not break reading.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A TPU VM (`Node`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiNode {
    /// Full name, `projects/P/locations/Z/nodes/ID` (output only).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// e.g. `v4-8`.
    pub accelerator_type: String,
    /// e.g. `tpu-ubuntu2204-base`.
    pub runtime_version: String,
    /// `CREATING`, `READY`, `PREEMPTED`, ... (output only).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// Why the node is unhealthy (output only).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub health_description: String,
    /// `HEALTHY`, `TIMEOUT`, `UNHEALTHY_MAINTENANCE`, ...
    #[serde(skip_serializing_if = "String::is_empty")]
    pub health: String,
    /// Network of the workers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_config: Option<NetworkConfig>,
    /// One per worker, worker 0 first (output only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network_endpoints: Vec<NetworkEndpoint>,
    /// The service account the workers run as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccount>,
    /// Spot or preemptible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling_config: Option<SchedulingConfig>,
    /// Resource labels.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Instance metadata (`ssh-keys`, `startup-script`, ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// RFC 3339 (output only).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub create_time: String,
    /// Unique id (output only; an int64, written as a string in JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    /// The queued resource that made this node, if one did (output only).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub queued_resource: String,
}

/// `NetworkConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkConfig {
    /// VPC network.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub network: String,
    /// VPC subnetwork.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subnetwork: String,
    /// Give workers external IPs.
    pub enable_external_ips: bool,
}

/// `NetworkEndpoint`: how to reach one worker.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkEndpoint {
    /// Internal address.
    pub ip_address: String,
    /// Port of the TPU runtime (not SSH).
    pub port: i32,
    /// External address, when the worker has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_config: Option<AccessConfig>,
}

/// `AccessConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AccessConfig {
    /// External address.
    pub external_ip: String,
}

/// `ServiceAccount`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceAccount {
    /// Its email.
    pub email: String,
    /// OAuth scopes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
}

/// `SchedulingConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SchedulingConfig {
    /// Preemptible.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// Spot.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub spot: bool,
}

/// `ListNodesResponse`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeList {
    /// This page's nodes.
    pub nodes: Vec<ApiNode>,
    /// Empty on the last page.
    pub next_page_token: String,
    /// Locations that could not be reached.
    pub unreachable: Vec<String>,
}

/// `ListQueuedResourcesResponse`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueuedResourceList {
    /// This page's queued resources.
    pub queued_resources: Vec<QueuedResource>,
    /// Empty on the last page.
    pub next_page_token: String,
}

/// A `QueuedResource` (spot VMs are created through one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueuedResource {
    /// Full name, `projects/P/locations/Z/queuedResources/ID` (output only).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The node(s) to make.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpu: Option<QueuedTpu>,
    /// Present (as `{}`) for a spot request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spot: Option<Value>,
    /// Its state (output only): `{"state": "ACCEPTED" | "PROVISIONING" | "ACTIVE" | "FAILED" |
    /// "SUSPENDED" | ..., "failedData": {"error": Status}}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
}

impl QueuedResource {
    /// The state's name (`ACTIVE`, ...); empty when absent.
    pub fn state_name(&self) -> &str {
        match &self.state {
            Some(Value::Object(state)) => state.get("state").and_then(Value::as_str).unwrap_or_default(),
            // Tolerated: a bare enum name.
            Some(Value::String(state)) => state,
            _ => "",
        }
    }

    /// The error of a `FAILED` queued resource (`state.failedData.error`).
    pub fn failure(&self) -> Option<Status> {
        let error = self.state.as_ref()?.get("failedData")?.get("error")?;
        serde_json::from_value(error.clone()).ok()
    }
}

/// `QueuedResource.Tpu`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueuedTpu {
    /// The nodes (theseus makes one).
    pub node_spec: Vec<NodeSpec>,
}

/// `QueuedResource.Tpu.NodeSpec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSpec {
    /// `projects/P/locations/Z`.
    pub parent: String,
    /// The node id.
    pub node_id: String,
    /// The node to make.
    pub node: ApiNode,
}

/// `google.longrunning.Operation`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Operation {
    /// `projects/P/locations/Z/operations/X`.
    pub name: String,
    /// `OperationMetadata` (`verb`, `target`, `statusDetail`, ...).
    pub metadata: Option<Value>,
    /// Finished.
    pub done: bool,
    /// Its failure, when it ended in one.
    pub error: Option<Status>,
    /// Its result, when it succeeded.
    pub response: Option<Value>,
}

impl Operation {
    /// `metadata.statusDetail`, the API's own words on the progress, when given.
    pub fn status_detail(&self) -> Option<&str> {
        self.metadata.as_ref()?.get("statusDetail")?.as_str().filter(|s| !s.is_empty())
    }
}

/// `google.rpc.Status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Status {
    /// A `google.rpc.Code` (8 is `RESOURCE_EXHAUSTED`).
    pub code: i32,
    /// Developer-facing text.
    pub message: String,
    /// Typed details (`@type` names the message).
    pub details: Vec<Value>,
}

/// `google.rpc.Code` values theseus tells apart (googleapis `google/rpc/code.proto`).
pub mod code {
    /// `NOT_FOUND`.
    pub const NOT_FOUND: i32 = 5;
    /// `ALREADY_EXISTS`.
    pub const ALREADY_EXISTS: i32 = 6;
    /// `PERMISSION_DENIED`.
    pub const PERMISSION_DENIED: i32 = 7;
    /// `RESOURCE_EXHAUSTED` (quota, or no capacity in the zone).
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    /// `UNAVAILABLE`.
    pub const UNAVAILABLE: i32 = 14;
    /// `UNAUTHENTICATED`.
    pub const UNAUTHENTICATED: i32 = 16;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_reads_as_google_writes_it() {
        let node: ApiNode = serde_json::from_value(serde_json::json!({
            "name": "projects/p/locations/us-central2-b/nodes/t",
            "acceleratorType": "v4-16",
            "state": "READY",
            "networkEndpoints": [
                {"ipAddress": "10.0.0.2", "port": 8470, "accessConfig": {"externalIp": "34.1.2.3"}},
                {"ipAddress": "10.0.0.3", "port": 8470}
            ],
            "schedulingConfig": {"spot": true},
            "labels": {"theseus-created": "true"},
            "id": "12345",
            "apiVersion": "V2",
            "symptoms": []
        }))
        .unwrap();
        assert_eq!(node.network_endpoints.len(), 2);
        assert_eq!(node.network_endpoints[0].access_config.as_ref().unwrap().external_ip, "34.1.2.3");
        assert!(node.scheduling_config.unwrap().spot);
    }

    #[test]
    fn a_node_to_create_writes_only_what_is_set() {
        let node = ApiNode { accelerator_type: "v4-8".into(), runtime_version: "v".into(), ..ApiNode::default() };
        assert_eq!(
            serde_json::to_value(&node).unwrap(),
            serde_json::json!({"acceleratorType": "v4-8", "runtimeVersion": "v"})
        );
    }

    #[test]
    fn queued_resource_states_and_failures() {
        let qr: QueuedResource = serde_json::from_value(serde_json::json!({
            "state": {"state": "FAILED", "failedData": {"error": {"code": 8, "message": "no capacity"}}}
        }))
        .unwrap();
        assert_eq!(qr.state_name(), "FAILED");
        assert_eq!(qr.failure().unwrap().code, code::RESOURCE_EXHAUSTED);
    }
}
