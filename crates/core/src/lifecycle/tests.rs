//! The lifecycle rules against the real local backend and a scripted one (a backend whose
//! answers a test sets): runs whose client died, cancel of ended and half-submitted runs,
//! replaced runs, follow to the end and giving up on a run that can never start.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::availability::Availability;
use crate::backend::{
    Backend, DynBackend, JobHandle, JobState, JobStatus, LogOptions, LogStream, PreparedJob, RunLayout, SubmitOptions,
};
use crate::config::{ClusterConfig, HostKind};
use crate::job::JobIdentity;
use crate::ledger::{Ledger, Record, RunKind, now_rfc3339, placeholder_handle};
use crate::local::LocalBackend;
use crate::local::LocalHost;
use crate::solver::{Plan, Request};
use crate::testing::{self, Harness, ProcessProbe};
use crate::{Error, Result};

/// What the scripted backend answers to `status` or `cancel`.
#[derive(Debug, Clone)]
enum Answer {
    Is(JobState, &'static str),
    NotFound,
    Fails,
    Hangs,
}

impl Answer {
    async fn give(&self) -> Result<JobStatus> {
        match self {
            Answer::Is(state, message) => Ok(JobStatus {
                state: *state,
                exit_code: None,
                message: (!message.is_empty()).then(|| message.to_string()),
                ranks: Vec::new(),
                attempt: None,
            }),
            Answer::NotFound => Err(Error::NotFound { what: "job `j-1`".into() }),
            Answer::Fails => Err(Error::backend("scripted", "connection refused")),
            Answer::Hangs => std::future::pending().await,
        }
    }
}

/// A backend on host `box` whose `status`, `cancel` and `never_starts` say what the test set,
/// whose logs never produce a line, and which counts its cancels.
#[derive(Debug)]
struct Scripted {
    status: Answer,
    cancel: Answer,
    never: Option<&'static str>,
    cancels: Mutex<u32>,
    /// Whether its logs end at once (the job's output is over) rather than never.
    logs_end: bool,
}

impl Scripted {
    fn new(status: Answer, cancel: Answer) -> Scripted {
        Scripted { status, cancel, never: None, cancels: Mutex::new(0), logs_end: false }
    }
}

impl std::fmt::Display for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scripted")
    }
}

#[async_trait]
impl Backend for Scripted {
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
        self.status.give().await
    }
    async fn logs(&self, _: &JobHandle, _: &LogOptions) -> Result<LogStream> {
        if self.logs_end {
            return Ok(Box::pin(futures::stream::empty()));
        }
        Ok(Box::pin(futures::stream::pending()))
    }
    async fn cancel(&self, _: &JobHandle) -> Result<JobStatus> {
        *self.cancels.lock().unwrap() += 1;
        self.cancel.give().await
    }
    async fn never_starts(&self, _: &JobHandle) -> Result<Option<String>> {
        Ok(self.never.map(str::to_owned))
    }
}

fn handle(id: &str) -> JobHandle {
    JobHandle { kind: HostKind::named("box"), host: "box".into(), id: id.into(), data: serde_json::Value::Null }
}

/// A run of `name` on host `box` recorded in `state` with `handle`, as the ledger has it.
fn record(name: &str, handle: JobHandle, state: JobState, message: Option<&str>) -> Record {
    Record {
        identity: JobIdentity::new(name, None, None),
        kind: RunKind::Job,
        host: "box".into(),
        handle,
        submitted_at: now_rfc3339(),
        updated_at: now_rfc3339(),
        state,
        exit_code: None,
        message: message.map(str::to_owned),
    }
}

/// Records `record` in `ledger` and returns it as the ledger reads it back.
fn recorded(ledger: &Ledger, record: Record) -> Record {
    ledger.insert(&record).unwrap();
    ledger.find(&record.identity.run_id).unwrap().unwrap()
}

fn scripted(status: Answer, cancel: Answer) -> Arc<DynBackend> {
    Arc::new(Scripted::new(status, cancel))
}

