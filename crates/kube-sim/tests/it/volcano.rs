//! The Volcano controller and the pod runtime: a gang job to Completed with logs, an oversized
//! gang, queue capability, image pull failures, secrets, failures and pod termination.

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, LogParams, PostParams};
use serde_json::{Value, json};
use theseus_kube_sim::{NodeConfig, SimConfig};

use crate::support::{
    events_about, eventually, phase, podgroup_of, podgroup_resource, queue_resource, start, vcjob, vcjobs, wait_phase,
};

fn two_nodes() -> SimConfig {
    SimConfig { nodes: vec![NodeConfig::new("n0", 4), NodeConfig::new("n1", 4)], ..SimConfig::default() }
}

#[tokio::test]
async fn gang_job_runs_to_completion_with_volcano_env_and_logs() {
    let ctx = start(two_nodes()).await;
    let jobs = vcjobs(&ctx.client, "default");
    // The hosts' names resolve in the pods (to 127.0.0.1, where every pod is), as the job's
    // Service and its pods' `hostname.subdomain` do through cluster DNS.
    let script = "echo $VC_TASK_INDEX $VC_WORKER_HOSTS $VC_WORKER_NUM; grep -c . etc/volcano/worker.host; \
                  getent hosts train-worker-1.train train train.default.svc.cluster.local | cut -d' ' -f1 | sort | uniq -c; \
                  cat /proc/sys/kernel/hostname";
    jobs.create(&PostParams::default(), &vcjob("train", 2, 4, "img", &["sh", "-c", script])).await.unwrap();
    let done = wait_phase(&jobs, "train", "Completed").await;
    // TaskCompleted -> CompleteJob ends the job through killJob, which counts only what it
    // deletes (job_controller_actions.go): the succeeded pods are retained, not counted.
    assert_eq!(done.data["status"]["succeeded"], 0);

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let listed = pods.list(&ListParams::default().labels("volcano.sh/job-name=train")).await.unwrap();
    let mut nodes = Vec::new();
    for (i, pod) in listed.items.iter().enumerate() {
        let meta = &pod.metadata;
        assert_eq!(meta.name.as_deref(), Some(format!("train-worker-{i}").as_str()));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["volcano.sh/task-spec"], "worker");
        assert_eq!(labels["volcano.sh/job-namespace"], "default");
        let uid = done.metadata.uid.as_deref().unwrap();
        assert_eq!(meta.annotations.as_ref().unwrap()["scheduling.k8s.io/group-name"], format!("train-{uid}"));
        assert_eq!(meta.owner_references.as_ref().unwrap()[0].kind, "Job");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.subdomain.as_deref(), Some("train"));
        nodes.push(spec.node_name.clone().unwrap());
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        assert_eq!(status.pod_ip.as_deref(), Some("127.0.0.1"));
        let terminated =
            status.container_statuses.as_ref().unwrap()[0].state.as_ref().unwrap().terminated.clone().unwrap();
        assert_eq!(terminated.exit_code, 0);

        let mut lines = pods.log_stream(meta.name.as_deref().unwrap(), &LogParams::default()).await.unwrap().lines();
        let first = lines.next().await.unwrap().unwrap();
        assert_eq!(first, format!("{i} train-worker-0.train,train-worker-1.train 2"));
        assert_eq!(lines.next().await.unwrap().unwrap().trim(), "2");
        assert_eq!(lines.next().await.unwrap().unwrap().trim(), "3 127.0.0.1", "pod {i} resolves the names");
        assert_eq!(lines.next().await.unwrap().unwrap(), format!("train-worker-{i}"), "the pod's own host name");
    }
    nodes.sort();
    assert_eq!(nodes, ["n0", "n1"], "4 GPUs each: one pod per node");

    // CompleteJob ends the job through killJob, which deletes the PodGroup.
    let pgs = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), "default", &podgroup_resource());
    let uid = done.metadata.uid.as_deref().unwrap();
    assert!(pgs.get(&format!("train-{uid}")).await.is_err(), "the PodGroup is deleted with the job's end");
    let cm = Api::<ConfigMap>::namespaced(ctx.client.clone(), "default").get("train-svc").await.unwrap();
    assert_eq!(cm.data.unwrap()["worker.host"], "train-worker-0.train\ntrain-worker-1.train");
    let svc = Api::<Service>::namespaced(ctx.client.clone(), "default").get("train").await.unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    // The svc plugin's NetworkPolicy: only the job's pods reach its pods.
    let policies = Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(ctx.client.clone(), "default");
    let policy = policies.get("train").await.unwrap().spec.unwrap();
    let labels = policy.pod_selector.and_then(|s| s.match_labels).unwrap();
    assert_eq!(labels["volcano.sh/job-name"], "train");
    assert_eq!(policy.policy_types.unwrap(), ["Ingress"]);

    // `--disable-network-policy=true` (what theseus passes) creates none.
    let mut open = vcjob("open", 1, 0, "img", &["true"]);
    open.data["spec"]["plugins"]["svc"] = json!(["--disable-network-policy=true"]);
    jobs.create(&PostParams::default(), &open).await.unwrap();
    eventually("the open job's service", 20, || async {
        Api::<Service>::namespaced(ctx.client.clone(), "default").get("open").await.ok()
    })
    .await;
    assert!(policies.get("open").await.is_err(), "no NetworkPolicy with --disable-network-policy=true");
    jobs.delete("open", &DeleteParams::background()).await.unwrap();

    // Deleting the job collects its pods, podgroup, configmap and service.
    jobs.delete("train", &DeleteParams::background()).await.unwrap();
    // The `open` job's pod may still be stopping (its finalizer goes once its processes are
    // gone), as a terminating pod does on a node.
    eventually("the pods to be gone", 20, || async {
        pods.list(&ListParams::default()).await.unwrap().items.is_empty().then_some(())
    })
    .await;
    assert!(pgs.list(&ListParams::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn followed_logs_stream_until_the_pod_ends() {
    let ctx = start(SimConfig::default()).await;
    let jobs = vcjobs(&ctx.client, "default");
    let script = "for i in 1 2 3; do echo line$i; sleep 0.2; done";
    jobs.create(&PostParams::default(), &vcjob("follow", 1, 1, "img", &["sh", "-c", script])).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let stream = eventually("a log stream", 20, || async {
        pods.log_stream("follow-worker-0", &LogParams { follow: true, ..LogParams::default() }).await.ok()
    })
    .await;
    let mut lines = Vec::new();
    let mut stream = stream.lines();
    while let Some(line) = stream.next().await {
        lines.push(line.unwrap());
    }
    assert_eq!(lines, ["line1", "line2", "line3"]);
    let tail = pods.logs("follow-worker-0", &LogParams { tail_lines: Some(1), ..LogParams::default() }).await.unwrap();
    assert_eq!(tail, "line3\n");
}

#[tokio::test]
async fn job_larger_than_the_cluster_is_not_enqueued_and_says_why_in_normal_events() {
    let ctx = start(two_nodes()).await;
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &vcjob("big", 2, 8, "img", &["true"])).await.unwrap();
    let pg = podgroup_of(&ctx, "big").await;
    let pg_name = pg.metadata.name.clone().unwrap();
    let overused = eventually("the overcommit plugin's event", 20, || async {
        let events = events_about(&ctx, &pg_name).await;
        events.into_iter().find(|(_, _, m)| m.starts_with("resource in cluster is overused"))
    })
    .await;
    assert_eq!(
        overused,
        ("Normal".into(), "Unschedulable".into(), "resource in cluster is overused: overused nvidia.com/gpu".into())
    );
    let events = events_about(&ctx, &pg_name).await;
    assert!(
        events.iter().any(|(t, r, m)| t == "Warning"
            && r == "Unschedulable"
            && m.starts_with("0/0 tasks in gang unschedulable")),
        "{events:?}"
    );
    let pg = podgroup_of(&ctx, "big").await;
    assert_eq!(pg.data["status"]["phase"], "Pending");
    assert!(pg.data.pointer("/status/conditions").and_then(Value::as_array).is_none_or(Vec::is_empty), "{pg:?}");
    assert_eq!(phase(&jobs.get("big").await.unwrap()), "Pending");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    assert!(pods.list(&ListParams::default()).await.unwrap().items.is_empty(), "no pods for a job not enqueued");
}

#[tokio::test]
async fn enqueued_gang_that_cannot_be_placed_gets_the_unschedulable_condition() {
    // 5 GPUs fit the cluster's 8 (and its overcommitted 9.6) but no node of 4.
    let ctx = start(two_nodes()).await;
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &vcjob("wide", 1, 5, "img", &["true"])).await.unwrap();
    let pg = eventually("an unschedulable podgroup", 20, || async {
        let pg = podgroup_of(&ctx, "wide").await;
        (pg.data["status"]["conditions"][0]["type"] == "Unschedulable").then_some(pg)
    })
    .await;
    let cond = &pg.data["status"]["conditions"][0];
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "NotEnoughResources");
    let message = cond["message"].as_str().unwrap();
    assert!(message.starts_with("1/1 tasks in gang unschedulable: pod group is not ready"), "{message}");
    assert!(message.contains("0/2 nodes are unavailable: 2 Insufficient nvidia.com/gpu."), "{message}");
    assert_eq!(pg.data["status"]["phase"], "Inqueue");
    assert_eq!(pg.data["spec"]["minMember"], 1);
    assert_eq!(pg.data["spec"]["minResources"]["nvidia.com/gpu"], "5");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let pod = eventually("the unplaced pod", 20, || async { pods.get("wide-worker-0").await.ok() }).await;
    assert!(pod.spec.unwrap().node_name.is_none());
    assert_eq!(pod.metadata.annotations.unwrap()["scheduling.k8s.io/group-name"], pg.metadata.name.unwrap());
}

