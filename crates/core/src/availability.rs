//! What a host can offer right now, as each backend measures it: plain data, which the solver
//! reads and backends produce ([`crate::probe::gather`] asks them all at once).

use std::time::Duration;

use serde::Serialize;

/// Free capacity of one host for one request, as its backend measured it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Availability {
    /// Not measured (availability checks were turned off): the solver trusts the config.
    NotChecked,
    /// The host did not answer in time or the probe failed.
    Unknown {
        /// Why, in one sentence.
        reason: String,
    },
    /// The host answered, and cannot take jobs until the user fixes something (its SSH host key
    /// is not trusted, its queue does not exist): the solver passes it over with `reason`.
    Unusable {
        /// What is wrong and how to fix it, in one or two sentences.
        reason: String,
    },
    /// Free chips of the requested kind (GPUs on a machine, GPUs left in a queue; for CPU
    /// requests, free CPU cores).
    Free {
        /// How many are free.
        chips: u32,
        /// Where the number came from, e.g. "nvidia-smi" or "queue capability".
        source: String,
    },
    /// Free GPUs per node, per partition (a scheduler's pools of nodes, e.g. Slurm's). Shown as
    /// `slurm`, as it always was.
    #[serde(rename = "slurm")]
    Partitions(PartitionReport),
}

/// Free GPUs of a cluster, per partition and node (from the scheduler, e.g. `sinfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PartitionReport {
    /// Partitions as the scheduler reports them.
    pub partitions: Vec<PartitionAvailability>,
}

/// One partition of a [`PartitionReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PartitionAvailability {
    /// Partition name (without the default marker `*`).
    pub name: String,
    /// Nodes of the partition.
    pub nodes: Vec<NodeAvailability>,
}

/// One node of a [`PartitionAvailability`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeAvailability {
    /// Node name.
    pub name: String,
    /// GRES type of its GPUs (`h100`), `None` for untyped GRES.
    pub gpu_type: Option<String>,
    /// GPUs configured on the node.
    pub total: u32,
    /// GPUs not allocated right now.
    pub free: u32,
    /// Whether the node can take jobs (not down, drained or in maintenance).
    pub usable: bool,
}

/// Default time one host may take to report its availability.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