const WITHIN: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_run_whose_client_died_is_settled_as_its_backend_says() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    // The backend still sees the submit under way (its claim), but nobody holds the lock.
    let half = recorded(&ledger, record("half", handle("j-1"), JobState::Submitting, None));
    let backend = scripted(Answer::Is(JobState::Submitting, "the name claim is held"), Answer::NotFound);
    let status = refresh(&ledger, &half, &backend, WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Unknown);
    let said = "the client stopped during submit (interrupted); host `box` says: the name claim is held";
    assert_eq!(status.message.as_deref(), Some(said));
    let stored = ledger.find(&half.identity.run_id).unwrap().unwrap();
    assert_eq!((stored.state, stored.message.as_deref()), (JobState::Unknown, Some(said)));

    // The backend has no such run: it never started anything.
    let gone = recorded(&ledger, record("gone", handle("j-2"), JobState::Submitting, None));
    let status = refresh(&ledger, &gone, &scripted(Answer::NotFound, Answer::NotFound), WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Unknown);
    assert_eq!(
        status.message.as_deref(),
        Some("the client stopped during submit (interrupted); host `box` has no such run (job `j-1` not found)")
    );

    // The backend runs it: the run is what the backend says.
    let running = recorded(&ledger, record("running", handle("j-3"), JobState::Submitting, None));
    let backend = scripted(Answer::Is(JobState::Running, "1/1 running"), Answer::NotFound);
    let status = refresh(&ledger, &running, &backend, WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Running);
    assert_eq!(ledger.find(&running.identity.run_id).unwrap().unwrap().state, JobState::Running);
}

#[tokio::test]
async fn a_run_being_submitted_is_left_to_its_client() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = record("busy", handle("j-1"), JobState::Pending, None);
    let _guard = ledger.begin_submit(&run).unwrap();
    let run = ledger.find(&run.identity.run_id).unwrap().unwrap();
    let backend = scripted(Answer::Hangs, Answer::Hangs);
    let status = refresh(&ledger, &run, &backend, WITHIN).await.unwrap();
    assert_eq!(
        (status.state, status.message.as_deref()),
        (JobState::Submitting, Some("another theseus is submitting it right now"))
    );
    let err = cancel(&ledger, &run, &backend, || WITHIN).await.unwrap_err();
    assert!(matches!(err, LifecycleError::SubmitInProgress { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("run {} is being submitted right now; cancel it once its submit has returned", run.identity.run_id)
    );
}

#[tokio::test]
async fn a_placeholder_run_whose_client_died_cannot_be_looked_up() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let mut run = record("ph", handle("x"), JobState::Submitting, None);
    run.handle = placeholder_handle(HostKind::named("box"), "box", &run.identity.run_id);
    let run = recorded(&ledger, run);
    // Neither asked: the backend would hang.
    let backend = scripted(Answer::Hangs, Answer::Hangs);
    let status = cancel(&ledger, &run, &backend, || WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Unknown);
    assert!(status.message.unwrap().ends_with("cannot look the run up from what was recorded before submit"));
}

#[tokio::test]
async fn a_host_that_does_not_answer_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = recorded(&ledger, record("slow", handle("j-1"), JobState::Running, None));
    let backend = scripted(Answer::Hangs, Answer::Hangs);
    let err = refresh(&ledger, &run, &backend, Duration::from_millis(50)).await.unwrap_err();
    assert_eq!(err.to_string(), format!("host `box` did not answer within 0s about run {}", run.identity.run_id));
    assert_eq!(ledger.find(&run.identity.run_id).unwrap().unwrap().state, JobState::Running, "kept as it was");
}

#[tokio::test]
async fn a_run_the_backend_deleted_keeps_its_last_known_end() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let done = recorded(&ledger, record("done", handle("j-1"), JobState::Completed, Some("exited 0")));
    let backend = scripted(Answer::NotFound, Answer::NotFound);
    let status = refresh(&ledger, &done, &backend, WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Completed);
    assert_eq!(
        status.message.as_deref(),
        Some(format!("last known state (as of {}): exited 0; job `j-1` no longer exists", done.updated_at).as_str())
    );
    let live = recorded(&ledger, record("live", handle("j-2"), JobState::Running, None));
    let status = refresh(&ledger, &live, &backend, WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Unknown);
    assert_eq!(
        status.message.as_deref(),
        Some("job `j-1` no longer exists on host `box` (replaced, deleted or cleaned up)")
    );
}