#[tokio::test]
async fn queue_capability_caps_admission() {
    let ctx = start(two_nodes()).await;
    let queues = Api::<DynamicObject>::all_with(ctx.client.clone(), &queue_resource());
    let q: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": "small"}, "spec": {"capability": {"nvidia.com/gpu": "2"}},
    }))
    .unwrap();
    queues.create(&PostParams::default(), &q).await.unwrap();
    let jobs = vcjobs(&ctx.client, "default");
    let mut job = vcjob("capped", 1, 4, "img", &["sleep", "30"]);
    job.data["spec"]["queue"] = json!("small");
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let pg_name = podgroup_of(&ctx, "capped").await.metadata.name.unwrap();
    let held = eventually("the proportion plugin's event", 20, || async {
        let events = events_about(&ctx, &pg_name).await;
        events.into_iter().find(|(_, _, m)| m.starts_with("queue resource quota insufficient"))
    })
    .await;
    assert_eq!(
        held,
        (
            "Normal".into(),
            "Unschedulable".into(),
            "queue resource quota insufficient: insufficient nvidia.com/gpu".into()
        )
    );
    assert_eq!(phase(&jobs.get("capped").await.unwrap()), "Pending");

    // A job that fits runs, and the default queue reports what it holds.
    jobs.create(&PostParams::default(), &vcjob("fits", 1, 3, "img", &["sleep", "30"])).await.unwrap();
    wait_phase(&jobs, "fits", "Running").await;
    let allocated = eventually("queue usage", 20, || async {
        let q = queues.get("default").await.ok()?;
        let gpus = q.data.pointer("/status/allocated/nvidia.com~1gpu")?.as_str()?.to_owned();
        (gpus == "3").then_some(gpus)
    })
    .await;
    assert_eq!(allocated, "3");
}

