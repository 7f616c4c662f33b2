//! Wiremock contract tests of [`Cluster`]: each call's method, path, query and body, the mapping
//! of apiserver failures to `VolcanoError`, and the retry of transient ones. A raw TCP listener
//! stands in for an apiserver that drops connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use theseus_backend_volcano::api::PodLogOptions;
use theseus_backend_volcano::availability::probe;
use theseus_backend_volcano::{Cluster, Job, RetryPolicy, VolcanoError};
use theseus_core::availability::Availability;
use theseus_core::solver::{ChipRequest, Request};
use wiremock::matchers::{body_partial_json, header, method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, ResponseTemplate};

const JOBS: &str = "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs";

fn cluster(server: &MockServer) -> Cluster {
    Cluster::for_url(&server.uri(), "ml").expect("a client").with_retry(RetryPolicy::fast())
}

fn job_json(name: &str, run_id: &str) -> Value {
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"theseus.dev/run-id": run_id}},
        "spec": {"queue": "research", "minAvailable": 2, "schedulerName": "volcano"}
    })
}

fn job(name: &str, run_id: &str) -> Job {
    serde_json::from_value(job_json(name, run_id)).expect("a job")
}

fn stored(mut object: Value, uid: &str) -> Value {
    object["metadata"]["uid"] = uid.into();
    object["metadata"]["resourceVersion"] = "10".into();
    object
}

fn status(code: u16, reason: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code, "reason": reason, "message": message
    }))
}

fn list(kind: &str, items: Vec<Value>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "10"}, "items": items
    }))
}

fn pod_json(name: &str, phase: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": "11",
                     "labels": {"volcano.sh/job-name": "train-1"},
                     "annotations": {"scheduling.k8s.io/group-name": "train-1-6f1c"}},
        "spec": {"containers": [{"name": "worker"}]},
        "status": {"phase": phase}
    })
}

#[tokio::test]
async fn create_job_posts_the_typed_job_to_the_namespace() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(JOBS))
        .and(header("content-type", "application/json"))
        .and(body_partial_json(json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train-1", "labels": {"theseus.dev/run-id": "r1"}},
            "spec": {"queue": "research", "minAvailable": 2}
        })))
        .respond_with(ResponseTemplate::new(201).set_body_json(stored(job_json("train-1", "r1"), "uid-1")))
        .expect(1)
        .mount(&server)
        .await;
    let created = cluster(&server).create_job(&job("train-1", "r1")).await.unwrap();
    assert_eq!(created.metadata.uid.as_deref(), Some("uid-1"));
    let body: Value = serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert!(!body.to_string().contains("null"), "no nulls reach the apiserver: {body}");
}

#[tokio::test]
async fn get_job_reads_one_and_maps_404_to_none() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("{JOBS}/train-1")))
        .respond_with(ResponseTemplate::new(200).set_body_json(stored(job_json("train-1", "r1"), "uid-1")))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{JOBS}/gone")))
        .respond_with(status(404, "NotFound", "jobs.batch.volcano.sh \"gone\" not found"))
        .expect(1)
        .mount(&server)
        .await;
    let cluster = cluster(&server);
    let found = cluster.get_job("train-1").await.unwrap().expect("the job");
    assert_eq!(found.spec.queue.as_deref(), Some("research"));
    assert!(cluster.get_job("gone").await.unwrap().is_none());
}

