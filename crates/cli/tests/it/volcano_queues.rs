//! `plan` on a Volcano host shows how the request stands among the cluster's queues: the verdict
//! line, a row per queue, and the same in `--output json`.

use crate::volcano::SimWorld;
use crate::{TestContext, text};

#[test]
fn plan_shows_the_queues_and_the_verdict() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    world.sim.put_queue("team-b", "Open");
    let args = ["plan", "p", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "h100", "-n", "4"];
    let out = ctx.run(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("queues of k8s (nvidia.com/gpu; proportion"), "{stdout}");
    let header = stdout.lines().find(|l| l.starts_with("queue ")).expect("a table");
    for column in
        ["capability", "deserved", "guarantee", "allocated", "owed", "borrowed", "pending", "priority classes"]
    {
        assert!(header.contains(column), "{column}: {header}");
    }
    assert!(stdout.lines().any(|l| l.starts_with("default*")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("team-b")), "{stdout}");
    assert!(!stdout.contains("-0"), "no negative zeros: {stdout}");
    assert!(stdout.contains("queue:   fits now: queue default has room for 4 (deserved 4, allocated 0)"), "{stdout}");

    let out = ctx.run(&[&args[..], &["--output", "json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["queues"]["verdict"]["kind"], "fits_now", "{v}");
    assert_eq!(v["queues"]["queue"], "default", "{v}");
    assert_eq!(v["queues"]["queues"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["queues"]["unknown"], serde_json::json!([]), "{v}");
}

/// A kube client for the simulator that trusts its CA.
fn client(world: &SimWorld) -> kube::Client {
    let mut config = kube::Config::new(world.sim.url().parse().unwrap());
    config.root_cert = Some(vec![world.sim.ca_der()]);
    kube::Client::try_from(config).unwrap()
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `status NAME --output json` until `ready` accepts it.
fn status_until(ctx: &TestContext, name: &str, ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = ctx.run(&["status", name, "--output", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
        if ready(&v) {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "never got there: {v}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Volcano's evictor as v1.15.1 leaves it (`Scheduled` event of the bind, `Warning` `Evict` on
/// the pod, `Normal` `Evict` on the PodGroup, the pod deleted), and the preemptor's pod bound to
/// the freed node.
async fn preempt(client: kube::Client, job: &str) {
    use k8s_openapi::api::core::v1::{Event, Pod};
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use kube::Api;
    use serde_json::json;
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let class: PriorityClass = serde_json::from_value(json!({"metadata": {"name": "prod"}, "value": 1000})).unwrap();
    classes.create(&Default::default(), &class).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list =
        pods.list(&kube::api::ListParams::default().labels(&format!("volcano.sh/job-name={job}"))).await.unwrap();
    let pod = list.items.into_iter().next().expect("the job's pod");
    let (name, node) = (pod.metadata.name.clone().unwrap(), pod.spec.unwrap().node_name.unwrap());
    let group = pod.metadata.annotations.unwrap()["scheduling.k8s.io/group-name"].clone();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let scheduled = format!("Successfully assigned default/{name} to {node}");
    let evict = "Pod is evicted, because of preempt";
    for (kind, object, type_, reason, message) in [
        ("Pod", name.as_str(), "Normal", "Scheduled", scheduled.as_str()),
        ("Pod", name.as_str(), "Warning", "Evict", evict),
        ("PodGroup", group.as_str(), "Normal", "Evict", "preempt"),
    ] {
        let event: Event = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{object}.")},
            "involvedObject": {"kind": kind, "name": object, "namespace": "default"},
            "type": type_, "reason": reason, "message": message, "firstTimestamp": now(), "lastTimestamp": now()
        }))
        .unwrap();
        events.create(&Default::default(), &event).await.unwrap();
    }
    pods.delete(&name, &Default::default()).await.unwrap();
    let serve: Pod = serde_json::from_value(json!({
        "metadata": {"name": "serve-main-0", "labels": {"volcano.sh/job-name": "serve"},
                     "annotations": {"volcano.sh/queue-name": "default"}},
        "spec": {"nodeName": node, "priorityClassName": "prod",
                 "containers": [{"name": "main", "image": "theseus-test:local", "command": ["sleep", "600"]}]}
    }))
    .unwrap();
    pods.create(&Default::default(), &serve).await.unwrap();
}

#[test]
fn status_and_logs_follow_say_why_a_run_was_interrupted_and_what_comes_next() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    let submit = ["submit", "long", &world.exp("sleep.yaml"), "--code", world.code(), "--host", "k8s", "--chip", "cpu"];
    let out = ctx.run(&submit);
    assert!(out.status.success(), "{}", text(&out.stderr));
    status_until(&ctx, "long", |v| v["status"]["state"] == "running");
    let list: serde_json::Value = serde_json::from_slice(&ctx.run(&["list", "--output", "json"]).stdout).unwrap();
    let job = list[0]["handle"]["id"].as_str().expect("the vcjob's name").to_owned();
    // Running for a second before the eviction (times are whole seconds).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let follow = ctx
        .cmd()
        .args(["logs", "long", "-f"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    world.block_on(async { preempt(client(&world), &job).await });

    let v =
        status_until(&ctx, "long", |v| v["status"]["message"].as_str().is_some_and(|m| m.contains("attempt 2 of 3")));
    let message = v["status"]["message"].as_str().unwrap();
    assert!(message.starts_with("preempted by serve (priority prod) at 20"), "{message}");
    let plain = ctx.run(&["status", "long"]);
    assert!(text(&plain.stdout).contains("preempted by serve (priority prod) at "), "{}", text(&plain.stdout));

    // The follower said it when it happened; cancelling ends it.
    status_until(&ctx, "long", |v| v["status"]["message"].as_str().is_some_and(|m| m.contains("running again")));
    std::thread::sleep(std::time::Duration::from_secs(1));
    let cancel = ctx.run(&["cancel", "long"]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    let followed = follow.wait_with_output().unwrap();
    let stderr = text(&followed.stderr);
    let line = stderr.lines().find(|l| l.contains(": preempted by ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains(&format!("vcjob {job}: preempted by serve (priority prod) at ")), "{line}");
    assert!(line.ends_with("attempt 2 of 3"), "{line}");
}

/// Busy nodes are not a full share: when another queue borrowed every GPU beyond its deserved
/// share, the solver takes what Volcano's reclaim gives back, and `plan` (without `--no-check`)
/// chooses the host saying how, where it used to refuse with "no host can serve".
#[test]
fn plan_counts_what_reclaim_gives_back_from_a_queue_over_its_share() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    world.sim.put_queue("team-b", "Open");
    world.block_on(async {
        use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
        let gvk = GroupVersionKind::gvk("batch.volcano.sh", "v1alpha1", "Job");
        let jobs: Api<DynamicObject> = Api::namespaced_with(client(&world), "default", &ApiResource::from_gvk(&gvk));
        let job: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "borrower"},
            "spec": {"schedulerName": "volcano", "queue": "team-b", "minAvailable": 2, "tasks": [{
                "name": "w", "replicas": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "theseus-test:local", "command": ["sleep", "600"],
                    "resources": {"limits": {"nvidia.com/gpu": "4"}, "requests": {"cpu": "100m"}}
                }]}}
            }]}
        }))
        .unwrap();
        jobs.create(&Default::default(), &job).await.unwrap();
    });
    let args = ["plan", "p", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "h100", "-n", "4"];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let stdout = loop {
        let out = ctx.run(&args);
        let all = text(&out.stdout) + &text(&out.stderr);
        // Until the borrower runs, the GPUs are simply free.
        if all.contains("0 free") || all.contains("reclaiming") {
            assert!(out.status.success(), "plan refused a job that fits by reclaim:\n{all}");
            break text(&out.stdout);
        }
        assert!(std::time::Instant::now() < deadline, "the borrower never ran:\n{all}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    let row = stdout.lines().find(|l| l.starts_with("k8s ")).expect("the host's row");
    assert!(row.contains("chosen") && row.contains("fits only by reclaiming 4 from queue team-b"), "{row}");
    assert!(stdout.contains("queue:   fits only by reclaiming 4 from queue team-b"), "{stdout}");
}