#[tokio::test]
async fn unpullable_image_backs_off_with_an_event() {
    let ctx = start(SimConfig::default()).await;
    ctx.sim.faults().make_image_unpullable("ghcr.io/missing:1");
    let jobs = vcjobs(&ctx.client, "default");
    jobs.create(&PostParams::default(), &vcjob("pull", 1, 1, "ghcr.io/missing:1", &["true"])).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let waiting = eventually("ImagePullBackOff", 20, || async {
        let pod = pods.get("pull-worker-0").await.ok()?;
        pod.status?.container_statuses?.first()?.state.clone()?.waiting
    })
    .await;
    assert_eq!(waiting.reason.as_deref(), Some("ImagePullBackOff"));
    let events: Api<Event> = Api::namespaced(ctx.client.clone(), "default");
    let listed = events.list(&ListParams::default().fields("involvedObject.name=pull-worker-0")).await.unwrap();
    assert!(
        listed
            .items
            .iter()
            .any(|e| e.message.as_deref().is_some_and(|m| m.starts_with("Failed to pull image \"ghcr.io/missing:1\"")))
    );
    assert_eq!(pods.get("pull-worker-0").await.unwrap().status.unwrap().phase.as_deref(), Some("Pending"));
    // Once the image can be pulled, the pod runs.
    ctx.sim.faults().make_image_pullable("ghcr.io/missing:1");
    wait_phase(&jobs, "pull", "Completed").await;
}

