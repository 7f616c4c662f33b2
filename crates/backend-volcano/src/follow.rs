//! `theseus logs -f` for Volcano: the follow loop, driven by two watches (the job's pods by
//! label, the vcjob by name), each resumed from its `resourceVersion` after a cut and re-listed
//! after `410 Gone` (kube-rs's watcher). A pod's reader ([`crate::pod_log::follow_pod`]) starts
//! the moment the watch shows its container started, and hears of its pod from the watch; the
//! follow ends the moment the job is terminal and every reader has read its log to the end.
//!
//! A watch can go silent without breaking (an API server that accepted it and never answers):
//! when neither watch has said anything for [`Cluster::watch_silence`], the job is looked at
//! with a plain, bounded GET. That look counts for the contact (one warning when it is lost, one
//! when it is back, give up after [`FollowSettings::reconnect_for`]); when contact came back, or
//! pods the job should have are still unseen, the watches are started afresh. Without the right
//! to watch vcjobs (an older Role), the job is looked at every [`FollowSettings::poll`] instead.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::api::{Cluster, JobEvents, PodEvents};
use crate::error::VolcanoError;
use crate::handle::HandleData;
use crate::pod_log::{
    Contact, MAX_OPEN_LOGS, PodState, Sender, Source, follow_pod, selector, started, transient, wanted,
};
use crate::types::{Job, TERMINAL_PHASES};

/// How `--follow` waits and reconnects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FollowSettings {
    /// How often the job is looked at when it cannot be watched.
    pub(crate) poll: Duration,
    /// How long the API server may stay unreachable before the follow gives up.
    pub(crate) reconnect_for: Duration,
    /// How long pods' logs may take to drain once the job is terminal.
    pub(crate) drain_for: Duration,
}

fn terminal(job: Option<&Job>) -> bool {
    job.is_none_or(|j| {
        j.status
            .as_ref()
            .and_then(|s| s.state.as_ref())
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| TERMINAL_PHASES.contains(&p))
    })
}

/// Whether Volcano's garbage collector may have deleted the finished `job` by `now`: its
/// `ttlSecondsAfterFinished` has passed since it finished (`status.state.lastTransitionTime`).
fn collectable(job: &Job, now: k8s_openapi::jiff::Timestamp) -> bool {
    let Some(ttl) = job.spec.ttl_seconds_after_finished else { return false };
    let finished = job.status.as_ref().and_then(|s| s.state.as_ref()).and_then(|s| s.last_transition_time.as_deref());
    match finished.and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok()) {
        Some(finished) => finished.as_second().saturating_add(i64::from(ttl)) <= now.as_second(),
        None => ttl == 0,
    }
}

/// How many pods of the job the caller reads: every replica, or one for `--rank`.
fn expected(job: &Job, rank: Option<u32>) -> usize {
    let replicas: i32 = job.spec.tasks.iter().map(|t| t.replicas.unwrap_or(1).max(0)).sum();
    let replicas = usize::try_from(replicas).unwrap_or(0);
    match rank {
        Some(r) => usize::from(usize::try_from(r).is_ok_and(|r| r < replicas)),
        None => replicas,
    }
}

/// The pods being read: each one's reader and what its watch last said.
struct Readers<'a> {
    cluster: &'a Cluster,
    tx: &'a Sender,
    contact: &'a Arc<Contact>,
    rank: Option<u32>,
    /// By pod uid: the state its reader hears of.
    states: HashMap<String, watch::Sender<PodState>>,
    /// Names of the pods whose reader started (a pod recreated under its name counts once).
    names: HashSet<String>,
    tasks: JoinSet<Result<(), String>>,
    /// Started pods waiting for a reader ([`MAX_OPEN_LOGS`] read at once).
    waiting: VecDeque<(Source, watch::Receiver<PodState>)>,
}

impl Readers<'_> {
    /// A pod as the watch (or a list) shows it: its reader told, or started when its container
    /// has.
    fn saw(&mut self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().or_else(|| pod.metadata.name.clone()).unwrap_or_default();
        if let Some(state) = self.states.get(&uid) {
            state.send_if_modified(|s| {
                let now = PodState::of(pod);
                let changed = *s != now;
                *s = now;
                changed
            });
            return;
        }
        if !wanted(pod, self.rank) || !started(pod) {
            return;
        }
        let (state, receiver) = watch::channel(PodState::of(pod));
        self.states.insert(uid, state);
        let source = Source::of(pod);
        self.names.insert(source.name.clone());
        if source.rank == Some(0) || self.tasks.len() < MAX_OPEN_LOGS {
            self.read(source, receiver);
        } else {
            self.waiting.push_back((source, receiver));
        }
    }

    fn read(&mut self, source: Source, receiver: watch::Receiver<PodState>) {
        let (cluster, tx, contact) = (self.cluster.clone(), self.tx.clone(), self.contact.clone());
        self.tasks.spawn(async move { follow_pod(&cluster, source, receiver, &tx, &contact).await });
    }

    /// A reader ended: waiting pods get readers while there is room.
    fn ended(&mut self, done: Result<Result<(), String>, tokio::task::JoinError>) -> Result<(), String> {
        if let Ok(Err(e)) = done {
            self.tasks.abort_all();
            return Err(e);
        }
        while self.tasks.len() < MAX_OPEN_LOGS
            && let Some((source, receiver)) = self.waiting.pop_front()
        {
            self.read(source, receiver);
        }
        Ok(())
    }

    fn deleted(&mut self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().or_else(|| pod.metadata.name.clone()).unwrap_or_default();
        if let Some(state) = self.states.remove(&uid) {
            state.send_modify(|s| s.gone = true);
        }
    }

    /// Whether every pod the caller reads has been seen started, none of them recreated.
    fn complete(&self, job: Option<&Job>) -> bool {
        job.is_some_and(|j| self.names.len() >= expected(j, self.rank) && self.states.len() == self.names.len())
    }
}

