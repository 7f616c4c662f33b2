//! `Dispatcher::submit` against a scripted backend: the ledger knows the run before the backend
//! is asked to create anything, and each outcome of `submit` settles the record as `status`,
//! `list` and `cancel` expect it (pending, failed, unknown, or no record at all).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::{BackendFactory, DispatchError, Dispatcher};
use crate::availability::Availability;
use crate::backend::{
    Backend, DynBackend, JobHandle, JobState, JobStatus, LogOptions, LogStream, PreparedJob, RunLayout, SubmitOptions,
};
use crate::config::{ClusterConfig, DispatchConfig, HostKind};
use crate::job::JobIdentity;
use crate::ledger::{Ledger, RunKind};
use crate::local::LocalBackend;
use crate::local::LocalHost;
use crate::solver::{Plan, Request};
use crate::testing::{self, Harness, ProcessProbe};
use crate::{Error, Result};

/// What the scripted backend's `submit` returns.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Started,
    Failed,
    Unknown,
    NameTaken,
}

/// A backend whose `submit` returns [`Outcome`] after noting what the ledger said of the run
/// at that moment; everything else is the local backend's (only `layout` is used).
#[derive(Debug)]
struct Scripted {
    outcome: Outcome,
    local: LocalBackend,
    state_dir: std::path::PathBuf,
    seen_during_submit: Mutex<Option<JobState>>,
}

impl std::fmt::Display for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scripted")
    }
}

fn handle(id: &str) -> JobHandle {
    JobHandle { kind: HostKind::named("box"), host: "box".into(), id: id.into(), data: serde_json::Value::Null }
}

#[async_trait]
impl Backend for Scripted {
    fn kind(&self) -> HostKind {
        HostKind::named("box")
    }
    fn layout(&self, identity: &JobIdentity, plan: &Plan) -> Result<RunLayout> {
        self.local.layout(identity, plan)
    }
    fn planned_handle(&self, _: &PreparedJob) -> Option<JobHandle> {
        Some(handle("planned"))
    }
    async fn availability(&self, _: &Request) -> Result<Availability> {
        Err(crate::backend::not_supported("availability", self))
    }
    async fn submit(&self, job: &PreparedJob, _: &SubmitOptions) -> Result<JobHandle> {
        let record = Ledger::open(&self.state_dir)?.find(&job.identity.run_id)?;
        *self.seen_during_submit.lock().unwrap() = record.map(|r| r.state);
        match self.outcome {
            Outcome::Started => Ok(handle("started")),
            Outcome::Failed => Err(Error::backend(self, "sbatch: error: invalid partition")),
            Outcome::Unknown => Err(Error::OutcomeUnknown {
                backend: self.to_string(),
                message: "the connection was lost after sbatch ran".into(),
                source: None,
            }),
            Outcome::NameTaken => Err(Error::AlreadyExists { what: "run r-1 of this name".into() }),
        }
    }
    async fn status(&self, _: &JobHandle) -> Result<JobStatus> {
        Err(crate::backend::not_supported("status", self))
    }
    async fn logs(&self, _: &JobHandle, _: &LogOptions) -> Result<LogStream> {
        Err(crate::backend::not_supported("logs", self))
    }
    async fn cancel(&self, _: &JobHandle) -> Result<JobStatus> {
        Err(crate::backend::not_supported("cancel", self))
    }
}

struct NoFactory;

impl BackendFactory for NoFactory {
    fn backend(&self, _: &DispatchConfig, name: &str) -> Result<Arc<DynBackend>> {
        Err(Error::backend("test", format!("no backend for {name}")))
    }
}

struct NoProbe;

#[async_trait]
impl ProcessProbe for NoProbe {
    async fn alive(&self, _: &JobHandle) -> Result<usize> {
        Ok(0)
    }
}

fn plan() -> Plan {
    testing::cpu_plan("box", HostKind::named("box"), 1)
}

