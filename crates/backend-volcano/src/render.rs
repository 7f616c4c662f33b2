//! Pure rendering of the gang-scheduled Volcano Job of a run, the Secret that carries its
//! secret environment and the headless Service by which the ranks find rank 0 (the coordinator).
//! No IO: the IO code creates these objects and sets the owner references of the Secret and the
//! Service once the Job's uid is known ([`owner_reference`]).
//!
//! Why theseus renders its own Service instead of enabling Volcano's `svc` plugin: that plugin
//! puts every pod's host name (`J-T-i.J`, comma-joined) into `VC_<TASK>_HOSTS` of every container
//! (`OnPodCreate` and `GenerateHosts` in pkg/controllers/job/plugins/svc/svc.go). At 1,024 pods
//! with theseus's longest names that is over 100 KiB in one environment string; Linux refuses to
//! exec a process with one over 131,072 bytes (`MAX_ARG_STRLEN`), so the containers of a job of
//! about 1,160 pods or more cannot start. Its `--inject-hosts-env=false` only exists in Volcano
//! releases from mid-2026 on; older ones ignore the unknown flag and inject anyway. The ranks need
//! only rank 0's address and the process count, which theseus knows when it renders the job: the
//! count is rendered as [`ENV_NODES`], and the coordinator is the Service [`ENV_COORDINATOR`] names,
//! which selects the job's pod of task index 0 (the pod label `volcano.sh/task-index`, set by
//! Volcano since v1.9) and publishes it before it is ready. The `ssh` plugin is not rendered either:
//! its ssh config names `J-T-i.J` hosts, which only the `svc` plugin makes resolvable.

use std::collections::BTreeMap;

use crate::config::VolcanoHost;
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMap, Container, EmptyDirVolumeSource, EnvVar as K8sEnvVar, EnvVarSource, LocalObjectReference,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, PodAffinity, PodAffinityTerm, PodSpec, PodTemplateSpec,
    ResourceRequirements, Secret, SecretKeySelector, Service, ServicePort, ServiceSpec, Toleration as K8sToleration,
    Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use theseus_core::backend::{EnvVar, RunLayout};
use theseus_core::job::{JobIdentity, k8s_name};
use theseus_core::shell::quote;
use theseus_core::solver::Plan;

use crate::types::{Job, JobSpec, LifecyclePolicy, TaskSpec};

/// Name of the one task of a gang job; pods are `<job>-worker-<index>`.
pub const TASK_NAME: &str = "worker";
/// The rendered variable naming the coordinator (rank 0): the job's headless Service, whose
/// name resolves (through the pod's DNS search list) to rank 0's pod.
pub const ENV_COORDINATOR: &str = "THESEUS_VOLCANO_COORDINATOR";
/// The rendered variable holding the process count (the gang's size).
pub const ENV_NODES: &str = "THESEUS_VOLCANO_NODES";
/// The pod label Volcano sets to the pod's index in its task (since v1.9).
pub const TASK_INDEX_LABEL: &str = "volcano.sh/task-index";
/// The pod label Volcano sets to the job's name.
pub const JOB_NAME_LABEL: &str = "volcano.sh/job-name";
/// Pod env: the job's restart count, from the pod annotation [`RETRY_COUNT_ANNOTATION`].
pub const ENV_RESTART_COUNT: &str = "THESEUS_RESTART_COUNT";

/// The annotation Volcano's job controller puts on every pod it creates: the job's
/// `status.retryCount` at that time.
pub const RETRY_COUNT_ANNOTATION: &str = "volcano.sh/job-retry-count";

