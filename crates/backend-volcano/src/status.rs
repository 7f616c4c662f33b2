//! Pure status logic: turns what the cluster reports about a gang job (the vcjob, its pods, its
//! PodGroup's conditions, recent events) into theseus's [`JobStatus`], and says in one plain
//! sentence why a job is still pending.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, Event, Pod, PodCondition,
    PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use theseus_core::backend::{JobState, JobStatus, RankStatus};

use crate::types::Job;

pub use crate::api::PodGroupCondition as GroupCondition;

/// Everything observed about one gang job.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The vcjob.
    pub job: &'a Job,
    /// Its pods (any order).
    pub pods: &'a [Pod],
    /// Its PodGroup's phase, when the PodGroup was found.
    pub group_phase: Option<&'a str>,
    /// Its PodGroup's conditions.
    pub group_conditions: &'a [GroupCondition],
    /// Events about the job, its PodGroup and its pods.
    pub events: &'a [Event],
}

/// Waiting reasons of a container that will not go away by waiting.
const STUCK_WAITING: &[&str] = &[
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// The job's state, exit code, message and one entry per pod (rank order).
pub fn summarize(observed: &Observed<'_>) -> JobStatus {
    let mut pods: Vec<&Pod> = observed.pods.iter().collect();
    pods.sort_by_key(|p| (rank_of(p).unwrap_or(u32::MAX), p.metadata.name.clone()));
    let ranks: Vec<RankStatus> = pods
        .iter()
        .enumerate()
        .map(|(i, pod)| RankStatus {
            rank: rank_of(pod).unwrap_or(i as u32),
            state: pod_state(pod),
            exit_code: exit_code(pod),
            location: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            restarts: Some(restarts(pod)),
        })
        .collect();
    let state_info = observed.job.status.as_ref().and_then(|s| s.state.as_ref());
    let phase = state_info.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let reason = state_info.and_then(|s| s.reason.as_deref()).unwrap_or("");
    let job_message = state_info.and_then(|s| s.message.as_deref()).filter(|m| !m.is_empty());
    let state = job_state(phase, reason, &pods);
    let first_failure = ranks.iter().find(|r| r.state == JobState::Failed || r.exit_code.is_some_and(|c| c != 0));
    let retries = observed.job.status.as_ref().and_then(|s| s.retry_count).filter(|r| *r > 0);
    let after = retries.map(|r| format!(" after {r} restart{}", if r == 1 { "" } else { "s" })).unwrap_or_default();
    let exit_code = match state {
        JobState::Completed => Some(0),
        JobState::Failed | JobState::Cancelled | JobState::Preempted => first_failure.and_then(|r| r.exit_code),
        _ => None,
    };
    let message = match state {
        JobState::Pending => Some(pending_reason(observed)),
        JobState::Failed => Some(match (first_failure, job_message) {
            (Some(r), _) => format!(
                "rank {} exited with code {} (vcjob phase {phase}{after}{})",
                r.rank,
                r.exit_code.unwrap_or(-1),
                job_message.map(|m| format!(": {m}")).unwrap_or_default()
            ),
            (None, Some(m)) => format!("vcjob phase {phase}: {m}"),
            (None, None) => format!("vcjob phase {phase}"),
        }),
        JobState::Running => {
            let running =
                pods.iter().filter(|p| pod_state(p) == JobState::Running && stuck_container(p).is_none()).count();
            Some(match first_failure {
                // A failed rank while the vcjob still runs: with `PodFailed -> TerminateJob`
                // Volcano is ending it; without such a policy it runs on until every pod ends.
                Some(r) => format!(
                    "rank {} failed with exit code {}; {running}/{} pods still running (vcjob phase {phase})",
                    r.rank,
                    r.exit_code.unwrap_or(-1),
                    ranks.len()
                ),
                // A pod restarting in place (`CrashLoopBackOff`) is Running to Volcano.
                None => match pods.iter().find_map(|p| stuck_container(p).map(|s| (p, s))) {
                    Some((pod, (reason, message))) => format!(
                        "pod {} cannot start: {reason}{}; {running}/{} pods running (vcjob phase {phase})",
                        pod.metadata.name.as_deref().unwrap_or("?"),
                        message.map(|m| format!(": {}", one_line(&m))).unwrap_or_default(),
                        ranks.len()
                    ),
                    None => format!("{running}/{} pods running (vcjob phase {phase}{after})", ranks.len()),
                },
            })
        }
        JobState::Cancelled | JobState::Preempted => {
            Some(format!("vcjob phase {phase}{}", job_message.map(|m| format!(": {m}")).unwrap_or_default()))
        }
        JobState::Completed | JobState::Unknown | JobState::Submitting => job_message.map(str::to_owned),
    };
    // `status.retryCount` counts the job's restarts (`RestartJob`); the first start is attempt 1,
    // as `THESEUS_ATTEMPT` in the pods (the annotation `volcano.sh/job-retry-count` + 1).
    let attempt =
        observed.job.status.as_ref().and_then(|s| s.retry_count).and_then(|r| u32::try_from(r).ok()).map(|r| r + 1);
    JobStatus { state, exit_code, message, ranks, attempt }
}

/// Maps a vcjob phase (and reason) to theseus's states. `Terminated` and `Aborted` come from
/// lifecycle policies (theseus renders `PodFailed -> TerminateJob`; `cancel` deletes the vcjob):
/// with a failed pod they are `Failed`, with an evicted one `Preempted`, else `Cancelled`.
/// `Terminating` and `Aborting` still hold pods, so they are `Running`.
pub fn job_state(phase: &str, reason: &str, pods: &[&Pod]) -> JobState {
    match phase {
        "Pending" | "Inqueue" => JobState::Pending,
        "Running" | "Restarting" | "Completing" | "Aborting" | "Terminating" => JobState::Running,
        "Completed" => JobState::Completed,
        "Failed" => JobState::Failed,
        "Aborted" | "Terminated" => {
            let evicted = |text: &str| text.contains("Evict") || text.contains("Preempt");
            let pod_evicted =
                pods.iter().any(|p| p.status.as_ref().and_then(|s| s.reason.as_deref()).is_some_and(evicted));
            if evicted(reason) || pod_evicted {
                JobState::Preempted
            } else if pods.iter().any(|p| pod_state(p) == JobState::Failed) {
                JobState::Failed
            } else {
                JobState::Cancelled
            }
        }
        _ => JobState::Unknown,
    }
}

/// The part of `pod` this module reads (its name, node, phase and reason, its `PodScheduled`
/// condition, its containers' waiting and terminated states), so a status of thousands of pods
/// keeps a few hundred bytes per pod instead of the whole object (spec, env, volumes, managed
/// fields). [`summarize`] and [`pending_reason`] give the same answer for `slim(pod)` as for
/// `pod`.
pub fn slim(pod: Pod) -> Pod {
    let Pod { metadata, spec, status } = pod;
    let container = |c: ContainerStatus| ContainerStatus {
        name: c.name,
        state: c.state.map(|s| ContainerState {
            waiting: s.waiting.map(|w| ContainerStateWaiting { reason: w.reason, message: w.message }),
            terminated: s.terminated.map(|t| ContainerStateTerminated {
                exit_code: t.exit_code,
                reason: t.reason,
                ..ContainerStateTerminated::default()
            }),
            running: None,
        }),
        restart_count: c.restart_count,
        ..ContainerStatus::default()
    };
    let status = status.map(|s| PodStatus {
        phase: s.phase,
        reason: s.reason,
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| c.type_ == "PodScheduled")
                .map(|c| PodCondition {
                    type_: c.type_,
                    status: c.status,
                    message: c.message,
                    ..PodCondition::default()
                })
                .collect()
        }),
        container_statuses: s.container_statuses.map(|cs| cs.into_iter().map(container).collect()),
        init_container_statuses: s.init_container_statuses.map(|cs| cs.into_iter().map(container).collect()),
        ..PodStatus::default()
    });
    Pod {
        metadata: ObjectMeta { name: metadata.name, ..ObjectMeta::default() },
        spec: spec.map(|s| PodSpec { node_name: s.node_name, ..PodSpec::default() }),
        status,
    }
}

