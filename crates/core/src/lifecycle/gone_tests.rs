//! Runs whose job the backend no longer has (Volcano collected it after its
//! `ttlSecondsAfterFinished`): `status` and `list` take its end from what the run left
//! ([`crate::backend::Backend::remains`]) once, then answer from the ledger; a follow whose job
//! is collected as its output ends finishes with that end instead of an error; a look that races
//! another client's cancel keeps what that client recorded.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::availability::Availability;
use crate::backend::{
    Backend, DynBackend, JobHandle, JobState, JobStatus, LogLine, LogOptions, LogStream, PreparedJob, RunLayout,
    SubmitOptions,
};
use crate::config::HostKind;
use crate::job::JobIdentity;
use crate::ledger::{Ledger, Record, RunKind, now_rfc3339};
use crate::solver::{Plan, Request};
use crate::{Error, Result};

/// A backend whose job is gone: `status` says not found, its logs give one line and end, and
/// `remains` answers what the test set (counting the asks). With `other`, another client's
/// step is taken as `status` is asked (see [`OtherClient`]).
#[derive(Debug)]
struct Collected {
    remains: std::result::Result<Option<JobStatus>, &'static str>,
    asked: Mutex<u32>,
    /// Reads under way, and the most at once.
    reads: Mutex<(u32, u32)>,
    other: Option<OtherClient>,
}

/// Another client (the dashboard's cancel) racing a look at run `run_id`, through a second
/// connection to the ledger in `state_dir`: it asks for a cancel (the job still runs, and
/// `status` says so) or it has cancelled (the job is gone).
#[derive(Debug)]
struct OtherClient {
    state_dir: std::path::PathBuf,
    run_id: String,
    done: bool,
}

impl OtherClient {
    /// Takes the step; the job's state as the backend then sees it.
    fn step(&self) -> Result<JobStatus> {
        let other = Ledger::open(&self.state_dir).unwrap();
        if self.done {
            other.update_state(&self.run_id, JobState::Cancelled, None, Some("vcjob `j` deleted")).unwrap();
            return Err(Error::NotFound { what: "vcjob `j`".into() });
        }
        let asked = format!("{CANCEL_ASKED}; not confirmed yet");
        other.update_state(&self.run_id, JobState::Running, None, Some(&asked)).unwrap();
        Ok(status_of(JobState::Running, "running".into()))
    }
}

impl std::fmt::Display for Collected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "collected")
    }
}

#[async_trait]
impl Backend for Collected {
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
        if let Some(other) = &self.other {
            return other.step();
        }
        Err(Error::NotFound { what: "vcjob `j` (collected after its TTL)".into() })
    }
    async fn logs(&self, _: &JobHandle, _: &LogOptions) -> Result<LogStream> {
        let line = LogLine { rank: Some(0), text: "step 9".into(), source: None };
        Ok(Box::pin(futures::stream::iter([Ok(line)])))
    }
    async fn cancel(&self, _: &JobHandle) -> Result<JobStatus> {
        Err(Error::NotFound { what: "vcjob `j` (collected after its TTL)".into() })
    }
    async fn remains(&self, _: &JobHandle) -> Result<Option<JobStatus>> {
        *self.asked.lock().unwrap() += 1;
        {
            let mut reads = self.reads.lock().unwrap();
            reads.0 += 1;
            reads.1 = reads.1.max(reads.0);
        }
        // A read takes a while (a helper pod starts), so reads asked together overlap.
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.reads.lock().unwrap().0 -= 1;
        self.remains.clone().map_err(|m| Error::backend("collected", m))
    }
}

fn ended() -> JobStatus {
    JobStatus {
        state: JobState::Completed,
        exit_code: Some(0),
        message: Some("vcjob `j` is gone: collected 1 d after it finished".into()),
        ranks: Vec::new(),
        attempt: None,
    }
}

fn backend(remains: std::result::Result<Option<JobStatus>, &'static str>) -> (Arc<Collected>, Arc<DynBackend>) {
    let b = Arc::new(Collected { remains, asked: Mutex::new(0), reads: Mutex::new((0, 0)), other: None });
    (b.clone(), b)
}