/// Volcano job plugins theseus enables: `env` (`VC_TASK_INDEX`, the rank). See the module doc
/// for why not `svc` and `ssh`.
pub const PLUGINS: &[&str] = &["env"];
/// Name of the PVC volume in job and helper pods.
pub const WORKSPACE_VOLUME: &str = "workspace";
/// Longest job name: pods are `<job>-worker-<index>` and their hostnames must fit in 63.
pub const MAX_JOB_NAME: usize = 50;
/// Label keys theseus sets on everything it creates.
pub const LABEL_PROJECT: &str = "theseus.dev/project";
/// See [`LABEL_PROJECT`].
pub const LABEL_GROUP: &str = "theseus.dev/group";
/// See [`LABEL_PROJECT`].
pub const LABEL_NAME: &str = "theseus.dev/name";
/// See [`LABEL_PROJECT`].
pub const LABEL_RUN_ID: &str = "theseus.dev/run-id";
/// `helper` on the code-shipping helper.
pub const LABEL_ROLE: &str = "theseus.dev/role";
/// The value shown instead of a secret in dry-run output.
pub const REDACTED: &str = "<redacted>";

/// Per-submit knobs of the gang job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    /// `spec.maxRetry`: how many times the whole job may be restarted (after an eviction, or a
    /// failure with `restart_on_failure`) before it fails.
    pub max_retry: i32,
    /// `spec.ttlSecondsAfterFinished`.
    pub ttl_seconds_after_finished: Option<i32>,
    /// A failed rank restarts the job (`PodFailed -> RestartJob`) instead of ending it
    /// (`PodFailed -> TerminateJob`).
    pub restart_on_failure: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions { max_retry: 3, ttl_seconds_after_finished: None, restart_on_failure: false }
    }
}

/// The job's lifecycle policies (`spec.policies`), as Volcano 1.15's job controller applies
/// them (`applyPolicies` in pkg/controllers/job/job_controller_util.go, the states in
/// pkg/controllers/job/state/):
///
/// - `PodEvicted -> RestartJob`: an evicted (deleted) pod restarts the whole gang, at most
///   `maxRetry` times; Volcano counts a retry when it kills the job and fails it once
///   `retryCount >= maxRetry`.
/// - `PodFailed -> TerminateJob`: one rank exiting non-zero ends the job at once: Volcano deletes
///   the other pods (keeping the failed and succeeded ones, so their logs stay readable), deletes
///   the PodGroup and ends in `Terminated`, which its garbage collector treats as finished
///   (`ttlSecondsAfterFinished`). `AbortJob` would end in `Aborted`, which is resumable and
///   never collected; `CompleteJob` would report success. Without a `PodFailed` policy the job
///   would stay `Running` until every other rank ended, and JAX ranks wait for the failed one
///   until their coordinator times out, holding every GPU. With `restart_on_failure` it is
///   `PodFailed -> RestartJob` instead.
/// - `TaskFailed` is not rendered: Volcano raises it from container restarts
///   (`TaskFailed` in pkg/controllers/cache/cache.go), and these pods never restart in place
///   (`restartPolicy: Never`).
/// - On the task, `TaskCompleted -> CompleteJob`.
pub fn job_policies(options: &RenderOptions) -> Vec<LifecyclePolicy> {
    let on_failure = if options.restart_on_failure { "RestartJob" } else { "TerminateJob" };
    vec![policy("PodEvicted", "RestartJob"), policy("PodFailed", on_failure)]
}

/// What the gang job is rendered from: a prepared job's parts plus the backend's layout.
#[derive(Debug, Clone, Copy)]
pub struct JobInputs<'a> {
    /// Who the job is.
    pub identity: &'a JobIdentity,
    /// Where and how it runs.
    pub plan: &'a Plan,
    /// Environment of every process; secrets go to the Secret.
    pub env: &'a [EnvVar],
    /// Paths on the PVC.
    pub layout: &'a RunLayout,
    /// The bootstrap script, relative to the work dir.
    pub bootstrap_entry: &'a str,
    /// Knobs.
    pub options: &'a RenderOptions,
}

/// The objects of one run.
#[derive(Debug, Clone)]
pub struct RenderedJob {
    /// The gang job.
    pub job: Job,
    /// The Secret with the secret environment, when there is any.
    pub secret: Option<Secret>,
    /// The headless Service naming rank 0 (see [`render_coordinator_service`]).
    pub service: Service,
    /// The ConfigMap with the run's own files, when its pods build the run dir from the code
    /// store (see `prebuilt.rs`); `None` as rendered.
    pub files: Option<ConfigMap>,
}

/// A configuration value that cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(pub String);

