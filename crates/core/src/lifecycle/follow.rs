//! Following a run's output to its end (`logs -f`, `submit --follow`): its lines, why it has not
//! started while it waits (see [`super::StartProgress`]), and its final state recorded. A run
//! that can never start, or has not started within its backend's start timeout, is cancelled
//! when the caller asks for that. A signal stops following and leaves the run as it is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::{LifecycleError, STATUS_TIMEOUT, StartProgress, StartStep, save};
use crate::backend::{DynBackend, JobHandle, JobState, JobStatus, LogLine, LogOptions};
use crate::interrupt::{self, InterruptSignal};
use crate::ledger::Ledger;

/// How often a run that has not started is asked why.
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// How to follow a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct FollowOptions {
    /// Only this rank's output.
    pub rank: Option<u32>,
    /// Cancel the run when it has not started after this long (`None`: never).
    pub start_timeout: Option<Duration>,
    /// Cancel the run at once when its backend says it can never start as its cluster is.
    pub cancel_if_never_starts: bool,
}

impl FollowOptions {
    /// Following an existing run (`logs -f`): says why it has not started but never cancels it.
    pub fn watch(rank: Option<u32>) -> FollowOptions {
        FollowOptions { rank, start_timeout: None, cancel_if_never_starts: false }
    }

    /// Following a run just submitted (`submit --follow`): cancelled when it can never start or
    /// has not started within `backend`'s start timeout.
    pub fn to_end(backend: &DynBackend, rank: Option<u32>) -> FollowOptions {
        FollowOptions { rank, start_timeout: backend.start_timeout(), cancel_if_never_starts: true }
    }
}

/// What happens while a run is followed, in order, for the caller to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowEvent {
    /// A line of the run's output.
    Line(LogLine),
    /// The run has not started yet, for this reason (said once per change).
    NotStarted(String),
    /// The run can never start as its cluster is, for this reason; it is cancelled next.
    NeverStarts(String),
    /// The run did not start within `within`, for this reason; it is cancelled next.
    StartTimedOut {
        /// The start timeout.
        within: Duration,
        /// Why it waited last.
        reason: String,
    },
    /// The run is being cancelled.
    Cancelling,
}

/// How following a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowEnd {
    /// Its output ended; its final state, recorded.
    Ended(JobStatus),
    /// It was cancelled for not starting (after [`FollowEvent::NeverStarts`] or
    /// [`FollowEvent::StartTimedOut`]); the state recorded.
    GaveUp(JobStatus),
    /// A signal stopped the following; the run was left as it was.
    Detached(InterruptSignal),
}

/// Streams the output of run `run_id` (`handle` on `backend`) until it ends, reporting each
/// step to `on_event`, and records its final state.
pub async fn follow(
    ledger: &Ledger,
    backend: &Arc<DynBackend>,
    (handle, run_id): (&JobHandle, &str),
    options: FollowOptions,
    mut on_event: impl FnMut(FollowEvent),
) -> Result<FollowEnd, LifecycleError> {
    let logs = LogOptions { follow: true, rank: options.rank };
    let mut stream = tokio::select! {
        biased;
        signal = interrupt::wait() => return Ok(FollowEnd::Detached(signal)),
        stream = backend.logs(handle, &logs) => stream?,
    };
    // Until the job starts, its status says why it waits.
    let mut start = StartProgress::new(options.start_timeout);
    let began = Instant::now();
    let mut look = tokio::time::interval(LOOK_EVERY);
    loop {
        tokio::select! {
            biased;
            signal = interrupt::wait() => return Ok(FollowEnd::Detached(signal)),
            line = stream.next() => match line {
                Some(line) => {
                    start.mark_started();
                    on_event(FollowEvent::Line(line?));
                }
                None => break,
            },
            _ = look.tick(), if !start.started() => {
                let status = match backend.status(handle).await {
                    Ok(status) => status,
                    Err(e) => {
                        tracing::debug!("status while waiting for {run_id} to start: {e}");
                        continue;
                    }
                };
                match start.observe(&status, began.elapsed()) {
                    StartStep::Say(reason) => {
                        on_event(FollowEvent::NotStarted(reason));
                        // A job that can never start is given up now, not after the start timeout.
                        if options.cancel_if_never_starts && status.state == JobState::Pending
                            && let Ok(Ok(Some(never))) =
                                tokio::time::timeout(STATUS_TIMEOUT, backend.never_starts(handle)).await
                        {
                            on_event(FollowEvent::NeverStarts(never.clone()));
                            let why = format!("can never start: {never}");
                            return give_up(ledger, backend, (handle, run_id), why, on_event).await;
                        }
                    }
                    StartStep::TimedOut(reason) => {
                        let within = start.timeout().unwrap_or_default();
                        let why = format!("did not start within {} s: {reason}", within.as_secs());
                        on_event(FollowEvent::StartTimedOut { within, reason });
                        return give_up(ledger, backend, (handle, run_id), why, on_event).await;
                    }
                    StartStep::Nothing | StartStep::Started => {}
                }
            }
        }
    }
    let status = match backend.status(handle).await {
        Ok(status) => status,
        // The job is gone as its output ended (collected after a short `ttlSecondsAfterFinished`,
        // or deleted): its end as `status` tells it, from the ledger and what the run left.
        Err(crate::Error::NotFound { what }) => {
            let Some(record) = ledger.find(run_id)?.filter(|r| r.identity.run_id == run_id) else {
                return Err(crate::Error::NotFound { what }.into());
            };
            return Ok(FollowEnd::Ended(super::refresh(ledger, &record, backend, STATUS_TIMEOUT).await?));
        }
        Err(e) => return Err(e.into()),
    };
    let status = cancel_stands(ledger, run_id, status)?;
    save(ledger, run_id, &status)?;
    Ok(FollowEnd::Ended(status))
}

/// The end a follow records when a cancel (by this client or another: `theseus cancel` in
/// another terminal, the dashboard) was asked for or recorded while it followed: the signal the
/// cancel sent shows to the backend as a preemption or a failure, and whichever client saved
/// last would win; the cancel's word stands.
fn cancel_stands(ledger: &Ledger, run_id: &str, mut status: JobStatus) -> crate::Result<JobStatus> {
    if !matches!(status.state, JobState::Preempted | JobState::Failed) {
        return Ok(status);
    }
    let Some(record) = ledger.find(run_id)?.filter(|r| r.identity.run_id == run_id) else { return Ok(status) };
    if record.state == JobState::Cancelled {
        status.state = JobState::Cancelled;
        status.message = record.message.or(status.message);
    } else if super::cancel_asked(&record) {
        status.state = JobState::Cancelled;
    }
    Ok(status)
}

/// Cancels a followed run that will not start (nothing of it is left) and records it as
/// cancelled with `why`.
async fn give_up(
    ledger: &Ledger,
    backend: &Arc<DynBackend>,
    (handle, run_id): (&JobHandle, &str),
    why: String,
    mut on_event: impl FnMut(FollowEvent),
) -> Result<FollowEnd, LifecycleError> {
    on_event(FollowEvent::Cancelling);
    let cancelled = backend.cancel(handle).await?;
    let status = JobStatus {
        state: JobState::Cancelled,
        exit_code: None,
        message: Some(why),
        ranks: cancelled.ranks,
        attempt: None,
    };
    save(ledger, run_id, &status)?;
    Ok(FollowEnd::GaveUp(status))
}
