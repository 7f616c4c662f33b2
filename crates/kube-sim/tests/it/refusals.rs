//! What a real API server refuses at admission: objects in a namespace that does not exist
//! (`NamespaceLifecycle`), pods whose ServiceAccount or PriorityClass does not exist
//! (`ServiceAccount`, `Priority`), and what the Volcano job controller makes of a refused pod.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use theseus_kube_sim::SimConfig;

use crate::support::{api_code, events_about, eventually, phase, post_raw, start, vcjob, vcjobs};

fn config_map(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

#[tokio::test]
async fn a_namespace_that_does_not_exist_is_refused_until_it_is_created() {
    let ctx = start(SimConfig { namespaces: vec!["team-a".into()], ..SimConfig::default() }).await;
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let mut names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["default", "kube-node-lease", "kube-public", "kube-system", "team-a"]);

    // The API server's own Status (NamespaceLifecycle: `errors.NewNotFound`).
    let (code, _, status) = post_raw(&ctx.client, "/api/v1/namespaces/ml/configmaps", &config_map("c")).await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["reason"], "NotFound", "{status}");
    assert_eq!(status["message"], "namespaces \"ml\" not found", "{status}");
    assert_eq!(status["details"], json!({"name": "ml", "kind": "namespaces"}), "{status}");
    // A vcjob too, before its schema or webhooks are consulted; a dry run is refused alike.
    let jobs = crate::support::vcjobs(&ctx.client, "ml");
    let job = vcjob("j", 1, 0, "busybox", &["true"]);
    assert_eq!(api_code(&jobs.create(&PostParams::default(), &job).await.unwrap_err()), Some(404));
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    assert_eq!(api_code(&jobs.create(&dry, &job).await.unwrap_err()), Some(404));
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), "ml");
    assert!(cms.list(&ListParams::default()).await.unwrap().items.is_empty(), "nothing was stored");

    // Pre-created (`SimConfig::namespaces`) and system namespaces accept objects.
    for ns in ["team-a", "kube-system"] {
        let (code, _, body) =
            post_raw(&ctx.client, &format!("/api/v1/namespaces/{ns}/configmaps"), &config_map("c")).await;
        assert_eq!(code, 201, "{ns}: {body}");
    }
    // Once the namespace is created through the API, the same create succeeds.
    let ml: Namespace = serde_json::from_value(json!({"metadata": {"name": "ml"}})).unwrap();
    namespaces.create(&PostParams::default(), &ml).await.unwrap();
    let (code, _, body) = post_raw(&ctx.client, "/api/v1/namespaces/ml/configmaps", &config_map("c")).await;
    assert_eq!(code, 201, "{body}");
    jobs.create(&PostParams::default(), &job).await.unwrap();
}

fn pod(name: &str, service_account: Option<&str>) -> serde_json::Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "img", "command": ["sleep", "30"]}]}});
    if let Some(sa) = service_account {
        pod["spec"]["serviceAccountName"] = json!(sa);
    }
    pod
}

#[tokio::test]
async fn a_pod_whose_service_account_does_not_exist_is_refused_and_its_vcjob_stays_pending() {
    let ctx = start(SimConfig::default()).await;
    // The service-account controller gives every namespace, new ones too, a `default`.
    let ml: Namespace = serde_json::from_value(json!({"metadata": {"name": "ml"}})).unwrap();
    Api::<Namespace>::all(ctx.client.clone()).create(&PostParams::default(), &ml).await.unwrap();
    for ns in ["default", "kube-system", "ml"] {
        let sas: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), ns);
        sas.get("default").await.unwrap_or_else(|e| panic!("{ns}/default: {e}"));
    }

    // The ServiceAccount admission plugin: `default` when none is named, 403 for a missing one.
    let (code, _, created) = post_raw(&ctx.client, "/api/v1/namespaces/default/pods", &pod("plain", None)).await;
    assert_eq!((code, created["spec"]["serviceAccountName"].as_str()), (201, Some("default")), "{created}");
    let (code, _, status) = post_raw(&ctx.client, "/api/v1/namespaces/default/pods", &pod("p", Some("robot"))).await;
    assert_eq!((code, status["reason"].as_str()), (403, Some("Forbidden")), "{status}");
    assert_eq!(
        status["message"],
        "pods \"p\" is forbidden: error looking up service account default/robot: serviceaccount \"robot\" not found"
    );
    assert_eq!(api_code(&Api::<Pod>::namespaced(ctx.client.clone(), "default").get("p").await.unwrap_err()), Some(404));

    // The job controller's creates are refused alike: a FailedCreate Warning, no pods, Pending.
    let jobs = vcjobs(&ctx.client, "default");
    let mut job = vcjob("j", 2, 0, "img", &["sleep", "30"]);
    job.data["spec"]["tasks"][0]["template"]["spec"]["serviceAccountName"] = json!("robot");
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let warning = eventually("a FailedCreate event", 20, || async {
        events_about(&ctx, "j").await.into_iter().find(|(_, reason, _)| reason == "FailedCreate")
    })
    .await;
    assert_eq!(warning.0, "Warning");
    let refused = "Message:\"pods \\\"j-worker-0\\\" is forbidden: error looking up service account default/robot: \
                   serviceaccount \\\"robot\\\" not found\", Reason:\"Forbidden\"";
    assert!(warning.2.starts_with("Error creating pods: [failed to create pod j-worker-"), "{}", warning.2);
    assert!(warning.2.contains(refused), "{}", warning.2);
    assert!(warning.2.contains("failed to create pod j-worker-1, err: &errors.StatusError{"), "{}", warning.2);
    // Later passes retry and still fail: the job stays Pending without pods.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(phase(&jobs.get("j").await.unwrap()), "Pending");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    let job_pods = pods.list(&ListParams::default().labels("volcano.sh/job-name=j")).await.unwrap();
    assert!(job_pods.items.is_empty(), "no pod was made");

    // Once the ServiceAccount exists, the next retry creates the pods and the job runs.
    let robot: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap();
    Api::<ServiceAccount>::namespaced(ctx.client.clone(), "default")
        .create(&PostParams::default(), &robot)
        .await
        .unwrap();
    crate::support::wait_phase(&jobs, "j", "Running").await;
}

