//! A run's output for its page: the history (`logs` without `-f`) then its end as the ledger
//! has it, or, following, what `theseus logs -f` does (core's [`lifecycle::follow`]: the lines,
//! why it has not started as notes, its final state recorded) ending with its end. A follow
//! runs on a blocking thread of the runtime (it holds a ledger across awaits) and stops as soon
//! as the page drops the stream: nothing is left behind.

use std::sync::Arc;

use futures::StreamExt;
use theseus_core::backend::{DynBackend, LogOptions};
use theseus_core::ledger::Record;
use theseus_core::lifecycle::{self, FollowEnd, FollowEvent, FollowOptions};
use theseus_ui::{LogEvent, LogEvents, SourceError};

use super::{Shared, on_ledger, one_line};

/// The run `run`'s output as events (see the module doc).
pub(super) async fn logs(shared: Arc<Shared>, run: &str, follow: bool) -> Result<LogEvents, SourceError> {
    let run = run.to_owned();
    let found = Arc::clone(&shared);
    let (record, backend) = on_ledger(move || async move {
        let ledger = found.open_ledger()?;
        let record = found.find(&ledger, &run)?;
        let loaded = found.loaded()?;
        let backend = crate::runs::backend_for(&found.ctx, loaded, &ledger, &record)
            .map_err(|e| SourceError::Failed(format!("{e:#}")))?;
        Ok((record, backend))
    })
    .await?;
    if follow {
        return Ok(followed(shared, record, backend));
    }
    let lines = backend
        .logs(&record.handle, &LogOptions { follow: false, rank: None })
        .await
        .map_err(|e| SourceError::Failed(one_line(&e)))?;
    let end = LogEvent::End { state: record.state, exit_code: record.exit_code };
    // The history, then its end as the ledger has it; a broken stream ends with its error.
    let events = futures::stream::unfold((lines, Some(end)), |(mut lines, end)| async move {
        let end = end?;
        match lines.next().await {
            Some(Ok(line)) => Some((LogEvent::Line(line), (lines, Some(end)))),
            Some(Err(e)) => Some((LogEvent::Error { error: one_line(&e) }, (lines, None))),
            None => Some((end, (lines, None))),
        }
    });
    Ok(events.boxed())
}

/// Follows the run as `theseus logs -f` does, its events sent as they happen, ending with
/// [`LogEvent::End`] (or [`LogEvent::Error`]); the follow stops when the events are dropped.
fn followed(shared: Arc<Shared>, record: Record, backend: Arc<DynBackend>) -> LogEvents {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<LogEvent>();
    let runtime = tokio::runtime::Handle::current();
    // Subscribed before the follow starts: a cancel asked from now on is seen.
    let mut cancels = shared.cancels.subscribe();
    // Not awaited: it ends on its own (the follow ends, or the receiver below is dropped).
    tokio::task::spawn_blocking(move || {
        runtime.block_on(async move {
            let ledger = match shared.open_ledger() {
                Ok(ledger) => ledger,
                Err(e) => {
                    let _ = tx.send(LogEvent::Error { error: e.to_string() });
                    return;
                }
            };
            let run_id = record.identity.run_id.as_str();
            // What the Volcano follower says of its contact with the cluster, as `logs -f` does.
            let mut notes = (backend.kind().as_str() == "volcano").then(crate::log_notes::subscribe);
            let events = tx.clone();
            let mut follow = Box::pin(lifecycle::follow(
                &ledger,
                &backend,
                (&record.handle, run_id),
                FollowOptions::watch(None),
                |event| {
                    let _ = events.send(event_of(run_id, event));
                },
            ));
            let last = loop {
                tokio::select! {
                    end = &mut follow => break match end {
                        Ok(FollowEnd::Ended(status) | FollowEnd::GaveUp(status)) => {
                            LogEvent::End { state: status.state, exit_code: status.exit_code }
                        }
                        // The program is stopping: the stream just ends.
                        Ok(FollowEnd::Detached(_)) => return,
                        Err(e) => LogEvent::Error { error: one_line(&e) },
                    },
                    text = next_note(&mut notes) => {
                        let _ = tx.send(LogEvent::Note { text });
                    }
                    // This dashboard cancels the run: the follow stops here, before its end
                    // (the pods' SIGTERM) could be recorded over the cancel, and the end is
                    // what the cancel recorded.
                    () = cancel_of(&mut cancels, run_id, Cancel::Started) => {
                        drop(follow);
                        break tokio::select! {
                            () = cancel_of(&mut cancels, run_id, Cancel::Done) => ended(&shared, &ledger, run_id),
                            () = tx.closed() => return,
                        };
                    }
                    // The page went away: the follow (and the backend's stream) is dropped here.
                    () = tx.closed() => return,
                }
            };
            let _ = tx.send(last);
        })
    });
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

/// A cancel by this dashboard, of one run (see [`super::Shared::cancels`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cancel {
    /// It is about to ask the backend.
    Started,
    /// It has recorded what it did (or failed).
    Done,
}

