//! `theseus logs` for Volcano: every pod's log, each line tagged with its pod (`[worker-0]`).
//! Without `-f`, the pods' logs one after the other in rank order (the next few read ahead
//! over their own connections, each into a small buffer); with `-f`, all pods at once
//! ([`crate::follow`]: watched, never polled), picking up pods the moment their containers
//! start, until the job is terminal and every pod's log has been read to its end. At most
//! [`crate::pod_log::MAX_OPEN_LOGS`] pods are read at once (each open log is a connection), rank
//! 0 always: the pods of a bigger gang past those wait for a log to end before theirs is read
//! (`--rank` follows any one pod at once).
//!
//! A log stream that ends is not taken for the container's end: the pod's watch tells, and
//! while its container runs the log is opened again and the lines already delivered are skipped
//! (by count: the kubelet serves a container's log from its first line, so the n-th line is the
//! same line on every read; a line without its newline yet is held back until it is complete).
//! When the container has ended, one last plain read delivers what the broken stream had not. A
//! stream can also go silent without breaking (a dropped connection nobody was told about):
//! every reader reopens its stream when contact with the API server comes back, and finishes
//! with a plain read once its container or the job has ended, so a silent stream is never
//! waited on. An API server that does not answer (a watch that stays silent is checked with a
//! bounded request) is retried for [`FollowSettings::reconnect_for`], with one warning when
//! contact is lost and one when it is back.

use theseus_core::backend::{LogLine, LogOptions, LogStream};
use tokio::sync::mpsc;

use crate::api::{Cluster, Page};
pub(crate) use crate::follow::FollowSettings;
use crate::handle::HandleData;
use crate::pod_log::{Cursor, Sender, Source, log_options, selector, started, wanted};

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
            crate::follow::follow(&cluster, &data, options.rank, settings, &tx).await
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

async fn dump(cluster: &Cluster, data: &HandleData, rank: Option<u32>, tx: &Sender) -> Result<(), String> {
    // Only what the reads need is kept of the pods, page by page, never the pods.
    let mut sources: Vec<Source> = Vec::new();
    cluster
        .visit_pods_for_logs(&selector(data), |page| match page {
            Page::Items(pods) => sources.extend(pods.iter().filter(|p| wanted(p, rank) && started(p)).map(Source::of)),
            Page::Restart => sources.clear(),
        })
        .await
        .map_err(|e| e.to_string())?;
    sources.sort_by_key(|s| s.rank.unwrap_or(u32::MAX));
    if sources.is_empty() && rank.is_some() {
        return Err(format!("no started pod of rank {} in vcjob {}", rank.unwrap_or_default(), data.job));
    }
    // The logs are read a few at a time (as separate connections) and printed one after the
    // other in rank order: a read ahead waits once its small buffer is full, so memory stays
    // bounded by the buffers, however long the logs.
    let mut ahead = std::collections::VecDeque::new();
    let mut sources = sources.into_iter();
    loop {
        while ahead.len() < READ_AHEAD {
            let Some(source) = sources.next() else { break };
            ahead.push_back(read_ahead(cluster.clone(), source));
        }
        let Some((mut lines, opened)) = ahead.pop_front() else { return Ok(()) };
        while let Some(line) = lines.recv().await {
            if tx.send(line).await.is_err() {
                return Ok(());
            }
        }
        opened.await.map_err(|e| e.to_string())??;
    }
}

/// Pods whose logs `logs` (without `-f`) reads at once, beside the one being printed.
const READ_AHEAD: usize = 4;
/// Lines a read ahead holds before it waits for its turn.
const AHEAD_LINES: usize = 512;

/// Starts reading one pod's whole log into a small channel of its own; the task ends with
/// the error of opening the log, if that failed.
fn read_ahead(cluster: Cluster, source: Source) -> (mpsc::Receiver<theseus_core::Result<LogLine>>, Opened) {
    let (tx, rx) = mpsc::channel(AHEAD_LINES);
    let opened = tokio::spawn(async move {
        let reader = cluster.log_stream(&source.name, &log_options(false)).await.map_err(|e| e.to_string())?;
        let _ = Cursor::default().read(reader, &source, &tx, true).await;
        Ok(())
    });
    (rx, opened)
}

/// A read ahead's task: its log could be opened, or why not.
type Opened = tokio::task::JoinHandle<Result<(), String>>;