/// The watches of the follow, started afresh when they may be dead.
struct Watches {
    pods: PodEvents,
    /// `None` when vcjobs cannot be watched (the job is looked at every `poll` instead).
    job: Option<JobEvents>,
}

pub(crate) async fn follow(
    cluster: &Cluster,
    data: &HandleData,
    rank: Option<u32>,
    settings: FollowSettings,
    tx: &Sender,
) -> Result<(), String> {
    let contact = Arc::new(Contact::new(cluster.server(), settings.reconnect_for));
    let mut readers = Readers {
        cluster,
        tx,
        contact: &contact,
        rank,
        states: HashMap::new(),
        names: HashSet::new(),
        tasks: JoinSet::new(),
        waiting: VecDeque::new(),
    };
    let silence = cluster.watch_silence();
    let mut watches = Watches { pods: cluster.watch_pods(&selector(data)), job: Some(cluster.watch_job(&data.job)) };
    let mut last_news = Instant::now();
    let mut restarts = Restarts::default();
    let job = loop {
        let look_at = last_news + if watches.job.is_some() { silence } else { settings.poll };
        tokio::select! {
            () = tx.closed() => {
                readers.tasks.abort_all();
                return Ok(());
            }
            event = watches.pods.next() => {
                last_news = Instant::now();
                match event {
                    Some(Ok(Event::Apply(pod) | Event::InitApply(pod))) => {
                        contact.ok();
                        readers.saw(&pod);
                    }
                    Some(Ok(Event::Delete(pod))) => readers.deleted(&pod),
                    Some(Ok(Event::Init | Event::InitDone)) => {
                        contact.ok();
                    }
                    Some(Err(e)) => watch_failed(&contact, &e, "pods")?,
                    None => watches.pods = cluster.watch_pods(&selector(data)),
                }
            }
            event = next_job(&mut watches.job) => {
                last_news = Instant::now();
                match event {
                    Some(Ok(now)) => {
                        contact.ok();
                        restarts.saw(cluster, now.as_ref()).await;
                        if terminal(now.as_ref()) {
                            break now;
                        }
                    }
                    Some(Err(VolcanoError::Forbidden { .. } | VolcanoError::Unauthorized { .. })) => {
                        tracing::debug!("vcjob {} cannot be watched; looking at it every {:?}", data.job, settings.poll);
                        watches.job = None;
                    }
                    Some(Err(e)) => watch_failed(&contact, &e, "the vcjob")?,
                    None => watches.job = Some(cluster.watch_job(&data.job)),
                }
            }
            Some(done) = readers.tasks.join_next(), if !readers.tasks.is_empty() => readers.ended(done)?,
            () = tokio::time::sleep_until(look_at) => {
                last_news = Instant::now();
                match cluster.get_job(&data.job).await {
                    Ok(now) => {
                        let back = contact.ok();
                        restarts.saw(cluster, now.as_ref()).await;
                        if terminal(now.as_ref()) {
                            break now;
                        }
                        if back || !readers.complete(now.as_ref()) {
                            tracing::debug!("watching the pods of vcjob {} afresh", data.job);
                            watches.pods = cluster.watch_pods(&selector(data));
                        }
                        if back && watches.job.is_some() {
                            watches.job = Some(cluster.watch_job(&data.job));
                        }
                    }
                    Err(e) if transient(&e) => contact.failed(&e)?,
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
    };
    // The job is terminal. A pod that started before the job ended may not have reached the
    // pods' watch yet: unless every pod is being read, one more look at them.
    if !readers.complete(job.as_ref()) {
        match cluster.list_pods(&selector(data)).await {
            Ok(pods) => pods.iter().for_each(|p| readers.saw(p)),
            Err(e) => tracing::debug!("listing the pods of vcjob {} once more: {e}", data.job),
        }
    }
    drain(readers, data, settings).await?;
    if job.as_ref().is_none_or(|j| collectable(j, k8s_openapi::jiff::Timestamp::now())) {
        // Gone, or Volcano's garbage collector may have deleted it (and its pods, with their
        // logs) while they were read: a pod deleted before its log was read to the end took
        // the rest with it. The run's log file on the PVC has every line.
        let run = data.run_id.as_deref().unwrap_or(&data.job);
        let text = format!(
            "{} no longer exists: lines its pods wrote after their logs were last read may be missing here; \
             `theseus logs {run}` prints the run's whole log from the PVC",
            crate::gone::gone_what(data)
        );
        let _ = tx.send(Ok(theseus_core::backend::LogLine { rank: None, text, source: Some("theseus".into()) })).await;
    }
    Ok(())
}

/// The job's restarts as the follow sees them: each one seen while following is said once, on
/// stderr, with why ([`crate::interruption`]), once the job has left `Restarting` (the
/// preemptor's pods are bound by then).
#[derive(Default)]
struct Restarts {
    /// `retryCount` when last looked at (`None`: not yet).
    seen: Option<i32>,
}

impl Restarts {
    async fn saw(&mut self, cluster: &Cluster, job: Option<&Job>) {
        let Some((job, status)) = job.and_then(|j| Some((j, j.status.as_ref()?))) else { return };
        let retries = status.retry_count.unwrap_or(0);
        let phase = status.state.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
        let Some(seen) = self.seen else {
            self.seen = Some(retries);
            return;
        };
        if retries <= seen || phase == "Restarting" {
            return;
        }
        self.seen = Some(retries);
        let name = job.metadata.name.as_deref().unwrap_or("?");
        match crate::interrupted::interruption_line(cluster, job).await {
            Some(line) => tracing::warn!("vcjob {name}: {line}"),
            None => tracing::warn!("vcjob {name} restarted (restart {retries})"),
        }
    }
}

/// The next state of the job from its watch (never, when it is not watched).
async fn next_job(events: &mut Option<JobEvents>) -> Option<Result<Option<Job>, VolcanoError>> {
    match events.as_mut() {
        Some(events) => events.next().await,
        None => std::future::pending().await,
    }
}

/// A watch's error: counted against the contact when the API server did not answer; otherwise
/// the watcher starts again by itself (re-listing after `410 Gone`).
fn watch_failed(contact: &Contact, e: &VolcanoError, what: &str) -> Result<(), String> {
    if transient(e) {
        return contact.failed(e);
    }
    match e {
        VolcanoError::Forbidden { .. } | VolcanoError::Unauthorized { .. } => Err(e.to_string()),
        _ => {
            tracing::debug!("the watch of {what} failed ({e}); it starts again");
            Ok(())
        }
    }
}

/// Every reader finishes with a plain read of what is left (a stream that went silent without
/// breaking would otherwise be waited on), within `drain_for`.
async fn drain(mut readers: Readers<'_>, data: &HandleData, settings: FollowSettings) -> Result<(), String> {
    readers.contact.finish();
    let drain = async {
        while let Some(done) = readers.tasks.join_next().await {
            readers.ended(done)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(replicas: &[i32], phase: Option<&str>) -> Job {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"tasks": replicas.iter().map(|r| serde_json::json!({"name": "worker", "replicas": r})).collect::<Vec<_>>()},
            "status": {"state": {"phase": phase}}
        }))
        .unwrap()
    }

    #[test]
    fn every_replica_is_expected_or_the_one_rank_asked_for() {
        let gang = job(&[3, 2], Some("Running"));
        assert_eq!(expected(&gang, None), 5);
        assert_eq!(expected(&gang, Some(4)), 1);
        assert_eq!(expected(&gang, Some(5)), 0, "a rank the job does not have is never waited for");
    }

    #[test]
    fn a_finished_job_is_collectable_once_its_ttl_passed() {
        let finished = |ttl: Option<i32>, at: Option<&str>| -> Job {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
                "spec": {"tasks": [], "ttlSecondsAfterFinished": ttl},
                "status": {"state": {"phase": "Completed", "lastTransitionTime": at}}
            }))
            .unwrap()
        };
        let now: k8s_openapi::jiff::Timestamp = "2026-11-27T10:00:10Z".parse().unwrap();
        assert!(collectable(&finished(Some(10), Some("2026-11-27T10:00:00Z")), now));
        assert!(!collectable(&finished(Some(11), Some("2026-11-27T10:00:00Z")), now));
        assert!(!collectable(&finished(None, Some("2026-11-27T10:00:00Z")), now), "kept without a TTL");
        assert!(collectable(&finished(Some(0), None), now));
        assert!(!collectable(&finished(Some(5), None), now));
    }

    #[test]
    fn a_job_that_is_gone_or_finished_is_terminal() {
        assert!(terminal(None));
        assert!(terminal(Some(&job(&[1], Some("Completed")))));
        assert!(!terminal(Some(&job(&[1], Some("Running")))));
        assert!(!terminal(Some(&job(&[1], None))));
    }
}