#[tokio::test]
async fn cancel_of_a_run_whose_client_died_settles_it_as_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let nothing = recorded(&ledger, record("nothing", handle("j-1"), JobState::Submitting, None));
    let status = cancel(&ledger, &nothing, &scripted(Answer::Hangs, Answer::NotFound), || WITHIN).await.unwrap();
    let said = "the client stopped during submit (interrupted) before it started anything (job `j-1` not found); \
                nothing to stop";
    assert_eq!((status.state, status.message.as_deref()), (JobState::Cancelled, Some(said)));
    let stored = ledger.find(&nothing.identity.run_id).unwrap().unwrap();
    assert_eq!((stored.state, stored.message.as_deref()), (JobState::Cancelled, Some(said)));

    let started = recorded(&ledger, record("started", handle("j-2"), JobState::Submitting, None));
    let backend = scripted(Answer::Hangs, Answer::Is(JobState::Pending, "helper deleted"));
    let status = cancel(&ledger, &started, &backend, || WITHIN).await.unwrap();
    assert_eq!(status.state, JobState::Cancelled);
    assert_eq!(
        status.message.as_deref(),
        Some(
            "the client stopped during submit (interrupted); stopped what it had started (host `box` said: helper \
             deleted)"
        )
    );

    // A live run whose backend lost it is an error, not a made-up state.
    let live = recorded(&ledger, record("live", handle("j-3"), JobState::Running, None));
    let err = cancel(&ledger, &live, &scripted(Answer::Hangs, Answer::NotFound), || WITHIN).await.unwrap_err();
    assert!(matches!(err, LifecycleError::Failed(Error::NotFound { .. })), "{err:?}");
    // This cancel deleted nothing: the run is not taken for one a cancel stopped later.
    let stored = ledger.find(&live.identity.run_id).unwrap().unwrap();
    assert_eq!((stored.state, stored.message), (JobState::Running, None));
}

fn local_harness(root: &Path) -> Harness {
    struct NoProbe;
    #[async_trait]
    impl ProcessProbe for NoProbe {
        async fn alive(&self, _: &JobHandle) -> Result<usize> {
            Ok(0)
        }
    }
    let cluster =
        ClusterConfig { root: root.join("root").display().to_string(), work: "~/work".into(), ..Default::default() };
    let backend = LocalBackend::new("local", LocalHost::default(), cluster, root);
    let plan = testing::cpu_plan("local", HostKind::LOCAL, 1);
    Harness { backend: Arc::new(backend), plan, probe: Arc::new(NoProbe), timeout: Duration::from_secs(60) }
}

