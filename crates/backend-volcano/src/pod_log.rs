//! One pod's log for `theseus logs`: which pods can be read, the reader that follows one pod's
//! log across broken streams (told about its pod by the follow loop's watch, never by polling),
//! and the contact with the API server the follow loop and the readers share.

use std::sync::Mutex;
use std::time::Duration;

use futures::AsyncBufReadExt as _;
use k8s_openapi::api::core::v1::Pod;
use theseus_core::backend::LogLine;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::api::Cluster;
use crate::error::VolcanoError;
use crate::handle::HandleData;
use crate::log_cursor::LineCursor;
use crate::render::TASK_NAME;
use crate::status::{pod_label, rank_of};

pub(crate) type Sender = mpsc::Sender<theseus_core::Result<LogLine>>;

/// How long a reader waits for news of its pod before it opens a log stream that ended again.
const REOPEN_PAUSE: Duration = Duration::from_millis(500);

/// How many pods' logs are read at once (rank 0's always is, even past it). Each open log is a connection of its
/// own (with its TLS and read buffers, about 170 KiB measured) and each reader a task, so a
/// 1,024-pod gang followed all at once held a thousand of each; past this many, a started
/// pod waits (as its name and rank) until another's reader ends (its pod's end, or the job's).
/// Rank 0 (the coordinator, whose output matters most) is always read at once.
pub(crate) const MAX_OPEN_LOGS: usize = 64;

/// The label selector of the job's pods.
pub(crate) fn selector(data: &HandleData) -> String {
    format!("{}={}", crate::api::JOB_NAME_LABEL, data.job)
}

/// Whether the pod is of the rank asked for (every pod when none was).
pub(crate) fn wanted(pod: &Pod, rank: Option<u32>) -> bool {
    rank.is_none_or(|r| rank_of(pod) == Some(r))
}

/// True once the pod's container has started (running or terminated): its log can be read.
pub(crate) fn started(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|cs| {
        cs.iter().any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some() || s.terminated.is_some()))
    })
}

/// True when the pod's container will write no more: terminated (and not restarting), or the
/// pod is in a terminal phase.
fn ended(pod: &Pod) -> bool {
    let Some(status) = &pod.status else { return false };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return true;
    }
    status
        .container_statuses
        .as_ref()
        .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some())))
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum())
}

/// What a reader needs to know of its pod, as the watch last saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PodState {
    /// The container will write no more.
    pub(crate) ended: bool,
    /// Restarts of its containers (a restarted container writes a new log from its first line).
    pub(crate) restarts: i32,
    /// The pod was deleted: its log cannot be read any more.
    pub(crate) gone: bool,
}

impl PodState {
    pub(crate) fn of(pod: &Pod) -> PodState {
        PodState { ended: ended(pod), restarts: restarts(pod), gone: false }
    }
}

/// Where a pod's lines come from.
pub(crate) struct Source {
    pub(crate) name: String,
    pub(crate) rank: Option<u32>,
    label: String,
}

impl Source {
    pub(crate) fn of(pod: &Pod) -> Source {
        let task =
            pod.metadata.labels.as_ref().and_then(|l| l.get("volcano.sh/task-spec")).map_or(TASK_NAME, String::as_str);
        Source { name: pod.metadata.name.clone().unwrap_or_default(), rank: rank_of(pod), label: pod_label(pod, task) }
    }
}

pub(crate) fn log_options(follow: bool) -> crate::api::PodLogOptions {
    crate::api::PodLogOptions { container: None, follow, tail_lines: None }
}

/// Whether an error is worth waiting out (the API server is unreachable or overloaded).
pub(crate) fn transient(e: &VolcanoError) -> bool {
    e.is_transient() || matches!(e, VolcanoError::Timeout { .. })
}

/// What the follow loop tells the pods' readers: reopen your stream (contact with the API
/// server came back, so open streams may be dead without knowing it), or finish (the job is
/// terminal: read what is left with a plain read and stop).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Nudge {
    reconnects: u64,
    pub(crate) terminal: bool,
}

