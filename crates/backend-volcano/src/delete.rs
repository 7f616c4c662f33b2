//! Deleting vcjobs: a job and its pods confirmed gone, and the best-effort delete of a
//! code-shipping helper.

use std::time::Duration;

use crate::api::Cluster;
use crate::error::VolcanoError;

/// Deletes a vcjob and waits until it and its pods are gone. Returns how many pods it had.
pub(crate) async fn delete_and_confirm(
    cluster: &Cluster,
    name: &str,
    timeout: Duration,
    poll: Duration,
) -> Result<usize, VolcanoError> {
    let selector = format!("volcano.sh/job-name={name}");
    let had = cluster.list_pods(&selector).await?.len();
    cluster.delete_job(name).await?;
    let wait = async {
        cluster.wait_job_gone(name, timeout).await?;
        loop {
            let left = cluster.list_pods(&selector).await?;
            if left.is_empty() {
                return Ok::<(), VolcanoError>(());
            }
            // Pods are deleted by the garbage collector once the job is gone; delete stragglers.
            for pod in &left {
                if pod.metadata.deletion_timestamp.is_none()
                    && let Some(p) = &pod.metadata.name
                {
                    cluster.delete_pod(p).await?;
                }
            }
            tokio::time::sleep(poll).await;
        }
    };
    tokio::time::timeout(timeout, wait).await.map_err(|_| VolcanoError::Timeout {
        what: format!("the pods of vcjob {name} to go away"),
        after: timeout,
    })??;
    Ok(had)
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
