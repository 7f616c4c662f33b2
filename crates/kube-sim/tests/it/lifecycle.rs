//! The job controller's lifecycle as Volcano 1.15 runs it: a failed rank with no policy, and
//! `PodFailed` with `TerminateJob`, `AbortJob` and `RestartJob` (retries counted against
//! `maxRetry`); pod termination with PID 1 semantics and grace periods.

use std::path::Path;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use theseus_kube_sim::{NodeConfig, SimConfig};

use crate::support::{eventually, phase, podgroup_resource, start, vcjob, vcjobs, wait_phase};

fn two_nodes() -> SimConfig {
    SimConfig { nodes: vec![NodeConfig::new("n0", 4), NodeConfig::new("n1", 4)], ..SimConfig::default() }
}

/// Rank 1 exits 3 at once; rank 0 runs until `go` exists, then exits 0.
fn one_rank_fails(name: &str, go: &Path, policies: Value) -> DynamicObject {
    let script = format!(
        "if [ \"$VC_TASK_INDEX\" = 1 ]; then exit 3; fi; while [ ! -e '{}' ]; do sleep 0.1; done",
        go.display()
    );
    let mut job = vcjob(name, 2, 1, "img", &["sh", "-c", &script]);
    job.data["spec"]["policies"] = policies;
    job
}

fn conditions(job: &DynamicObject) -> Vec<String> {
    job.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["status"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn failed_rank_without_a_policy_leaves_the_job_running_until_every_pod_ends() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let ctx = start(two_nodes()).await;
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &one_rank_fails("nopolicy", &go, json!([]))).await.unwrap();
    let job = eventually("the failed rank counted", 20, || async {
        let job = jobs.get("nopolicy").await.ok()?;
        (job.data.pointer("/status/failed") == Some(&json!(1))).then_some(job)
    })
    .await;
    // Volcano's running state only syncs: succeeded + failed (1) is not the replicas (2).
    assert_eq!(phase(&job), "Running");
    assert_eq!(job.data["status"]["running"], 1);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let rank0 = pods.get("nopolicy-worker-0").await.unwrap();
    assert_eq!(rank0.status.unwrap().phase.as_deref(), Some("Running"), "the other rank is not removed");

    std::fs::write(&go, "").unwrap();
    let done = wait_phase(&jobs, "nopolicy", "Failed").await;
    assert_eq!(done.data["status"]["succeeded"], 1);
    assert_eq!(done.data["status"]["failed"], 1);
}

#[tokio::test]
async fn pod_failed_terminate_job_ends_the_job_at_once_and_keeps_the_failed_pod() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = start(two_nodes()).await;
    let jobs = vcjobs(&ctx.client, "default");
    let policies = json!([{"event": "PodFailed", "action": "TerminateJob"}]);
    jobs.create(&PostParams::default(), &one_rank_fails("term", &dir.path().join("never"), policies)).await.unwrap();
    let uid = eventually("the job's uid", 20, || async { jobs.get("term").await.ok()?.metadata.uid }).await;
    let done = wait_phase(&jobs, "term", "Terminated").await;
    let seen = conditions(&done);
    assert!(seen.contains(&"Terminating".to_owned()), "Terminating before Terminated: {seen:?}");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    eventually("the running rank to be removed", 20, || async {
        pods.get("term-worker-0").await.is_err().then_some(())
    })
    .await;
    let failed = pods.get("term-worker-1").await.expect("a failed pod is retained (PodRetainPhaseSoft)");
    let status = failed.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let code = status.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap().exit_code;
    assert_eq!(code, 3);
    // killJob deletes the PodGroup, which frees the gang's place in its queue.
    let pgs = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), "default", &podgroup_resource());
    eventually("the podgroup to be deleted", 20, || async {
        pgs.get(&format!("term-{uid}")).await.is_err().then_some(())
    })
    .await;
}