fn running(ledger: &Ledger, name: &str) -> Record {
    let handle =
        JobHandle { kind: HostKind::named("box"), host: "box".into(), id: "j".into(), data: Default::default() };
    let record = Record {
        identity: JobIdentity::new(name, None, None),
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
    ledger.find(&record.identity.run_id).unwrap().unwrap()
}

const WITHIN: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_live_run_whose_job_was_collected_ends_as_its_files_say_once() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = running(&ledger, "collected");
    let (counter, backend) = backend(Ok(Some(ended())));
    let status = refresh(&ledger, &run, &backend, WITHIN).await.unwrap();
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}");
    let stored = ledger.find(&run.identity.run_id).unwrap().unwrap();
    assert_eq!((stored.state, stored.exit_code), (JobState::Completed, Some(0)));
    assert!(stored.message.as_deref().unwrap().contains("collected 1 d after it finished"), "{stored:?}");
    // From now on the ledger answers: the files are not read again.
    let again = refresh(&ledger, &stored, &backend, WITHIN).await.unwrap();
    assert_eq!((again.state, again.exit_code), (JobState::Completed, Some(0)));
    let said = again.message.unwrap();
    assert!(said.starts_with("last known state (as of ") && said.contains("no longer exists"), "{said}");
    assert!(said.contains("collected 1 d after it finished"), "how it ended is still said: {said}");
    assert_eq!(*counter.asked.lock().unwrap(), 1);
}

#[tokio::test]
async fn files_that_cannot_be_read_are_an_error_and_the_run_is_left_to_try_again() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = running(&ledger, "unread");
    let (_, unread) = backend(Err("the helper pod did not start"));
    let err = refresh(&ledger, &run, &unread, WITHIN).await.unwrap_err();
    assert!(err.to_string().contains("the helper pod did not start"), "{err}");
    let stored = ledger.find(&run.identity.run_id).unwrap().unwrap();
    assert_eq!(
        (stored.state, stored.message.as_deref()),
        (JobState::Running, None),
        "kept live: the next look tries again"
    );
    let err = cancel(&ledger, &stored, &unread, || WITHIN).await.unwrap_err();
    assert!(err.to_string().contains("the helper pod did not start"), "{err}");
    let stored = ledger.find(&run.identity.run_id).unwrap().unwrap();
    assert_eq!((stored.state, stored.message), (JobState::Running, None), "the cancel deleted nothing");
    // A backend that cannot tell: the run is unknown, as before.
    let (_, nothing) = backend(Ok(None));
    let run = running(&ledger, "nothing");
    let status = refresh(&ledger, &run, &nothing, WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Unknown);
}

#[tokio::test]
async fn a_follow_whose_job_is_collected_as_it_ends_ends_with_its_final_state() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = running(&ledger, "followed");
    let (_, backend) = backend(Ok(Some(ended())));
    let mut lines = Vec::new();
    let end =
        follow(&ledger, &backend, (&run.handle, &run.identity.run_id), FollowOptions::watch(None), |e| lines.push(e))
            .await
            .unwrap();
    let FollowEnd::Ended(status) = end else { panic!("{end:?}") };
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(ledger.find(&run.identity.run_id).unwrap().unwrap().state, JobState::Completed);
}

#[tokio::test]
async fn cancel_of_a_live_run_whose_job_was_collected_records_how_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = running(&ledger, "late");
    let (_, backend) = backend(Ok(Some(ended())));
    let status = cancel(&ledger, &run, &backend, || WITHIN).await.unwrap();
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}");
    let stored = ledger.find(&run.identity.run_id).unwrap().unwrap();
    assert_eq!(stored.state, JobState::Completed);
    assert!(!stored.message.as_deref().unwrap().starts_with(CANCEL_ASKED), "{stored:?}");
    // Asked again: the run ended; nothing is said to be cancelled.
    let again = cancel(&ledger, &stored, &backend, || WITHIN).await.unwrap();
    assert_eq!(again.state, JobState::Completed);
}