/// The pod's index in its task: the number after the last `-` of `J-T-i`.
pub fn rank_of(pod: &Pod) -> Option<u32> {
    let name = pod.metadata.name.as_deref()?;
    name.rsplit_once('-')?.1.parse().ok()
}

/// The task-and-index part of the pod name (`worker-0`), used to prefix log lines.
pub fn pod_label(pod: &Pod, task: &str) -> String {
    match rank_of(pod) {
        Some(i) => format!("{task}-{i}"),
        None => pod.metadata.name.clone().unwrap_or_default(),
    }
}

fn pod_state(pod: &Pod) -> JobState {
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending") {
        "Pending" => JobState::Pending,
        "Running" => JobState::Running,
        "Succeeded" => JobState::Completed,
        "Failed" => {
            let reason = status.and_then(|s| s.reason.as_deref()).unwrap_or("");
            if reason.contains("Evict") || reason.contains("Preempt") { JobState::Preempted } else { JobState::Failed }
        }
        _ => JobState::Unknown,
    }
}

fn exit_code(pod: &Pod) -> Option<i32> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code))
}

/// How often the pod's containers were restarted in place: the sum of their `restartCount`
/// (the kubelet counts a container's restarts from the instance it creates after each back-off,
/// `convertContainerStatus` in pkg/kubelet/kubelet_pods.go, read, not run). Init containers are
/// left out, as `kubectl get pods` leaves them out of RESTARTS; a pod with no container status
/// yet has restarted nothing.
fn restarts(pod: &Pod) -> u32 {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
    statuses.iter().map(|c| u32::try_from(c.restart_count).unwrap_or(0)).fold(0, u32::saturating_add)
}

