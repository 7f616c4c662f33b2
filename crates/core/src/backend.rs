//! The one async trait every backend implements, and the types that cross it.
//!
//! Shaped after object_store's `ObjectStore`: few required verbs, each with an options struct,
//! typed errors for unsupported operations, and `Arc<dyn Backend>` everywhere.

use std::fmt::{Debug, Display};
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;
use serde::{Deserialize, Serialize};

use crate::availability::Availability;
use crate::bootstrap::RenderedBootstrap;
// Re-exported where they were first defined; they live below this module now.
use crate::Result;
pub use crate::bootstrap::RunLayout;
pub use crate::job::EnvVar;
use crate::job::{Experiment, JobIdentity};
use crate::plan::HostKind;
use crate::plan::{Plan, Request};
use crate::session::{ShellRequest, ShellSession};
use crate::snapshot::Snapshot;
pub use crate::store::reclaim::{ReclaimKind, ReclaimOptions, ReclaimReport, ReclaimedItem, StoreUsage};
pub use crate::store::sync::SyncReport;
pub use crate::store::{ProgressFn, StatusFn};

/// A backend: one configured host (a machine, a Slurm cluster, a Volcano queue, this machine).
///
/// # Contract
/// - `availability` answers for one [`Request`] and may be slow; callers bound it with a timeout
///   ([`crate::probe::gather`]).
/// - `submit` ships the job's code, writes its bootstrap and starts it; it returns a
///   [`JobHandle`] that can be stored and used later by another process. When `submit` fails,
///   nothing of the job is left running or half-written where a later run would use it.
/// - One name, one live job: `submit` makes a second live job of one (project, group, name)
///   impossible on its host, checked before anything is shipped (a lock, an atomic rename or a
///   deterministic object that the server refuses to create twice; never a look followed by a
///   create). It returns [`crate::Error::AlreadyExists`] naming the live run, e.g. ``live run
///   `R` of job `x` on host `h` `` (the caller adds how to replace it), unless
///   [`SubmitOptions::replace`], in which case it stops the live run first and confirms it gone.
///   Two concurrent replacers still leave exactly one live job. The CLI marks the replaced run in
///   the ledger by asking `status` of its older runs of the name.
/// - Interrupts: backends install no signal handler. A long step of `submit` that creates
///   something (shipping, a helper) selects on [`crate::interrupt::wait`], takes back what it
///   created (bounded) and returns an error; the CLI reports the signal and exits 130/143.
/// - `status`, `logs` and `cancel` work from a stored handle alone.
/// - `cancel` returns once no process of the job is left (or fails saying what is left).
///
/// # Errors
/// Operations a backend cannot do return [`crate::Error::NotSupported`], never panic.
#[async_trait]
pub trait Backend: Debug + Display + Send + Sync + 'static {
    /// The host type this backend serves.
    fn kind(&self) -> HostKind;

    /// Where a run's files go and how its ranks are wired, for rendering the bootstrap before
    /// `submit`. Pure: no IO.
    fn layout(&self, identity: &JobIdentity, plan: &Plan) -> Result<RunLayout>;

    /// Free capacity for `request` right now.
    async fn availability(&self, request: &Request) -> Result<Availability>;

    /// How `request`, planned as `plan`, stands among the host's shared queues, for `plan` to
    /// show. The default (a host without queues) has nothing to say.
    async fn shares(&self, request: &Request, plan: &Plan) -> Result<Option<crate::shares::QueueShares>> {
        let _ = (request, plan);
        Ok(None)
    }

    /// What `submit` of `job` would create now that is billed or outlives the job (a cloud VM),
    /// one line each, e.g. "TPU VM `pod` (v4-32, spot) in us-central2-b": it may ask the host
    /// whether the thing exists already (then it is not listed). `plan` and `submit --dry-run`
    /// show the lines; `submit` with any goes on only when the user confirmed, and says so in
    /// [`SubmitOptions::create_confirmed`]. `plan` asks with a job whose snapshot and bootstrap
    /// are empty (it lists no code): decide from the identity, the plan and the host. The
    /// default (a backend that creates nothing billed) has none.
    async fn creates(&self, job: &PreparedJob) -> Result<Vec<String>> {
        let _ = job;
        Ok(Vec::new())
    }

    /// Ships and starts a prepared job.
    async fn submit(&self, job: &PreparedJob, options: &SubmitOptions) -> Result<JobHandle>;

    /// The job's current state.
    async fn status(&self, handle: &JobHandle) -> Result<JobStatus>;

    /// The job's output, as lines; with `follow`, the stream ends when the job is terminal.
    async fn logs(&self, handle: &JobHandle, options: &LogOptions) -> Result<LogStream>;

    /// Stops every process of the job and confirms none is left.
    async fn cancel(&self, handle: &JobHandle) -> Result<JobStatus>;

    /// The handle that `submit` will return for `job`, when the backend can tell it before
    /// anything is created (e.g. a deterministic object name), so that the CLI can record the run
    /// in the ledger as [`JobState::Submitting`] first. `status` and `cancel` must accept it even
    /// when `submit` never finished (the client was killed). Pure: no IO. The default is `None`.
    fn planned_handle(&self, job: &PreparedJob) -> Option<JobHandle> {
        let _ = job;
        None
    }

    /// The documents a `--dry-run` of `job` shows for this backend (manifests, batch scripts),
    /// rendered without contacting anything. The default has none.
    fn dry_run(&self, job: &PreparedJob) -> Result<Vec<DryRunDocument>> {
        let _ = job;
        Ok(Vec::new())
    }

    /// Where the job of `handle` lives in the backend's own tools, one line each (e.g. the vcjob
    /// and its namespace with the `kubectl` command that shows it), printed after a submit. The
    /// default has none.
    fn locate(&self, handle: &JobHandle) -> Vec<String> {
        let _ = handle;
        Vec::new()
    }

    /// How long `submit --follow` waits for a job to start before cancelling it with the reason
    /// `status` gives; `None` waits forever (the default).
    fn start_timeout(&self) -> Option<Duration> {
        None
    }

    /// Why the pending job of `handle` can never start as the cluster is (it asks for more
    /// than its queue's capability or the whole cluster has, or more per pod or node than any
    /// node has), or `None` when it may start later or the backend cannot tell (the default).
    /// `submit --follow` gives up at once on such a job instead of after [`Backend::start_timeout`].
    async fn never_starts(&self, handle: &JobHandle) -> Result<Option<String>> {
        let _ = handle;
        Ok(None)
    }

    /// How the run of `handle` ended, for a run whose job `status` no longer finds
    /// ([`crate::Error::NotFound`]: e.g. Volcano collected it after its `ttlSecondsAfterFinished`),
    /// from what the run left on the cluster (the bootstrap's `metadata.json`); its message says
    /// that the job is gone. `None` when nothing tells (the default). It may be slow (a helper pod
    /// reads the files): [`crate::lifecycle::refresh`] asks it once, for a run the ledger still
    /// has live, and records the answer; it gives up after 300 s, so a backend bounds its own
    /// steps well within that and takes back what it started.
    async fn remains(&self, handle: &JobHandle) -> Result<Option<JobStatus>> {
        let _ = handle;
        Ok(None)
    }

    /// A small file the run wrote in its status dir (`batch-search.json`, see
    /// [`crate::batch_search`]), for `status` to show: `name` is a plain file name, the
    /// contents are at most [`RUN_FILE_LIMIT`] bytes. `None` when the file is not there, or the
    /// backend cannot read the run's files (the default).
    async fn run_file(&self, handle: &JobHandle, name: &str) -> Result<Option<Vec<u8>>> {
        let _ = (handle, name);
        Ok(None)
    }

    /// The files `names` (plain names, as for [`Backend::run_file`]) as an ended run left them,
    /// where `run_file` reads a run's files only while it runs (Volcano reads them in rank 0's
    /// pod; an ended run's files stay on its PVC). One entry per name, in order: the contents
    /// (at most [`RUN_FILE_LIMIT`] bytes), or `None` when the file is not there or is larger.
    /// `None` as a whole: `run_file` already reads an ended run's files, or nothing can (the
    /// default). It may be slow (Volcano starts a short-lived helper pod, deleted on every path,
    /// and bounds its start well within 300 s): callers ask it once per ended run and keep the
    /// answer, since an ended run's files no longer change.
    async fn ended_run_files(&self, handle: &JobHandle, names: &[&str]) -> Result<Option<Vec<Option<Vec<u8>>>>> {
        let _ = (handle, names);
        Ok(None)
    }

    /// Frees space on this host's cluster (see [`crate::store::reclaim`]): code dirs of runs
    /// that are not live and older than [`ReclaimOptions::older_than`] (logs and status stay),
    /// leftovers of crashed submits, and objects no run links. Never touches a run in
    /// [`ReclaimOptions::live`] nor one the backend itself sees pending or running, which it
    /// adds. The default is [`crate::Error::NotSupported`].
    async fn reclaim(&self, options: &ReclaimOptions) -> Result<ReclaimReport> {
        let _ = options;
        Err(crate::Error::NotSupported { operation: "reclaim", backend: self.to_string() })
    }

    /// Leftovers of crashed clients that this backend's platform keeps besides the store
    /// (helper jobs and pods, stale claims), older than `older_than`: deleted, or only listed
    /// when `dry_run`. `None`: this backend leaves none (the default).
    async fn leftovers(&self, older_than: Duration, dry_run: bool) -> Result<Option<Vec<String>>> {
        let _ = (older_than, dry_run);
        Ok(None)
    }

    /// Space used on this host's cluster: its object store and run code dirs. The default is
    /// [`crate::Error::NotSupported`].
    async fn usage(&self) -> Result<StoreUsage> {
        Err(crate::Error::NotSupported { operation: "usage", backend: self.to_string() })
    }

    /// Opens one connection to TCP `port` of rank `rank` of the job of `handle` (a tunnel's
    /// worth: `theseus forward` calls it once per local connection). Optional: the default is
    /// [`crate::Error::NotSupported`].
    async fn connect_port(&self, handle: &JobHandle, rank: u32, port: u16) -> Result<PortStream> {
        let _ = (handle, rank, port);
        Err(crate::Error::NotSupported { operation: "forward", backend: self.to_string() })
    }

    /// Enters rank `request.rank` of the running job of `handle` for `theseus shell`: a
    /// command, or an interactive shell, in the run's work dir with the job's variables
    /// ([`crate::bootstrap::enter::script`]), on the rank's host, node or pod. Optional: the
    /// default is [`crate::Error::NotSupported`].
    async fn shell(&self, handle: &JobHandle, request: &ShellRequest) -> Result<ShellSession> {
        let _ = (handle, request);
        Err(crate::Error::NotSupported { operation: "shell", backend: self.to_string() })
    }

    /// Pushes `snapshot` (the local code now) into the running job's code dir through the
    /// store ([`crate::store::sync`]): only changed files move, files the local tree no longer
    /// has are deleted, files the job made stay. Optional: the default is
    /// [`crate::Error::NotSupported`].
    async fn sync(&self, handle: &JobHandle, snapshot: &Snapshot, options: &SyncOptions) -> Result<SyncReport> {
        let _ = (handle, snapshot, options);
        Err(crate::Error::NotSupported { operation: "sync", backend: self.to_string() })
    }
}