#[tokio::test]
async fn secret_env_waits_for_the_secret() {
    let ctx = start(SimConfig::default()).await;
    let jobs = vcjobs(&ctx.client, "default");
    let mut job = vcjob("sec", 1, 1, "img", &["sh", "-c", "echo token=$TOKEN"]);
    job.data["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let waiting = eventually("CreateContainerConfigError", 20, || async {
        pods.get("sec-worker-0").await.ok()?.status?.container_statuses?.first()?.state.clone()?.waiting
    })
    .await;
    assert_eq!(waiting.reason.as_deref(), Some("CreateContainerConfigError"));
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}})).unwrap();
    let stored =
        Api::<Secret>::namespaced(ctx.client.clone(), "default").create(&PostParams::default(), &secret).await.unwrap();
    assert!(stored.string_data.is_none() && stored.data.is_some(), "stringData is folded into data");
    wait_phase(&jobs, "sec", "Completed").await;
    assert_eq!(pods.logs("sec-worker-0", &LogParams::default()).await.unwrap(), "token=s3cret\n");
}

/// A one-container pod running `command` in `mount`, the PVC `shared` mounted there.
fn pod_on_the_pvc(name: &str, mount: &str, command: &[&str]) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}],
            "containers": [{
                "name": "main", "image": "busybox", "command": command,
                "workingDir": mount, "volumeMounts": [{"name": "data", "mountPath": mount}],
            }],
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn deleting_a_pod_stops_its_process_group() {
    let pvc_dir = tempfile::tempdir().unwrap();
    let config = SimConfig { max_grace_period: std::time::Duration::from_secs(2), ..SimConfig::default() };
    let ctx = start(config).await;
    let mount = pvc_dir.path().to_str().unwrap().to_owned();
    let pod = pod_on_the_pvc(
        "sleeper",
        &mount,
        &["sh", "-c", "sleep 1000 & echo $! > child.pid; echo $$ > leader.pid; wait"],
    );
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let child_pid = eventually("the pod's child pid in the PVC dir", 20, || async {
        let text = std::fs::read_to_string(pvc_dir.path().join("child.pid")).ok()?;
        text.trim().parse::<u32>().ok()
    })
    .await;
    assert!(std::path::Path::new(&format!("/proc/{child_pid}")).exists());
    assert_eq!(pods.get("sleeper").await.unwrap().status.unwrap().phase.as_deref(), Some("Running"));
    pods.delete("sleeper", &DeleteParams::default()).await.unwrap();
    eventually("the pod's process group to be gone", 20, || async {
        let status = std::fs::read_to_string(format!("/proc/{child_pid}/stat")).ok();
        // Gone, or a zombie waiting for its (killed) parent's reaper.
        status.is_none_or(|s| s.split_whitespace().nth(2) == Some("Z")).then_some(())
    })
    .await;
}

