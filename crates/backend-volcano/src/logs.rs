//! `theseus logs` for Volcano: every pod's log, each line tagged with its pod (`[worker-0]`).
//! Without `-f`, the pods' logs one after the other in rank order; with `-f`, all pods at once,
//! picking up pods as their containers start, until the job is terminal and every stream ended.

use std::collections::HashSet;
use std::time::Duration;

use futures::{AsyncBufReadExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use theseus_core::backend::{LogLine, LogOptions, LogStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::api::Cluster;
use crate::backend::HandleData;
use crate::render::TASK_NAME;
use crate::status::{pod_label, rank_of};
use crate::types::TERMINAL_PHASES;

type Sender = mpsc::Sender<theseus_core::Result<LogLine>>;

/// The log stream of a job.
pub(crate) fn stream(cluster: Cluster, data: HandleData, options: LogOptions, poll: Duration, backend: String) -> LogStream {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let result = if options.follow {
            follow(&cluster, &data, options.rank, poll, &tx).await
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
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some() || s.terminated.is_some())))
}

fn label(pod: &Pod) -> String {
    let task = pod.metadata.labels.as_ref().and_then(|l| l.get("volcano.sh/task-spec")).map_or(TASK_NAME, String::as_str);
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
        pump(cluster, &pod, false, tx).await?;
    }
    Ok(())
}

async fn follow(cluster: &Cluster, data: &HandleData, rank: Option<u32>, poll: Duration, tx: &Sender) -> Result<(), String> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut streams: JoinSet<Result<(), String>> = JoinSet::new();
    loop {
        if tx.is_closed() {
            streams.abort_all();
            return Ok(());
        }
        let pods = cluster.list_pods(&selector(data)).await.map_err(|e| e.to_string())?;
        for pod in pods.into_iter().filter(|p| wanted(p, rank) && started(p)) {
            let uid = pod.metadata.uid.clone().or_else(|| pod.metadata.name.clone()).unwrap_or_default();
            if seen.insert(uid) {
                let (cluster, tx) = (cluster.clone(), tx.clone());
                streams.spawn(async move { pump(&cluster, &pod, true, &tx).await });
            }
        }
        while let Some(done) = streams.try_join_next() {
            if let Ok(Err(e)) = done {
                tracing::debug!("log stream ended with: {e}");
            }
        }
        let job = cluster.get_job(&data.job).await.map_err(|e| e.to_string())?;
        let terminal = job.as_ref().is_none_or(|j| {
            j.status.as_ref().and_then(|s| s.state.as_ref()).and_then(|s| s.phase.as_deref()).is_some_and(|p| TERMINAL_PHASES.contains(&p))
        });
        if terminal {
            while streams.join_next().await.is_some() {}
            return Ok(());
        }
        tokio::time::sleep(poll).await;
    }
}

/// Sends one pod's log, line by line.
async fn pump(cluster: &Cluster, pod: &Pod, follow: bool, tx: &Sender) -> Result<(), String> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let source = label(pod);
    let rank = rank_of(pod);
    let options = crate::api::PodLogOptions { container: None, follow, tail_lines: None };
    let reader = cluster.log_stream(&name, &options).await.map_err(|e| e.to_string())?;
    let mut lines = reader.lines();
    while let Some(line) = lines.next().await {
        let text = line.map_err(|e| format!("reading the log of pod {name}: {e}"))?;
        if tx.send(Ok(LogLine { rank, text, source: Some(source.clone()) })).await.is_err() {
            break;
        }
    }
    Ok(())
}