#[tokio::test]
async fn delete_job_propagates_in_the_background_and_reports_absence() {
    let server = MockServer::start().await;
    Mock::given(method("DELETE"))
        .and(path(format!("{JOBS}/train-1")))
        .and(body_partial_json(json!({"propagationPolicy": "Background"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{JOBS}/gone")))
        .respond_with(status(404, "NotFound", "not found"))
        .expect(1)
        .mount(&server)
        .await;
    let cluster = cluster(&server);
    assert!(cluster.delete_job("train-1").await.unwrap());
    assert!(!cluster.delete_job("gone").await.unwrap());
}

#[tokio::test]
async fn list_calls_send_their_selectors() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(JOBS))
        .and(query_param("labelSelector", "theseus.dev/run-id=r1"))
        .respond_with(list("JobList", vec![job_json("train-1", "r1")]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ml/pods"))
        .and(query_param("labelSelector", "volcano.sh/job-name=train-1"))
        .respond_with(list("PodList", vec![pod_json("train-1-worker-0", "Running")]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ml/events"))
        .and(query_param("fieldSelector", "involvedObject.name=train-1,involvedObject.kind=Job"))
        .respond_with(list(
            "EventList",
            vec![json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Job", "name": "train-1"},
                        "reason": "PodGroupPending", "message": "queue is full"})],
        ))
        .expect(1)
        .mount(&server)
        .await;
    let cluster = cluster(&server);
    assert_eq!(cluster.list_jobs("theseus.dev/run-id=r1").await.unwrap().len(), 1);
    let pods = cluster.list_pods("volcano.sh/job-name=train-1").await.unwrap();
    assert_eq!(pods[0].metadata.name.as_deref(), Some("train-1-worker-0"));
    let events = cluster.events_for("Job", "train-1").await.unwrap();
    assert_eq!(events[0].message.as_deref(), Some("queue is full"));
}

/// LISTs page (`limit` and `continue`); a continue token the server says expired (`410`) makes
/// the list start over in one unpaged LIST, whose items replace what the pages gave.
#[tokio::test]
async fn lists_page_and_start_over_unpaged_when_the_continue_token_expired() {
    let server = MockServer::start().await;
    let page = |names: &[&str], next: Option<&str>| {
        let mut body = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "10"},
            "items": names.iter().map(|n| pod_json(n, "Running")).collect::<Vec<_>>()});
        if let Some(next) = next {
            body["metadata"]["continue"] = next.into();
        }
        ResponseTemplate::new(200).set_body_json(body)
    };
    let pods = "/api/v1/namespaces/ml/pods";
    let limit = theseus_backend_volcano::api::LIST_PAGE.to_string();
    Mock::given(method("GET"))
        .and(path(pods))
        .and(query_param("limit", limit.as_str()))
        .and(query_param_is_missing("continue"))
        .respond_with(page(&["p-0", "p-1"], Some("t1")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(pods))
        .and(query_param("continue", "t1"))
        .respond_with(page(&["p-2"], None))
        .expect(1)
        .mount(&server)
        .await;
    let cluster = cluster(&server);
    let names = |pods: Vec<k8s_openapi::api::core::v1::Pod>| {
        pods.into_iter().map(|p| p.metadata.name.unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(names(cluster.list_pods("").await.unwrap()), ["p-0", "p-1", "p-2"]);

    server.reset().await;
    Mock::given(method("GET"))
        .and(path(pods))
        .and(query_param("limit", limit.as_str()))
        .and(query_param_is_missing("continue"))
        .respond_with(page(&["p-0", "p-1"], Some("t1")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(pods))
        .and(query_param("continue", "t1"))
        .respond_with(status(410, "Expired", "The provided continue parameter is too old"))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(pods))
        .and(query_param_is_missing("limit"))
        .respond_with(page(&["p-0", "p-2"], None))
        .expect(1)
        .mount(&server)
        .await;
    assert_eq!(names(cluster.list_pods("").await.unwrap()), ["p-0", "p-2"], "only the full list's items");
}

#[tokio::test]
async fn secret_create_owner_patch_and_delete() {
    let server = MockServer::start().await;
    let secret_json = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "train-1-env", "labels": {"theseus.dev/run-id": "r1"}},
        "stringData": {"WANDB_API_KEY": "k"}
    });
    Mock::given(method("POST"))
        .and(path("/api/v1/namespaces/ml/secrets"))
        .and(body_partial_json(json!({"metadata": {"name": "train-1-env"}, "stringData": {"WANDB_API_KEY": "k"}})))
        .respond_with(ResponseTemplate::new(201).set_body_json(stored(secret_json.clone(), "s-uid")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path("/api/v1/namespaces/ml/secrets/train-1-env"))
        .and(header("content-type", "application/merge-patch+json"))
        .and(body_partial_json(json!({"metadata": {"ownerReferences": [{
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train-1", "uid": "uid-1", "controller": true
        }]}})))
        .respond_with(ResponseTemplate::new(200).set_body_json(stored(secret_json.clone(), "s-uid")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/v1/namespaces/ml/secrets/train-1-env"))
        .respond_with(ResponseTemplate::new(200).set_body_json(stored(secret_json.clone(), "s-uid")))
        .expect(1)
        .mount(&server)
        .await;
    let cluster = cluster(&server);
    let secret: Secret = serde_json::from_value(secret_json).unwrap();
    let created = cluster.create_secret(&secret).await.unwrap();
    assert_eq!(created.metadata.uid.as_deref(), Some("s-uid"));
    let owner = theseus_backend_volcano::owner_reference("train-1", "uid-1");
    cluster.set_secret_owner("train-1-env", owner).await.unwrap();
    assert!(cluster.delete_secret("train-1-env").await.unwrap());
}

#[tokio::test]
async fn wait_job_gone_lists_then_watches_by_name() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(JOBS))
        .and(query_param("fieldSelector", "metadata.name=train-1"))
        .and(query_param_is_missing("watch"))
        .respond_with(list("JobList", vec![stored(job_json("train-1", "r1"), "uid-1")]))
        .expect(1..)
        .mount(&server)
        .await;
    let deleted = json!({"type": "DELETED", "object": stored(job_json("train-1", "r1"), "uid-1")});
    Mock::given(method("GET"))
        .and(path(JOBS))
        .and(query_param("watch", "true"))
        .and(query_param("fieldSelector", "metadata.name=train-1"))
        .and(query_param("resourceVersion", "10"))
        .respond_with(ResponseTemplate::new(200).set_body_string(format!("{deleted}\n")))
        .expect(1..)
        .mount(&server)
        .await;
    cluster(&server).wait_job_gone("train-1", Duration::from_secs(10)).await.unwrap();
}

#[tokio::test]
async fn wait_job_gone_times_out_naming_the_job() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(JOBS))
        .and(query_param_is_missing("watch"))
        .respond_with(list("JobList", vec![stored(job_json("train-1", "r1"), "uid-1")]))
        .mount(&server)
        .await;
    // The watch stays open without events until the wait gives up.
    Mock::given(method("GET"))
        .and(path(JOBS))
        .and(query_param("watch", "true"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .mount(&server)
        .await;
    let err = cluster(&server).wait_job_gone("train-1", Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(err, VolcanoError::Timeout { .. }), "{err:?}");
    assert_eq!(err.to_string(), "timed out after 0.3s waiting for job \"train-1\" to be deleted");
}

#[tokio::test]
async fn watch_pods_lists_then_streams_events() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ml/pods"))
        .and(query_param("labelSelector", "volcano.sh/job-name=train-1"))
        .and(query_param_is_missing("watch"))
        .respond_with(list("PodList", vec![pod_json("train-1-worker-0", "Pending")]))
        .expect(1..)
        .mount(&server)
        .await;
    let modified = json!({"type": "MODIFIED", "object": pod_json("train-1-worker-0", "Running")});
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ml/pods"))
        .and(query_param("watch", "true"))
        .and(query_param("labelSelector", "volcano.sh/job-name=train-1"))
        .respond_with(ResponseTemplate::new(200).set_body_string(format!("{modified}\n")))
        .expect(1..)
        .mount(&server)
        .await;
    let events: Vec<_> =
        cluster(&server).watch_pods("volcano.sh/job-name=train-1").take(4).try_collect().await.unwrap();
    let phase =
        |p: &k8s_openapi::api::core::v1::Pod| p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    assert!(matches!(events[0], Event::Init));
    assert!(matches!(&events[1], Event::InitApply(p) if phase(p) == "Pending"));
    assert!(matches!(events[2], Event::InitDone));
    assert!(matches!(&events[3], Event::Apply(p) if phase(p) == "Running"));
}

#[tokio::test]
async fn log_stream_asks_for_follow_and_tail() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ml/pods/train-1-worker-0/log"))
        .and(query_param("follow", "true"))
        .and(query_param("tailLines", "10"))
        .and(query_param("container", "worker"))
        .respond_with(ResponseTemplate::new(200).set_body_string("step 1\nstep 2\n"))
        .expect(1)
        .mount(&server)
        .await;
    let options = PodLogOptions { container: Some("worker".into()), follow: true, tail_lines: Some(10) };
    let reader = cluster(&server).log_stream("train-1-worker-0", &options).await.unwrap();
    let lines: Vec<String> = reader.lines().try_collect().await.unwrap();
    assert_eq!(lines, ["step 1", "step 2"]);
}