impl From<RenderError> for theseus_core::Error {
    fn from(e: RenderError) -> Self {
        theseus_core::Error::InvalidConfig(e.0)
    }
}

/// The job's name: `<project>-<group>-<name>` shortened, then the run id, valid as a DNS label
/// that starts with a letter and at most [`MAX_JOB_NAME`] long; unique per run.
pub fn job_name(identity: &JobIdentity) -> String {
    let run = k8s_name(&identity.run_id);
    let base = k8s_name(&format!("{}-{}-{}", identity.project, identity.group, identity.name));
    let room = MAX_JOB_NAME.saturating_sub(run.len() + 1).max(1);
    let base = base[..base.len().min(room)].trim_end_matches('-');
    let name = if base.is_empty() { run } else { format!("{base}-{run}") };
    let name = &name[..name.len().min(MAX_JOB_NAME)];
    let name = name.trim_end_matches('-');
    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name.to_owned()
    } else {
        format!("t-{}", &name[..name.len().min(MAX_JOB_NAME - 2)]).trim_end_matches('-').to_owned()
    }
}

/// A valid label value for `text` (lowercase, `[a-z0-9-]`, at most 63, hashed when shortened).
pub fn label_value(text: &str) -> String {
    k8s_name(text)
}

/// Host labels plus the run's `theseus.dev/*` labels.
pub fn run_labels(host: &VolcanoHost, identity: &JobIdentity) -> BTreeMap<String, String> {
    let mut labels = host.labels.clone();
    for (key, value) in [
        (LABEL_PROJECT, &identity.project),
        (LABEL_GROUP, &identity.group),
        (LABEL_NAME, &identity.name),
        (LABEL_RUN_ID, &identity.run_id),
    ] {
        labels.insert(key.to_owned(), label_value(value));
    }
    labels
}

/// Renders the gang job and its Secret.
///
/// # Errors
/// [`RenderError`] naming the key for a host that [`crate::validate_host`] rejects, a negative
/// `max_retry` or `ttl_seconds_after_finished`, or more nodes than fit an `i32`.
pub fn render_job(host: &VolcanoHost, inputs: &JobInputs<'_>) -> Result<RenderedJob, RenderError> {
    crate::validate::check_host(host).map_err(RenderError)?;
    let options = inputs.options;
    if options.max_retry < 0 {
        return Err(RenderError(format!("max_retry: {} is negative", options.max_retry)));
    }
    if let Some(ttl) = options.ttl_seconds_after_finished.filter(|t| *t < 0) {
        return Err(RenderError(format!("ttl_seconds_after_finished: {ttl} is negative")));
    }
    let name = job_name(inputs.identity);
    let labels = run_labels(host, inputs.identity);
    let secret = render_secret(&name, &host.namespace, &labels, inputs.env);
    let secret_name = secret.as_ref().map(|s| s.metadata.name.clone().unwrap_or_default());
    let service = render_coordinator_service(&name, &host.namespace, &labels, host.coordinator_port);
    let gpu = inputs.plan.chip.is_some() && inputs.plan.chips_per_node > 0;
    let nodes = i32::try_from(inputs.plan.nodes.max(1))
        .map_err(|_| RenderError(format!("too many nodes: {}", inputs.plan.nodes)))?;

    let mut resources = BTreeMap::new();
    let (cpu, memory) = if gpu {
        (host.cpu.clone(), host.memory.clone())
    } else {
        (
            Some(host.cpu_cpu.clone().unwrap_or_else(|| "8".into())),
            Some(host.cpu_memory.clone().unwrap_or_else(|| "64Gi".into())),
        )
    };
    if let Some(cpu) = cpu {
        resources.insert("cpu".to_owned(), K8sQuantity(cpu));
    }
    if let Some(memory) = memory {
        resources.insert("memory".to_owned(), K8sQuantity(memory));
    }
    if gpu {
        resources.insert(host.gpu_resource_key.clone(), K8sQuantity(inputs.plan.chips_per_node.to_string()));
        if host.rdma {
            resources.insert("rdma/rdma_shared_device_a".to_owned(), K8sQuantity(host.rdma_per_node.to_string()));
        }
    }

    let mut volumes = vec![workspace_volume(host)];
    let mut mounts = vec![workspace_mount(host)];
    if gpu && let Some(shm) = &host.shm_size {
        volumes.push(Volume {
            name: "dshm".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(K8sQuantity(shm.clone())),
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount { name: "dshm".into(), mount_path: "/dev/shm".into(), ..VolumeMount::default() });
    }

    let container = Container {
        name: TASK_NAME.into(),
        image: Some(host.image.clone()),
        command: Some(vec!["bash".into(), "-lc".into()]),
        args: Some(vec![pod_script(inputs.layout, inputs.bootstrap_entry)]),
        env: Some(pod_env(inputs.env, secret_name.as_deref(), &name, nodes)),
        resources: Some(ResourceRequirements {
            requests: Some(resources.clone()),
            limits: Some(resources),
            ..ResourceRequirements::default()
        }),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let mut pod = pod_spec(host, container, volumes);
    pod.affinity = affinity(&host.labels);
    if host.host_network {
        // The node's interfaces (RDMA/RoCE); cluster DNS still resolves Services.
        pod.host_network = Some(true);
        pod.dns_policy = Some("ClusterFirstWithHostNet".into());
    }

    let job = Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(host.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: JobSpec {
            scheduler_name: Some("volcano".into()),
            queue: Some(queue(host)),
            priority_class_name: host.priority_class.clone(),
            min_available: Some(nodes),
            max_retry: Some(inputs.options.max_retry),
            ttl_seconds_after_finished: inputs.options.ttl_seconds_after_finished,
            plugins: PLUGINS.iter().map(|p| ((*p).to_owned(), Vec::new())).collect(),
            policies: job_policies(inputs.options),
            tasks: vec![TaskSpec {
                name: Some(TASK_NAME.into()),
                replicas: Some(nodes),
                min_available: Some(nodes),
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }),
                    spec: Some(pod),
                }),
                policies: vec![policy("TaskCompleted", "CompleteJob")],
            }],
        },
        status: None,
    };
    Ok(RenderedJob { job, secret, service, files: None })
}

