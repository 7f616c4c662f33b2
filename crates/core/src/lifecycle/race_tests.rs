//! A look at a run racing a cancel by another client (the dashboard's cancel while its
//! refresher and a log follow ask the same run): the backend is asked while the other client
//! records, and what it recorded stands. The backend here does the other client's part itself,
//! through a second connection to the same ledger, at the moment it answers.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

use super::*;
use crate::availability::Availability;
use crate::backend::{
    Backend, DynBackend, JobHandle, JobState, JobStatus, LogOptions, LogStream, PreparedJob, RankStatus, RunLayout,
    SubmitOptions,
};
use crate::config::HostKind;
use crate::job::JobIdentity;
use crate::ledger::{Ledger, Record, RunKind, now_rfc3339};
use crate::solver::{Plan, Request};
use crate::{Error, Result};

/// What the other client records while the backend is asked.
#[derive(Debug, Clone, Copy)]
enum Meanwhile {
    /// A cancel asked for: the job still runs.
    CancelAsked,
    /// A cancel done: the job is gone.
    Cancelled,
}

#[derive(Debug)]
struct Racing {
    state_dir: PathBuf,
    run_id: String,
    meanwhile: Meanwhile,
}

impl std::fmt::Display for Racing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "racing")
    }
}

impl Racing {
    fn other_client(&self) {
        let other = Ledger::open(&self.state_dir).unwrap();
        match self.meanwhile {
            Meanwhile::CancelAsked => {
                let asked = format!("{CANCEL_ASKED}; not confirmed yet");
                other.update_state(&self.run_id, JobState::Running, None, Some(&asked)).unwrap();
            }
            Meanwhile::Cancelled => {
                other.update_state(&self.run_id, JobState::Cancelled, None, Some("vcjob `j` deleted")).unwrap();
            }
        }
    }
}

#[async_trait]
impl Backend for Racing {
    fn kind(&self) -> HostKind {
        HostKind::named("box")
    }
    fn layout(&self, _: &JobIdentity, _: &Plan) -> Result<RunLayout> {
        Err(crate::backend::not_supported("layout", self))
    }
    async fn availability(&self, _: &Request) -> Result<Availability> {
        Err(crate::backend::not_supported("availability", self))
    }
    async fn submit(&self, _: &PreparedJob, _: &SubmitOptions) -> Result<JobHandle> {
        Err(crate::backend::not_supported("submit", self))
    }
    async fn status(&self, _: &JobHandle) -> Result<JobStatus> {
        self.other_client();
        match self.meanwhile {
            Meanwhile::CancelAsked => Ok(status_of(JobState::Running, "running".into())),
            Meanwhile::Cancelled => Err(Error::NotFound { what: "vcjob `j`".into() }),
        }
    }
    async fn logs(&self, _: &JobHandle, _: &LogOptions) -> Result<LogStream> {
        Err(crate::backend::not_supported("logs", self))
    }
    async fn cancel(&self, _: &JobHandle) -> Result<JobStatus> {
        Err(crate::backend::not_supported("cancel", self))
    }
    /// The job is gone and its rank was killed: what it left says its end is unknown.
    async fn remains(&self, _: &JobHandle) -> Result<Option<JobStatus>> {
        let rank = RankStatus { rank: 0, state: JobState::Unknown, exit_code: None, location: None, restarts: None };
        Ok(Some(JobStatus {
            ranks: vec![rank],
            ..status_of(JobState::Unknown, "rank 0 never recorded its end".into())
        }))
    }
}

/// A running run in a fresh ledger, and a backend racing `meanwhile` on it.
fn race(meanwhile: Meanwhile) -> (tempfile::TempDir, Ledger, Record, Arc<DynBackend>) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let handle =
        JobHandle { kind: HostKind::named("box"), host: "box".into(), id: "j".into(), data: Default::default() };
    let record = Record {
        identity: JobIdentity::new("raced", None, None),
        kind: RunKind::Job,
        host: "box".into(),
        handle,
        submitted_at: now_rfc3339(),
        updated_at: now_rfc3339(),
        state: JobState::Running,
        exit_code: None,
        message: None,
    };
    ledger.insert(&record).unwrap();
    let run_id = record.identity.run_id.clone();
    let backend: Arc<DynBackend> = Arc::new(Racing { state_dir: dir.path().to_owned(), run_id, meanwhile });
    (dir, ledger, record, backend)
}

const WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

#[tokio::test]
async fn a_cancel_recorded_while_the_job_is_looked_up_stands() {
    let (_dir, ledger, seen, backend) = race(Meanwhile::Cancelled);
    // The look began before the cancel; the job it asks for is gone, deleted by that cancel.
    let status = refresh(&ledger, &seen, &backend, WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    let stored = ledger.find(&seen.identity.run_id).unwrap().unwrap();
    assert_eq!((stored.state, stored.message.as_deref()), (JobState::Cancelled, Some("vcjob `j` deleted")));
}

#[tokio::test]
async fn a_cancel_asked_while_the_job_is_looked_up_stays_said() {
    let (_dir, ledger, seen, backend) = race(Meanwhile::CancelAsked);
    let status = refresh(&ledger, &seen, &backend, WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Running, "{status:?}");
    let stored = ledger.find(&seen.identity.run_id).unwrap().unwrap();
    assert!(cancel_asked(&stored), "a look that saw the job running must not unsay the cancel: {stored:?}");
}
