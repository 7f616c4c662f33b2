//! Why a running gang was interrupted and what happens next, in one line with numbers, from
//! what Volcano leaves behind ([`interruption`]):
//!
//! - the scheduler's evictor (`defaultEvictor.Evict`, pkg/scheduler/cache/cache.go, v1.15.1):
//!   a `Warning` `Evict` event on each evicted pod, `Pod is evicted, because of preempt` (or
//!   `reclaim`), then the pod is deleted; `SchedulerCache.Evict` adds a `Normal` `Evict` event
//!   on the PodGroup whose message is the reason;
//! - the job controller: the deleted running pod is `PodEvicted`, theseus's `PodEvicted ->
//!   RestartJob` policy restarts the job (`Restarting` in `status.conditions`, `retryCount` + 1),
//!   and it fails once `retryCount` reaches `maxRetry` (pkg/controllers/job/state);
//! - a plain eviction (a node drained through the Eviction API, a `NoExecute` taint) restarts it
//!   the same way with no `Evict` event from the scheduler; the node is the one the pod's
//!   `Scheduled` event (`Successfully assigned <ns>/<pod> to <node>`, `SchedulerCache.Bind`)
//!   named before it.
//!
//! Nothing names the preemptor: it is inferred as the job whose pod was bound first after the
//! eviction, on a node the evicted pods had (when their `Scheduled` events say which), of the
//! same queue for a preemption, of another for a reclaim. Read from the source, not run against
//! a real cluster.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::types::Job;

/// Event and condition times are whole seconds: two of them a second apart may be the same.
const SLACK: k8s_openapi::jiff::SignedDuration = k8s_openapi::jiff::SignedDuration::from_secs(1);

/// Pod annotation naming its Volcano queue.
pub const QUEUE_ANNOTATION: &str = "volcano.sh/queue-name";

/// What interrupted a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// A higher-priority job of its queue took its place.
    Preempted {
        /// The preemptor, when it could be told.
        by: Preemptor,
    },
    /// Another queue took back what this one borrowed.
    Reclaimed {
        /// The job of the reclaiming queue, when it could be told.
        by: Preemptor,
    },
    /// A plain eviction: the node was drained or tainted `NoExecute`.
    Evicted {
        /// The node, when known.
        node: Option<String>,
    },
    /// Restarted without a scheduler's eviction by a job that also restarts on a failed rank
    /// (`PodFailed -> RestartJob`): which of the two is not left behind.
    Restarted {
        /// The node, when known.
        node: Option<String>,
    },
}

/// Who took the freed place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preemptor {
    /// The job (namespace, name, PriorityClass, queue).
    Job {
        /// Namespace.
        namespace: String,
        /// Job name.
        job: String,
        /// PriorityClass.
        class: Option<String>,
        /// Queue.
        queue: String,
    },
    /// No pod bound after the eviction was found (the preemptor's pods were deleted).
    NotFound,
    /// Other jobs' pods cannot be read (RBAC).
    Hidden,
}

/// An interruption and its aftermath.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interruption {
    /// What happened.
    pub cause: Cause,
    /// When (RFC 3339, seconds), when known.
    pub at: Option<String>,
    /// What happens next: `restarting, attempt 2 of 4`, or how the run ended.
    pub next: String,
    /// The run has ended: the line leads with how.
    pub ended: bool,
    /// `retryCount` after the restart it caused (what a record of it is keyed by).
    pub retries: u32,
}

impl Interruption {
    /// What happened and when, as the run's namespace `namespace` reads it: `preempted by serve
    /// (priority prod) at 2026-11-27T11:00:01Z`.
    pub fn what(&self, namespace: &str) -> String {
        let at = self.at.as_ref().map(|t| format!(" at {t}")).unwrap_or_default();
        let job = |ns: &str, job: &str, class: &Option<String>| {
            let name = if ns == namespace { job.to_owned() } else { format!("{ns}/{job}") };
            match class {
                Some(class) => format!("{name} (priority {class})"),
                None => name,
            }
        };
        const HIDDEN: &str = "theseus may not see which job: RBAC refuses listing other pods";
        match &self.cause {
            Cause::Preempted { by: Preemptor::Job { namespace: ns, job: name, class, .. } } => {
                format!("preempted by {}{at}", job(ns, name, class))
            }
            Cause::Preempted { by: Preemptor::NotFound } => format!("preempted{at} (the preemptor has ended)"),
            Cause::Preempted { by: Preemptor::Hidden } => format!("preempted{at} ({HIDDEN})"),
            Cause::Reclaimed { by: Preemptor::Job { namespace: ns, job: name, class, queue } } => {
                format!("reclaimed by queue {queue} (for {}){at}", job(ns, name, class))
            }
            Cause::Reclaimed { by: Preemptor::NotFound } => {
                format!("reclaimed by another queue{at} (its job has ended)")
            }
            Cause::Reclaimed { by: Preemptor::Hidden } => format!("reclaimed by another queue{at} ({HIDDEN})"),
            Cause::Evicted { node: Some(node) } => format!("evicted from node {node}{at}"),
            Cause::Evicted { node: None } => format!("evicted from its node{at}"),
            Cause::Restarted { node } => format!(
                "restarted after a failed rank or an eviction{}{at}",
                node.as_ref().map(|n| format!(" from node {n}")).unwrap_or_default()
            ),
        }
    }

