//! What the rendered manifests do in the simulator, which runs Volcano 1.15's job controller and
//! PID 1 signal semantics: the helper exits at once on SIGTERM, and a failed rank ends the gang
//! job (or restarts it with `restart_on_failure`).

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use theseus_backend_volcano::render_helper;
use theseus_kube_sim::{Sim, SimConfig};

use crate::fixtures::identity;

fn vcjobs(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("batch.volcano.sh", "v1alpha1", "Job");
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk_with_plural(&gvk, "jobs"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_helper_exits_on_sigterm_instead_of_waiting_for_sigkill() {
    // A grace period long enough that a helper ignoring SIGTERM is visibly killed (137).
    let sim = Sim::start(SimConfig { max_grace_period: std::time::Duration::from_secs(3), ..SimConfig::default() })
        .await
        .unwrap();
    let client = kube::Client::try_from(kube::Config::new(sim.url().parse().unwrap())).unwrap();
    let pvc = tempfile::tempdir().unwrap();
    let mount = pvc.path().display().to_string();
    let host: theseus_core::config::VolcanoHost = serde_json::from_value(serde_json::json!({
        "cluster": "sim", "namespace": "default", "image": "img", "pvc_name": "work",
        "pvc_mount_path": mount, "helper_image": "busybox:1.36",
    }))
    .unwrap();
    let helper = render_helper(&host, &identity(), &format!("{mount}/work/run")).unwrap();
    let manifest: DynamicObject = serde_json::from_value(serde_json::to_value(&helper).unwrap()).unwrap();
    vcjobs(&client).create(&PostParams::default(), &manifest).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let name = loop {
        let listed = pods.list(&ListParams::default().labels("theseus.dev/role=helper")).await.unwrap();
        let ready = listed.items.into_iter().find(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && pvc.path().join("work/run").is_dir()
        });
        if let Some(pod) = ready
            && pods.logs(pod.metadata.name.as_deref().unwrap(), &Default::default()).await.unwrap().contains("ready")
        {
            break pod.metadata.name.unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let mut watch =
        pods.watch(&WatchParams::default().fields(&format!("metadata.name={name}")), "0").await.unwrap().boxed();
    pods.delete(&name, &DeleteParams::default()).await.unwrap();
    let code = loop {
        match watch.try_next().await.unwrap().expect("the watch lasts until the pod is gone") {
            WatchEvent::Deleted(pod) => {
                let state = pod.status.unwrap().container_statuses.unwrap()[0].state.clone().unwrap();
                break state.terminated.expect("terminated").exit_code;
            }
            _ => continue,
        }
    };
    assert_eq!(code, 0, "the helper's trap ends it on SIGTERM (137 is SIGKILL after the grace period)");
}
