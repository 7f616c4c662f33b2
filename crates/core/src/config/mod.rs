//! The dispatch config: clusters (filesystem layout and credentials), hosts (where jobs run),
//! `priority` and `gres_mapping`, as in the original dispatcher, plus the `local` host type.
//!
//! The types here are the *validated* shape. [`load`] builds them from the figment layers
//! (built-in defaults < user file < project file < environment < CLI) and [`validate`] checks
//! everything that serde cannot (references between tables, chip names, counts).

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

pub mod compat;
pub mod load;
pub mod ssh;
pub mod validate;

pub use crate::cluster::{ClusterConfig, Materialize, join};
pub use crate::keys::Provenance;
pub use crate::plan::{HostKind, MAX_COUNT};
pub use load::{ConfigSources, ENV_PREFIX, LoadedConfig, display_path, expand_tilde};
pub use ssh::{KnownHosts, SshSettings};

#[cfg(test)]
mod tests;

/// The whole dispatch config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchConfig {
    /// Local path of a JuiceFS mount of the theseus root (REPL sync; accepted, not used yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
    /// Alternative mailbox transport `[user@]host:/path` (accepted, not used yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// Filesystem layout and credentials per cluster.
    #[serde(default)]
    pub clusters: IndexMap<String, ClusterConfig>,
    /// Execution targets, in the order the solver tries them after `priority`.
    #[serde(default)]
    pub hosts: IndexMap<String, HostConfig>,
    /// Hosts tried first, in this order.
    #[serde(default)]
    pub priority: Vec<String>,
    /// Chip name to Slurm GRES type token (the `TYPE` in `gpu:TYPE:N`).
    #[serde(default)]
    pub gres_mapping: BTreeMap<String, String>,
}

impl DispatchConfig {
    /// Hosts in solver order: `priority` first, then the rest in config order.
    pub fn ordered_hosts(&self) -> Vec<(&str, &HostConfig)> {
        let mut out: Vec<(&str, &HostConfig)> = Vec::new();
        for name in &self.priority {
            if let Some((k, h)) = self.hosts.get_key_value(name.as_str())
                && !out.iter().any(|(n, _)| *n == k.as_str())
            {
                out.push((k.as_str(), h));
            }
        }
        for (k, h) in &self.hosts {
            if !out.iter().any(|(n, _)| *n == k.as_str()) {
                out.push((k.as_str(), h));
            }
        }
        out
    }

    /// The cluster a host belongs to.
    pub fn cluster_of(&self, host: &HostConfig) -> Option<&ClusterConfig> {
        self.clusters.get(host.cluster())
    }
}

/// A duration key's text: a string, or a number of seconds as YAML and env values give it
/// (`probe_timeout: 5`), kept as text for [`crate::duration::parse`].
fn duration_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    use serde::de::Error as _;
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(text)) => Ok(Some(text)),
        Some(serde_json::Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => {
            Err(D::Error::custom(format!("expected a duration such as `5s` or a number of seconds, found {other}")))
        }
    }
}

/// One execution target. In files, `type` selects the variant (default `plain`); `tpu` and
/// unknown types are errors.
// Hosts are few and built once per command; boxing the volcano variant would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum HostConfig {
    /// A GPU box reached over SSH.
    Plain(PlainHost),
    /// A Slurm cluster reached over SSH to a login node.
    Slurm(SlurmHost),
    /// A Kubernetes cluster running the Volcano scheduler.
    Volcano(VolcanoHost),
    /// This machine.
    Local(LocalHost),
}

impl<'de> Deserialize<'de> for HostConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut body = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let kind = match body.remove("type") {
            None => HostKind::Plain,
            Some(serde_json::Value::String(t)) => validate::host_kind(&t).map_err(D::Error::custom)?,
            Some(other) => return Err(D::Error::custom(format!("type: expected a string, found {other}"))),
        };
        validate::host_from_body(kind, body, "host").map_err(|e| D::Error::custom(format!("{}: {}", e.path, e.message)))
    }
}

impl HostConfig {
    /// The host's type.
    pub fn kind(&self) -> HostKind {
        match self {
            HostConfig::Plain(_) => HostKind::Plain,
            HostConfig::Slurm(_) => HostKind::Slurm,
            HostConfig::Volcano(_) => HostKind::Volcano,
            HostConfig::Local(_) => HostKind::LOCAL,
        }
    }

    /// The name of the cluster the host belongs to.
    pub fn cluster(&self) -> &str {
        match self {
            HostConfig::Plain(h) => &h.cluster,
            HostConfig::Slurm(h) => &h.cluster,
            HostConfig::Volcano(h) => &h.cluster,
            HostConfig::Local(h) => &h.cluster,
        }
    }

    /// Host-level environment variables.
    pub fn env(&self) -> &BTreeMap<String, String> {
        match self {
            HostConfig::Plain(h) => &h.env,
            HostConfig::Slurm(h) => &h.env,
            HostConfig::Volcano(h) => &h.env,
            HostConfig::Local(h) => &h.env,
        }
    }