    /// Whether [`Interruption::what`] names who took the place (worth keeping: the preemptor's
    /// pods go away, and with them what tells it).
    pub fn names_the_preemptor(&self) -> bool {
        matches!(
            self.cause,
            Cause::Preempted { by: Preemptor::Job { .. } } | Cause::Reclaimed { by: Preemptor::Job { .. } }
        )
    }

    /// The one line `status` shows, with `what` ([`Interruption::what`], or what was recorded
    /// of it while the preemptor could still be told).
    pub fn line(&self, what: &str) -> String {
        if self.ended { format!("{} after being {what}", self.next) } else { format!("{what}; {}", self.next) }
    }

    /// [`Interruption::line`] with what is inferred now.
    pub fn describe(&self, namespace: &str) -> String {
        self.line(&self.what(namespace))
    }
}

/// What [`interruption`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// The vcjob.
    pub job: &'a Job,
    /// Events about the job, its PodGroup and its pods.
    pub events: &'a [Event],
    /// Pods of every job that may have taken the place (`None`: RBAC refused the list).
    pub others: Option<&'a [Pod]>,
}

/// The last interruption of the job, or `None` when it never was.
pub fn interruption(evidence: &Evidence<'_>) -> Option<Interruption> {
    let job = evidence.job;
    let name = job.metadata.name.as_deref().unwrap_or("");
    let namespace = job.metadata.namespace.as_deref().unwrap_or("");
    let status = job.status.clone().unwrap_or_default();
    let retries = u32::try_from(status.retry_count.unwrap_or(0)).unwrap_or(0);
    let phase = status.state.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let time =
        |c: &crate::types::JobCondition| c.last_transition_time.as_deref().and_then(|t| t.parse::<Timestamp>().ok());
    let last_restart = status.conditions.iter().rposition(|c| c.status == "Restarting");
    let restarted_at = last_restart.and_then(|i| time(&status.conditions[i]));
    // An `Evict` event older than the run the last restart ended is an earlier interruption's.
    let since =
        last_restart.and_then(|i| status.conditions[..i].iter().rev().find(|c| c.status == "Running")).and_then(time);
    let own_pod = |e: &Event| {
        e.involved_object.kind.as_deref() == Some("Pod")
            && e.involved_object.name.as_deref().is_some_and(|n| n.starts_with(&format!("{name}-")))
    };
    // The scheduler's eviction: the newest `Evict` event on the PodGroup or a pod of the job.
    let evict = evidence
        .events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Evict"))
        .filter(|e| own_pod(e) || e.involved_object.kind.as_deref() == Some("PodGroup"))
        // Event times are whole seconds: one second of slack.
        .filter(|e| since.is_none_or(|since| last_time(e).is_some_and(|t| t + SLACK >= since)))
        .max_by_key(|e| last_time(e));
    // Not restarted yet: an `Evict` event alone is a restart the controller has still to make
    // (or an old job's), not this run's interruption.
    if retries == 0 && phase != "Restarting" {
        return None;
    }
    let at = evict.and_then(last_time).or(restarted_at);
    // Nodes the job's pods were bound to before the eviction (their `Scheduled` events).
    let freed: BTreeSet<String> = evidence
        .events
        .iter()
        .filter(|e| own_pod(e) && e.reason.as_deref() == Some("Scheduled"))
        .filter(|e| at.is_none_or(|at| first_time(e).is_some_and(|t| t <= at)))
        .filter_map(|e| e.message.as_deref().and_then(|m| m.rsplit_once(" to ")).map(|(_, node)| node.to_owned()))
        .collect();
    let cause = match evict {
        Some(event) => {
            let message = event.message.as_deref().unwrap_or("");
            let reclaim = message.contains("reclaim");
            let queue = job.spec.queue.clone().filter(|q| !q.is_empty()).unwrap_or_else(|| "default".into());
            let by = preemptor(evidence.others, (namespace, name), at, &freed, &queue, reclaim);
            if reclaim { Cause::Reclaimed { by } } else { Cause::Preempted { by } }
        }
        // With no scheduler's eviction, a restart is a plain eviction: theseus restarts jobs
        // only on `PodEvicted` unless `restart_on_failure` is set.
        None => {
            let node = freed.iter().next_back().cloned().filter(|_| freed.len() == 1);
            let on_failure = job
                .spec
                .policies
                .iter()
                .chain(job.spec.tasks.iter().flat_map(|t| &t.policies))
                .any(|p| p.event.as_deref() == Some("PodFailed") && p.action.as_deref() == Some("RestartJob"));
            if on_failure { Cause::Restarted { node } } else { Cause::Evicted { node } }
        }
    };
    let max = job.spec.max_retry.map_or(3, |m| u32::try_from(m).unwrap_or(0));
    let attempt = retries + 1;
    let (next, ended) = match phase.as_str() {
        "Failed" => (format!("failed with no restarts left ({retries} of {max} used)"), true),
        "Running" => (format!("running again, attempt {attempt} of {max}"), false),
        "Completed" => (format!("completed on attempt {attempt} of {max}"), true),
        "Aborted" | "Terminated" | "Aborting" | "Terminating" => (format!("vcjob phase {phase}"), true),
        _ => (format!("restarting, attempt {attempt} of {max}"), false),
    };
    let at = at.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    Some(Interruption { cause, at, next, ended, retries })
}

