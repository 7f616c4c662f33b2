//! The reads behind a status line about an interruption ([`crate::interruption`]): only for a
//! job that was restarted or is restarting, the events of its PodGroup and of every pod that
//! carried its name (the evicted pods are gone; their events stay), and the pods of the
//! cluster (else of the namespace) that may have taken its place. Best effort: what RBAC
//! refuses is said in the line, never an error of `status`.

use k8s_openapi::api::core::v1::{Event, Pod};

use crate::api::Cluster;
use crate::error::VolcanoError;
use crate::interruption::{Evidence, Interruption, interruption};
use crate::types::Job;

/// The job's last interruption, `None` when it was never restarted.
pub(crate) async fn interruption_of(cluster: &Cluster, job: &Job) -> Option<Interruption> {
    let status = job.status.as_ref()?;
    let restarting = status.state.as_ref().and_then(|s| s.phase.as_deref()) == Some("Restarting");
    if status.retry_count.unwrap_or(0) <= 0 && !restarting {
        return None;
    }
    let name = job.metadata.name.clone()?;
    let mut events: Vec<Event> = Vec::new();
    let prefix = format!("{name}-");
    match cluster.events_for_each("Pod", |pod| pod.starts_with(&prefix)).await {
        Ok(found) => events.extend(found),
        Err(e) => tracing::debug!("cannot read the events of the pods of {name}: {e}"),
    }
    if let Some((group, _, _)) = super::podgroup_of(cluster, job).await {
        match cluster.events_for("PodGroup", &group).await {
            Ok(found) => events.extend(found),
            Err(e) => tracing::debug!("cannot read the events of PodGroup {group}: {e}"),
        }
    }
    let others = other_pods(cluster).await;
    interruption(&Evidence { job, events: &events, others: others.as_deref() })
}

/// Running pods of the cluster, else of the namespace; `None` when RBAC refuses both.
async fn other_pods(cluster: &Cluster) -> Option<Vec<Pod>> {
    const RUNNING: &str = "status.phase=Running";
    match cluster.list_all_pods(RUNNING).await {
        Ok(pods) => return Some(pods),
        Err(VolcanoError::Forbidden { .. }) => {}
        Err(e) => {
            tracing::debug!("cannot list the cluster's pods: {e}");
            return None;
        }
    }
    match cluster.list_pods_where(RUNNING).await {
        Ok(pods) => Some(pods),
        Err(e) => {
            tracing::debug!("cannot list the namespace's pods: {e}");
            None
        }
    }
}