/// Per-call options of [`Backend::sync`].
#[derive(Clone, Default)]
pub struct SyncOptions {
    /// Called with the bytes of code sent so far.
    pub progress: Option<ProgressFn>,
    /// Called with one-line notes.
    pub status: Option<StatusFn>,
}

impl Debug for SyncOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncOptions").finish_non_exhaustive()
    }
}

/// A byte stream to a port of a job.
pub type PortStream = Pin<Box<dyn PortIo>>;

/// What a [`PortStream`] is: readable and writable, and movable between tasks.
pub trait PortIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send> PortIo for T {}

/// A backend behind a pointer.
pub type DynBackend = dyn Backend;

/// A stream of log lines.
pub type LogStream = Pin<Box<dyn Stream<Item = Result<LogLine>> + Send>>;

/// One line of job output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// The process rank that printed it, when the backend knows it.
    pub rank: Option<u32>,
    /// The text, without the trailing newline.
    pub text: String,
    /// Where it came from when that says more than the rank (e.g. the pod `worker-0`); the CLI
    /// shows it as the line's prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A document a dry run shows (a manifest, a script), rendered without touching any cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DryRunDocument {
    /// What it is, e.g. "helper job (batch.volcano.sh/v1alpha1 Job)".
    pub title: String,
    /// Its text (YAML for manifests). Secret values are already redacted.
    pub text: String,
}