/// The job whose pod was bound first after `at` on a `freed` node (any node when none is
/// known), of `queue` (a preemption) or of another queue (a reclaim).
fn preemptor(
    others: Option<&[Pod]>,
    (namespace, job): (&str, &str),
    at: Option<Timestamp>,
    freed: &BTreeSet<String>,
    queue: &str,
    reclaim: bool,
) -> Preemptor {
    let Some(pods) = others else { return Preemptor::Hidden };
    let found = pods
        .iter()
        .filter_map(|p| {
            let ns = p.metadata.namespace.as_deref().unwrap_or(namespace);
            let labels = p.metadata.labels.as_ref();
            let owner = labels.and_then(|l| l.get(crate::api::JOB_NAME_LABEL)).cloned();
            if ns == namespace && owner.as_deref() == Some(job) {
                return None;
            }
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref())?;
            if !freed.is_empty() && !freed.contains(node) {
                return None;
            }
            let pod_queue = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(QUEUE_ANNOTATION))
                .cloned()
                .unwrap_or_else(|| "default".into());
            if (pod_queue == queue) == reclaim {
                return None;
            }
            let bound = bound_at(p)?;
            if at.is_some_and(|at| bound < at) {
                return None;
            }
            let job = owner.or_else(|| p.metadata.name.clone()).unwrap_or_default();
            let class = p.spec.as_ref().and_then(|s| s.priority_class_name.clone());
            Some((bound, Preemptor::Job { namespace: ns.to_owned(), job, class, queue: pod_queue }))
        })
        .min_by_key(|(bound, _)| *bound);
    found.map_or(Preemptor::NotFound, |(_, p)| p)
}

/// When the pod was bound: its `PodScheduled=True` condition's time, else its creation.
fn bound_at(pod: &Pod) -> Option<Timestamp> {
    let scheduled = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| {
        cs.iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "True")
            .and_then(|c| c.last_transition_time.as_ref())
    });
    scheduled.or(pod.metadata.creation_timestamp.as_ref()).map(|t| t.0)
}

/// When an event last happened.
fn last_time(event: &Event) -> Option<Timestamp> {
    event.last_timestamp.as_ref().map(|t| t.0).or(event.event_time.as_ref().map(|t| t.0)).or(first_time(event))
}

/// When an event first happened.
fn first_time(event: &Event) -> Option<Timestamp> {
    event.first_timestamp.as_ref().map(|t| t.0).or(event.event_time.as_ref().map(|t| t.0))
}

#[cfg(test)]
mod tests;