/// Seconds the pod script lets `tee` drain after the bootstrap exited before it stops waiting
/// (a process the bootstrap left behind may hold the output open).
pub const TEE_DRAIN_SECONDS: u32 = 10;

/// The script each pod runs (as `bash -lc`, PID 1 of the container): the bootstrap from the PVC,
/// its output copied by `tee` to the container's stdout (`kubectl logs`) and appended to the
/// run's log file on the PVC, and the bootstrap's exit status as the pod's.
///
/// The bootstrap runs in the background, writing into a FIFO that `tee` reads, so the shell can
/// handle signals: SIGTERM or SIGINT (pod deletion, preemption) is forwarded to the bootstrap as
/// SIGTERM, whose own handler records the run as preempted and stops the ranks; the shell keeps
/// waiting until the bootstrap really exits. `tee` ignores both signals so the last lines still
/// reach the log; after the bootstrap exited it gets [`TEE_DRAIN_SECONDS`] to finish. A signal
/// that arrives before the bootstrap started is forwarded once it has.
pub fn pod_script(layout: &RunLayout, bootstrap_entry: &str) -> String {
    let entry = theseus_core::config::join(&layout.work_dir, bootstrap_entry);
    let log_dir = match layout.log_file.rfind('/') {
        Some(0) => "/",
        Some(i) => &layout.log_file[..i],
        None => ".",
    };
    format!(
        r#"theseus_boot=
theseus_pending=
theseus_forward() {{
  if [[ -n "$theseus_boot" ]]; then kill -TERM "$theseus_boot" 2> /dev/null || true; else theseus_pending=1; fi
}}
trap theseus_forward TERM INT
mkdir -p {dir} || exit 1
theseus_tmp=$(mktemp -d "${{TMPDIR:-/tmp}}/theseus-pod.XXXXXX") || exit 1
theseus_fifo=$theseus_tmp/output
mkfifo "$theseus_fifo" || {{ rm -rf "$theseus_tmp"; exit 1; }}
(trap '' TERM INT; exec tee -a {log}) < "$theseus_fifo" &
theseus_tee=$!
bash {entry} > "$theseus_fifo" 2>&1 &
theseus_boot=$!
if [[ -n "$theseus_pending" ]]; then kill -TERM "$theseus_boot" 2> /dev/null || true; fi
while kill -0 "$theseus_boot" 2> /dev/null; do wait "$theseus_boot"; done
wait "$theseus_boot"
theseus_rc=$?
sleep {drain} > /dev/null 2>&1 &
theseus_timer=$!
while kill -0 "$theseus_tee" 2> /dev/null && kill -0 "$theseus_timer" 2> /dev/null; do wait -n; done
{{ kill -KILL "$theseus_tee" "$theseus_timer"; wait; }} 2> /dev/null
rm -rf "$theseus_tmp"
exit "$theseus_rc"
"#,
        dir = quote(log_dir),
        entry = quote(&entry),
        log = quote(&layout.log_file),
        drain = TEE_DRAIN_SECONDS,
    )
}

