//! Tests of the status summary over pod, PodGroup and event fixtures shaped like the apiserver's.

use k8s_openapi::api::core::v1::{Event, Pod};
use serde_json::json;
use theseus_core::backend::JobState;

use super::{GroupCondition, Observed, job_state, pending_reason, rank_of, summarize};
use crate::types::Job;

fn job(phase: Option<&str>, reason: &str) -> Job {
    let mut value = json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "p-g-run-1", "namespace": "ml"},
        "spec": {"minAvailable": 2, "tasks": []}
    });
    if let Some(phase) = phase {
        value["status"] = json!({"state": {"phase": phase, "reason": reason, "message": ""}});
    }
    serde_json::from_value(value).unwrap()
}

fn pod(index: u32, phase: &str, container_state: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("p-g-run-1-worker-{index}")},
        "spec": {"nodeName": format!("node-{index}"), "containers": [{"name": "main"}]},
        "status": {"phase": phase, "containerStatuses": [{
            "name": "main", "image": "img", "imageID": "", "ready": false, "restartCount": 0,
            "state": container_state
        }]}
    }))
    .unwrap()
}

fn observed<'a>(job: &'a Job, pods: &'a [Pod], conditions: &'a [GroupCondition], events: &'a [Event]) -> Observed<'a> {
    Observed { job, pods, group_phase: Some("Pending"), group_conditions: conditions, events }
}

#[test]
fn ranks_come_from_pod_names_and_sort() {
    let job = job(Some("Running"), "");
    let pods = [pod(1, "Running", json!({"running": {}})), pod(0, "Running", json!({"running": {}}))];
    let status = summarize(&observed(&job, &pods, &[], &[]));
    assert_eq!(status.state, JobState::Running);
    assert_eq!(status.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(status.ranks[1].location.as_deref(), Some("node-1"));
    assert_eq!(rank_of(&pods[0]), Some(1));
    assert!(status.message.unwrap().starts_with("2/2 pods running"));
}

#[test]
fn failed_job_reports_the_first_failing_rank_and_code() {
    let job = job(Some("Failed"), "PodFailed");
    let pods = [
        pod(0, "Succeeded", json!({"terminated": {"exitCode": 0}})),
        pod(1, "Failed", json!({"terminated": {"exitCode": 3}})),
    ];
    let status = summarize(&observed(&job, &pods, &[], &[]));
    assert_eq!(status.state, JobState::Failed);
    assert_eq!(status.exit_code, Some(3));
    assert!(status.message.unwrap().contains("rank 1 exited with code 3"));
}

#[test]
fn completed_job_exits_zero() {
    let job = job(Some("Completed"), "");
    let pods = [pod(0, "Succeeded", json!({"terminated": {"exitCode": 0}}))];
    let status = summarize(&observed(&job, &pods, &[], &[]));
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)));
}

#[test]
fn the_attempt_is_the_jobs_retry_count_plus_one() {
    let mut restarted = job(Some("Running"), "");
    restarted.status.as_mut().unwrap().retry_count = Some(2);
    let pods = [pod(0, "Running", json!({"running": {}}))];
    assert_eq!(summarize(&observed(&restarted, &pods, &[], &[])).attempt, Some(3));
    let mut first = job(Some("Running"), "");
    first.status.as_mut().unwrap().retry_count = Some(0);
    assert_eq!(summarize(&observed(&first, &pods, &[], &[])).attempt, Some(1));
    // Not reported yet (a new vcjob without status): unknown, not 1.
    assert_eq!(summarize(&observed(&job(None, ""), &[], &[], &[])).attempt, None);
}

#[test]
fn aborted_is_cancelled_unless_evicted() {
    assert_eq!(job_state("Aborted", "", &[]), JobState::Cancelled);
    assert_eq!(job_state("Terminated", "PodEvicted", &[]), JobState::Preempted);
    assert_eq!(job_state("Restarting", "", &[]), JobState::Running);
    assert_eq!(job_state("Inqueue", "", &[]), JobState::Pending);
    assert_eq!(job_state("Bogus", "", &[]), JobState::Unknown);
}

#[test]
fn pending_reason_prefers_a_stuck_container() {
    let job = job(Some("Pending"), "");
    let pods = [pod(
        0,
        "Pending",
        json!({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"nope:1\""}}),
    )];
    let conditions = [GroupCondition {
        type_: "Unschedulable".into(),
        status: "True".into(),
        reason: None,
        message: Some("should not win".into()),
    }];
    let reason = pending_reason(&observed(&job, &pods, &conditions, &[]));
    assert_eq!(reason, "pod p-g-run-1-worker-0 cannot start: ImagePullBackOff: Back-off pulling image \"nope:1\"");
}

