//! `theseus logs` for Volcano: every pod's log, each line tagged with its pod (`[worker-0]`).
//! Without `-f`, the pods' logs one after the other in rank order; with `-f`, all pods at once,
//! picking up pods as their containers start, until the job is terminal and every pod's log has
//! been read to its end.
//!
//! A log stream that ends is not taken for the container's end: the pod is looked at, and while
//! its container runs the log is opened again and the lines already delivered are skipped (by
//! count: the kubelet serves a container's log from its first line, so the n-th line is the same
//! line on every read; a line without its newline yet is held back until it is complete). When
//! the container has ended, one last plain read delivers what the broken stream had not. A stream
//! can also go silent without breaking (a dropped connection nobody was told about): every reader
//! reopens its stream when contact with the API server comes back, and finishes with a plain read
//! once the job is terminal, so a silent stream is never waited on. An API server that does not
//! answer is retried for [`FollowSettings::reconnect_for`], with one warning when contact is lost
//! and one when it is back.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::AsyncBufReadExt as _;
use k8s_openapi::api::core::v1::Pod;
use theseus_core::backend::{LogLine, LogOptions, LogStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::api::Cluster;
use crate::error::VolcanoError;
use crate::handle::HandleData;
use crate::log_cursor::LineCursor;
use crate::render::TASK_NAME;
use crate::status::{pod_label, rank_of};
use crate::types::TERMINAL_PHASES;

type Sender = mpsc::Sender<theseus_core::Result<LogLine>>;

/// How `--follow` waits and reconnects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FollowSettings {
    /// How often the job and its pods are looked at.
    pub(crate) poll: Duration,
    /// How long the API server may stay unreachable before the follow gives up.
    pub(crate) reconnect_for: Duration,
    /// How long pods' logs may take to drain once the job is terminal.
    pub(crate) drain_for: Duration,
}

/// The log stream of a job.
pub(crate) fn stream(
    cluster: Cluster,
    data: HandleData,
    options: LogOptions,
    settings: FollowSettings,
    backend: String,
) -> LogStream {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let result = if options.follow {
            follow(&cluster, &data, options.rank, settings, &tx).await
        } else {
            dump(&cluster, &data, options.rank, &tx).await
        };
        if let Err(message) = result {
            let _ = tx.send(Err(theseus_core::Error::backend(&backend, message))).await;
        }
    });
    tokio_stream_from(rx)
}

fn tokio_stream_from(mut rx: mpsc::Receiver<theseus_core::Result<LogLine>>) -> LogStream {
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

fn selector(data: &HandleData) -> String {
    format!("volcano.sh/job-name={}", data.job)
}

fn wanted(pod: &Pod, rank: Option<u32>) -> bool {
    rank.is_none_or(|r| rank_of(pod) == Some(r))
}

/// True once the pod's container has started (running or terminated): its log can be read.
fn started(pod: &Pod) -> bool {
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

fn label(pod: &Pod) -> String {
    let task =
        pod.metadata.labels.as_ref().and_then(|l| l.get("volcano.sh/task-spec")).map_or(TASK_NAME, String::as_str);
    pod_label(pod, task)
}

async fn dump(cluster: &Cluster, data: &HandleData, rank: Option<u32>, tx: &Sender) -> Result<(), String> {
    let mut pods = cluster.list_pods(&selector(data)).await.map_err(|e| e.to_string())?;
    pods.retain(|p| wanted(p, rank) && started(p));
    pods.sort_by_key(|p| rank_of(p).unwrap_or(u32::MAX));
    if pods.is_empty() && rank.is_some() {
        return Err(format!("no started pod of rank {} in vcjob {}", rank.unwrap_or_default(), data.job));
    }
    for pod in pods {
        let mut cursor = Cursor::default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let reader = cluster.log_stream(&name, &log_options(false)).await.map_err(|e| e.to_string())?;
        let _ = cursor.read(reader, &Source::of(&pod), tx, true).await;
    }
    Ok(())
}

fn log_options(follow: bool) -> crate::api::PodLogOptions {
    crate::api::PodLogOptions { container: None, follow, tail_lines: None }
}

/// Whether an error is worth waiting out (the API server is unreachable or overloaded).
fn transient(e: &VolcanoError) -> bool {
    e.is_transient() || matches!(e, VolcanoError::Timeout { .. })
}

/// What the follow loop tells the pods' readers: reopen your stream (contact with the API
/// server came back, so open streams may be dead without knowing it), or finish (the job is
/// terminal: read what is left with a plain read and stop).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Nudge {
    reconnects: u64,
    terminal: bool,
}

/// Contact with the API server, shared by the follow loop and every pod's reader: one warning
/// when it is lost, one note when it is back, and an error once it has been lost too long.
#[derive(Debug)]
struct Contact {
    server: String,
    limit: Duration,
    lost_since: Mutex<Option<Instant>>,
    nudges: watch::Sender<Nudge>,
}

impl Contact {
    fn ok(&self) {
        let mut lost = self.lost_since.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = lost.take() {
            tracing::warn!(
                "reconnected to the API server {} after {}s; following the logs again",
                self.server,
                since.elapsed().as_secs()
            );
            self.nudges.send_modify(|n| n.reconnects += 1);
        }
    }

    /// Records a failure; `Err` once contact has been lost for longer than the limit.
    fn failed(&self, e: &VolcanoError) -> Result<(), String> {
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
}

async fn follow(
    cluster: &Cluster,
    data: &HandleData,
    rank: Option<u32>,
    settings: FollowSettings,
    tx: &Sender,
) -> Result<(), String> {
    let contact = Arc::new(Contact {
        server: cluster.server().to_owned(),
        limit: settings.reconnect_for,
        lost_since: Mutex::new(None),
        nudges: watch::channel(Nudge::default()).0,
    });
    let mut seen: HashSet<String> = HashSet::new();
    let mut streams: JoinSet<Result<(), String>> = JoinSet::new();
    let mut terminal = false;
    loop {
        if tx.is_closed() {
            streams.abort_all();
            return Ok(());
        }
        // Pods first, then the job: a pod that started before the job ended is always picked up.
        match cluster.list_pods(&selector(data)).await {
            Ok(pods) => {
                contact.ok();
                for pod in pods.into_iter().filter(|p| wanted(p, rank) && started(p)) {
                    let uid = pod.metadata.uid.clone().or_else(|| pod.metadata.name.clone()).unwrap_or_default();
                    if seen.insert(uid) {
                        let (cluster, tx, contact) = (cluster.clone(), tx.clone(), contact.clone());
                        let poll = settings.poll;
                        streams.spawn(async move { follow_pod(&cluster, pod, &tx, &contact, poll).await });
                    }
                }
            }
            Err(e) if transient(&e) => contact.failed(&e)?,
            Err(e) => return Err(e.to_string()),
        }
        while let Some(done) = streams.try_join_next() {
            if let Ok(Err(e)) = done {
                streams.abort_all();
                return Err(e);
            }
        }
        if terminal {
            break;
        }
        match cluster.get_job(&data.job).await {
            Ok(job) => {
                contact.ok();
                terminal = job.as_ref().is_none_or(|j| {
                    j.status
                        .as_ref()
                        .and_then(|s| s.state.as_ref())
                        .and_then(|s| s.phase.as_deref())
                        .is_some_and(|p| TERMINAL_PHASES.contains(&p))
                });
                if terminal {
                    // One more look at the pods (above) before waiting for the readers.
                    continue;
                }
            }
            Err(e) if transient(&e) => contact.failed(&e)?,
            Err(e) => return Err(e.to_string()),
        }
        tokio::time::sleep(settings.poll).await;
    }
    // The job is terminal: every reader finishes with a plain read of what is left (a stream
    // that went silent without breaking would otherwise be waited on).
    contact.nudges.send_modify(|n| n.terminal = true);
    let drain = async {
        while let Some(done) = streams.join_next().await {
            if let Ok(Err(e)) = done {
                return Err(e);
            }
        }
        Ok(())
    };
    match tokio::time::timeout(settings.drain_for, drain).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(
                "the logs of some pods of vcjob {} did not end within {}s of the job; stopped reading them",
                data.job,
                settings.drain_for.as_secs()
            );
            Ok(())
        }
    }
}