    /// The host's `probe_timeout`, when set (local hosts are not probed over a network).
    /// Validated at load, so a value that does not parse is treated as unset.
    pub fn probe_timeout(&self) -> Option<std::time::Duration> {
        let text = match self {
            HostConfig::Plain(h) => h.probe_timeout.as_deref(),
            HostConfig::Slurm(h) => h.probe_timeout.as_deref(),
            HostConfig::Volcano(h) => h.probe_timeout.as_deref(),
            HostConfig::Local(_) => None,
        };
        text.and_then(|t| crate::duration::parse(t).ok())
    }

    /// The connection keys of a plain or Slurm host; `None` for the others.
    pub fn connection(&self) -> Option<&SshSettings> {
        match self {
            HostConfig::Plain(h) => Some(&h.connection),
            HostConfig::Slurm(h) => Some(&h.connection),
            HostConfig::Volcano(_) | HostConfig::Local(_) => None,
        }
    }

    /// Host-level `uv sync --group` names.
    pub fn uv_groups(&self) -> &[String] {
        match self {
            HostConfig::Plain(h) => &h.uv_groups,
            HostConfig::Slurm(h) => &h.uv_groups,
            HostConfig::Volcano(h) => &h.uv_groups,
            HostConfig::Local(h) => &h.uv_groups,
        }
    }
}

/// `type: plain`: a machine reached over SSH, jobs started detached.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlainHost {
    /// SSH alias or `user@host`.
    pub ssh: String,
    /// How to connect (`known_hosts`, `connect_timeout`, `max_sessions`, `identity_file`,
    /// `port`, `user`, `proxy_jump`, `ssh_options`, `login_env`), written among the host's keys; unset keys
    /// leave the decision to the user's ssh config. Read by [`validate::host_from_body`].
    #[serde(flatten, skip_deserializing)]
    pub connection: SshSettings,
    /// Cluster name.
    pub cluster: String,
    /// Chip name to GPU count on the machine. Empty: CPU-only.
    #[serde(default)]
    pub chips: BTreeMap<String, u32>,
    /// `uv sync --group` names.
    #[serde(default)]
    pub uv_groups: Vec<String>,
    /// Environment for jobs on this host.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How long this host's availability probe may take before the host counts as "unknown"
    /// (e.g. `3s`, `500ms`; default 5s, see [`crate::probe::DEFAULT_TIMEOUT`]). `--probe-timeout`
    /// overrides it. Parsed by [`crate::duration::parse`]; more than 0.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "duration_text")]
    pub probe_timeout: Option<String>,
}

/// `type: slurm`: a Slurm cluster reached over SSH to its login node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmHost {
    /// Login node alias.
    pub ssh: String,
    /// How to connect (`known_hosts`, `connect_timeout`, `max_sessions`, `identity_file`,
    /// `port`, `user`, `proxy_jump`, `ssh_options`, `login_env`), written among the host's keys; unset keys
    /// leave the decision to the user's ssh config. Read by [`validate::host_from_body`].
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
    /// (e.g. `3s`, `500ms`; default 5s, see [`crate::probe::DEFAULT_TIMEOUT`]). `--probe-timeout`
    /// overrides it. Parsed by [`crate::duration::parse`]; more than 0.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "duration_text")]
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