/// A container ends with every process in it, as a PID namespace does: a child that made a
/// process group of its own (a shell's job control, as theseus's bootstrap uses) is gone by the
/// time the deleted pod is gone from the API.
#[tokio::test]
async fn a_deleted_pod_is_gone_only_with_the_processes_that_left_its_group() {
    let pvc_dir = tempfile::tempdir().unwrap();
    let config = SimConfig { max_grace_period: std::time::Duration::from_secs(1), ..SimConfig::default() };
    let ctx = start(config).await;
    let mount = pvc_dir.path().to_str().unwrap().to_owned();
    let pod = pod_on_the_pvc("grouped", &mount, &["bash", "-c", "set -m; sleep 1000 & echo $! > child.pid; wait"]);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let child_pid = eventually("the pod's child pid in the PVC dir", 20, || async {
        let text = std::fs::read_to_string(pvc_dir.path().join("child.pid")).ok()?;
        text.trim().parse::<u32>().ok()
    })
    .await;
    let stat = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    let group = |s: &str| s.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(2)).map(str::to_owned);
    let child_group = stat(child_pid).as_deref().and_then(group);
    assert_eq!(child_group, Some(child_pid.to_string()), "the child leads a process group of its own");
    pods.delete("grouped", &DeleteParams::default()).await.unwrap();
    eventually("the pod to be gone from the API", 30, || async {
        pods.get_opt("grouped").await.unwrap().is_none().then_some(())
    })
    .await;
    let left = stat(child_pid);
    let gone =
        left.as_deref().is_none_or(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"));
    if !gone {
        // Started by this test's pod: stop it by its PID before failing.
        let _ = std::process::Command::new("kill").arg("-KILL").arg(child_pid.to_string()).status();
    }
    assert!(gone, "the pod is gone but its process {child_pid} still runs: {left:?}");
}

#[tokio::test]
async fn a_container_that_keeps_failing_under_its_restart_policy_crash_loops() {
    let ctx = start(SimConfig::default()).await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "crash"},
        "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "exit 2"]}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = eventually("CrashLoopBackOff", 20, || async {
        let status = pods.get("crash").await.ok()?.status?;
        let waiting = status.container_statuses.as_ref()?.first()?.state.clone()?.waiting?;
        (waiting.reason.as_deref() == Some("CrashLoopBackOff")).then_some(status)
    })
    .await;
    let container = &status.container_statuses.unwrap()[0];
    let message = container.state.clone().unwrap().waiting.unwrap().message.unwrap();
    assert!(message.starts_with("back-off 10s restarting failed container=main pod=crash_default("), "{message}");
    assert_eq!(container.last_state.clone().unwrap().terminated.unwrap().exit_code, 2);
    assert_eq!(status.phase.as_deref(), Some("Running"), "a restarting pod is not Failed");
}

#[tokio::test]
async fn a_missing_pvc_leaves_the_gang_unschedulable_with_the_scheduler_wording() {
    let config = SimConfig { missing_pvcs: ["gone".to_owned()].into(), ..SimConfig::default() };
    let ctx = start(config).await;
    let jobs = vcjobs(&ctx.client, "default");
    let mut job = vcjob("nopvc", 1, 1, "img", &["true"]);
    let spec = &mut job.data["spec"]["tasks"][0]["template"]["spec"];
    spec["volumes"] = json!([{"name": "ws", "persistentVolumeClaim": {"claimName": "gone"}}]);
    spec["containers"][0]["volumeMounts"] = json!([{"name": "ws", "mountPath": "/tmp/theseus-sim-never"}]);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let condition = eventually("PodScheduled=False", 20, || async {
        let conds = pods.get("nopvc-worker-0").await.ok()?.status?.conditions?;
        conds.into_iter().find(|c| c.type_ == "PodScheduled" && c.status == "False")
    })
    .await;
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(condition.message.as_deref(), Some("persistentvolumeclaim \"gone\" not found"));
    let events = events_about(&ctx, "nopvc-worker-0").await;
    assert!(
        events.iter().any(|(t, r, m)| t == "Warning"
            && r == "FailedScheduling"
            && m == "persistentvolumeclaim \"gone\" not found"),
        "{events:?}"
    );
}