#[tokio::test]
async fn podgroup_is_found_through_the_pod_annotation() {
    let server = MockServer::start().await;
    let groups = "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups";
    Mock::given(method("GET"))
        .and(path(format!("{groups}/train-1")))
        .respond_with(status(404, "NotFound", "not found"))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ml/pods"))
        .and(query_param("labelSelector", "volcano.sh/job-name=train-1"))
        .respond_with(list("PodList", vec![pod_json("train-1-worker-0", "Pending")]))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{groups}/train-1-6f1c")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "train-1-6f1c", "namespace": "ml"},
            "spec": {"minMember": 2},
            "status": {"phase": "Pending", "conditions": [{"type": "Unschedulable", "status": "True",
                        "message": "0/3 nodes are unavailable: 3 Insufficient nvidia.com/gpu"}]}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let group = cluster(&server).get_podgroup("train-1").await.unwrap().expect("the podgroup");
    assert_eq!(group.metadata.name.as_deref(), Some("train-1-6f1c"));
    assert_eq!(group.status.unwrap().conditions[0].type_, "Unschedulable");
}

fn gpu_request() -> Request {
    Request { chip: ChipRequest::AnyGpu, count: 8, preferred_clusters: vec![], forbidden_clusters: vec![], host: None }
}

fn queue_json(capability: Value, allocated: Value) -> Value {
    json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "research"},
        "spec": {"capability": capability, "weight": 1},
        "status": {"state": "Open", "allocated": allocated}
    })
}