/// Pod env: `THESEUS_VOLCANO_MODE=1`, the coordinator ([`ENV_COORDINATOR`], the Service named
/// after the job), the process count ([`ENV_NODES`]) and the restart count
/// ([`ENV_RESTART_COUNT`], downward API), then plain values, and secrets as `secretKeyRef`s.
fn pod_env(env: &[EnvVar], secret_name: Option<&str>, job_name: &str, nodes: i32) -> Vec<K8sEnvVar> {
    let plain = |name: &str, value: String| K8sEnvVar { name: name.into(), value: Some(value), ..K8sEnvVar::default() };
    let rendered = ["THESEUS_VOLCANO_MODE", ENV_COORDINATOR, ENV_NODES, ENV_RESTART_COUNT];
    // The job controller annotates each pod it creates with the job's `status.retryCount`
    // (upstream v1.15.1 pkg/controllers/job/job_controller_util.go, `createJobPod`:
    // `pod.Annotations[batch.JobRetryCountKey]`, key `volcano.sh/job-retry-count`); the
    // downward API hands it to the bootstrap, which exports THESEUS_ATTEMPT = it + 1.
    let restart_count = K8sEnvVar {
        name: ENV_RESTART_COUNT.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: format!("metadata.annotations['{RETRY_COUNT_ANNOTATION}']"),
            }),
            ..EnvVarSource::default()
        }),
        ..K8sEnvVar::default()
    };
    let mut out = vec![
        plain("THESEUS_VOLCANO_MODE", "1".into()),
        plain(ENV_COORDINATOR, job_name.to_owned()),
        plain(ENV_NODES, nodes.to_string()),
        restart_count,
    ];
    for var in env.iter().filter(|v| !rendered.contains(&v.name.as_str())) {
        let entry = match (var.secret, secret_name) {
            (true, Some(secret)) => K8sEnvVar {
                name: var.name.clone(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.to_owned(),
                        key: var.name.clone(),
                        optional: None,
                    }),
                    ..EnvVarSource::default()
                }),
                ..K8sEnvVar::default()
            },
            // Unreachable: a secret variable always produces a Secret. Never fall back to the value.
            (true, None) => continue,
            (false, _) => K8sEnvVar { name: var.name.clone(), value: Some(var.value.clone()), ..K8sEnvVar::default() },
        };
        out.push(entry);
    }
    out
}

