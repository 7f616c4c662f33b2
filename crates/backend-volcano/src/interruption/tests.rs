//! What Volcano leaves after a preemption, a reclaim and a drain, and the line each makes.

use super::*;
use serde_json::json;

fn job(phase: &str, retries: i32) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"queue": "research", "maxRetry": 4, "tasks": []},
        "status": {
            "state": {"phase": phase}, "retryCount": retries,
            "conditions": [
                {"status": "Running", "lastTransitionTime": "2026-11-27T10:00:00Z"},
                {"status": "Restarting", "lastTransitionTime": "2026-11-27T11:00:03Z"},
                {"status": phase, "lastTransitionTime": "2026-11-27T11:00:05Z"}
            ]
        }
    }))
    .unwrap()
}

fn event(kind: &str, name: &str, type_: &str, reason: &str, message: &str, at: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{name}.{reason}")},
        "involvedObject": {"kind": kind, "name": name, "namespace": "ml"},
        "type": type_, "reason": reason, "message": message,
        "firstTimestamp": at, "lastTimestamp": at
    }))
    .unwrap()
}

fn pod(ns: &str, job: &str, queue: &str, class: &str, node: &str, bound: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{job}-worker-0"), "namespace": ns,
            "labels": {"volcano.sh/job-name": job},
            "annotations": {"volcano.sh/queue-name": queue},
            "creationTimestamp": "2026-11-27T10:30:00Z"
        },
        "spec": {"nodeName": node, "priorityClassName": class, "containers": []},
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}]}
    }))
    .unwrap()
}

/// The events of one eviction of pod `train-worker-0` from `gpu-3` because of `why`.
fn evicted(why: &str) -> Vec<Event> {
    vec![
        event(
            "Pod",
            "train-worker-0",
            "Normal",
            "Scheduled",
            "Successfully assigned ml/train-worker-0 to gpu-3",
            "2026-11-27T10:00:00Z",
        ),
        event(
            "Pod",
            "train-worker-0",
            "Warning",
            "Evict",
            &format!("Pod is evicted, because of {why}"),
            "2026-11-27T11:00:01Z",
        ),
        event("PodGroup", "train-uid", "Normal", "Evict", why, "2026-11-27T11:00:01Z"),
    ]
}

/// A case: name, the job, its events, the other pods (`None`: hidden) and the line.
type Case<'a> = (&'a str, Job, Vec<Event>, Option<&'a [Pod]>, Option<&'a str>);

#[test]
fn lines_by_case() {
    let others = vec![
        pod("ml", "train", "research", "dev", "gpu-3", "2026-11-27T11:00:09Z"),
        pod("ml", "old", "research", "dev", "gpu-3", "2026-11-27T09:00:00Z"),
        pod("ml", "elsewhere", "research", "prod", "gpu-9", "2026-11-27T11:00:02Z"),
        pod("ml", "serve", "research", "prod", "gpu-3", "2026-11-27T11:00:04Z"),
        pod("team-b", "sweep", "vision", "normal", "gpu-3", "2026-11-27T11:00:06Z"),
    ];
    let plain = vec![evicted("x").remove(0)];
    let cases: Vec<Case<'_>> = vec![
        ("never interrupted", job("Running", 0), vec![], Some(&others), None),
        ("evicted, not restarted yet", job("Running", 0), evicted("preempt"), Some(&others), None),
        (
            "preempted",
            job("Pending", 1),
            evicted("preempt"),
            Some(&others),
            Some("preempted by serve (priority prod) at 2026-11-27T11:00:01Z; restarting, attempt 2 of 4"),
        ),
        (
            "reclaimed",
            job("Restarting", 1),
            evicted("reclaim"),
            Some(&others),
            Some(
                "reclaimed by queue vision (for team-b/sweep (priority normal)) at 2026-11-27T11:00:01Z; restarting, \
                 attempt 2 of 4",
            ),
        ),
        (
            "preemptor hidden",
            job("Running", 2),
            evicted("preempt"),
            None,
            Some(
                "preempted at 2026-11-27T11:00:01Z (theseus may not see which job: RBAC refuses listing other pods); \
                 running again, attempt 3 of 4",
            ),
        ),
        (
            "drained",
            job("Pending", 1),
            plain,
            Some(&others),
            Some("evicted from node gpu-3 at 2026-11-27T11:00:03Z; restarting, attempt 2 of 4"),
        ),
        (
            "out of restarts",
            job("Failed", 4),
            evicted("preempt"),
            Some(&others[..1]),
            Some(
                "failed with no restarts left (4 of 4 used) after being preempted at 2026-11-27T11:00:01Z (the \
                 preemptor has ended)",
            ),
        ),
    ];
    // An eviction of an earlier run (before the run the last restart ended) is not this one's.
    let mut twice = job("Pending", 2);
    let conditions = &mut twice.status.as_mut().unwrap().conditions;
    conditions.insert(
        2,
        crate::types::JobCondition {
            status: "Running".into(),
            last_transition_time: Some("2026-11-27T11:00:30Z".into()),
        },
    );
    conditions.insert(
        3,
        crate::types::JobCondition {
            status: "Restarting".into(),
            last_transition_time: Some("2026-11-27T12:00:00Z".into()),
        },
    );
    let got = interruption(&Evidence { job: &twice, events: &evicted("preempt"), others: Some(&others) }).unwrap();
    assert_eq!(got.describe("ml"), "evicted from node gpu-3 at 2026-11-27T12:00:00Z; restarting, attempt 3 of 4");
    // A job that restarts on a failed rank too: which one it was is not left behind.
    let mut on_failure = job("Pending", 1);
    on_failure.spec.policies = serde_json::from_value(json!([{"event": "PodFailed", "action": "RestartJob"}])).unwrap();
    let plain = vec![evicted("x").remove(0)];
    let got = interruption(&Evidence { job: &on_failure, events: &plain, others: Some(&others) }).unwrap();
    assert_eq!(
        got.describe("ml"),
        "restarted after a failed rank or an eviction from node gpu-3 at 2026-11-27T11:00:03Z; restarting, attempt 2 of 4"
    );
    for (name, job, events, others, want) in cases {
        let got = interruption(&Evidence { job: &job, events: &events, others }).map(|i| i.describe("ml"));
        assert_eq!(got.as_deref(), want, "{name}");
    }
}

#[test]
fn an_ended_run_leads_with_its_end_and_no_class_is_no_priority() {
    let mut others = vec![pod("team-b", "sweep", "vision", "", "gpu-3", "2026-11-27T11:00:06Z")];
    others[0].spec.as_mut().unwrap().priority_class_name = None;
    let got = interruption(&Evidence { job: &job("Completed", 1), events: &evicted("reclaim"), others: Some(&others) });
    assert_eq!(
        got.unwrap().describe("ml"),
        "completed on attempt 2 of 4 after being reclaimed by queue vision (for team-b/sweep) at 2026-11-27T11:00:01Z"
    );
    // What was recorded while the preemptor could be told stands in for what can be told now.
    let gone =
        interruption(&Evidence { job: &job("Completed", 1), events: &evicted("preempt"), others: Some(&[]) }).unwrap();
    assert!(!gone.names_the_preemptor());
    assert_eq!(
        gone.line("preempted by serve (priority prod) at 2026-11-27T11:00:01Z"),
        "completed on attempt 2 of 4 after being preempted by serve (priority prod) at 2026-11-27T11:00:01Z"
    );
}
