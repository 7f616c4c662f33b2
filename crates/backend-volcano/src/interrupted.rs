//! The reads behind a status line about an interruption ([`crate::interruption`]): only for a
//! job that was restarted or is restarting, the events of its PodGroup and of every pod that
//! carried its name (the evicted pods are gone; their events stay), and the pods of the
//! cluster (else of the namespace) that may have taken its place. Best effort: what RBAC
//! refuses is said in the line, never an error of `status`.
//!
//! The preemptor is told by its pods, which go away when it ends; so the first time it is
//! told, what was inferred is recorded in a small ConfigMap owned by the vcjob
//! (`<job>-interrupted-<retryCount>`, garbage-collected with it), and every later look reads
//! that record instead (a completed run still says who preempted it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::Cluster;
use crate::error::VolcanoError;
use crate::interruption::{Evidence, Interruption, interruption};
use crate::render::{LABEL_ROLE, owner_reference};
use crate::types::Job;

/// `theseus.dev/role` of an interruption's record.
const RECORD_ROLE: &str = "interruption";

/// The line `status` shows for the job's last interruption, `None` when it was never
/// restarted: what was recorded of it when there is a record, else what is inferred now
/// (recorded when it names the preemptor).
pub(crate) async fn interruption_line(cluster: &Cluster, job: &Job) -> Option<String> {
    let found = interruption_of(cluster, job).await?;
    let name = job.metadata.name.as_deref()?;
    let record = format!("{name}-interrupted-{}", found.retries);
    let recorded = match cluster.get_config_map(&record).await {
        Ok(map) => map.and_then(|m| m.data?.remove("what")),
        Err(e) => {
            tracing::debug!("cannot read {record}: {e}");
            None
        }
    };
    if let Some(what) = recorded {
        return Some(found.line(&what));
    }
    let what = found.what(cluster.namespace());
    if found.names_the_preemptor()
        && let Some(uid) = job.metadata.uid.as_deref()
    {
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(record.clone()),
                labels: Some(BTreeMap::from([(LABEL_ROLE.to_owned(), RECORD_ROLE.to_owned())])),
                owner_references: Some(vec![owner_reference(name, uid)]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("what".to_owned(), what.clone())])),
            ..ConfigMap::default()
        };
        match cluster.create_config_map(&map).await {
            Ok(_) => {}
            // Another look recorded it first: its words stand.
            Err(VolcanoError::AlreadyExists { .. }) => {
                if let Ok(Some(what)) =
                    cluster.get_config_map(&record).await.map(|m| m.and_then(|m| m.data?.remove("what")))
                {
                    return Some(found.line(&what));
                }
            }
            Err(e) => tracing::debug!("cannot record {record}: {e}"),
        }
    }
    Some(found.line(&what))
}

/// The job's last interruption as inferred now, `None` when it was never restarted.
async fn interruption_of(cluster: &Cluster, job: &Job) -> Option<Interruption> {
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
    match cluster.get_podgroup(&name).await {
        Ok(Some(group)) => {
            let group = group.metadata.name.unwrap_or_default();
            match cluster.events_for("PodGroup", &group).await {
                Ok(found) => events.extend(found),
                Err(e) => tracing::debug!("cannot read the events of PodGroup {group}: {e}"),
            }
        }
        Ok(None) => {}
        Err(e) => tracing::debug!("cannot read the PodGroup of {name}: {e}"),
    }
    let others = other_pods(cluster).await;
    interruption(&Evidence { job, events: &events, others: others.as_deref() })
}

/// Pods of the cluster, else of the namespace, bound or finished (a preemptor that has ended
/// is still told while its pods are kept); `None` when RBAC refuses both.
async fn other_pods(cluster: &Cluster) -> Option<Vec<Pod>> {
    const RUNNING: &str = "status.phase!=Pending";
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