/// `vcctl queue operate --action close|open` as the Command it creates.
fn queue_command(queue: &str, action: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
        "metadata": {"generateName": format!("{queue}-{}-", action.to_lowercase())},
        "action": action,
        "target": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "name": queue, "uid": ""},
    }))
    .unwrap()
}

#[tokio::test]
async fn commands_close_a_queue_through_closing_and_open_it_again() {
    let ctx = start(two_nodes()).await;
    let queues = Api::<DynamicObject>::all_with(ctx.client.clone(), &queue_resource());
    let commands = Api::<DynamicObject>::namespaced_with(
        ctx.client.clone(),
        "default",
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("bus.volcano.sh", "v1alpha1", "Command"),
            "commands",
        ),
    );
    let q: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "team"}, "spec": {},
    }))
    .unwrap();
    queues.create(&PostParams::default(), &q).await.unwrap();
    let state = |name: &'static str| {
        let queues = queues.clone();
        async move { queues.get(name).await.unwrap().data["status"]["state"].as_str().unwrap_or("").to_owned() }
    };
    assert_eq!(state("team").await, "Open", "a new queue is opened");
    let jobs = vcjobs(&ctx.client, "default");
    let mut job = vcjob("inside", 1, 1, "img", &["sleep", "30"]);
    job.data["spec"]["queue"] = json!("team");
    jobs.create(&PostParams::default(), &job).await.unwrap();
    wait_phase(&jobs, "inside", "Running").await;

    // Closing while a PodGroup remains; no new job is admitted meanwhile.
    commands.create(&PostParams::default(), &queue_command("team", "CloseQueue")).await.unwrap();
    eventually("Closing", 20, || async { (state("team").await == "Closing").then_some(()) }).await;
    let mut late = vcjob("late", 1, 1, "img", &["true"]);
    late.data["spec"]["queue"] = json!("team");
    let err = jobs.create(&PostParams::default(), &late).await.unwrap_err();
    assert!(err.to_string().contains("queue `team` status is `Closing`"), "{err}");
    assert!(commands.list(&ListParams::default()).await.unwrap().items.is_empty(), "a handled command is deleted");

    jobs.delete("inside", &DeleteParams::background()).await.unwrap();
    eventually("Closed", 30, || async { (state("team").await == "Closed").then_some(()) }).await;
    commands.create(&PostParams::default(), &queue_command("team", "OpenQueue")).await.unwrap();
    eventually("Open", 20, || async { (state("team").await == "Open").then_some(()) }).await;
    jobs.create(&PostParams::default(), &late).await.unwrap();
}