#[tokio::test]
async fn queue_availability_is_capability_minus_allocated() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/apis/scheduling.volcano.sh/v1beta1/queues/research"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(queue_json(
                json!({"nvidia.com/gpu": "8", "cpu": "128"}),
                json!({"nvidia.com/gpu": "3"}),
            )),
        )
        .expect(1)
        .mount(&server)
        .await;
    let got = probe(&cluster(&server), &crate::fixtures::host(), &gpu_request()).await.unwrap();
    assert_eq!(got, Availability::Free { chips: 5, source: "queue research capability minus allocated".into() });
}

#[tokio::test]
async fn queue_without_a_gpu_cap_falls_back_to_the_selected_nodes() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/apis/scheduling.volcano.sh/v1beta1/queues/research"))
        .respond_with(ResponseTemplate::new(200).set_body_json(queue_json(json!({"cpu": "128"}), json!({}))))
        .mount(&server)
        .await;
    let node = |name: &str| {
        json!({"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": "8"},
               "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    Mock::given(method("GET"))
        .and(path("/api/v1/nodes"))
        .and(query_param("labelSelector", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"))
        .respond_with(list("NodeList", vec![node("gpu-a"), node("gpu-b")]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/pods"))
        .and(query_param("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed"))
        .respond_with(list(
            "PodList",
            vec![json!({"metadata": {"name": "other"}, "status": {"phase": "Running"},
                        "spec": {"nodeName": "gpu-a", "containers": [{"name": "c",
                                 "resources": {"requests": {"nvidia.com/gpu": "6"}}}]}})],
        ))
        .expect(1)
        .mount(&server)
        .await;
    let got = probe(&cluster(&server), &crate::fixtures::host(), &gpu_request()).await.unwrap();
    let Availability::Free { chips, source } = got else { panic!("{got:?}") };
    assert_eq!(chips, 10);
    assert!(source.contains("2 nodes matching nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"), "{source}");
    assert!(source.contains("queue research caps no nvidia.com/gpu"), "{source}");
}

#[tokio::test]
async fn missing_queue_names_queue_cluster_and_namespace() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/apis/scheduling.volcano.sh/v1beta1/queues/research"))
        .respond_with(status(404, "NotFound", "queues.scheduling.volcano.sh \"research\" not found"))
        .mount(&server)
        .await;
    // Not "unknown": the host cannot take jobs until the config names a queue that exists.
    let cpu = Request { chip: ChipRequest::Cpu, count: 1, ..gpu_request() };
    for request in [gpu_request(), cpu] {
        let got = probe(&cluster(&server), &crate::fixtures::host(), &request).await.unwrap();
        let Availability::Unusable { reason } = got else { panic!("{got:?}") };
        assert!(reason.contains("queue \"research\" does not exist on cluster \"k8s\""), "{reason}");
        assert!(reason.contains("namespace \"ml\"") && reason.contains("kubectl get queues"), "{reason}");
    }
}

#[tokio::test]
async fn cpu_requests_check_only_that_the_queue_exists() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/apis/scheduling.volcano.sh/v1beta1/queues/research"))
        .respond_with(ResponseTemplate::new(200).set_body_json(queue_json(json!({}), json!({}))))
        .expect(1)
        .mount(&server)
        .await;
    let request = Request { chip: ChipRequest::Cpu, count: 1, ..gpu_request() };
    let got = probe(&cluster(&server), &crate::fixtures::host(), &request).await.unwrap();
    assert_eq!(got, Availability::NotChecked);
    assert_eq!(server.received_requests().await.unwrap().len(), 1, "one GET of the queue, nothing else");
}

#[tokio::test]
async fn conflict_on_create_is_already_exists_unless_the_run_id_matches() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(JOBS))
        .respond_with(status(409, "AlreadyExists", "jobs.batch.volcano.sh \"train-1\" already exists"))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{JOBS}/train-1")))
        .respond_with(ResponseTemplate::new(200).set_body_json(stored(job_json("train-1", "r1"), "uid-1")))
        .mount(&server)
        .await;
    let cluster = cluster(&server);
    let adopted = cluster.create_job(&job("train-1", "r1")).await.unwrap();
    assert_eq!(adopted.metadata.uid.as_deref(), Some("uid-1"));

    let err = cluster.create_job(&job("train-1", "r2")).await.unwrap_err();
    assert!(matches!(&err, VolcanoError::AlreadyExists { name, .. } if name == "train-1"), "{err:?}");
    assert_eq!(err.to_string(), "jobs.batch.volcano.sh \"train-1\" already exists in namespace \"ml\"");
    let posts = server.received_requests().await.unwrap().iter().filter(|r| r.method.as_str() == "POST").count();
    assert_eq!(posts, 2, "a 409 is not retried");
}

#[tokio::test]
async fn forbidden_names_verb_resource_and_namespace() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(JOBS))
        .respond_with(status(403, "Forbidden", "User \"bob\" cannot create resource \"jobs\""))
        .expect(1)
        .mount(&server)
        .await;
    let err = cluster(&server).create_job(&job("train-1", "r1")).await.unwrap_err();
    assert!(!err.is_transient());
    assert_eq!(
        err.to_string(),
        "RBAC refused: cannot create jobs.batch.volcano.sh in namespace \"ml\" (403 Forbidden: User \"bob\" cannot \
         create resource \"jobs\"); ask your cluster admin for a Role granting create on jobs.batch.volcano.sh in \
         namespace \"ml\", or use a namespace you may use: the host's `namespace` key, else the kubeconfig \
         context's namespace"
    );
}

