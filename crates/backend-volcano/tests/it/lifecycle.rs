//! What the rendered manifests do in the simulator, which runs Volcano 1.15's job controller and
//! PID 1 signal semantics: the helper exits at once on SIGTERM, and a failed rank ends the gang
//! job at once, with the rank and its exit code in `status`.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use theseus_backend_volcano::render_helper;
use theseus_core::backend::{Backend, JobState, PreparedJob, SubmitOptions};
use theseus_core::bootstrap::BootstrapInput;
use theseus_core::job::{Distributed, Entrypoint, Experiment, JobIdentity};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
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
    let client = crate::flow::sim_client(&sim);
    let pvc = tempfile::tempdir().unwrap();
    let mount = pvc.path().display().to_string();
    let host: theseus_backend_volcano::VolcanoHost = serde_json::from_value(serde_json::json!({
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
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && pvc.path().join("work").is_dir()
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

/// A job whose rank 1 exits 3 at once while rank 0 would run for ten minutes.
fn one_rank_fails(
    identity: JobIdentity,
    plan: &theseus_core::solver::Plan,
    layout: &theseus_core::backend::RunLayout,
) -> (PreparedJob, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("job.py"),
        "import os, sys, time\n\
         if os.environ.get('VC_TASK_INDEX') == '1':\n    print('rank 1 fails', flush=True)\n    sys.exit(3)\n\
         time.sleep(600)\n",
    )
    .unwrap();
    let snapshot = Snapshot::collect(dir.path(), SnapshotMode::Dirty).unwrap();
    let words = vec!["python".to_owned(), "job.py".to_owned()];
    let input = BootstrapInput::for_layout(
        identity.clone(),
        layout,
        Vec::new(),
        words.clone(),
        Distributed::None,
        serde_json::json!({}),
    );
    let bootstrap = theseus_core::bootstrap::render(&input).unwrap();
    let experiment = Experiment { entrypoint: Entrypoint::Words(words), ..Experiment::default() };
    (PreparedJob { identity, experiment, env: Vec::new(), plan: plan.clone(), snapshot, bootstrap }, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rank_ends_the_gang_at_once_and_status_names_it() {
    let world = crate::flow::World::start(2).await;
    let backend = world.backend();
    let plan = crate::flow::plan(2, 4);
    let identity = JobIdentity::new("one-fails", Some("lifecycle"), None);
    let layout = backend.run_layout(&identity).unwrap();
    let (job, _dir) = one_rank_fails(identity, &plan, &layout);
    let handle = backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    // Without `PodFailed -> TerminateJob` the vcjob would stay Running while rank 0 sleeps.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        let status = backend.status(&handle).await.expect("status");
        if status.state.is_terminal() {
            break status;
        }
        assert!(tokio::time::Instant::now() < deadline, "the job did not end: {status:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!((status.state, status.exit_code), (JobState::Failed, Some(3)), "{status:?}");
    assert_eq!(status.message.as_deref(), Some("rank 1 exited with code 3 (vcjob phase Terminated)"));
    let pods = world.connection().list_pods("volcano.sh/job-name").await.unwrap();
    let left: Vec<_> =
        pods.iter().filter_map(|p| p.metadata.name.clone()).filter(|n| n.ends_with("worker-0")).collect();
    assert!(left.is_empty(), "the other rank is stopped: {left:?}");
}