#[test]
fn pending_reason_quotes_the_unschedulable_condition() {
    let job = job(None, "");
    let conditions = [GroupCondition {
        type_: "Unschedulable".into(),
        status: "True".into(),
        reason: Some("NotEnoughResources".into()),
        message: Some("0/4 nodes are unavailable:\n 4 Insufficient nvidia.com/gpu.".into()),
    }];
    let status = summarize(&observed(&job, &[], &conditions, &[]));
    assert_eq!(status.state, JobState::Pending);
    assert_eq!(
        status.message.as_deref(),
        Some(
            "waiting for resources: the scheduler cannot place the whole gang: 0/4 nodes are unavailable: 4 Insufficient nvidia.com/gpu."
        )
    );
}

#[test]
fn pending_reason_falls_back_to_warning_events_then_counts() {
    let job = job(Some("Pending"), "");
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "e1"},
        "involvedObject": {"name": "p-g-run-1"},
        "type": "Warning", "reason": "FailedScheduling", "message": "queue  full",
        "lastTimestamp": "2026-11-21T10:00:00Z"
    }))
    .unwrap();
    let events = [event];
    assert_eq!(
        pending_reason(&observed(&job, &[], &[], &events)),
        "waiting: FailedScheduling on p-g-run-1: queue full"
    );
    assert_eq!(
        pending_reason(&observed(&job, &[], &[], &[])),
        "waiting for Volcano to admit the gang of 2 pods (no pods yet, PodGroup Pending)"
    );
}

fn event(kind: &str, type_: &str, reason: &str, message: &str, at: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("e-{at}")},
        "involvedObject": {"kind": kind, "name": "p-g-run-1-0f8e"},
        "type": type_, "reason": reason, "message": message, "lastTimestamp": at
    }))
    .unwrap()
}

#[test]
fn pending_reason_reads_the_enqueue_events_of_both_types() {
    // What Volcano 1.15 leaves for a job its enqueue action rejects: no pods, no condition, a
    // Normal event of the overcommit plugin and the scheduler cache's Warning one.
    let job = job(Some("Pending"), "");
    let events = [
        event(
            "PodGroup",
            "Normal",
            "Unschedulable",
            "resource in cluster is overused: overused nvidia.com/gpu",
            "2026-11-21T10:00:00Z",
        ),
        event(
            "PodGroup",
            "Warning",
            "Unschedulable",
            "0/0 tasks in gang unschedulable: pod group is not ready, 2 minAvailable",
            "2026-11-21T10:00:01Z",
        ),
    ];
    assert_eq!(
        pending_reason(&observed(&job, &[], &[], &events)),
        "waiting for queue default: resource in cluster is overused: overused nvidia.com/gpu"
    );
    let quota = [event(
        "PodGroup",
        "Normal",
        "Unschedulable",
        "queue resource quota insufficient: insufficient nvidia.com/gpu",
        "2026-11-21T10:00:00Z",
    )];
    assert!(
        pending_reason(&observed(&job, &[], &[], &quota))
            .ends_with("queue resource quota insufficient: insufficient nvidia.com/gpu")
    );
}

#[test]
fn a_failed_rank_is_reported_while_the_vcjob_still_runs() {
    let job = job(Some("Running"), "");
    let pods = [pod(0, "Running", json!({"running": {}})), pod(1, "Failed", json!({"terminated": {"exitCode": 3}}))];
    let status = summarize(&observed(&job, &pods, &[], &[]));
    assert_eq!(status.state, JobState::Running);
    assert_eq!(
        status.message.as_deref(),
        Some("rank 1 failed with exit code 3; 1/2 pods still running (vcjob phase Running)")
    );
    assert_eq!(status.ranks[1].exit_code, Some(3));
}

#[test]
fn a_job_terminated_by_its_pod_failed_policy_is_failed_with_the_rank_and_code() {
    let job = job(Some("Terminated"), "");
    let pods = [pod(1, "Failed", json!({"terminated": {"exitCode": 3}}))];
    let status = summarize(&observed(&job, &pods, &[], &[]));
    assert_eq!((status.state, status.exit_code), (JobState::Failed, Some(3)));
    assert_eq!(status.message.as_deref(), Some("rank 1 exited with code 3 (vcjob phase Terminated)"));
    assert_eq!(job_state("Terminating", "", &[]), JobState::Running, "pods are still being stopped");
}

