//! A TPU VM as the backend sees it ([`Node`]): its state, its workers' addresses in worker
//! order, its labels and whether theseus created it; the labels theseus puts on the VMs it
//! creates; and the body of a create request built from a host's settings ([`node_to_create`]).
//! Pure: no IO (checked by `cargo xtask tidy`).

use std::collections::BTreeMap;

use crate::api::types::{ApiNode, NetworkConfig, QueuedResource, SchedulingConfig, ServiceAccount};
use crate::config::{TpuSettings, run_label};

/// The label on every VM theseus creates.
pub const CREATED_LABEL: &str = "theseus-created";
/// The label naming the run that created the VM.
pub const RUN_LABEL: &str = "theseus-run";
/// The label naming the local user who created the VM.
pub const USER_LABEL: &str = "theseus-user";

/// The instance-metadata key of the login keys (`user:ssh-ed25519 AAAA... comment` lines), as
/// GCE's guest agent reads it.
pub const SSH_KEYS: &str = "ssh-keys";

/// One worker's addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerAddr {
    /// Internal address.
    pub internal_ip: String,
    /// External address, when the worker has one.
    pub external_ip: Option<String>,
}

impl WorkerAddr {
    /// The address to reach it at: internal with `internal_ip`, else the external one when
    /// there is one.
    pub fn address(&self, internal_ip: bool) -> &str {
        match (&self.external_ip, internal_ip) {
            (Some(external), false) => external,
            _ => &self.internal_ip,
        }
    }
}

/// A TPU VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node id (the host's name).
    pub name: String,
    /// `READY`, `CREATING`, `PREEMPTED`, ... as the API says; `QUEUED` (theseus's word) for a
    /// spot VM whose queued resource has not made it yet ([`queued_node`]).
    pub state: String,
    /// `HEALTHY`, ... when the API says.
    pub health: Option<String>,
    /// Why it is unhealthy, when the API says.
    pub health_description: Option<String>,
    /// e.g. `v4-8`.
    pub accelerator_type: String,
    /// One per worker, worker 0 first.
    pub workers: Vec<WorkerAddr>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its instance metadata.
    pub metadata: BTreeMap<String, String>,
    /// Labelled `theseus-created=true`.
    pub created_by_theseus: bool,
    /// A spot VM.
    pub spot: bool,
    /// A preemptible VM.
    pub preemptible: bool,
    /// The id of the queued resource that made it, when one did.
    pub queued_resource: Option<String>,
    /// When it was created (RFC 3339), when the API says.
    pub create_time: Option<String>,
}

impl Node {
    /// Whether it is `READY`.
    pub fn is_ready(&self) -> bool {
        self.state == "READY"
    }

    /// Whether it is gone for good and must be made anew: `PREEMPTED`, `TERMINATED`, or
    /// `UNKNOWN` (googleapis `cloud_tpu.proto` v2: "unknown state after a failed repair").
    pub fn is_lost(&self) -> bool {
        matches!(self.state.as_str(), "PREEMPTED" | "TERMINATED" | "UNKNOWN")
    }

    /// The run that created it (label `theseus-run`).
    pub fn run(&self) -> Option<&str> {
        self.labels.get(RUN_LABEL).map(String::as_str)
    }

    /// Its state with the API's health words, for progress lines: `CREATING`,
    /// `READY (UNHEALTHY_MAINTENANCE: rescheduling)`.
    pub fn state_text(&self) -> String {
        match (&self.health, &self.health_description) {
            (_, Some(d)) => format!("{} ({d})", self.state),
            (Some(h), None) if h != "HEALTHY" => format!("{} ({h})", self.state),
            _ => self.state.clone(),
        }
    }
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

impl From<ApiNode> for Node {
    fn from(n: ApiNode) -> Node {
        let name = n.name.rsplit('/').next().unwrap_or_default().to_owned();
        let scheduling = n.scheduling_config.unwrap_or_default();
        Node {
            name,
            state: if n.state.is_empty() { "STATE_UNSPECIFIED".into() } else { n.state },
            health: non_empty(&n.health),
            health_description: non_empty(&n.health_description),
            accelerator_type: n.accelerator_type,
            workers: n
                .network_endpoints
                .into_iter()
                .map(|e| WorkerAddr {
                    internal_ip: e.ip_address,
                    external_ip: e.access_config.map(|a| a.external_ip).filter(|ip| !ip.is_empty()),
                })
                .collect(),
            created_by_theseus: n.labels.get(CREATED_LABEL).is_some_and(|v| v == "true"),
            labels: n.labels,
            metadata: n.metadata,
            spot: scheduling.spot,
            preemptible: scheduling.preemptible,
            queued_resource: non_empty(n.queued_resource.rsplit('/').next().unwrap_or_default()),
            create_time: non_empty(&n.create_time),
        }
    }
}

/// The node a queued resource will make, while it has not made it (state `QUEUED`); `None`
/// when it names no node.
pub fn queued_node(resource: &QueuedResource) -> Option<Node> {
    let spec = resource.tpu.as_ref()?.node_spec.first()?;
    let mut node = Node::from(spec.node.clone());
    node.name = spec.node_id.clone();
    node.state = "QUEUED".to_owned();
    node.spot = resource.spot.is_some();
    node.queued_resource = non_empty(resource.name.rsplit('/').next().unwrap_or_default());
    node.workers.clear();
    Some(node)
}

/// The labels of a VM theseus creates for `run_id` of `user`: `theseus-created=true`,
/// `theseus-run`, `theseus-user` (values made label-safe).
pub fn labels(run_id: &str, user: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CREATED_LABEL.to_owned(), "true".to_owned()),
        (RUN_LABEL.to_owned(), run_label(run_id)),
        (USER_LABEL.to_owned(), run_label(user)),
    ])
}

