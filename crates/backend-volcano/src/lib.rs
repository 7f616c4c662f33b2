//! Volcano (Kubernetes) backend for theseus: ships code to a PVC through a helper vcjob and starts a
//! gang-scheduled Volcano Job.
//!
//! Pure parts: the typed Volcano `Job` ([`types`]), Kubernetes quantities ([`quantity`]),
//! rendering of the gang job, its Secret and the helper ([`render`], [`helper`]), host validation
//! ([`validate_host`]), the status summary ([`status`]) and the weighing of a request among the
//! cluster's queues for `plan` ([`shares`]). IO parts: the kube client and retries
//! ([`client`]; its proxy choice [`proxy`], exec plugins [`credential`], connection failures
//! [`diagnose`]), typed API calls ([`api`]), queue availability ([`availability`]), the checks
//! that a job's namespace, ServiceAccount and PriorityClass exist before anything ships
//! (`preflight`), shipping over
//! exec ([`ship`]) and the [`VolcanoBackend`] that ties them into theseus's `Backend`.
//!
//! # Volcano as it really behaves
//!
//! Read from Volcano v1.15.1's source and kept true in the simulator:
//!
//! - **Not enqueued is not unschedulable.** A gang larger than its queue or the cluster is
//!   rejected by the enqueue action: its PodGroup (`<job>-<uid>`) stays `Pending`, no pods are
//!   created, and the gang plugin gives it no condition. The reason is only a `Normal`
//!   `Unschedulable` event on the PodGroup (`resource in cluster is overused: overused <res>` or
//!   `queue resource quota insufficient: insufficient <res>`), next to a `Warning` one that only
//!   counts tasks. `status` finds the PodGroup by `<job>-<uid>` (then the job's name, for Volcano
//!   before 1.5), reads its events of both types, and says `waiting for queue <q>: <message>`.
//!   The `Unschedulable` condition is read when Volcano sets it: a gang that was enqueued but
//!   whose pods cannot be placed.
//! - **One failed rank ends the job.** With no `PodFailed` policy Volcano's running state only
//!   syncs, so the vcjob stays `Running` until every pod has ended, and JAX's other ranks wait in
//!   a collective holding their GPUs. theseus renders `PodFailed -> TerminateJob`: Volcano deletes
//!   the other pods (keeping failed and succeeded ones for their logs), deletes the PodGroup and
//!   ends in `Terminated`, which its garbage collector treats as finished. `AbortJob` was not
//!   taken (`Aborted` is resumable and never collected), nor `CompleteJob` (reports success).
//!   `status` maps `Terminated`/`Aborted` with a failed pod to `failed` with the rank and its exit
//!   code, and reports a failed rank while the vcjob still says `Running`. `PodEvicted ->
//!   RestartJob` restarts the gang after an eviction; `restart_on_failure: true` renders
//!   `PodFailed -> RestartJob` too. Volcano counts a retry when it kills the job and fails it once
//!   `retryCount >= maxRetry`, so `max_retry: 3` means at most 3 runs. `TaskFailed` is not
//!   rendered: Volcano raises it from container restarts, and these pods never restart in place.
//! - **PID 1 ignores SIGTERM without a handler.** The helper's `sh` traps TERM and waits on a
//!   backgrounded `sleep`, so its deletion takes no grace period (deleting its vcjob with a zero
//!   grace period would not help: the garbage collector deletes the pod with the pod's own grace
//!   period). The simulator delivers SIGTERM only to a main process that has a handler for it
//!   (`SigCgt`), and SIGKILLs the group after the grace period, as a container runtime does.
//! - **Following a job that cannot start.** `submit --follow` and `logs -f` ask `status` every 2 s
//!   until the job starts and print its reason once per change (image pull, `CrashLoopBackOff`,
//!   missing Secret or PVC, not enqueued, unschedulable). After the backend's start timeout
//!   (`start_timeout` of a volcano host, default `10m`, `0` waits forever) `submit --follow`
//!   cancels the job with that reason (exit 1), as `kubectl rollout status --timeout` and
//!   Kubeflow's `activeDeadlineSeconds` bound a start; `logs -f` of an existing run never cancels
//!   it. A job still queued behind others is cancelled too: the timeout is the user's bound on
//!   waiting, raise it (or set 0) for busy clusters. A job that can never start is cancelled by
//!   `submit --follow` as soon as it is seen pending (`Backend::never_starts`): on Volcano its pods
//!   against the largest node, the nodes' sum and the queue's capability (`fit.rs`), on Slurm a
//!   pending reason that never passes (`never.rs`: `PartitionConfig`, per-job limits, ...).
//! - **Finished jobs are collected.** Volcano keeps a finished Job (and its pods, and so their
//!   logs) until something deletes it; its garbage collector deletes it
//!   `spec.ttlSecondsAfterFinished` after it finished (`Completed`, `Failed`, `Terminated`; not
//!   `Aborted`), counted from `status.state.lastTransitionTime`
//!   (pkg/controllers/garbagecollector/garbagecollector.go, read). theseus renders one on every
//!   gang job (`ttl_seconds_after_finished`, a day by default, `never` to keep them) and 300 s on
//!   its helpers. A run whose vcjob is gone still answers from the ledger and its files on the PVC
//!   (`gone.rs`).
//!
//! # Deadlines
//!
//! Every API call has a connect timeout (10 s, or less), a per-attempt timeout and an
//! overall deadline covering its retries: the host's `api_timeout` (default 30 s, `1s` to `1h`). A
//! server that accepts connections and never answers therefore costs one `api_timeout` per call, and
//! the error names the server and the call: "the API server URL did not answer (get
//! jobs.batch.volcano.sh) within 30s; ...". Shipping has an overall budget (1 h) and a progress
//! watchdog (5 min without the exec stream accepting a byte). `plan` treats a host that does not
//! answer as of unknown capacity, with one note naming the server. Watches and log streams are not
//! cut by a read timeout (quiet jobs are normal); their waits have their own bounds.

pub mod api;
pub mod availability;
mod backend;
pub mod claim;
pub mod client;
pub mod config;
pub mod credential;
mod delete;
pub mod diagnose;
pub mod error;
mod exec;
pub mod fit;
mod follow;
mod gc;
mod gone;
mod handle;
pub mod helper;
pub mod host;
mod interrupted;
pub mod interruption;
mod kept_files;
mod kubeconfig;
pub mod log_cursor;
mod logs;
mod pod_log;
pub mod prebuilt;
mod preflight;
pub mod proxy;
pub mod quantity;
pub mod reclaim;
pub mod render;
mod resources;
pub mod retry;
pub mod rule;
pub mod shares;
pub mod ship;
pub mod status;
pub mod store_shell;
pub mod types;
mod validate;

pub use api::{Cluster, PodGroup, PodLogOptions, Queue};
pub use backend::{Settings, VolcanoBackend, WIRING};
pub use client::RetryPolicy;
pub use config::{KIND, Toleration, VolcanoHost};
pub use error::VolcanoError;
pub use handle::HandleData;
pub use helper::{helper_name, render_helper};
pub use host::VolcanoType;
pub use quantity::{InvalidQuantity, Quantity};
pub use render::{
    JobInputs, RenderError, RenderOptions, RenderedJob, job_name, owner_reference, redacted, render_job, render_secret,
};
pub use resources::helper_resources;
pub use types::{Job, JobSpec, JobStatus, LifecyclePolicy, TaskSpec};
pub use validate::{check_cluster_paths, is_label_key, is_label_value, validate_host};