#[tokio::test]
async fn pod_failed_abort_job_aborts() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = start(two_nodes()).await;
    let jobs = vcjobs(&ctx.client, "default");
    let policies = json!([{"event": "PodFailed", "action": "AbortJob"}]);
    jobs.create(&PostParams::default(), &one_rank_fails("abort", &dir.path().join("never"), policies)).await.unwrap();
    let done = wait_phase(&jobs, "abort", "Aborted").await;
    assert!(conditions(&done).contains(&"Aborting".to_owned()), "{:?}", conditions(&done));
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    eventually("the running rank to be removed", 20, || async {
        pods.get("abort-worker-0").await.is_err().then_some(())
    })
    .await;
}

#[tokio::test]
async fn pod_failed_restart_job_restarts_until_max_retry_as_volcano_counts() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let ctx = start(SimConfig::default()).await;
    let jobs = vcjobs(&ctx.client, "default");
    let script = format!("echo run >> '{}'; exit 1", runs.display());
    let mut job = vcjob("retry", 1, 1, "img", &["sh", "-c", &script]);
    job.data["spec"]["maxRetry"] = json!(2);
    job.data["spec"]["policies"] = json!([{"event": "PodFailed", "action": "RestartJob"}]);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let failed = wait_phase(&jobs, "retry", "Failed").await;
    // RestartJob counts a retry when it kills the job; the Restarting state fails the job once
    // `retryCount >= maxRetry` (pkg/controllers/job/state/restarting.go): 2 runs, not 3.
    assert_eq!(failed.data["status"]["retryCount"], 2);
    assert!(conditions(&failed).contains(&"Restarting".to_owned()));
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 2);
    // On the last retry the failed pod is retained (killPods in job_controller_actions.go).
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let pod = pods.get("retry-worker-0").await.unwrap();
    assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Failed"));
}

/// Deletes pod `name` and returns the exit code its container reported last (from the watch's
/// DELETED event): 137 means SIGKILL after the grace period.
async fn delete_and_get_exit_code(pods: &Api<Pod>, name: &str) -> i32 {
    let mut stream =
        pods.watch(&WatchParams::default().fields(&format!("metadata.name={name}")), "0").await.unwrap().boxed();
    pods.delete(name, &DeleteParams::default()).await.unwrap();
    while let Some(event) = stream.try_next().await.unwrap() {
        if let WatchEvent::Deleted(pod) = event {
            let state = pod.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap();
            return state.terminated.expect("a terminated container").exit_code;
        }
    }
    panic!("the watch of {name} ended before the pod was deleted");
}

