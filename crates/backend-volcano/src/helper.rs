//! Pure rendering of the code-shipping helper: a one-pod Volcano Job that mounts the PVC, creates
//! the run's parent dir and sleeps, so the IO code can `exec` a tar into it and then delete it.

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use theseus_core::job::{JobIdentity, k8s_name};
use theseus_core::shell::quote;

use crate::config::VolcanoHost;
use crate::render::{LABEL_ROLE, RenderError, pod_spec, queue, run_labels, workspace_mount, workspace_volume};
use crate::resources::helper_resources;
use crate::types::{Job, JobSpec, TaskSpec};

/// Name of the helper's task and container.
pub const HELPER_TASK: &str = "loader";
/// Seconds the helper waits for the IO code before exiting on its own.
pub const HELPER_SLEEP_SECONDS: u32 = 3600;

/// The helper's own `ttlSecondsAfterFinished`: a helper its client left behind (killed while
/// shipping) ends by itself after [`HELPER_SLEEP_SECONDS`], and Volcano then deletes it this
/// soon, not after the gang jobs' day (`theseus gc` deletes it sooner). A live client deletes its
/// helper itself.
pub const HELPER_TTL_SECONDS: i32 = 300;

/// The helper's name: `theseus-ship-<run id>`, unique per run.
pub fn helper_name(identity: &JobIdentity) -> String {
    k8s_name(&format!("theseus-ship-{}", identity.run_id))
}

/// Renders the helper for a run whose code goes to `work_dir` on the PVC.
///
/// # Errors
/// [`RenderError`] naming the key for a host that [`crate::validate_host`] rejects.
pub fn render_helper(host: &VolcanoHost, identity: &JobIdentity, work_dir: &str) -> Result<Job, RenderError> {
    crate::validate::check_host(host).map_err(RenderError)?;
    let resources =
        helper_resources(host.helper_resources.as_ref()).map_err(|m| RenderError(format!("helper_resources.{m}")))?;
    let mut labels = run_labels(host, identity);
    labels.insert(LABEL_ROLE.into(), "helper".into());
    let script = helper_script(work_dir);
    let container = Container {
        name: HELPER_TASK.into(),
        image: Some(host.helper_image.clone()),
        command: Some(vec!["sh".into(), "-c".into(), script]),
        resources: Some(resources),
        volume_mounts: Some(vec![workspace_mount(host)]),
        ..Container::default()
    };
    let pod = pod_spec(host, container, vec![workspace_volume(host)]);
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(helper_name(identity)),
            namespace: Some(host.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: JobSpec {
            scheduler_name: Some("volcano".into()),
            queue: Some(queue(host)),
            min_available: Some(1),
            tasks: vec![TaskSpec {
                name: Some(HELPER_TASK.into()),
                replicas: Some(1),
                min_available: Some(1),
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }),
                    spec: Some(pod),
                }),
                policies: Vec::new(),
            }],
            ttl_seconds_after_finished: Some(HELPER_TTL_SECONDS),
            ..JobSpec::default()
        },
        status: None,
    })
}

/// The helper's script (busybox `sh`): make the run's parent dir (a failing mkdir, e.g. a
/// read-only PVC, fails the pod at once; the run dir itself must not exist yet, since the store
/// renames it into place whole), say `ready`, then wait. It runs as
/// PID 1 of its container, and PID 1 gets no signal it has no handler for (pid_namespaces(7)):
/// a plain `sleep` would ignore the kubelet's SIGTERM and hold every deletion for the whole
/// grace period. So it traps TERM, and sleeps in the background while `wait`ing, because the
/// shell runs a trap only between commands and `wait` returns as soon as a trapped signal
/// arrives. Deleting the helper's vcjob cannot shorten the grace period instead: the garbage
/// collector deletes its pod with the pod's own `terminationGracePeriodSeconds`.
pub fn helper_script(work_dir: &str) -> String {
    let parent =
        std::path::Path::new(work_dir).parent().and_then(|p| p.to_str()).filter(|p| !p.is_empty()).unwrap_or("/");
    format!(
        "trap 'kill $! 2> /dev/null; exit 0' TERM; mkdir -p {dir} || exit 1; echo ready; sleep {HELPER_SLEEP_SECONDS} & wait",
        dir = quote(parent)
    )
}