/// Where a pod's lines come from.
struct Source {
    rank: Option<u32>,
    label: String,
}

impl Source {
    fn of(pod: &Pod) -> Source {
        Source { rank: rank_of(pod), label: label(pod) }
    }
}

/// How far a pod's log has been delivered.
#[derive(Debug, Default)]
struct Cursor {
    lines: LineCursor,
}

/// How a read of a log ended.
enum ReadEnd {
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
    async fn read(&mut self, reader: crate::api::LogReader, source: &Source, tx: &Sender, last: bool) -> ReadEnd {
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
async fn follow_pod(cluster: &Cluster, pod: Pod, tx: &Sender, contact: &Contact, poll: Duration) -> Result<(), String> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone();
    let source = Source::of(&pod);
    let mut cursor = Cursor::default();
    let mut restarts_seen = restarts(&pod);
    let mut last = ended(&pod);
    let mut nudges = contact.nudges.subscribe();
    loop {
        last |= nudges.borrow_and_update().terminal;
        match cluster.log_stream(&name, &log_options(!last)).await {
            Ok(reader) => {
                contact.ok();
                let end = if last {
                    cursor.read(reader, &source, tx, true).await
                } else {
                    tokio::select! {
                        end = cursor.read(reader, &source, tx, false) => end,
                        _ = nudges.changed() => ReadEnd::Broken("reopening after a reconnect or the job's end".into()),
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
            // e.g. 400 "container is waiting to start" after a restart: look at the pod again.
            Err(e) => tracing::debug!("opening the log of pod {name}: {e}"),
        }
        // The stream ended: the container's end, or a cut? The pod says.
        match cluster.get_pod(&name).await {
            Ok(None) => return Ok(()),
            Ok(Some(now)) if now.metadata.uid != uid => return Ok(()),
            Ok(Some(now)) => {
                contact.ok();
                let restarted = restarts(&now);
                if restarted != restarts_seen {
                    // A restarted container writes a new log from its first line.
                    restarts_seen = restarted;
                    cursor.lines = LineCursor::default();
                }
                last = ended(&now) || nudges.borrow().terminal;
                if !last {
                    tokio::time::sleep(poll.min(Duration::from_millis(500))).await;
                }
            }
            Err(e) if transient(&e) => {
                contact.failed(&e)?;
                tokio::time::sleep(poll).await;
            }
            Err(e) => return Err(e.to_string()),
        }
        if tx.is_closed() {
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
        let source = Source { rank: Some(0), label: "worker-0".into() };
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