#[test]
fn a_crash_looping_pod_is_named_although_volcano_counts_it_running() {
    let job = job(Some("Running"), "");
    let waiting = json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container=main pod=p-g-run-1-worker-1_ml(u)"}});
    let pods = [pod(0, "Running", json!({"running": {}})), pod(1, "Running", waiting.clone())];
    let status = summarize(&observed(&job, &pods, &[], &[]));
    assert_eq!(status.state, JobState::Running);
    assert_eq!(
        status.message.as_deref(),
        Some(
            "pod p-g-run-1-worker-1 cannot start: CrashLoopBackOff: back-off 10s restarting failed container=main pod=p-g-run-1-worker-1_ml(u); 1/2 pods running (vcjob phase Running)"
        )
    );
    let pending = job_with_pods_pending(waiting);
    assert!(pending.starts_with("pod p-g-run-1-worker-0 cannot start: CrashLoopBackOff"), "{pending}");
}

/// A rank's restarts are its pod's containers' `restartCount`, summed; init containers, which
/// `kubectl get pods` leaves out of RESTARTS, are left out.
#[test]
fn a_ranks_restarts_are_its_containers_restart_counts() {
    let job = job(Some("Running"), "");
    let mut twice: Pod = pod(0, "Running", json!({"running": {}}));
    let status = twice.status.as_mut().unwrap();
    status.container_statuses.as_mut().unwrap()[0].restart_count = 2;
    let sidecar = json!({"name": "side", "image": "img", "imageID": "", "ready": true, "restartCount": 1,
        "lastState": {"terminated": {"exitCode": 1}}, "state": {"running": {}}});
    status.container_statuses.as_mut().unwrap().push(serde_json::from_value(sidecar).unwrap());
    status.init_container_statuses = Some(vec![
        serde_json::from_value(
            json!({"name": "init", "image": "img", "imageID": "", "ready": false, "restartCount": 5}),
        )
        .unwrap(),
    ]);
    let fresh = pod(1, "Running", json!({"running": {}}));
    let mut unscheduled = pod(2, "Pending", json!({}));
    unscheduled.status.as_mut().unwrap().container_statuses = None;
    let pods = [twice, fresh, unscheduled];
    let status = summarize(&observed(&job, &pods, &[], &[]));
    let restarts: Vec<_> = status.ranks.iter().map(|r| r.restarts).collect();
    assert_eq!(restarts, [Some(3), Some(0), Some(0)]);
    let shown = serde_json::to_value(&status.ranks[0]).unwrap();
    assert_eq!(shown["restarts"], 3, "{shown}");
}

fn job_with_pods_pending(state: serde_json::Value) -> String {
    let job = job(Some("Pending"), "");
    let pods = [pod(0, "Running", state)];
    pending_reason(&observed(&job, &pods, &[], &[]))
}

/// `slim` keeps everything the summary and the pending reason read: the same answers for the
/// cut pods as for the whole ones, over pods in every state the summary tells apart.
#[test]
fn slim_pods_summarize_like_whole_ones() {
    let mut evicted = pod(2, "Failed", json!({"terminated": {"exitCode": 137}}));
    evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
    let unscheduled: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p-g-run-1-worker-4", "labels": {"a": "b"}},
        "spec": {"containers": [{"name": "main", "env": [{"name": "X", "value": "y"}]}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}
        ]}
    }))
    .unwrap();
    let stuck_init: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p-g-run-1-worker-5"},
        "status": {"phase": "Pending", "initContainerStatuses": [{
            "name": "init", "image": "img", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}
        }]}
    }))
    .unwrap();
    let mut restarted = pod(6, "Running", json!({"running": {}}));
    restarted.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].restart_count = 2;
    let pods = vec![
        pod(0, "Running", json!({"running": {"startedAt": "2026-11-27T10:00:00Z"}})),
        pod(1, "Failed", json!({"terminated": {"exitCode": 3, "reason": "Error"}})),
        evicted,
        pod(3, "Pending", json!({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}})),
        unscheduled,
        stuck_init,
        restarted,
    ];
    let slimmed: Vec<Pod> = pods.iter().cloned().map(super::slim).collect();
    assert!(serde_json::to_string(&slimmed).unwrap().len() < serde_json::to_string(&pods).unwrap().len());
    for (phase, reason) in [("Running", ""), ("Failed", "PodFailed"), ("Terminated", ""), ("Pending", "")] {
        let job = job(Some(phase), reason);
        for n in 0..=pods.len() {
            let whole = summarize(&observed(&job, &pods[..n], &[], &[]));
            let cut = summarize(&observed(&job, &slimmed[..n], &[], &[]));
            assert_eq!(format!("{whole:?}"), format!("{cut:?}"), "{phase} with {n} pods");
            let whole = pending_reason(&observed(&job, &pods[n..], &[], &[]));
            assert_eq!(whole, pending_reason(&observed(&job, &slimmed[n..], &[], &[])), "{phase} from pod {n}");
        }
    }
}