/// Why the job is not running yet, in one plain sentence.
pub fn pending_reason(observed: &Observed<'_>) -> String {
    let mut pods: Vec<&Pod> = observed.pods.iter().collect();
    pods.sort_by_key(|p| rank_of(p).unwrap_or(u32::MAX));
    // 1. A container that cannot start.
    for pod in &pods {
        if let Some((reason, message)) = stuck_container(pod) {
            let name = pod.metadata.name.as_deref().unwrap_or("?");
            return match message {
                Some(m) => format!("pod {name} cannot start: {reason}: {}", one_line(&m)),
                None => format!("pod {name} cannot start: {reason}"),
            };
        }
    }
    // 2. The gang does not fit.
    let unschedulable = observed
        .group_conditions
        .iter()
        .rev()
        .find(|c| c.type_ == "Unschedulable" && c.status == "True")
        .and_then(|c| c.message.clone().or_else(|| c.reason.clone()));
    if let Some(message) = unschedulable {
        return format!("waiting for resources: the scheduler cannot place the whole gang: {}", one_line(&message));
    }
    // 3. A pod the default scheduler could not place.
    for pod in &pods {
        let condition =
            pod.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| {
                cs.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.message.is_some())
            });
        if let Some(message) = condition.and_then(|c| c.message.as_deref()) {
            return format!("waiting for resources: {}", one_line(message));
        }
    }
    // 4. The enqueue action's verdict: a PodGroup that is not enqueued has no condition and no
    //    pods; the overcommit and proportion plugins say why in `Normal` `Unschedulable` events
    //    on it (`resource in cluster is overused: ...`, `queue resource quota insufficient: ...`),
    //    the scheduler cache adds a `Warning` one that only counts tasks. Both types are read;
    //    the newest `Normal` one names the resource.
    if observed.group_phase.is_none_or(|p| p == "Pending") {
        let enqueue = observed
            .events
            .iter()
            .filter(|e| e.involved_object.kind.as_deref() == Some("PodGroup"))
            .filter(|e| e.reason.as_deref() == Some("Unschedulable") && e.type_.as_deref() == Some("Normal"))
            .max_by_key(|e| event_time(e));
        if let Some(event) = enqueue {
            let queue = observed.job.spec.queue.as_deref().filter(|q| !q.is_empty()).unwrap_or("default");
            return format!("waiting for queue {queue}: {}", one_line(event.message.as_deref().unwrap_or("")));
        }
    }
    // 5. The newest warning event.
    let warning =
        observed.events.iter().filter(|e| e.type_.as_deref() == Some("Warning")).max_by_key(|e| event_time(e));
    if let Some(event) = warning {
        let what = event.involved_object.name.as_deref().unwrap_or("?");
        let reason = event.reason.as_deref().unwrap_or("Warning");
        let message = event.message.as_deref().unwrap_or("");
        return format!("waiting: {reason} on {what}: {}", one_line(message));
    }
    // 6. Nothing known yet.
    let group = observed.group_phase.map(|p| format!(", PodGroup {p}")).unwrap_or_default();
    let running = pods.iter().filter(|p| pod_state(p) == JobState::Running).count();
    let wanted = observed.job.spec.min_available.unwrap_or(0);
    if pods.is_empty() {
        format!("waiting for Volcano to admit the gang of {wanted} pods (no pods yet{group})")
    } else {
        format!("waiting for the gang to start: {running}/{} pods running{group}", pods.len())
    }
}

/// The first container of `pod` stuck in a waiting reason that will not resolve by itself.
pub fn stuck_container(pod: &Pod) -> Option<(String, Option<String>)> {
    let status = pod.status.as_ref()?;
    let all = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    for container in all {
        let Some(waiting) = container.state.as_ref().and_then(|s| s.waiting.as_ref()) else { continue };
        let reason = waiting.reason.as_deref().unwrap_or("");
        if STUCK_WAITING.contains(&reason) {
            return Some((reason.to_owned(), waiting.message.clone()));
        }
    }
    None
}

/// When an event last happened (`lastTimestamp`, else `eventTime`), for picking the newest.
fn event_time(event: &Event) -> Option<k8s_openapi::jiff::Timestamp> {
    event.last_timestamp.as_ref().map(|t| t.0).or(event.event_time.as_ref().map(|t| t.0))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