#[tokio::test]
async fn the_ssh_plugin_makes_a_key_secret_and_mounts_it() {
    let ctx = start(two_nodes()).await;
    let jobs = vcjobs(&ctx.client, "default");
    let mut job = vcjob("mpi", 2, 0, "img", &["sleep", "30"]);
    job.data["spec"]["plugins"] = json!({"ssh": [], "svc": ["--disable-network-policy=true"]});
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), "default");
    let secret = eventually("the ssh Secret", 20, || async { secrets.get("mpi-ssh").await.ok() }).await;
    let data = secret.data.unwrap();
    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert!(text("id_rsa").starts_with("-----BEGIN RSA PRIVATE KEY-----"), "{}", text("id_rsa"));
    assert!(text("id_rsa.pub").starts_with("ssh-rsa "));
    assert_eq!(
        text("config"),
        "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\nHost mpi-worker-0\n  HostName mpi-worker-0.mpi\n\
         Host mpi-worker-1\n  HostName mpi-worker-1.mpi\n"
    );
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), "default");
    let pod = eventually("a pod", 20, || async { pods.get("mpi-worker-0").await.ok() }).await;
    let spec = pod.spec.unwrap();
    let mount =
        spec.containers[0].volume_mounts.as_ref().unwrap().iter().find(|m| m.name == "mpi-ssh").cloned().unwrap();
    assert_eq!((mount.mount_path.as_str(), mount.sub_path.as_deref()), ("/root/.ssh", Some(".ssh")));
    let volume = spec.volumes.unwrap().into_iter().find(|v| v.name == "mpi-ssh").unwrap();
    let items = volume.secret.unwrap().items.unwrap();
    assert!(items.iter().any(|i| i.key == "id_rsa.pub" && i.path == ".ssh/authorized_keys"));
    // The runtime projects the items and shows the subPath: `<sandbox>/root/.ssh/...`.
    let root = ctx.sim.root().join("pods");
    let authorized = eventually("the projected keys", 20, || async {
        let sandbox = std::fs::read_dir(&root)
            .ok()?
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with("default_mpi-worker-0_"))?;
        std::fs::read_to_string(sandbox.path().join("root/.ssh/authorized_keys")).ok()
    })
    .await;
    assert_eq!(authorized, text("id_rsa.pub"));
}

/// A container whose one environment string is over Linux's 131,072 bytes (`MAX_ARG_STRLEN`)
/// does not start, as on a real node (the runtime's exec fails with E2BIG); one just under does.
#[tokio::test]
async fn a_container_with_an_env_string_over_the_kernel_limit_cannot_start() {
    let ctx = start(two_nodes()).await;
    let jobs = vcjobs(&ctx.client, "default");
    for (name, len) in [("fits", 131_072 - "BIG=".len() - 1), ("toobig", 131_072)] {
        let mut job = vcjob(name, 1, 0, "img", &["sh", "-c", "echo ${#BIG}"]);
        job.data["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "BIG", "value": "x".repeat(len)}]);
        jobs.create(&PostParams::default(), &job).await.unwrap();
    }
    wait_phase(&jobs, "fits", "Completed").await;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let terminated = eventually("the oversized pod to fail", 60, || async {
        let pod = pods.get("toobig-worker-0").await.ok()?;
        let state = pod.status?.container_statuses?.first()?.state.clone()?;
        state.terminated
    })
    .await;
    assert_eq!(terminated.reason.as_deref(), Some("StartError"));
    let message = terminated.message.unwrap_or_default();
    assert!(message.contains("Argument list too long"), "{message}");
}

/// Stopping the simulator stops every process its pods started, also those that left the
/// container's process group (a node's runtime kills the whole container).
#[tokio::test]
async fn stopping_the_simulator_stops_processes_that_left_their_pods_group() {
    let pvc_dir = tempfile::tempdir().unwrap();
    let ctx = start(SimConfig::default()).await;
    let mount = pvc_dir.path().to_str().unwrap().to_owned();
    let pod = pod_on_the_pvc("escaper", &mount, &["bash", "-c", "set -m; sleep 1000 & echo $! > child.pid; wait"]);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let child_pid = eventually("the pod's child pid in the PVC dir", 20, || async {
        let text = std::fs::read_to_string(pvc_dir.path().join("child.pid")).ok()?;
        text.trim().parse::<u32>().ok()
    })
    .await;
    drop(ctx);
    let left = std::fs::read_to_string(format!("/proc/{child_pid}/stat")).ok();
    let gone =
        left.as_deref().is_none_or(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"));
    if !gone {
        // Started by this test's pod: stop it by its PID before failing.
        let _ = std::process::Command::new("kill").arg("-KILL").arg(child_pid.to_string()).status();
    }
    assert!(gone, "the simulator stopped but its pod's process {child_pid} still runs: {left:?}");
}