/// The node to create for `settings`: its accelerator and runtime, network, service account,
/// scheduling (`preemptible`; spot goes through a queued resource, see [`crate::cloud`]), the
/// host's metadata with `ssh_keys` added to `ssh-keys`, and `labels` with `theseus-created=true`.
pub fn node_to_create(settings: &TpuSettings, labels: &BTreeMap<String, String>, ssh_keys: &[String]) -> ApiNode {
    let mut metadata = settings.metadata.clone();
    if !ssh_keys.is_empty() {
        let mut lines: Vec<String> = metadata.get(SSH_KEYS).map(|k| vec![k.trim_end().to_owned()]).unwrap_or_default();
        lines.extend(ssh_keys.iter().map(|k| k.trim().to_owned()));
        lines.retain(|l| !l.is_empty());
        metadata.insert(SSH_KEYS.to_owned(), lines.join("\n"));
    }
    let mut labels = labels.clone();
    labels.insert(CREATED_LABEL.to_owned(), "true".to_owned());
    ApiNode {
        accelerator_type: settings.accelerator_type.trim().to_owned(),
        runtime_version: settings.version.trim().to_owned(),
        network_config: Some(NetworkConfig {
            network: settings.network.clone().unwrap_or_default(),
            subnetwork: settings.subnetwork.clone().unwrap_or_default(),
            // gcloud's default: workers get external addresses (`--internal-ips` turns them off);
            // `internal_ip` only says which address theseus connects to, as the original's did.
            enable_external_ips: true,
        }),
        service_account: settings
            .service_account
            .as_ref()
            .map(|email| ServiceAccount { email: email.clone(), scope: vec![crate::auth::file::SCOPE.to_owned()] }),
        scheduling_config: settings.preemptible.then_some(SchedulingConfig { preemptible: true, spot: false }),
        labels,
        metadata,
        ..ApiNode::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::{AccessConfig, NetworkEndpoint};

    #[test]
    fn a_node_lists_its_workers_in_order() {
        let api = ApiNode {
            name: "projects/p/locations/z/nodes/t".into(),
            state: "READY".into(),
            network_endpoints: vec![
                NetworkEndpoint {
                    ip_address: "10.0.0.2".into(),
                    port: 8470,
                    access_config: Some(AccessConfig { external_ip: "34.0.0.1".into() }),
                },
                NetworkEndpoint { ip_address: "10.0.0.3".into(), port: 8470, access_config: None },
            ],
            labels: labels("Run.1", "me"),
            queued_resource: "projects/p/locations/z/queuedResources/t".into(),
            ..ApiNode::default()
        };
        let node = Node::from(api);
        assert_eq!(node.name, "t");
        assert!(node.created_by_theseus && node.is_ready());
        assert_eq!(node.run(), Some("run-1"));
        assert_eq!(node.workers[0].address(false), "34.0.0.1");
        assert_eq!(node.workers[0].address(true), "10.0.0.2");
        assert_eq!(node.workers[1].address(false), "10.0.0.3");
        assert_eq!(node.queued_resource.as_deref(), Some("t"));
    }

    #[test]
    fn the_node_to_create_carries_keys_labels_and_scheduling() {
        let settings = TpuSettings {
            accelerator_type: "v4-8".into(),
            version: "tpu-ubuntu2204-base".into(),
            preemptible: true,
            metadata: [("ssh-keys".to_owned(), "alice:ssh-ed25519 AAAA a".to_owned())].into(),
            ..TpuSettings::default()
        };
        let node = node_to_create(&settings, &labels("r", "bob"), &["bob:ssh-ed25519 BBBB b".into()]);
        assert_eq!(node.metadata["ssh-keys"], "alice:ssh-ed25519 AAAA a\nbob:ssh-ed25519 BBBB b");
        assert_eq!(node.labels["theseus-created"], "true");
        assert!(node.scheduling_config.unwrap().preemptible);
        assert!(node.service_account.is_none());
    }
}