#[tokio::test]
async fn a_pod_whose_priority_class_does_not_exist_is_refused_and_an_existing_one_sets_its_priority() {
    let ctx = start(SimConfig::default()).await;
    let classes: Api<PriorityClass> = Api::all(ctx.client.clone());
    for (name, value) in [("system-cluster-critical", 2_000_000_000), ("system-node-critical", 2_000_001_000)] {
        let class = classes.get(name).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((class.value, class.preemption_policy.as_deref()), (value, Some("PreemptLowerPriority")));
    }

    // The Priority admission plugin: 403 for a class that does not exist.
    let mut refused = pod("p", None);
    refused["spec"]["priorityClassName"] = json!("high");
    let (code, _, status) = post_raw(&ctx.client, "/api/v1/namespaces/default/pods", &refused).await;
    assert_eq!((code, status["reason"].as_str()), (403, Some("Forbidden")), "{status}");
    assert_eq!(status["message"], "pods \"p\" is forbidden: no PriorityClass with name high was found");
    // A class made through the API sets the pod's priority and policy; no class: priority 0.
    let high: PriorityClass =
        serde_json::from_value(json!({"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"}))
            .unwrap();
    classes.create(&PostParams::default(), &high).await.unwrap();
    let (code, _, created) = post_raw(&ctx.client, "/api/v1/namespaces/default/pods", &refused).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!((&created["spec"]["priority"], &created["spec"]["preemptionPolicy"]), (&json!(1000), &json!("Never")));
    let (_, _, plain) = post_raw(&ctx.client, "/api/v1/namespaces/default/pods", &pod("plain", None)).await;
    assert_eq!(
        (&plain["spec"]["priority"], &plain["spec"]["preemptionPolicy"]),
        (&json!(0), &json!("PreemptLowerPriority"))
    );
    let mut lying = pod("lying", None);
    lying["spec"]["priorityClassName"] = json!("high");
    lying["spec"]["priority"] = json!(5);
    let (code, _, status) = post_raw(&ctx.client, "/api/v1/namespaces/default/pods", &lying).await;
    assert_eq!(code, 403, "{status}");

    // A vcjob's `priorityClassName` reaches its pods (`createJobPod`) and its PodGroup; a missing
    // class fails their creation: a FailedCreate Warning, no pods, the job Pending.
    let jobs = vcjobs(&ctx.client, "default");
    let mut job = vcjob("urgent", 1, 0, "img", &["sleep", "30"]);
    job.data["spec"]["priorityClassName"] = json!("urgent");
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let warning = eventually("a FailedCreate event", 20, || async {
        events_about(&ctx, "urgent").await.into_iter().find(|(_, reason, _)| reason == "FailedCreate")
    })
    .await;
    let refused = "Message:\"pods \\\"urgent-worker-0\\\" is forbidden: no PriorityClass with name urgent was found\"";
    assert!(warning.2.contains(refused), "{}", warning.2);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(phase(&jobs.get("urgent").await.unwrap()), "Pending");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), "default");
    assert_eq!(api_code(&pods.get("urgent-worker-0").await.unwrap_err()), Some(404));
    let pg = crate::support::podgroup_of(&ctx, "urgent").await;
    assert_eq!(pg.data["spec"]["priorityClassName"], "urgent");

    let urgent: PriorityClass = serde_json::from_value(json!({"metadata": {"name": "urgent"}, "value": 5000})).unwrap();
    classes.create(&PostParams::default(), &urgent).await.unwrap();
    crate::support::wait_phase(&jobs, "urgent", "Running").await;
    let made = pods.get("urgent-worker-0").await.unwrap();
    let spec = made.spec.unwrap();
    assert_eq!((spec.priority_class_name.as_deref(), spec.priority), (Some("urgent"), Some(5000)));
}