/// Submits a prepared job through a backend that answers `outcome`; returns the result, what the
/// ledger said during the backend's submit, and the ledger.
async fn submit(
    root: &Path,
    outcome: Outcome,
) -> (std::result::Result<JobHandle, DispatchError>, Option<JobState>, Ledger, String) {
    let cluster = ClusterConfig {
        root: root.join("root").display().to_string(),
        work: "~/work".into(),
        ..ClusterConfig::default()
    };
    let state_dir = root.join("state");
    let scripted = Arc::new(Scripted {
        outcome,
        local: LocalBackend::new("box", LocalHost::default(), cluster, root),
        state_dir: state_dir.clone(),
        seen_during_submit: Mutex::new(None),
    });
    let backend: Arc<DynBackend> = scripted.clone();
    let harness =
        Harness { backend: backend.clone(), plan: plan(), probe: Arc::new(NoProbe), timeout: Duration::from_secs(5) };
    let (job, _code) = testing::prepare(&harness, "scripted", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let ledger = Ledger::open(&state_dir).unwrap();
    let dispatcher = Dispatcher::new(Arc::new(NoFactory), Arc::new(|_| {}));
    let result = dispatcher.submit(&ledger, &backend, &job, RunKind::Job, SubmitOptions::default()).await;
    let seen = *scripted.seen_during_submit.lock().unwrap();
    (result, seen, ledger, job.identity.run_id.clone())
}

#[tokio::test]
async fn a_started_job_is_pending_with_the_backends_handle() {
    let dir = tempfile::tempdir().unwrap();
    let (result, seen, ledger, run_id) = submit(dir.path(), Outcome::Started).await;
    assert_eq!(result.unwrap().id, "started");
    assert_eq!(seen, Some(JobState::Submitting), "the ledger must know the run before the backend creates it");
    let record = ledger.find(&run_id).unwrap().unwrap();
    assert_eq!((record.state, record.handle.id.as_str(), record.message), (JobState::Pending, "started", None));
    assert!(!ledger.submit_in_progress(&run_id));
    assert_eq!(ledger.chips(&run_id).unwrap().as_deref(), Some("1 x cpu"), "the dashboard shows what the run got");
}

#[tokio::test]
async fn a_refused_submit_is_failed_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (result, seen, ledger, run_id) = submit(dir.path(), Outcome::Failed).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("invalid partition"), "{err}");
    assert_eq!(seen, Some(JobState::Submitting));
    let record = ledger.find(&run_id).unwrap().unwrap();
    assert_eq!((record.state, record.handle.id.as_str()), (JobState::Failed, "planned"));
    assert_eq!(record.message.as_deref(), Some("submit failed: scripted: sbatch: error: invalid partition"));
}

#[tokio::test]
async fn a_submit_whose_answer_was_lost_is_unknown_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (result, _, ledger, run_id) = submit(dir.path(), Outcome::Unknown).await;
    assert!(matches!(result, Err(DispatchError::Failed(Error::OutcomeUnknown { .. }))), "{result:?}");
    let record = ledger.find(&run_id).unwrap().unwrap();
    // The planned handle stays, so that `status` and `cancel` can ask the host about this run.
    assert_eq!((record.state, record.handle.id.as_str()), (JobState::Unknown, "planned"));
    let message = record.message.unwrap();
    assert!(message.starts_with("the submit's outcome is unknown: "), "{message}");
    assert!(message.contains("lost after sbatch ran"), "{message}");
}

#[tokio::test]
async fn a_name_held_by_a_live_run_leaves_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let (result, seen, ledger, run_id) = submit(dir.path(), Outcome::NameTaken).await;
    assert!(matches!(result, Err(DispatchError::Failed(Error::AlreadyExists { .. }))), "{result:?}");
    assert_eq!(seen, Some(JobState::Submitting));
    assert!(ledger.find(&run_id).unwrap().is_none(), "a run that never was must not be listed");
    assert!(ledger.list(10).unwrap().is_empty());
}
