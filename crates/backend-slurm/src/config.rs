//! The settings of a `slurm` host ([`SlurmHost`]): the login node, partitions and `#SBATCH`
//! defaults, as the config writes them. Plain data, read by [`crate::host::SlurmType`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use theseus_backend_ssh::remote::HostEntry;
use theseus_core::config::SshSettings;
use theseus_core::plan::HostKind;

/// The kind of Slurm hosts.
pub const KIND: HostKind = HostKind::named("slurm");

/// `type: slurm`: a Slurm cluster reached over SSH to its login node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmHost {
    /// Login node alias.
    pub ssh: String,
    /// How to connect (`known_hosts`, `connect_timeout`, `max_sessions`, `identity_file`,
    /// `port`, `user`, `proxy_jump`, `ssh_options`, `login_env`), written among the host's keys; unset keys
    /// leave the decision to the user's ssh config. Read by [`crate::host::SlurmType`].
    #[serde(flatten, skip_deserializing)]
    pub connection: SshSettings,
    /// Cluster name.
    pub cluster: String,
    /// GPU partitions; default ones are tried first.
    #[serde(default)]
    pub partitions: Vec<PartitionConfig>,
    /// Partitions for CPU-only jobs, in order (default: `partitions`).
    #[serde(default, alias = "partitions_cpu")]
    pub cpu_partitions: Vec<String>,
    /// `#SBATCH --account`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// `#SBATCH --qos`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// `#SBATCH --mem` (default `64G`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem: Option<String>,
    /// `#SBATCH --exclude`.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Optional chip caps. Absent or empty: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chips: Option<BTreeMap<String, u32>>,
    /// Accepted for compatibility; not used.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Walltime (`#SBATCH --time`); [`DEFAULT_SLURM_TIME`] when unset ([`SlurmHost::time_limit`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// `#SBATCH --constraint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// GPUs per node, overriding what `sinfo` reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    /// Extra `#SBATCH` directives, e.g. `--reservation=x`.
    #[serde(default)]
    pub extra_directives: Vec<String>,
    /// `uv sync --group` names.
    #[serde(default)]
    pub uv_groups: Vec<String>,
    /// Environment for jobs on this host.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How long this host's availability probe may take before the host counts as "unknown"
    /// (e.g. `3s`, `500ms`; default 5s, see `theseus_core::probe::DEFAULT_TIMEOUT`). `--probe-timeout`
    /// overrides it. Parsed by `theseus_core::duration::parse`; more than 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "theseus_core::config::duration_text"
    )]
    pub probe_timeout: Option<String>,
}

/// A Slurm partition: a bare name or `{name, default, constraint}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PartitionConfig {
    /// Just the name.
    Name(String),
    /// Name with options.
    Detailed(PartitionDetail),
}

/// The map form of [`PartitionConfig`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionDetail {
    /// Partition name.
    pub name: String,
    /// Tried before non-default partitions.
    #[serde(default)]
    pub default: bool,
    /// `#SBATCH --constraint` for jobs in this partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
}

/// The Slurm time limit of a host that sets no `time:`: 14 days, as the original sent.
pub const DEFAULT_SLURM_TIME: &str = "14-0";

impl SlurmHost {
    /// The job's time limit (`#SBATCH --time`): the host's `time:`, else [`DEFAULT_SLURM_TIME`].
    pub fn time_limit(&self) -> &str {
        self.time.as_deref().unwrap_or(DEFAULT_SLURM_TIME)
    }
}

impl PartitionConfig {
    /// The partition name.
    pub fn name(&self) -> &str {
        match self {
            PartitionConfig::Name(n) => n,
            PartitionConfig::Detailed(d) => &d.name,
        }
    }

    /// Whether the partition is marked `default: true`.
    pub fn is_default(&self) -> bool {
        matches!(self, PartitionConfig::Detailed(d) if d.default)
    }

    /// The partition's constraint, if any.
    pub fn constraint(&self) -> Option<&str> {
        match self {
            PartitionConfig::Name(_) => None,
            PartitionConfig::Detailed(d) => d.constraint.as_deref(),
        }
    }
}

impl HostEntry for SlurmHost {
    const KIND: &'static str = "slurm";
    const HOST_KIND: HostKind = KIND;
    fn ssh(&self) -> &str {
        &self.ssh
    }
    fn cluster(&self) -> &str {
        &self.cluster
    }
}
