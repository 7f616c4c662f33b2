//! Shared helpers: start a simulator with a kube client, poll with a deadline, Volcano job
//! manifests.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};
use theseus_kube_sim::{Sim, SimConfig};

/// A started simulator and a kube client talking to it.
pub(crate) struct Ctx {
    pub(crate) sim: Sim,
    pub(crate) client: Client,
}

pub(crate) async fn start(config: SimConfig) -> Ctx {
    let sim = Sim::start(config).await.expect("simulator starts");
    let client = Client::try_from(client_config(&sim)).expect("client");
    Ctx { sim, client }
}

/// A kube config for the simulator's HTTPS URL that trusts its CA, without credentials.
pub(crate) fn client_config(sim: &Sim) -> kube::Config {
    let mut config = kube::Config::new(sim.url().parse().expect("valid url"));
    config.root_cert = Some(vec![sim.ca_der()]);
    config
}

/// Polls `f` until it returns `Some`, failing the test after `secs` seconds.
pub(crate) async fn eventually<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub(crate) fn vcjob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch.volcano.sh", "v1alpha1", "Job"), "jobs")
}

pub(crate) fn podgroup_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "PodGroup"),
        "podgroups",
    )
}

pub(crate) fn queue_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "Queue"), "queues")
}

pub(crate) fn vcjobs(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &vcjob_resource())
}

/// A Volcano job with one task `worker` of `replicas` pods, each asking for `gpus` GPUs.
pub(crate) fn vcjob(name: &str, replicas: u32, gpus: u32, image: &str, command: &[&str]) -> DynamicObject {
    let manifest = json!({
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": replicas,
            "schedulerName": "volcano",
            "queue": "default",
            "plugins": {"env": [], "svc": []},
            "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
            "tasks": [{
                "name": "worker",
                "replicas": replicas,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "main", "image": image, "command": command,
                        "resources": {"limits": {"nvidia.com/gpu": gpus.to_string(), "cpu": "500m", "memory": "1Gi"}},
                    }],
                }},
            }],
        },
    });
    serde_json::from_value(manifest).expect("valid job")
}

pub(crate) fn phase(job: &DynamicObject) -> String {
    job.data.pointer("/status/state/phase").and_then(Value::as_str).unwrap_or("").to_owned()
}

/// The Status code of a kube API error.
pub(crate) fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Waits until job `name` is in phase `want`.
pub(crate) async fn wait_phase(api: &Api<DynamicObject>, name: &str, want: &str) -> DynamicObject {
    eventually(&format!("job {name} {want}"), 20, || async {
        let job = api.get(name).await.ok()?;
        (phase(&job) == want).then_some(job)
    })
    .await
}

/// The PodGroup of a job, named `<job>-<uid>` as Volcano's job controller names it
/// (`generateRelatedPodGroupName` in pkg/controllers/job/job_controller_actions.go).
pub(crate) async fn podgroup_of(ctx: &Ctx, job: &str) -> DynamicObject {
    let uid = vcjobs(&ctx.client, "default").get(job).await.unwrap().metadata.uid.unwrap();
    let pgs = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), "default", &podgroup_resource());
    eventually("the job's podgroup", 20, || async { pgs.get(&format!("{job}-{uid}")).await.ok() }).await
}

/// Events about the object named `name`, as (type, reason, message).
pub(crate) async fn events_about(ctx: &Ctx, name: &str) -> Vec<(String, String, String)> {
    let events: Api<Event> = Api::namespaced(ctx.client.clone(), "default");
    let listed = events.list(&ListParams::default().fields(&format!("involvedObject.name={name}"))).await.unwrap();
    listed
        .items
        .into_iter()
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// `POST` of `body` to `path` with raw HTTP: status, `Warning` headers and the JSON body.
pub(crate) async fn post_raw(
    client: &kube::Client,
    path: &str,
    body: &serde_json::Value,
) -> (u16, Vec<String>, serde_json::Value) {
    let req = http::Request::post(path)
        .header("content-type", "application/json")
        .body(body.to_string().into_bytes())
        .unwrap();
    let resp = client.send(req.map(kube::client::Body::from)).await.unwrap();
    let status = resp.status().as_u16();
    let warnings = resp.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    let bytes = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
    (status, warnings, serde_json::from_slice(&bytes).unwrap())
}
