//! Deleting vcjobs: a job and its pods confirmed gone (the pods watched away, not polled), and
//! the best-effort delete of a code-shipping helper.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt as _;
use kube::runtime::watcher::Event;

use crate::api::{Cluster, PodName, PodNameEvents};
use crate::error::VolcanoError;

/// How long the pods' watch may go without news after the vcjob is gone before the pods it
/// still shows undeleted are looked for (the garbage collector deletes a job's pods soon after
/// the job; theseus deletes those it left).
const STRAGGLER_GRACE: Duration = Duration::from_secs(1);
/// Errors in a row after which the pods' watch is given up for polling.
const WATCH_ERRORS: u32 = 3;

/// The job's pods as a watch shows them: by name, whether their deletion has begun. Only
/// names are kept, never the pods.
#[derive(Debug, Default)]
struct Left {
    pods: HashMap<String, bool>,
    /// Between a watch's `Init` and `InitDone`: the set is being listed afresh.
    listing: bool,
}

impl Left {
    fn saw(&mut self, pod: &PodName) {
        if let Some(name) = &pod.metadata.name {
            self.pods.insert(name.clone(), pod.metadata.deletion_timestamp.is_some());
        }
    }

    /// Applies one event; `false` when the watch failed.
    fn apply(&mut self, event: Result<Event<PodName>, VolcanoError>) -> bool {
        match event {
            Ok(Event::Init) => {
                self.pods.clear();
                self.listing = true;
            }
            Ok(Event::InitDone) => self.listing = false,
            Ok(Event::InitApply(pod) | Event::Apply(pod)) => self.saw(&pod),
            Ok(Event::Delete(pod)) => {
                if let Some(name) = &pod.metadata.name {
                    self.pods.remove(name);
                }
            }
            Err(e) => {
                tracing::debug!("the watch of pods failed: {e}");
                return false;
            }
        }
        true
    }

    fn gone(&self) -> bool {
        !self.listing && self.pods.is_empty()
    }

    /// Whether the watch shows a pod whose deletion has not begun.
    fn undeleted(&self) -> bool {
        self.pods.values().any(|deleting| !deleting)
    }
}

/// Reads the watch until its first list is complete; `None` when it failed or was silent.
async fn first_list(pods: &mut PodNameEvents, left: &mut Left, silence: Duration) -> Option<()> {
    loop {
        let event = tokio::time::timeout(silence, pods.next()).await.ok()??;
        if !left.apply(event) {
            return None;
        }
        if !left.listing {
            return Some(());
        }
    }
}

/// Deletes a vcjob and waits until it and its pods are gone. Returns how many pods it had.
pub(crate) async fn delete_and_confirm(
    cluster: &Cluster,
    name: &str,
    timeout: Duration,
    poll: Duration,
) -> Result<usize, VolcanoError> {
    let selector = format!("{}={name}", crate::api::JOB_NAME_LABEL);
    let silence = cluster.watch_silence();
    let mut left = Left { listing: true, ..Left::default() };
    let mut watch = cluster.watch_pod_names(&selector);
    let (mut pods, had) = match first_list(&mut watch, &mut left, silence).await {
        Some(()) => {
            let had = left.pods.len();
            (Some(watch), had)
        }
        None => (None, cluster.list_pod_names(&selector).await?.len()),
    };
    cluster.delete_job(name).await?;
    let wait = async {
        let job_gone = cluster.wait_job_gone(name, timeout);
        tokio::pin!(job_gone);
        let mut job_done = false;
        if let Some(pods) = pods.as_mut() {
            // The pods' watch is read while the job goes away too: a watch nobody reads falls
            // behind, and the API server ends it (410) once its buffer is full. An error is
            // followed by the watcher's own relist; only errors in a row give it up.
            let (mut caught_up, mut errors) = (false, 0);
            loop {
                if job_done && left.gone() {
                    return Ok(());
                }
                // Once the job is gone, a moment without news while the watch still shows
                // undeleted pods has one list say which pods really are stragglers.
                let wait = if job_done && !caught_up { STRAGGLER_GRACE.min(silence) } else { silence };
                tokio::select! {
                    gone = &mut job_gone, if !job_done => {
                        gone?;
                        job_done = true;
                    }
                    next = tokio::time::timeout(wait, pods.next()) => match next {
                        Ok(Some(Ok(event))) => {
                            errors = 0;
                            left.apply(Ok(event));
                        }
                        Ok(Some(Err(e))) => {
                            errors += 1;
                            if !left.apply(Err(e)) && errors >= WATCH_ERRORS {
                                break;
                            }
                        }
                        Err(_) if !job_done => {}
                        Err(_) if !caught_up => {
                            caught_up = true;
                            if left.undeleted() {
                                delete_stragglers(cluster, &cluster.list_pod_names(&selector).await?).await?;
                            }
                        }
                        _ => break,
                    },
                }
            }
            tracing::debug!("the watch of the pods of vcjob {name} failed or was silent; listing them instead");
        }
        if !job_done {
            job_gone.await?;
        }
        poll_pods_gone(cluster, &selector, poll).await
    };
    tokio::time::timeout(timeout, wait).await.map_err(|_| VolcanoError::Timeout {
        what: format!("the pods of vcjob {name} to go away"),
        after: timeout,
    })??;
    Ok(had)
}

/// Lists the pods every `poll` until none is left, deleting stragglers (when watching fails).
async fn poll_pods_gone(cluster: &Cluster, selector: &str, poll: Duration) -> Result<(), VolcanoError> {
    loop {
        let left = cluster.list_pod_names(selector).await?;
        if left.is_empty() {
            return Ok(());
        }
        delete_stragglers(cluster, &left).await?;
        tokio::time::sleep(poll).await;
    }
}

/// Pods are deleted by the garbage collector once their job is gone; deletes those whose
/// deletion has not begun.
async fn delete_stragglers(cluster: &Cluster, pods: &[PodName]) -> Result<(), VolcanoError> {
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_none()
            && let Some(p) = &pod.metadata.name
        {
            cluster.delete_pod(p).await?;
        }
    }
    Ok(())
}

/// Deletes the helper vcjob `name`, with a second call when the first failed (an API server
/// that dropped or never answered that one request: the call's own retries end at its
/// deadline, which a request never answered uses up); warns when both failed (`theseus gc`
/// removes it later).
pub(crate) async fn delete_helper(cluster: &Cluster, name: &str) {
    let Err(first) = cluster.delete_job(name).await else { return };
    tracing::debug!("deleting helper vcjob {name} failed ({first}); once more");
    if let Err(e) = cluster.delete_job(name).await {
        tracing::warn!("could not delete helper vcjob {name}: {e}; `theseus gc` removes it later");
    }
}