/// `list` settles every gone run of a big ledger at once; their remains are read a few at a
/// time (a read may start a helper pod on a shared cluster), and every run is still settled.
#[tokio::test]
async fn a_list_of_many_gone_runs_reads_their_remains_a_few_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let mut records: Vec<Record> = (0..12).map(|i| running(&ledger, &format!("gone-{i}"))).collect();
    let (counter, backend) = backend(Ok(Some(ended())));
    let seen = refresh_live(&ledger, &mut records, |_| Ok(backend.clone()), |_| WITHIN).await;
    assert!(seen.unanswered.is_empty(), "{seen:?}");
    assert!(records.iter().all(|r| r.state == JobState::Completed), "every run settled");
    assert_eq!(*counter.asked.lock().unwrap(), 12);
    let most = counter.reads.lock().unwrap().1;
    assert!((1..=4).contains(&most), "{most} remains read at once");
}

fn rank(rank: u32, state: JobState, code: i32) -> crate::backend::RankStatus {
    crate::backend::RankStatus {
        rank,
        state,
        exit_code: Some(code),
        location: Some(format!("j-worker-{rank}")),
        restarts: (rank == 1).then_some(2),
    }
}

#[tokio::test]
async fn an_ended_run_whose_job_is_gone_keeps_how_each_rank_ended() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = running(&ledger, "ranked");
    let ranks = vec![rank(0, JobState::Completed, 0), rank(1, JobState::Failed, 3)];
    let (_, backend) = backend(Ok(Some(JobStatus { ranks: ranks.clone(), state: JobState::Failed, ..ended() })));
    let first = refresh(&ledger, &run, &backend, WITHIN).await.unwrap();
    assert_eq!(first.ranks, ranks);
    // The ledger has it ended: later looks answer from it, each rank as it ended.
    let stored = ledger.find(&run.identity.run_id).unwrap().unwrap();
    let later = refresh(&ledger, &stored, &backend, WITHIN).await.unwrap();
    assert!(later.message.as_deref().unwrap().starts_with("last known state"), "{later:?}");
    assert_eq!(later.ranks, ranks, "{later:?}");
    let cancelled = cancel(&ledger, &stored, &backend, || WITHIN).await.unwrap();
    assert_eq!(cancelled.ranks, ranks, "{cancelled:?}");

    // Ranks last seen running say nothing of an ended run: none are shown.
    let other = running(&ledger, "stale");
    ledger.set_ranks(&other.identity.run_id, &[rank(0, JobState::Running, 0)]).unwrap();
    ledger.update_state(&other.identity.run_id, JobState::Completed, Some(0), Some("done")).unwrap();
    let stored = ledger.find(&other.identity.run_id).unwrap().unwrap();
    let status = refresh(&ledger, &stored, &backend, WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Completed);
    assert!(status.ranks.is_empty(), "{status:?}");
}

/// A look at a run racing another client's cancel (the dashboard's, while its refresher and a
/// log follow ask the same run): what that client recorded stands.
async fn raced(done: bool) -> (tempfile::TempDir, Ledger, Record) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let seen = running(&ledger, "raced");
    let other = OtherClient { state_dir: dir.path().to_owned(), run_id: seen.identity.run_id.clone(), done };
    // What the job left, read after the cancel deleted it: its rank was killed.
    let left = status_of(JobState::Unknown, "rank 0 never recorded its end".into());
    let b = Arc::new(Collected {
        remains: Ok(Some(left)),
        asked: Mutex::new(0),
        reads: Mutex::new((0, 0)),
        other: Some(other),
    });
    let backend: Arc<DynBackend> = b;
    // The look began before the other client's step.
    refresh(&ledger, &seen, &backend, WITHIN).await.unwrap();
    (dir, ledger, seen)
}

#[tokio::test]
async fn a_cancel_recorded_while_the_job_is_looked_up_stands() {
    let (_dir, ledger, seen) = raced(true).await;
    let stored = ledger.find(&seen.identity.run_id).unwrap().unwrap();
    assert_eq!((stored.state, stored.message.as_deref()), (JobState::Cancelled, Some("vcjob `j` deleted")));
}

#[tokio::test]
async fn a_cancel_asked_while_the_job_is_looked_up_stays_said() {
    let (_dir, ledger, seen) = raced(false).await;
    let stored = ledger.find(&seen.identity.run_id).unwrap().unwrap();
    assert_eq!(stored.state, JobState::Running);
    assert!(cancel_asked(&stored), "a look that saw the job running must not unsay the cancel: {stored:?}");
}
