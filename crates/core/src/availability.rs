//! What a host can offer right now, as each backend measures it, and gathering it from every
//! candidate host at once with a per-host timeout.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::backend::DynBackend;
use crate::solver::Request;

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
    /// Free chips of the requested kind (GPUs on a machine, GPUs left in a queue; for CPU
    /// requests, free CPU cores).
    Free {
        /// How many are free.
        chips: u32,
        /// Where the number came from, e.g. "nvidia-smi" or "queue capability".
        source: String,
    },
    /// Slurm: free GPUs per node, per partition.
    Slurm(SlurmAvailability),
}

/// Free GPUs on a Slurm cluster, per partition and node (from `sinfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SlurmAvailability {
    /// Partitions as `sinfo` reports them.
    pub partitions: Vec<PartitionAvailability>,
}

/// One partition of a [`SlurmAvailability`].
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

/// Asks every backend for its availability at the same time. A host that fails or does not
/// answer within `timeout` is reported as [`Availability::Unknown`]; this never waits longer
/// than `timeout` (plus scheduling noise) in total.
pub async fn gather(
    backends: &[(String, Arc<DynBackend>)],
    request: &Request,
    timeout: Duration,
) -> BTreeMap<String, Availability> {
    let probes = backends.iter().map(|(name, backend)| {
        let backend = Arc::clone(backend);
        let request = request.clone();
        async move {
            let res = tokio::time::timeout(timeout, backend.availability(&request)).await;
            let availability = match res {
                Ok(Ok(a)) => a,
                Ok(Err(e)) => Availability::Unknown { reason: format!("probe failed: {e}") },
                Err(_) => Availability::Unknown {
                    reason: format!("no answer within {}s", timeout.as_secs_f64()),
                },
            };
            (name.clone(), availability)
        }
    });
    futures::future::join_all(probes).await.into_iter().collect()
}