fn plain_pod(name: &str, script: &str, grace: i64) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}],
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn pid_1_without_a_sigterm_handler_waits_for_sigkill_and_a_trap_exits_at_once() {
    let ctx = start(SimConfig::default()).await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    // No handler: PID 1 of a container ignores SIGTERM (pid_namespaces(7)); SIGKILL ends it.
    pods.create(&PostParams::default(), &plain_pod("stubborn", "echo up; sleep 1000", 1)).await.unwrap();
    // A trap: the shell runs its handler as soon as the backgrounded sleep is waited for.
    let trapped = "trap 'exit 0' TERM; echo up; sleep 1000 & wait";
    pods.create(&PostParams::default(), &plain_pod("trapped", trapped, 30)).await.unwrap();
    for name in ["stubborn", "trapped"] {
        eventually("the pod to run", 20, || async {
            let pod = pods.get(name).await.ok()?;
            (pod.status?.phase.as_deref() == Some("Running")).then_some(())
        })
        .await;
        eventually("its shell to be up", 20, || async {
            pods.logs(name, &Default::default()).await.ok().filter(|l| l.contains("up")).map(|_| ())
        })
        .await;
    }
    assert_eq!(
        delete_and_get_exit_code(&pods, "stubborn").await,
        137,
        "SIGTERM ignored, SIGKILL after the grace period"
    );
    assert_eq!(delete_and_get_exit_code(&pods, "trapped").await, 0, "the trap ran on SIGTERM");
    assert!(pods.list(&ListParams::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn a_delete_with_grace_period_zero_kills_at_once() {
    let config = SimConfig { max_grace_period: std::time::Duration::from_secs(600), ..SimConfig::default() };
    let ctx = start(config).await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    pods.create(&PostParams::default(), &plain_pod("now", "echo up; sleep 1000", 600)).await.unwrap();
    eventually("its shell to be up", 20, || async {
        pods.logs("now", &Default::default()).await.ok().filter(|l| l.contains("up")).map(|_| ())
    })
    .await;
    let mut stream = pods.watch(&WatchParams::default().fields("metadata.name=now"), "0").await.unwrap().boxed();
    pods.delete("now", &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await.unwrap();
    // Without the delete's grace period the pod would wait 600 s for SIGKILL.
    let deleted = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(event) = stream.try_next().await.unwrap() {
            if let WatchEvent::Deleted(pod) = event {
                return pod;
            }
        }
        panic!("the watch ended before the pod was deleted");
    })
    .await
    .expect("the pod is deleted without waiting for its own grace period");
    assert_eq!(deleted.metadata.deletion_grace_period_seconds, Some(0));
    let state = deleted.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap();
    assert_eq!(state.terminated.unwrap().exit_code, 137);
}

#[tokio::test]
async fn task_failed_fires_when_restarts_in_place_reach_the_task_max_retry() {
    let ctx = start(SimConfig::default()).await;
    let jobs = vcjobs(&ctx.client, "default");
    let mut job = vcjob("flaky", 1, 1, "img", &["sh", "-c", "exit 4"]);
    let task = &mut job.data["spec"]["tasks"][0];
    task["maxRetry"] = json!(1);
    task["template"]["spec"]["restartPolicy"] = json!("OnFailure");
    task["policies"] = json!([{"event": "TaskFailed", "action": "TerminateJob"}]);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    // The kubelet restarts the container after its first 10 s back-off; that restart reaches
    // maxRetry 1 (TaskFailed in pkg/controllers/cache/cache.go).
    let done = eventually("Terminated by TaskFailed", 40, || async {
        let job = jobs.get("flaky").await.ok()?;
        (phase(&job) == "Terminated").then_some(job)
    })
    .await;
    assert!(conditions(&done).contains(&"Terminating".to_owned()));
}

/// A container restarted in place counts it as the kubelet does: while it waits out its back-off
/// it is `CrashLoopBackOff` with the exit in `lastState` and the count unchanged; the instance
/// started after the back-off carries the count + 1 (the kubelet's status takes `restartCount`
/// from the newest container instance, `convertContainerStatus` in pkg/kubelet/kubelet_pods.go,
/// read, not run) and keeps the last exit in `lastState`.
#[tokio::test]
async fn a_restarted_container_counts_its_restarts_as_the_kubelet_does() {
    let ctx = start(SimConfig::default()).await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let dir = tempfile::tempdir().unwrap();
    let once = dir.path().join("once");
    let script = format!("if [ -e '{0}' ]; then echo again; sleep 1000; else touch '{0}'; exit 4; fi", once.display());
    let mut pod = plain_pod("flaky", &script, 1);
    pod.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = |pod: Pod| pod.status?.container_statuses?.into_iter().next();
    let waiting = eventually("the back-off", 20, || async {
        let cs = status(pods.get("flaky").await.ok()?)?;
        cs.state.as_ref()?.waiting.is_some().then_some(cs)
    })
    .await;
    assert_eq!(waiting.state.unwrap().waiting.unwrap().reason.as_deref(), Some("CrashLoopBackOff"));
    assert_eq!(waiting.restart_count, 0, "not restarted yet");
    assert_eq!(waiting.last_state.unwrap().terminated.unwrap().exit_code, 4);
    let running = eventually("the restart after the 10 s back-off", 30, || async {
        let cs = status(pods.get("flaky").await.ok()?)?;
        cs.state.as_ref()?.running.is_some().then_some(cs)
    })
    .await;
    assert_eq!(running.restart_count, 1);
    assert_eq!(running.last_state.unwrap().terminated.unwrap().exit_code, 4, "the last exit is kept");
    pods.delete("flaky", &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await.unwrap();
}
