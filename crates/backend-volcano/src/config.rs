//! The settings of a `volcano` host ([`VolcanoHost`]): namespace, queue, image, PVC, pod
//! resources and scheduling keys, as the config writes them, with their defaults. Plain data,
//! read by [`crate::host::VolcanoType`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use theseus_core::plan::HostKind;

/// The kind of Volcano hosts.
pub const KIND: HostKind = HostKind::named("volcano");

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
    /// Port of the JAX coordinator on the first pod; torch's `MASTER_PORT` is the next one.
    #[serde(default = "defaults::coordinator_port")]
    pub coordinator_port: u16,
    /// `spec.maxRetry` of the gang job: restarts of the whole job (after an eviction) before it
    /// fails.
    #[serde(default = "defaults::max_retry")]
    pub max_retry: u32,
    /// `spec.ttlSecondsAfterFinished`: how long Volcano keeps a finished job before its garbage
    /// collector deletes it with its pods: seconds, or a duration (`12h`, `7d`); `never` keeps
    /// finished jobs. Unset: [`DEFAULT_TTL_SECONDS`] (a day). Checked by [`Self::ttl_seconds`].
    /// `status`, `logs` and `list` of a run whose job was collected answer from the ledger and
    /// the run's files on the PVC.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "theseus_core::config::duration_text"
    )]
    pub ttl_seconds_after_finished: Option<String>,
    /// A failed rank restarts the whole job (`PodFailed -> RestartJob`, counted against
    /// `max_retry`) instead of ending it at once (`PodFailed -> TerminateJob`, the default).
    #[serde(default)]
    pub restart_on_failure: bool,
    /// How long `submit --follow` waits for the job to start (a pod that cannot start or a gang
    /// that is not admitted) before cancelling it with the reason (e.g. `10m`, `1h`; default
    /// 10m; `0` waits forever). Parsed by `theseus_core::duration::parse`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout: Option<String>,
    /// How long one call to the API server may take, retries included (e.g. `30s`, `2m`;
    /// default 30s). `status`, `plan`, `cancel` and `submit` give up after it, naming the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_timeout: Option<String>,
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

/// `ttl_seconds_after_finished` when unset: a day. Long enough that the job, its pods and their
/// logs are there while anyone looks at a run that just ended (the next morning included); short
/// enough that a shared namespace does not fill with finished jobs and their pods, which Volcano
/// never deletes without a TTL (its garbage collector only acts on
/// `spec.ttlSecondsAfterFinished`: pkg/controllers/garbagecollector/garbagecollector.go, read).
pub const DEFAULT_TTL_SECONDS: u32 = 86_400;

/// What `ttl_seconds_after_finished` says to keep a finished job for good.
pub const TTL_NEVER: &str = "never";

impl VolcanoHost {
    /// `spec.ttlSecondsAfterFinished` of this host's jobs: [`DEFAULT_TTL_SECONDS`] when unset,
    /// `None` for `never`.
    ///
    /// # Errors
    /// A message starting with the key, saying what is accepted.
    pub fn ttl_seconds(&self) -> Result<Option<u32>, String> {
        let Some(text) = self.ttl_seconds_after_finished.as_deref() else { return Ok(Some(DEFAULT_TTL_SECONDS)) };
        if text.trim() == TTL_NEVER {
            return Ok(None);
        }
        let fix = format!(
            "use a number of seconds (e.g. `{DEFAULT_TTL_SECONDS}`), a duration such as `12h` or `7d`, or \
             `{TTL_NEVER}` to keep finished vcjobs"
        );
        let bad = |why: String| format!("ttl_seconds_after_finished: {text:?}: {why}; {fix}");
        let duration = theseus_core::duration::parse(text).map_err(bad)?;
        if duration.subsec_nanos() != 0 {
            return Err(bad("not a whole number of seconds".into()));
        }
        // The field is an int32 in the Job CRD.
        u32::try_from(duration.as_secs())
            .ok()
            .filter(|s| i32::try_from(*s).is_ok())
            .map(Some)
            .ok_or_else(|| bad(format!("more than {} seconds", i32::MAX)))
    }
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
}
