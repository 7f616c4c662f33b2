//! What the backend needs of the VM behind a `tpu` host ([`Vm`]): its node as the API shows
//! it, making it ready (creating it only when confirmed), deleting it, and the nodes theseus
//! created. [`crate::cloud::Cloud`] is the real one (over the Cloud TPU API); tests give a
//! fake over real sshds.

use std::collections::BTreeMap;
use std::fmt::Debug;

use async_trait::async_trait;
use theseus_core::Result;

/// A note of a long step (`waiting for VM x: CREATING`).
pub type Progress<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A node (TPU VM) as the backend sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmNode {
    /// The node id (the host's name).
    pub name: String,
    /// The node's full resource name, `projects/P/locations/Z/nodes/ID`.
    pub resource: String,
    /// The API's unique id of this incarnation (a recreated node gets a new one).
    pub id: String,
    /// The API's state (`READY`, `CREATING`, `PREEMPTED`, ...).
    pub state: String,
    /// The API's health description, when it gives one.
    pub health: Option<String>,
    /// How to reach each worker over SSH (an address or an ssh config alias), worker 0 first.
    pub workers: Vec<String>,
    /// The login user the node's `ssh-keys` metadata names first, if any.
    pub ssh_user: Option<String>,
    /// The node's labels.
    pub labels: BTreeMap<String, String>,
    /// Whether theseus created it (label `theseus-created=true`).
    pub created_by_theseus: bool,
}

impl VmNode {
    /// Whether the node's processes are gone for good: preempted, terminated or stopped.
    pub fn is_interrupted(&self) -> bool {
        matches!(self.state.as_str(), "PREEMPTED" | "TERMINATED" | "STOPPED" | "STOPPING")
    }
}

/// A node made ready by [`Vm::ensure_ready`].
#[derive(Debug, Clone)]
pub struct Ready {
    /// The node, `READY`.
    pub node: VmNode,
    /// Whether this call created it.
    pub created: bool,
}

/// The VM of one `tpu` host.
#[async_trait]
pub trait Vm: Debug + Send + Sync {
    /// The node now; `None` when it does not exist.
    async fn node(&self) -> Result<Option<VmNode>>;

    /// The line `plan` shows for the node a submit would create now; `None` when it exists.
    async fn plan_creation(&self) -> Result<Option<String>>;

    /// The node, `READY`: reused when it is; created when absent (refused unless
    /// `create_confirmed`), with `labels`; waited for while it starts; a preempted or terminated
    /// node theseus created is deleted and created again.
    async fn ensure_ready(
        &self,
        create_confirmed: bool,
        labels: &BTreeMap<String, String>,
        progress: Progress<'_>,
    ) -> Result<Ready>;

    /// What the node would be created with now (the host's settings as JSON), kept with a run
    /// so that a restart after a preemption creates the same VM whatever the config says then;
    /// `None`: nothing to keep.
    fn creation(&self) -> Option<serde_json::Value> {
        None
    }

    /// [`Vm::ensure_ready`] creating (or creating anew) with `creation` (from [`Vm::creation`]
    /// at submit) instead of the settings now.
    async fn ensure_ready_as(
        &self,
        creation: Option<&serde_json::Value>,
        create_confirmed: bool,
        labels: &BTreeMap<String, String>,
        progress: Progress<'_>,
    ) -> Result<Ready> {
        let _ = creation;
        self.ensure_ready(create_confirmed, labels, progress).await
    }

    /// Deletes the node and waits until it is gone (absent already: done).
    async fn delete(&self, progress: Progress<'_>) -> Result<()>;
}
