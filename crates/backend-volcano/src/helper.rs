//! Pure rendering of the code-shipping helper: a one-pod Volcano Job that mounts the PVC, creates
//! the run's parent dir and sleeps, so the IO code can `exec` a tar into it and then delete it.

use std::collections::BTreeMap;

use crate::config::VolcanoHost;
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use theseus_core::job::{JobIdentity, k8s_name};
use theseus_core::shell::quote;

use crate::quantity::Quantity;
use crate::render::{LABEL_ROLE, RenderError, pod_spec, queue, run_labels, workspace_mount, workspace_volume};
use crate::types::{Job, JobSpec, TaskSpec};

/// Name of the helper's task and container.
pub const HELPER_TASK: &str = "loader";
/// Seconds the helper waits for the IO code before exiting on its own.
pub const HELPER_SLEEP_SECONDS: u32 = 3600;

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

/// The helper's resources from `requests.cpu: "1"` style keys (split on the first dot); the
/// default is 1 CPU and 1Gi for both requests and limits. A given map replaces the default.
///
/// # Errors
/// A message naming the key for a key that is not `requests.<name>` or `limits.<name>`, or a
/// value that is not a quantity.
pub fn helper_resources(given: Option<&BTreeMap<String, String>>) -> Result<ResourceRequirements, String> {
    let default: BTreeMap<String, String> =
        [("requests.cpu", "1"), ("requests.memory", "1Gi"), ("limits.cpu", "1"), ("limits.memory", "1Gi")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    let map = given.unwrap_or(&default);
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    for (key, value) in map {
        let section = match key.split_once('.') {
            Some(("requests", name)) if !name.is_empty() => (&mut requests, name),
            Some(("limits", name)) if !name.is_empty() => (&mut limits, name),
            _ => {
                return Err(format!("{key}: expected a key like \"requests.cpu\" or \"limits.memory\""));
            }
        };
        if Quantity::parse(value).map_err(|e| format!("{key}: {e}"))?.value() < 0.0 {
            return Err(format!("{key}: {value:?} is negative"));
        }
        section.0.insert(section.1.to_owned(), K8sQuantity(value.clone()));
    }
    Ok(ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..ResourceRequirements::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn default_resources() {
        let r = helper_resources(None).unwrap();
        let req = r.requests.unwrap();
        assert_eq!(req["cpu"].0, "1");
        assert_eq!(req["memory"].0, "1Gi");
        assert_eq!(r.limits.unwrap()["memory"].0, "1Gi");
    }

    #[test]
    fn given_resources_replace_the_default() {
        let r = helper_resources(Some(&map(&[("requests.cpu", "500m"), ("limits.nvidia.com/gpu", "0")]))).unwrap();
        assert_eq!(r.requests.unwrap().len(), 1);
        assert_eq!(r.limits.unwrap()["nvidia.com/gpu"].0, "0");
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        for (key, value, want) in [
            ("cpu", "1", "cpu: expected"),
            ("request.cpu", "1", "request.cpu: expected"),
            ("limits.", "1", "limits.: expected"),
            ("limits.memory", "1Gx", "limits.memory: invalid quantity \"1Gx\""),
            ("requests.cpu", "-1", "requests.cpu: \"-1\" is negative"),
        ] {
            let err = helper_resources(Some(&map(&[(key, value)]))).unwrap_err();
            assert!(err.starts_with(want), "{err}");
        }
    }
}