/// Everything a backend needs to start a job: all decisions are already made.
#[derive(Debug, Clone)]
pub struct PreparedJob {
    /// Who the job is.
    pub identity: JobIdentity,
    /// The experiment, with overrides applied.
    pub experiment: Experiment,
    /// Environment of every process, merged (cluster < host < experiment < CLI).
    pub env: Vec<EnvVar>,
    /// Where and how it runs.
    pub plan: Plan,
    /// The code to ship.
    pub snapshot: Snapshot,
    /// The rendered bootstrap files.
    pub bootstrap: RenderedBootstrap,
}

/// Per-call options of [`Backend::submit`].
#[derive(Clone, Default)]
pub struct SubmitOptions {
    /// Stop a live job of the same project, group and name before starting this one (see the
    /// trait's contract); without it, such a job makes `submit` fail with `AlreadyExists`.
    pub replace: bool,
    /// Called with the bytes of code shipped so far.
    pub progress: Option<ProgressFn>,
    /// Called with a one-line note when a long step starts (e.g. "waiting for the helper pod").
    pub status: Option<StatusFn>,
    /// Called once with what shipping the code did (files already on the cluster, bytes sent).
    pub shipped: Option<ShippedFn>,
    /// The user confirmed what [`Backend::creates`] listed (`--yes`, or answered yes on a
    /// terminal), or it listed nothing. A backend that would create something billed refuses
    /// without it (defence in depth: the CLI asks first).
    pub create_confirmed: bool,
    /// Leave what the backend created for the job (`--keep`) when the job ends, instead of
    /// deleting it.
    pub keep: bool,
}