#[tokio::test]
async fn unauthorized_names_the_server() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/ml/pods"))
        .respond_with(status(401, "Unauthorized", "Unauthorized"))
        .expect(1)
        .mount(&server)
        .await;
    let err = cluster(&server).list_pods("").await.unwrap_err();
    assert!(matches!(err, VolcanoError::Unauthorized { .. }), "{err:?}");
    assert!(err.to_string().contains(&server.uri()), "{err}");
}

#[tokio::test]
async fn server_errors_are_retried_until_success() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("{JOBS}/train-1")))
        .respond_with(status(500, "InternalError", "etcdserver: leader changed"))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{JOBS}/train-1")))
        .respond_with(ResponseTemplate::new(200).set_body_json(stored(job_json("train-1", "r1"), "uid-1")))
        .with_priority(2)
        .mount(&server)
        .await;
    let found = cluster(&server).get_job("train-1").await.unwrap();
    assert!(found.is_some());
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn persistent_server_errors_give_up_after_max_attempts() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("{JOBS}/train-1")))
        .respond_with(status(503, "ServiceUnavailable", "apiserver is shutting down"))
        .mount(&server)
        .await;
    let err = cluster(&server).get_job("train-1").await.unwrap_err();
    assert!(matches!(err, VolcanoError::Api { code: 503, .. }), "{err:?}");
    assert!(err.is_transient());
    assert_eq!(server.received_requests().await.unwrap().len(), 5);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(JOBS))
        .respond_with(status(422, "Invalid", "spec.tasks[0].replicas: Invalid value"))
        .mount(&server)
        .await;
    let err = cluster(&server).create_job(&job("train-1", "r1")).await.unwrap_err();
    assert!(matches!(err, VolcanoError::Api { code: 422, .. }), "{err:?}");
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn throttling_honors_retry_after_seconds() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/apis/scheduling.volcano.sh/v1beta1/queues/research"))
        .respond_with(ResponseTemplate::new(429).set_body_json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429, "reason": "TooManyRequests",
            "message": "too many requests", "details": {"retryAfterSeconds": 1}
        })))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/apis/scheduling.volcano.sh/v1beta1/queues/research"))
        .respond_with(ResponseTemplate::new(200).set_body_json(queue_json(json!({}), json!({}))))
        .with_priority(2)
        .mount(&server)
        .await;
    // The cap of the fast policy would shorten the wait; the server's hint is honored up to `cap`.
    let policy = RetryPolicy { cap: Duration::from_secs(2), ..RetryPolicy::fast() };
    let cluster = cluster(&server).with_retry(policy);
    let started = Instant::now();
    assert!(cluster.get_queue("research").await.unwrap().is_some());
    assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