/// `type: volcano`: a Kubernetes cluster with the Volcano batch scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolcanoHost {
    /// Cluster name (paths must be valid inside the pods, on the PVC).
    pub cluster: String,
    /// Namespace of jobs, helpers and secrets. Empty (not set): the kubeconfig context's
    /// namespace, else `default`, as kubectl chooses (the Volcano backend resolves it).
    #[serde(default = "defaults::namespace")]
    pub namespace: String,
    /// Volcano queue (empty: `default`, availability not checked).
    #[serde(default)]
    pub queue: String,
    /// Container image of the job.
    #[serde(default)]
    pub image: String,
    /// PVC holding code and data.
    #[serde(default)]
    pub pvc_name: String,
    /// Where the PVC is mounted in pods and the helper.
    #[serde(default = "defaults::pvc_mount_path")]
    pub pvc_mount_path: String,
    /// Legacy; the solver computes the node count.
    #[serde(default = "defaults::one")]
    pub num_nodes: u32,
    /// GPUs per node when `chips` gives none.
    #[serde(default)]
    pub gpus_per_node: u32,
    /// Chip name to GPUs per node.
    #[serde(default)]
    pub chips: BTreeMap<String, u32>,
    /// Resource name of GPUs.
    #[serde(default = "defaults::gpu_resource_key")]
    pub gpu_resource_key: String,
    /// CPU per pod for GPU jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory per pod for GPU jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// CPU per pod for CPU-only jobs (default `8`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cpu: Option<String>,
    /// Memory per pod for CPU-only jobs (default `64Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_memory: Option<String>,
    /// Size of the memory-backed `/dev/shm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_size: Option<String>,
    /// `priorityClassName` of the job (its PodGroup's priority) and of its pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    /// Pods use the node's network (`hostNetwork`, with `dnsPolicy: ClusterFirstWithHostNet`),
    /// for RDMA/RoCE setups; off by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_network: bool,
    /// `serviceAccountName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// Kubeconfig path (`~` expanded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    /// Kubeconfig context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// `nodeSelector`.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Pod tolerations.
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// Request `rdma/rdma_shared_device_a`.
    #[serde(default)]
    pub rdma: bool,
    /// RDMA devices per node.
    #[serde(default = "defaults::rdma_per_node")]
    pub rdma_per_node: u32,
    /// Labels on the job and its pods.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Environment for jobs on this host.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `uv sync --group` names.
    #[serde(default)]
    pub uv_groups: Vec<String>,
    /// Resources of the code-shipping helper, as `requests.cpu: "1"` style keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helper_resources: Option<BTreeMap<String, String>>,
    /// Image of the code-shipping helper.
    #[serde(default = "defaults::helper_image")]
    pub helper_image: String,
    /// `imagePullSecrets` of job and helper pods.
    #[serde(default)]
    pub image_pull_secrets: Vec<String>,
    /// Port of the JAX coordinator on the first pod.
    #[serde(default = "defaults::coordinator_port")]
    pub coordinator_port: u16,
    /// `spec.maxRetry` of the gang job: restarts of the whole job (after an eviction) before it
    /// fails.
    #[serde(default = "defaults::max_retry")]
    pub max_retry: u32,
    /// `spec.ttlSecondsAfterFinished`: how long Volcano keeps a finished job (unset: kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<u32>,
    /// A failed rank restarts the whole job (`PodFailed -> RestartJob`, counted against
    /// `max_retry`) instead of ending it at once (`PodFailed -> TerminateJob`, the default).
    #[serde(default)]
    pub restart_on_failure: bool,
    /// How long `submit --follow` waits for the job to start (a pod that cannot start or a gang
    /// that is not admitted) before cancelling it with the reason (e.g. `10m`, `1h`; default
    /// 10m; `0` waits forever). Parsed by [`crate::duration::parse`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout: Option<String>,
    /// How long one call to the API server may take, retries included (e.g. `30s`, `2m`;
    /// default 30s). `status`, `plan`, `cancel` and `submit` give up after it, naming the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_timeout: Option<String>,
    /// How long this host's availability probe may take before the host counts as "unknown"
    /// (e.g. `3s`, `500ms`; default 5s, see [`crate::probe::DEFAULT_TIMEOUT`]). `--probe-timeout`
    /// overrides it. Parsed by [`crate::duration::parse`]; more than 0.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "duration_text")]
    pub probe_timeout: Option<String>,
}

/// A Kubernetes toleration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key.
    #[serde(default)]
    pub key: String,
    /// `Exists` or `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    /// For `NoExecute`: how long the pod stays bound after the taint appears.
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "toleration_seconds")]
    pub toleration_seconds: Option<i64>,
}

/// `type: local`: this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalHost {
    /// Cluster name (default `local`, a built-in cluster under the user's data dir).
    #[serde(default = "defaults::local_cluster")]
    pub cluster: String,
    /// GPUs on this machine, by chip (empty: CPU only).
    #[serde(default)]
    pub chips: BTreeMap<String, u32>,
    /// Processes to start as one distributed job (default 1; `-n N` for CPU jobs overrides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
    /// Port of the JAX coordinator on 127.0.0.1 (default: a free port chosen at submit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator_port: Option<u16>,
    /// Allow CPU jobs with more processes than this machine has CPUs (default false: such a
    /// request is refused; `--oversubscribe` sets this for one command).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oversubscribe: bool,
    /// `uv sync --group` names.
    #[serde(default)]
    pub uv_groups: Vec<String>,
    /// Environment for jobs on this host.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl Default for LocalHost {
    fn default() -> Self {
        LocalHost {
            cluster: defaults::local_cluster(),
            chips: BTreeMap::new(),
            processes: None,
            coordinator_port: None,
            oversubscribe: false,
            uv_groups: Vec::new(),
            env: BTreeMap::new(),
        }
    }
}

/// Default values of config fields.
pub mod defaults {
    /// `namespace` of a volcano host: empty, the kubeconfig context's (else `default`).
    pub fn namespace() -> String {
        String::new()
    }
    /// `pvc_mount_path` of a volcano host.
    pub fn pvc_mount_path() -> String {
        "/workspace".into()
    }
    /// `num_nodes` of a volcano host.
    pub fn one() -> u32 {
        1
    }
    /// `gpu_resource_key` of a volcano host.
    pub fn gpu_resource_key() -> String {
        "nvidia.com/gpu".into()
    }
    /// `rdma_per_node` of a volcano host.
    pub fn rdma_per_node() -> u32 {
        8
    }
    /// `helper_image` of a volcano host.
    pub fn helper_image() -> String {
        "busybox:1.36".into()
    }
    /// `max_retry` of a volcano host.
    pub fn max_retry() -> u32 {
        3
    }

    /// `coordinator_port` of a volcano host.
    pub fn coordinator_port() -> u16 {
        1234
    }
    /// `cluster` of a local host, and the name of the built-in cluster.
    pub fn local_cluster() -> String {
        "local".into()
    }
}