/// Contact with the API server, shared by the follow loop and every pod's reader: one warning
/// when it is lost, one note when it is back, and an error once it has been lost too long.
#[derive(Debug)]
pub(crate) struct Contact {
    server: String,
    limit: Duration,
    lost_since: Mutex<Option<Instant>>,
    pub(crate) nudges: watch::Sender<Nudge>,
}

impl Contact {
    pub(crate) fn new(server: &str, limit: Duration) -> Contact {
        Contact {
            server: server.to_owned(),
            limit,
            lost_since: Mutex::new(None),
            nudges: watch::channel(Nudge::default()).0,
        }
    }

    /// Records an answer; `true` when contact had been lost (the readers are told to reopen).
    pub(crate) fn ok(&self) -> bool {
        let mut lost = self.lost_since.lock().unwrap_or_else(|e| e.into_inner());
        let Some(since) = lost.take() else { return false };
        tracing::warn!(
            "reconnected to the API server {} after {}s; following the logs again",
            self.server,
            since.elapsed().as_secs()
        );
        self.nudges.send_modify(|n| n.reconnects += 1);
        true
    }

    /// Records a failure; `Err` once contact has been lost for longer than the limit.
    pub(crate) fn failed(&self, e: &VolcanoError) -> Result<(), String> {
        let mut lost = self.lost_since.lock().unwrap_or_else(|e| e.into_inner());
        match *lost {
            None => {
                *lost = Some(Instant::now());
                tracing::warn!(
                    "lost contact with the API server {} ({e}); reconnecting for up to {}s, the job is not affected",
                    self.server,
                    self.limit.as_secs()
                );
                Ok(())
            }
            Some(since) if since.elapsed() > self.limit => Err(format!(
                "gave up following the logs: the API server {} did not answer for {}s ({e}); the job may still run: `theseus status` tells",
                self.server,
                since.elapsed().as_secs()
            )),
            Some(_) => Ok(()),
        }
    }

    /// Tells every reader that the job is terminal.
    pub(crate) fn finish(&self) {
        self.nudges.send_modify(|n| n.terminal = true);
    }
}

/// How far a pod's log has been delivered.
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    lines: LineCursor,
}

/// How a read of a log ended.
pub(crate) enum ReadEnd {
    /// The server ended the stream.
    Eof,
    /// The connection broke.
    Broken(String),
    /// Nobody listens any more.
    Closed,
}

impl Cursor {
    /// Reads a log from its first line, skipping the lines already delivered and sending the
    /// rest. A last line without its newline is sent only when `last` (nothing more will come).
    pub(crate) async fn read(
        &mut self,
        reader: crate::api::LogReader,
        source: &Source,
        tx: &Sender,
        last: bool,
    ) -> ReadEnd {
        let mut reader = reader;
        self.lines.reopen();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let read = reader.read_until(b'\n', &mut buf).await;
            let end = match read {
                Ok(0) => ReadEnd::Eof,
                Ok(_) if buf.ends_with(b"\n") => {
                    if let Some(line) = self.lines.complete(&buf)
                        && !self.send(line, source, tx).await
                    {
                        return ReadEnd::Closed;
                    }
                    continue;
                }
                // A partial last line: the stream ended in the middle of it.
                Ok(_) => ReadEnd::Eof,
                Err(e) => ReadEnd::Broken(e.to_string()),
            };
            if last
                && matches!(end, ReadEnd::Eof)
                && let Some(line) = self.lines.tail(&buf)
                && !self.send(line, source, tx).await
            {
                return ReadEnd::Closed;
            }
            return end;
        }
    }

    async fn send(&self, text: String, source: &Source, tx: &Sender) -> bool {
        tx.send(Ok(LogLine { rank: source.rank, text, source: Some(source.label.clone()) })).await.is_ok()
    }
}

