//! Hand-written typed Volcano resources, the parts theseus uses: the `Job`
//! (`batch.volcano.sh/v1alpha1`), and the `PodGroup` and `Queue` (`scheduling.volcano.sh/v1beta1`).
//! The job's pod template is k8s-openapi's `PodTemplateSpec`; the vendored CRD's schema test keeps
//! these types honest. Every `Option` is skipped when `None`, so no `null` reaches the apiserver.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// `spec` of a Volcano Job. `schema = "disabled"`: theseus never installs the CRD.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "batch.volcano.sh",
    version = "v1alpha1",
    kind = "Job",
    plural = "jobs",
    shortname = "vcjob",
    namespaced,
    status = "JobStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// Scheduler of the job's pods (`volcano`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Volcano queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Priority class of the job's PodGroup: Volcano orders and preempts gangs by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Pods that must be schedulable together (the gang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    /// Restarts of the whole job before it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry: Option<i32>,
    /// Seconds after finishing before the controller deletes the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Job plugins (`env`, `svc`, `ssh`) with their arguments.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugins: BTreeMap<String, Vec<String>>,
    /// Job-level lifecycle policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<LifecyclePolicy>,
    /// Tasks (pod groups of identical replicas).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskSpec>,
}

/// One task of a [`JobSpec`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// Task name; pods are `<job>-<task>-<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Pods of this task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Pods of this task that must be schedulable together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    /// The pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
    /// Task-level lifecycle policies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<LifecyclePolicy>,
}

/// What the controller does on an event (`PodEvicted` → `RestartJob`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LifecyclePolicy {
    /// Event (`PodEvicted`, `PodFailed`, `TaskCompleted`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Action (`RestartJob`, `CompleteJob`, `AbortJob`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

/// `status` of a Volcano Job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// Phase and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    /// Pods pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<i32>,
    /// Pods running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// Pods succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Pods failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// Pods in an unknown state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<i32>,
    /// Pods terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating: Option<i32>,
    /// The gang size the controller uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    /// Restarts so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_count: Option<i32>,
    /// Every phase the job entered, with when (the controller appends one per transition).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<JobCondition>,
}

/// One entry of a Volcano Job's `status.conditions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    /// The phase entered (`Restarting`, `Running`, ...).
    #[serde(default)]
    pub status: String,
    /// When, as RFC 3339 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// `status.state` of a Volcano Job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobState {
    /// `Pending`, `Running`, `Completed`, `Failed`, `Aborted`, `Terminated`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Machine-readable reason of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message of the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the phase was entered (RFC 3339): for a finished job, when it finished, from which
    /// Volcano's garbage collector counts `ttlSecondsAfterFinished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// Volcano phases after which a job does not change any more.
pub const TERMINAL_PHASES: &[&str] = &["Completed", "Failed", "Aborted", "Terminated"];

/// A Volcano PodGroup (`scheduling.volcano.sh/v1beta1`), the part theseus reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "scheduling.volcano.sh",
    version = "v1beta1",
    kind = "PodGroup",
    plural = "podgroups",
    namespaced,
    status = "PodGroupStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Pods that must be scheduled together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// Queue of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// PriorityClass of the group (the job's), which orders and preempts within the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// What the gang needs to start (the sum of its first `minMember` pods' requests).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "quantities")]
    pub min_resources: BTreeMap<String, String>,
}

/// `status` of a [`PodGroup`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `Pending`, `Inqueue`, `Running`, `Unknown`, `Completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Conditions; `Unschedulable` carries the shortage in its message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodGroupCondition>,
    /// Pods running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
}

/// One condition of a [`PodGroupStatus`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCondition {
    /// `Unschedulable`, `Scheduled`, ...
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `True`, `False`, `Unknown`.
    #[serde(default)]
    pub status: String,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A Volcano Queue (`scheduling.volcano.sh/v1beta1`, cluster-scoped), the part theseus reads.
/// Quantities stay text; [`crate::availability`] parses them.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "scheduling.volcano.sh",
    version = "v1beta1",
    kind = "Queue",
    plural = "queues",
    status = "QueueStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// Hard cap per resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "quantities")]
    pub capability: BTreeMap<String, String>,
    /// Share weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// The share the capacity plugin gives the queue (the proportion plugin ignores it and
    /// shares by weight).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "quantities")]
    pub deserved: BTreeMap<String, String>,
    /// What the queue keeps whatever others need: never reclaimed below it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarantee: Option<Guarantee>,
    /// `false`: what the queue holds beyond its share is never reclaimed (absent: `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimable: Option<bool>,
}

/// `spec.guarantee` of a [`Queue`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Guarantee {
    /// Guaranteed resources.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "quantities")]
    pub resource: BTreeMap<String, String>,
}

/// `status` of a [`Queue`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// `Open`, `Closed`, `Closing`, `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Resources in use.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", deserialize_with = "quantities")]
    pub allocated: BTreeMap<String, String>,
}

/// Quantities as text, accepting bare JSON numbers too.
fn quantities<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let raw: Option<BTreeMap<String, serde_json::Value>> = Option::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_parses_from_controller_json() {
        let status: JobStatus = serde_json::from_value(serde_json::json!({
            "state": {"phase": "Running", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            "running": 2, "minAvailable": 2, "retryCount": 0,
            "conditions": [{"status": "Running"}]
        }))
        .unwrap();
        assert_eq!(status.state.unwrap().phase.as_deref(), Some("Running"));
        assert_eq!(status.running, Some(2));
    }

    #[test]
    fn empty_spec_serializes_without_nulls() {
        let json = serde_json::to_string(&JobSpec::default()).unwrap();
        assert_eq!(json, "{}");
    }
}