/// The Secret named after the job holding the secret variables, or `None` when there are none.
pub fn render_secret(
    job_name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    env: &[EnvVar],
) -> Option<Secret> {
    let data: BTreeMap<String, String> =
        env.iter().filter(|v| v.secret).map(|v| (v.name.clone(), v.value.clone())).collect();
    if data.is_empty() {
        return None;
    }
    Some(Secret {
        metadata: ObjectMeta {
            name: Some(job_name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some(data),
        ..Secret::default()
    })
}

/// The headless Service named after the job that selects the job's pod of task index 0 (rank 0,
/// the coordinator), published before the pod is ready (the other ranks connect while it
/// starts). Owned by the job once it exists, like the Secret. Its name resolves in the job's
/// namespace (the pods' DNS search list) to rank 0's pod IP.
pub fn render_coordinator_service(
    job_name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    port: u16,
) -> Service {
    let selector: BTreeMap<String, String> = [(JOB_NAME_LABEL, job_name), (TASK_INDEX_LABEL, "0")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Service {
        metadata: ObjectMeta {
            name: Some(job_name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector),
            publish_not_ready_addresses: Some(true),
            // JAX's coordinator, and torch's rendezvous (`MASTER_PORT`) on the next port.
            ports: Some(vec![
                ServicePort {
                    name: Some("coordinator".into()),
                    port: i32::from(port),
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                },
                ServicePort {
                    name: Some("torch".into()),
                    port: i32::from(port) + 1,
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                },
            ]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The Secret as it may be shown: every value replaced by [`REDACTED`].
pub fn redacted(secret: &Secret) -> Secret {
    let mut out = secret.clone();
    if let Some(data) = out.string_data.as_mut() {
        data.values_mut().for_each(|v| *v = REDACTED.to_owned());
    }
    if let Some(data) = out.data.as_mut() {
        data.values_mut().for_each(|v| *v = k8s_openapi::ByteString(REDACTED.as_bytes().to_vec()));
    }
    out
}

/// The owner reference that ties a Secret (or any object) to the job with `uid`, so deleting the
/// job garbage-collects it.
pub fn owner_reference(job_name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "batch.volcano.sh/v1alpha1".into(),
        kind: "Job".into(),
        name: job_name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// `host.queue`, or `default` when empty.
pub(crate) fn queue(host: &VolcanoHost) -> String {
    if host.queue.is_empty() { "default".into() } else { host.queue.clone() }
}

pub(crate) fn policy(event: &str, action: &str) -> LifecyclePolicy {
    LifecyclePolicy { event: Some(event.into()), action: Some(action.into()) }
}

pub(crate) fn workspace_volume(host: &VolcanoHost) -> Volume {
    Volume {
        name: WORKSPACE_VOLUME.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: host.pvc_name.clone(),
            read_only: None,
        }),
        ..Volume::default()
    }
}

pub(crate) fn workspace_mount(host: &VolcanoHost) -> VolumeMount {
    VolumeMount { name: WORKSPACE_VOLUME.into(), mount_path: host.pvc_mount_path.clone(), ..VolumeMount::default() }
}

/// The pod spec both the job and the helper use: scheduler, placement and access settings.
pub(crate) fn pod_spec(host: &VolcanoHost, container: Container, volumes: Vec<Volume>) -> PodSpec {
    let some_map = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| m.clone());
    PodSpec {
        scheduler_name: Some("volcano".into()),
        restart_policy: Some("Never".into()),
        containers: vec![container],
        volumes: Some(volumes),
        node_selector: some_map(&host.node_selector),
        tolerations: (!host.tolerations.is_empty()).then(|| {
            host.tolerations
                .iter()
                .map(|t| K8sToleration {
                    key: Some(t.key.clone()),
                    operator: t.operator.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                    toleration_seconds: t.toleration_seconds,
                })
                .collect()
        }),
        priority_class_name: host.priority_class.clone(),
        service_account_name: host.service_account.clone(),
        image_pull_secrets: (!host.image_pull_secrets.is_empty())
            .then(|| host.image_pull_secrets.iter().map(|n| LocalObjectReference { name: n.clone() }).collect()),
        ..PodSpec::default()
    }
}

/// The original's preferred pod affinity: pack pods with the host's labels onto one node.
fn affinity(labels: &BTreeMap<String, String>) -> Option<Affinity> {
    if labels.is_empty() {
        return None;
    }
    Some(Affinity {
        pod_affinity: Some(PodAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![WeightedPodAffinityTerm {
                weight: 100,
                pod_affinity_term: PodAffinityTerm {
                    label_selector: Some(LabelSelector {
                        match_labels: Some(labels.clone()),
                        ..LabelSelector::default()
                    }),
                    topology_key: "kubernetes.io/hostname".into(),
                    ..PodAffinityTerm::default()
                },
            }]),
            ..PodAffinity::default()
        }),
        ..Affinity::default()
    })
}