/// Follows one pod's log until its container has ended and its log has been read to the end.
/// `state` is the pod as the follow loop's watch sees it (its sender dropped: the follow is
/// over): a stream that ended is opened again at once when the pod says its container still
/// runs, or as soon as the pod changes, the job ends or contact comes back.
pub(crate) async fn follow_pod(
    cluster: &Cluster,
    source: Source,
    mut state: watch::Receiver<PodState>,
    tx: &Sender,
    contact: &Contact,
) -> Result<(), String> {
    let name = source.name.clone();
    let mut cursor = Cursor::default();
    let mut restarts_seen = state.borrow().restarts;
    let mut nudges = contact.nudges.subscribe();
    loop {
        let now = *state.borrow_and_update();
        if now.gone {
            return Ok(());
        }
        if now.restarts != restarts_seen {
            // A restarted container writes a new log from its first line.
            restarts_seen = now.restarts;
            cursor.lines = LineCursor::default();
        }
        let last = now.ended || nudges.borrow_and_update().terminal;
        match cluster.log_stream(&name, &log_options(!last)).await {
            Ok(reader) => {
                contact.ok();
                let end = if last {
                    cursor.read(reader, &source, tx, true).await
                } else {
                    // A stream can go silent without breaking: the container's end (told by
                    // the watch), the job's end or a reconnect ends the wait for it.
                    tokio::select! {
                        end = cursor.read(reader, &source, tx, false) => end,
                        _ = nudges.changed() => ReadEnd::Broken("reopening after a reconnect or the job's end".into()),
                        _ = state.wait_for(|s| s.ended || s.gone) => ReadEnd::Broken("the container ended".into()),
                    }
                };
                match end {
                    ReadEnd::Closed => return Ok(()),
                    ReadEnd::Broken(e) => tracing::debug!("the log stream of pod {name} ended: {e}; opening it again"),
                    ReadEnd::Eof => {}
                }
                if last {
                    return Ok(());
                }
            }
            Err(VolcanoError::NotFound { .. }) => return Ok(()),
            Err(e) if transient(&e) => contact.failed(&e)?,
            // e.g. 400 "container is waiting to start" after a restart: wait for news of the pod.
            Err(e) => tracing::debug!("opening the log of pod {name}: {e}"),
        }
        if tx.is_closed() {
            return Ok(());
        }
        // The stream ended: the container's end (the watch tells) or a cut (reopen).
        let changed = state.has_changed().unwrap_or(true) || nudges.has_changed().unwrap_or(true);
        if !changed {
            tokio::select! {
                _ = state.changed() => {}
                _ = nudges.changed() => {}
                () = tokio::time::sleep(REOPEN_PAUSE) => {}
            }
        }
        if state.has_changed().is_err() {
            // The follow loop is gone.
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(text: &'static str) -> crate::api::LogReader {
        Box::pin(futures::io::Cursor::new(text.as_bytes()))
    }

    async fn read(cursor: &mut Cursor, text: &'static str, last: bool) -> Vec<String> {
        let (tx, mut rx) = mpsc::channel(64);
        let source = Source { name: "j-worker-0".into(), rank: Some(0), label: "worker-0".into() };
        cursor.read(reader(text), &source, &tx, last).await;
        drop(tx);
        let mut out = Vec::new();
        while let Some(Ok(line)) = rx.recv().await {
            out.push(line.text);
        }
        out
    }

    #[tokio::test]
    async fn a_reopened_log_skips_what_was_delivered_and_holds_back_a_partial_line() {
        let mut cursor = Cursor::default();
        assert_eq!(read(&mut cursor, "a\nb\npar", false).await, ["a", "b"]);
        assert_eq!(read(&mut cursor, "a\nb\npartial\nc\n", false).await, ["partial", "c"]);
        assert_eq!(read(&mut cursor, "a\nb\npartial\nc\n", false).await, Vec::<String>::new());
        assert_eq!(
            read(&mut cursor, "a\nb\npartial\nc\nend", true).await,
            ["end"],
            "the last read sends a partial line"
        );
        assert_eq!(cursor.lines.delivered(), 5);
    }
}