/// A listener that accepts connections and closes them at once, counting them.
async fn dropping_server() -> (String, Arc<AtomicU32>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (url, accepted)
}

#[tokio::test]
async fn dropped_connections_are_retried_then_reported_with_the_url() {
    let (url, accepted) = dropping_server().await;
    let cluster = Cluster::for_url(&url, "ml").unwrap().with_retry(RetryPolicy::fast());
    let err = cluster.get_job("train-1").await.unwrap_err();
    let VolcanoError::Transport { attempts, ref server, .. } = err else { panic!("{err:?}") };
    assert_eq!(attempts, 5);
    assert_eq!(server, &url);
    assert!(accepted.load(Ordering::SeqCst) >= 5);
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("cannot get jobs.batch.volcano.sh: API server {url} unreachable after 5 attempts")),
        "{text}"
    );
}

#[tokio::test]
async fn refused_connections_say_so() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let cluster =
        Cluster::for_url(&url, "ml").unwrap().with_retry(RetryPolicy { max_attempts: 2, ..RetryPolicy::fast() });
    let err = cluster.list_jobs("").await.unwrap_err();
    assert!(
        matches!(&err, VolcanoError::Transport { detail, attempts: 2, .. } if detail == "connection refused"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_refused_api_server_fails_a_probe_after_one_attempt() {
    // The same cluster's other calls retry (5 attempts, above); availability answers at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let cluster = Cluster::for_url(&url, "ml").unwrap().with_retry(RetryPolicy::fast());
    let err = probe(&cluster, &crate::fixtures::host(), &gpu_request()).await.unwrap_err();
    assert!(
        matches!(&err, VolcanoError::Transport { detail, attempts: 1, .. } if detail == "connection refused"),
        "{err:?}"
    );
    let err = cluster.get_queue("research").await.unwrap_err();
    assert!(matches!(&err, VolcanoError::Transport { attempts: 5, .. }), "{err:?}");
}

#[tokio::test]
async fn a_dropped_connection_then_a_working_server_succeeds() {
    // The first attempt hits a listener that closes at once; the retry reaches wiremock through a
    // tiny relay that forwards every later connection.
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("{JOBS}/train-1")))
        .respond_with(ResponseTemplate::new(200).set_body_json(stored(job_json("train-1", "r1"), "uid-1")))
        .expect(1)
        .mount(&server)
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let upstream = server.address().to_owned();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut socket, _)) = listener.accept().await {
            if std::mem::take(&mut first) {
                drop(socket);
                continue;
            }
            tokio::spawn(async move {
                if let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut socket, &mut up).await;
                }
            });
        }
    });
    let cluster = Cluster::for_url(&url, "ml").unwrap().with_retry(RetryPolicy::fast());
    assert!(cluster.get_job("train-1").await.unwrap().is_some());
}