/// Submits `python job.py args` to the local backend and records it as the dispatcher would.
async fn local_run(
    h: &Harness,
    ledger: &Ledger,
    name: &str,
    args: &[&str],
) -> (Record, testing::tempfile_dir::TempDir) {
    let (job, dir) = testing::prepare(h, name, args, vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap();
    let mut run = record(name, handle, JobState::Pending, None);
    run.identity = job.identity.clone();
    run.host = "local".into();
    (recorded(ledger, run), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_an_ended_run_records_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let h = local_harness(dir.path());
    let ledger = Ledger::open(&dir.path().join("state")).unwrap();
    let (run, _code) = local_run(&h, &ledger, "ended", &["fail", "3"]).await;
    testing::wait_terminal(&h, &run.handle).await;
    let status = cancel(&ledger, &run, &h.backend, || WITHIN).await.unwrap();
    assert_eq!((status.state, status.exit_code), (JobState::Failed, Some(3)), "{status:?}");
    let stored = ledger.find(&run.identity.run_id).unwrap().unwrap();
    assert_eq!((stored.state, stored.exit_code), (JobState::Failed, Some(3)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_a_run_streams_its_lines_and_records_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let h = local_harness(dir.path());
    let ledger = Ledger::open(&dir.path().join("state")).unwrap();
    let (run, _code) = local_run(&h, &ledger, "counted", &["count", "3"]).await;
    let mut lines = Vec::new();
    let run_ref = (&run.handle, run.identity.run_id.as_str());
    let end = follow(&ledger, &h.backend, run_ref, FollowOptions::to_end(&*h.backend, None), |event| match event {
        FollowEvent::Line(line) => lines.push(line.text),
        other => panic!("a local run starts at once: {other:?}"),
    })
    .await
    .unwrap();
    let FollowEnd::Ended(status) = end else { panic!("{end:?}") };
    assert_eq!(status.state, JobState::Completed);
    let ours: Vec<_> = lines.iter().filter(|l| l.starts_with("conformance: line")).cloned().collect();
    assert_eq!(ours, ["conformance: line 0", "conformance: line 1", "conformance: line 2"], "{lines:?}");
    assert_eq!(ledger.find(&run.identity.run_id).unwrap().unwrap().state, JobState::Completed);
}

#[tokio::test]
async fn a_followed_run_that_can_never_start_is_cancelled_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = recorded(&ledger, record("stuck", handle("j-1"), JobState::Pending, None));
    let mut script = Scripted::new(
        Answer::Is(JobState::Pending, "waiting for 9 GPUs"),
        Answer::Is(JobState::Cancelled, "cancelled"),
    );
    script.never = Some("no node has 9 GPUs");
    let script = Arc::new(script);
    let backend: Arc<DynBackend> = script.clone();
    let mut events = Vec::new();
    let run_ref = (&run.handle, run.identity.run_id.as_str());
    let end =
        follow(&ledger, &backend, run_ref, FollowOptions::to_end(&*backend, None), |e| events.push(e)).await.unwrap();
    assert_eq!(
        events,
        [
            FollowEvent::NotStarted("waiting for 9 GPUs".into()),
            FollowEvent::NeverStarts("no node has 9 GPUs".into()),
            FollowEvent::Cancelling,
        ]
    );
    let FollowEnd::GaveUp(status) = end else { panic!("{end:?}") };
    assert_eq!(status.message.as_deref(), Some("can never start: no node has 9 GPUs"));
    assert_eq!(*script.cancels.lock().unwrap(), 1);
    let stored = ledger.find(&run.identity.run_id).unwrap().unwrap();
    assert_eq!(
        (stored.state, stored.message.as_deref()),
        (JobState::Cancelled, Some("can never start: no node has 9 GPUs"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_followed_run_not_started_in_time_is_cancelled_and_a_watched_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = recorded(&ledger, record("slow", handle("j-1"), JobState::Pending, None));
    let backend = scripted(Answer::Is(JobState::Pending, "queued"), Answer::Is(JobState::Cancelled, ""));
    let mut events = Vec::new();
    let run_ref = (&run.handle, run.identity.run_id.as_str());
    let options = FollowOptions { rank: None, start_timeout: Some(Duration::ZERO), cancel_if_never_starts: true };
    let end = follow(&ledger, &backend, run_ref, options, |e| events.push(e)).await.unwrap();
    assert_eq!(
        events,
        [FollowEvent::StartTimedOut { within: Duration::ZERO, reason: "queued".into() }, FollowEvent::Cancelling]
    );
    let FollowEnd::GaveUp(status) = end else { panic!("{end:?}") };
    assert_eq!(status.message.as_deref(), Some("did not start within 0 s: queued"));

    // `logs -f` says why once, and keeps waiting.
    let mut said = Vec::new();
    let watching = follow(&ledger, &backend, run_ref, FollowOptions::watch(None), |e| said.push(e));
    assert!(tokio::time::timeout(Duration::from_secs(60), watching).await.is_err(), "a watch never gives up");
    assert_eq!(said, [FollowEvent::NotStarted("queued".into())]);
}

#[tokio::test]
async fn replaced_runs_are_settled_from_what_the_backend_says() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let old = recorded(&ledger, record("train", handle("j-1"), JobState::Running, None));
    let mut new = record("train", handle("j-2"), JobState::Pending, None);
    new.identity.run_id = format!("{}-new", old.identity.run_id);
    let new = recorded(&ledger, new);
    let mut unsettled = Vec::new();
    let gone = scripted(Answer::NotFound, Answer::NotFound);
    settle_replaced(&ledger, &gone, &new.identity, "box", |u| unsettled.push(u)).await.unwrap();
    assert!(unsettled.is_empty(), "{unsettled:?}");
    let stored = ledger.find(&old.identity.run_id).unwrap().unwrap();
    let replaced = format!("replaced by run {}", new.identity.run_id);
    assert_eq!((stored.state, stored.message), (JobState::Cancelled, Some(replaced)));
    assert_eq!(
        ledger.find(&new.identity.run_id).unwrap().unwrap().state,
        JobState::Pending,
        "the new run is not touched"
    );

    // A run that still runs elsewhere keeps running; one whose host fails is said, not settled.
    let other = recorded(&ledger, record("other", handle("j-3"), JobState::Pending, None));
    let mut newer = record("other", handle("j-4"), JobState::Pending, None);
    newer.identity.run_id = format!("{}-new", other.identity.run_id);
    let runs = scripted(Answer::Is(JobState::Running, "1/1 running"), Answer::NotFound);
    settle_replaced(&ledger, &runs, &newer.identity, "box", |u| unsettled.push(u)).await.unwrap();
    assert_eq!(ledger.find(&other.identity.run_id).unwrap().unwrap().state, JobState::Running);
    assert!(unsettled.is_empty(), "{unsettled:?}");
    settle_replaced(&ledger, &scripted(Answer::Fails, Answer::Fails), &newer.identity, "box", |u| unsettled.push(u))
        .await
        .unwrap();
    let said: Vec<_> = unsettled.iter().map(ToString::to_string).collect();
    let unclear =
        format!("cannot tell whether run {} was replaced: scripted: connection refused", other.identity.run_id);
    assert_eq!(said, [unclear]);
    assert_eq!(ledger.find(&other.identity.run_id).unwrap().unwrap().state, JobState::Running, "kept as it was");
}

#[tokio::test]
async fn live_rows_are_refreshed_and_silent_hosts_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let a = recorded(&ledger, record("a", handle("j-1"), JobState::Pending, None));
    let mut b = record("b", handle("j-2"), JobState::Pending, None);
    b.host = "gone".into();
    let b = recorded(&ledger, b);
    let mut c = record("c", handle("j-3"), JobState::Running, None);
    c.host = "gone".into();
    let c = recorded(&ledger, c);
    let done = recorded(&ledger, record("d", handle("j-4"), JobState::Completed, None));
    let mut records = vec![a.clone(), b.clone(), c.clone(), done.clone()];
    let mut made = Vec::new();
    let backend = scripted(Answer::Is(JobState::Running, ""), Answer::Hangs);
    let learned = refresh_live(
        &ledger,
        &mut records,
        |r| {
            made.push(r.host.clone());
            if r.host == "box" { Ok(backend.clone()) } else { Err("host `gone` is not in the config".into()) }
        },
        |_| WITHIN,
    )
    .await;
    assert_eq!(made, ["box", "gone"], "one backend per host");
    assert_eq!(records[0].state, JobState::Running);
    assert_eq!((records[1].state, records[2].state), (JobState::Pending, JobState::Running), "kept as they were");
    assert_eq!(
        learned.silent,
        [SilentHost { host: "gone".into(), reason: "host `gone` is not in the config".into(), rows: 2 }]
    );
    assert_eq!(learned.unanswered.len(), 2);
    assert!(learned.unanswered.contains_key(&b.identity.run_id) && learned.unanswered.contains_key(&c.identity.run_id));
    assert_eq!(live_run_paths(&records).len(), 3);
    assert!(!live_run_paths(&records).contains(&done.identity.run_path()));
    assert_eq!(abandoned_run_paths(&ledger).unwrap().len(), 4, "nobody submits any of them");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attended_run_is_stopped_with_its_reason_or_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let h = local_harness(dir.path());
    let ledger = Ledger::open(&dir.path().join("state")).unwrap();
    let (session, _code) = local_run(&h, &ledger, "session", &["sleep"]).await;
    let run = (&session.handle, session.identity.run_id.as_str());
    let Stopped::Done(status) = stop(&ledger, &h.backend, run, "stopped from the test", WITHIN).await else {
        panic!("the local backend stops a running job")
    };
    assert_eq!(status.state, JobState::Cancelled);
    let stored = ledger.find(&session.identity.run_id).unwrap().unwrap();
    assert_eq!((stored.state, stored.message.as_deref()), (JobState::Cancelled, Some("stopped from the test")));

    let (short, _code) = local_run(&h, &ledger, "short", &["fail", "4"]).await;
    let run = (&short.handle, short.identity.run_id.as_str());
    let every = Duration::from_millis(100);
    let ended = tokio::time::timeout(h.timeout, wait_for_end(&ledger, &h.backend, run, every, WITHIN)).await.unwrap();
    assert_eq!((ended.state, ended.exit_code), (JobState::Failed, Some(4)));
    assert_eq!(ledger.find(&short.identity.run_id).unwrap().unwrap().state, JobState::Failed);

    // A backend that does not answer in time leaves the record as it was.
    let hangs = recorded(&ledger, record("hangs", handle("j-9"), JobState::Running, None));
    let run = (&hangs.handle, hangs.identity.run_id.as_str());
    let slow = scripted(Answer::Hangs, Answer::Hangs);
    assert!(matches!(stop(&ledger, &slow, run, "why", Duration::from_millis(50)).await, Stopped::TimedOut));
    assert_eq!(ledger.find(&hangs.identity.run_id).unwrap().unwrap().state, JobState::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_gives_its_url_or_says_why_it_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let h = local_harness(dir.path());
    let url = "http://127.0.0.1:8888/lab?token=abc";
    let (job, _code) =
        testing::prepare(&h, "jupyter", &["ok"], vec![], serde_json::json!({"greeting": url})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap();
    let found = wait_for_url(&h.backend, &handle, h.timeout).await.unwrap();
    assert_eq!((found.port, found.token.as_str()), (8888, "abc"));

    let (job, _code) = testing::prepare(&h, "no-jupyter", &["fail", "3"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap();
    let none = wait_for_url(&h.backend, &handle, h.timeout).await.unwrap_err();
    assert!(none.ended && none.state == JobState::Failed, "{none:?}");
    assert!(none.tail.iter().any(|l| l == "conformance: failing with 3"), "{none:?}");
    let said = none.to_string();
    assert!(said.starts_with("the session ended (failed) before Jupyter Lab started"), "{said}");
    assert!(said.contains("; the log's last lines:\n  "), "{said}");
    assert!(said.contains("\n  conformance: failing with 3"), "{said}");
}

/// A cancel stopped (Ctrl-C, SIGTERM) after its backend deleted the job leaves the run marked:
/// a later `status` or `cancel` that finds the job gone settles it as cancelled, not unknown or
/// an error. Found by hand: `theseus cancel` killed mid-way, then `status` said `unknown` and a
/// second `cancel` failed with "not found".
#[tokio::test]
async fn a_cancel_interrupted_after_its_delete_is_settled_as_cancelled_later() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let said = "job `j-1` is gone: an earlier cancel deleted it and was interrupted";
    for second_look in ["status", "cancel"] {
        let run = recorded(&ledger, record(second_look, handle("j-1"), JobState::Running, Some("step 10")));
        // The first cancel's delete went out, then its client was stopped before the answer.
        let stopped = tokio::time::timeout(
            Duration::from_millis(100),
            cancel(&ledger, &run, &scripted(Answer::Hangs, Answer::Hangs), || WITHIN),
        )
        .await;
        assert!(stopped.is_err(), "the first cancel was stopped mid-way");
        let marked = ledger.find(&run.identity.run_id).unwrap().unwrap();
        assert_eq!(marked.state, JobState::Running, "nothing is settled before the backend answers");
        let gone = scripted(Answer::NotFound, Answer::NotFound);
        let status = match second_look {
            "status" => refresh(&ledger, &marked, &gone, WITHIN).await.unwrap(),
            _ => cancel(&ledger, &marked, &gone, || WITHIN).await.unwrap(),
        };
        assert_eq!((status.state, status.message.as_deref()), (JobState::Cancelled, Some(said)), "{second_look}");
        let stored = ledger.find(&run.identity.run_id).unwrap().unwrap();
        assert_eq!(stored.state, JobState::Cancelled, "{second_look}");
        // Once settled, cancelling it again repeats its end instead of failing.
        let again = cancel(&ledger, &stored, &gone, || WITHIN).await.unwrap();
        assert_eq!(again.state, JobState::Cancelled);
        assert_eq!(again.message.as_deref(), Some("already cancelled; job `j-1` no longer exists"));
    }
}

/// A pending run's reason is what its backend says now: each refresh stores the new one (the
/// dashboard shows the ledger's message), and a backend that gives none leaves none, never an
/// older reason that no longer holds.
#[tokio::test]
async fn a_pending_runs_reason_is_the_backends_latest() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let run = recorded(&ledger, record("p", handle("j-1"), JobState::Pending, Some("waiting for queue q: full")));
    let message = |ledger: &Ledger| ledger.find(&run.identity.run_id).unwrap().unwrap().message;
    let pulling = "pod p-0 cannot start: ImagePullBackOff: Back-off pulling image \"img\"";
    let backend = scripted(Answer::Is(JobState::Pending, pulling), Answer::Hangs);
    let status = refresh(&ledger, &run, &backend, WITHIN).await.unwrap();
    assert_eq!(status.message.as_deref(), Some(pulling));
    assert_eq!(message(&ledger).as_deref(), Some(pulling), "stored");
    let mut records = vec![ledger.find(&run.identity.run_id).unwrap().unwrap()];
    let preempted = "preempted by serve (priority prod) at 2026-01-01T00:00:00Z; restarting, attempt 2 of 4";
    let backend = scripted(Answer::Is(JobState::Pending, preempted), Answer::Hangs);
    refresh_live(&ledger, &mut records, |_| Ok(backend.clone()), |_| WITHIN).await;
    assert_eq!(records[0].message.as_deref(), Some(preempted));
    assert_eq!(message(&ledger).as_deref(), Some(preempted), "the list's refresh stores it too");
    let backend = scripted(Answer::Is(JobState::Pending, ""), Answer::Hangs);
    refresh(&ledger, &records[0], &backend, WITHIN).await.unwrap();
    assert_eq!(message(&ledger), None, "no stale reason");
}

#[tokio::test]
async fn a_follow_that_ends_with_a_cancel_of_another_client_records_the_cancel() {
    // `logs -f` in one terminal, `theseus cancel` (or the dashboard) in another: the job ends
    // by the cancel's signal, which its backend reports as a preemption or a failure.
    for (before, message) in [
        (JobState::Cancelled, Some("cancelled by the user")),
        (JobState::Running, Some("a cancel was asked for; not confirmed yet")),
        (JobState::Running, None),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path()).unwrap();
        let run = recorded(&ledger, record("followed", handle("j-1"), before, message));
        let backend: Arc<DynBackend> = Arc::new(Scripted {
            logs_end: true,
            ..Scripted::new(Answer::Is(JobState::Preempted, "terminated by SIGTERM"), Answer::Fails)
        });
        let run_ref = (&run.handle, run.identity.run_id.as_str());
        let end = follow(&ledger, &backend, run_ref, FollowOptions::watch(None), |_| {}).await.unwrap();
        let FollowEnd::Ended(status) = end else { panic!("{end:?}") };
        let stored = ledger.find(&run.identity.run_id).unwrap().unwrap();
        let expected = if message.is_some() { JobState::Cancelled } else { JobState::Preempted };
        assert_eq!((status.state, stored.state), (expected, expected), "{before:?} {message:?}: {status:?}");
        if before == JobState::Cancelled {
            assert_eq!(stored.message.as_deref(), Some("cancelled by the user"));
        }
    }
}