/// Resolves when `run_id`'s cancel reaches `step`.
async fn cancel_of(cancels: &mut tokio::sync::broadcast::Receiver<(String, Cancel)>, run_id: &str, step: Cancel) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match cancels.recv().await {
            Ok((id, got)) if id == run_id && got == step => return,
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// The end of a run as the ledger has it after a cancel: [`LogEvent::End`] when it is over,
/// else why the stream stops.
fn ended(shared: &Shared, ledger: &theseus_core::ledger::Ledger, run_id: &str) -> LogEvent {
    match shared.find(ledger, run_id) {
        Ok(record) if record.state.is_terminal() => LogEvent::End { state: record.state, exit_code: record.exit_code },
        Ok(record) => LogEvent::Error {
            error: format!("the cancel left run {run_id} {}; open its log again to follow it", record.state),
        },
        Err(e) => LogEvent::Error { error: e.to_string() },
    }
}

/// The next line the backend logged about its streams (never, without `notes`).
async fn next_note(notes: &mut Option<tokio::sync::broadcast::Receiver<String>>) -> String {
    use tokio::sync::broadcast::error::RecvError;
    if let Some(notes) = notes {
        loop {
            match notes.recv().await {
                Ok(text) => return text,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            }
        }
    }
    std::future::pending().await
}

/// What a follow event says on the page.
fn event_of(run_id: &str, event: FollowEvent) -> LogEvent {
    let text = match event {
        FollowEvent::Line(line) => return LogEvent::Line(line),
        FollowEvent::NotStarted(reason) => format!("not started yet: {reason}"),
        FollowEvent::NeverStarts(reason) => format!("run {run_id} can never start: {reason}"),
        FollowEvent::StartTimedOut { within, reason } => {
            format!("run {run_id} did not start within {} s: {reason}", within.as_secs())
        }
        FollowEvent::Cancelling => format!("cancelling run {run_id}"),
    };
    LogEvent::Note { text }
}

#[cfg(test)]
mod tests {
    use theseus_core::backend::LogLine;

    use super::*;

    #[test]
    fn follow_events_are_lines_or_notes_as_logs_f_says_them() {
        let line = LogLine { rank: Some(1), text: "step 3".into(), source: None };
        assert!(matches!(event_of("r1", FollowEvent::Line(line.clone())), LogEvent::Line(l) if l == line));
        let waiting = event_of("r1", FollowEvent::NotStarted("pod worker-0: ImagePullBackOff".into()));
        assert!(
            matches!(waiting, LogEvent::Note { text } if text == "not started yet: pod worker-0: ImagePullBackOff")
        );
        let never = event_of("r1", FollowEvent::NeverStarts("16 GPUs > 8".into()));
        assert!(matches!(never, LogEvent::Note { text } if text == "run r1 can never start: 16 GPUs > 8"));
    }
}