impl SubmitOptions {
    /// Reports a step through [`SubmitOptions::status`], when set.
    pub fn note(&self, text: &str) {
        if let Some(status) = &self.status {
            status(text);
        }
    }

    /// Reports a finished ship through [`SubmitOptions::shipped`], when set.
    pub fn report_shipped(&self, report: &crate::store::ShipReport) {
        if let Some(shipped) = &self.shipped {
            shipped(report);
        }
    }
}

/// See [`SubmitOptions::shipped`].
pub type ShippedFn = std::sync::Arc<dyn Fn(&crate::store::ShipReport) + Send + Sync>;

impl Debug for SubmitOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmitOptions")
            .field("replace", &self.replace)
            .field("progress", &self.progress.is_some())
            .field("status", &self.status.is_some())
            .field("shipped", &self.shipped.is_some())
            .field("create_confirmed", &self.create_confirmed)
            .field("keep", &self.keep)
            .finish()
    }
}

/// Per-call options of [`Backend::logs`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Keep streaming until the job is terminal.
    pub follow: bool,
    /// Only this rank's output.
    pub rank: Option<u32>,
}

/// What a backend returns from `submit`: enough to find the job again from another process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHandle {
    /// Host type.
    pub kind: HostKind,
    /// Host name in the dispatch config.
    pub host: String,
    /// The backend's id of the job (process group, Slurm job id, `namespace/name`).
    pub id: String,
    /// Backend-specific details (paths, pids), as JSON.
    #[serde(default)]
    pub data: serde_json::Value,
}

/// State of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Recorded by the client before the backend was asked to create anything; settled by a
    /// later `status` or `list` (the client may have died in the middle of `submit`).
    Submitting,
    /// Accepted, waiting for resources.
    Pending,
    /// Running.
    Running,
    /// Finished with exit code 0.
    Completed,
    /// Finished with a non-zero exit code, or could not start.
    Failed,
    /// Stopped by `cancel`.
    Cancelled,
    /// Stopped by the system (SIGTERM, eviction, preemption).
    Preempted,
    /// The backend cannot tell (the job's processes and records are gone).
    Unknown,
}

impl JobState {
    /// Whether the job will not change state any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Completed | JobState::Failed | JobState::Cancelled | JobState::Preempted)
    }

    /// Lowercase name, as shown to users and stored in the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Submitting => "submitting",
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Preempted => "preempted",
            JobState::Unknown => "unknown",
        }
    }

    /// Parses [`JobState::as_str`].
    pub fn parse(s: &str) -> Option<JobState> {
        Some(match s {
            "submitting" => JobState::Submitting,
            "pending" => JobState::Pending,
            "running" => JobState::Running,
            "completed" => JobState::Completed,
            "failed" => JobState::Failed,
            "cancelled" => JobState::Cancelled,
            "preempted" => JobState::Preempted,
            "unknown" => JobState::Unknown,
            _ => return None,
        })
    }
}

impl Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `status` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    /// Overall state.
    pub state: JobState,
    /// Exit code of the job when finished (the first non-zero rank's, else 0).
    pub exit_code: Option<i32>,
    /// One plain sentence about the state (why pending, what failed).
    pub message: Option<String>,
    /// Per-process state, when the backend knows it.
    pub ranks: Vec<RankStatus>,
    /// Which start of the run this is (1 the first; a restarted or requeued job counts up),
    /// when the backend knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

/// State of one process of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankStatus {
    /// Rank (process id in the distributed job).
    pub rank: u32,
    /// State.
    pub state: JobState,
    /// Exit code when finished.
    pub exit_code: Option<i32>,
    /// Where it runs (node, pod or pid).
    pub location: Option<String>,
    /// How often its process was restarted in place (a pod's containers' `restartCount`), when
    /// the backend knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<u32>,
}

/// The most [`Backend::run_file`] reads of a file.
pub const RUN_FILE_LIMIT: u64 = 1 << 20;

/// Whether `name` is a plain file name [`Backend::run_file`] may read: `[A-Za-z0-9._-]`, not
/// starting with `.`.
pub fn is_run_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Error for an operation a backend does not implement.
pub fn not_supported(operation: &'static str, backend: &dyn Display) -> crate::Error {
    crate::Error::NotSupported { operation, backend: backend.to_string() }
}
