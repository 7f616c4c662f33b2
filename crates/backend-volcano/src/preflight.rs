//! Before a submit ships anything: the objects the job names but theseus does not create must
//! exist. A real cluster refuses them late and piecemeal: a namespace that does not exist fails
//! the first create (`NamespaceLifecycle`, 404); a ServiceAccount that does not exist fails
//! every pod the job controller creates (the `ServiceAccount` admission plugin, 403: the vcjob
//! exists and stays Pending with `FailedCreate` events); a PriorityClass that does not exist
//! fails pod admission (the `Priority` plugin, 403). Read from kubernetes v1.33
//! `plugin/pkg/admission/{namespace/lifecycle,serviceaccount,priority}/admission.go`, and run
//! against the simulator, which ports them (crates/kube-sim `api_admission.rs`).
//!
//! A user who may not read one of them (namespaces and PriorityClasses are cluster-scoped) is
//! not refused: the check is skipped with a note saying what could not be checked.

use crate::api::Cluster;
use crate::config::VolcanoHost;
use crate::error::VolcanoError;

/// Checks the namespace, then the ServiceAccount and the PriorityClass the host names. `Ok`
/// carries a note per object that could not be checked (403).
///
/// # Errors
/// [`VolcanoError::MissingObject`] naming the object and the config key; other call errors.
pub(crate) async fn require_objects(cluster: &Cluster, host: &VolcanoHost) -> Result<Vec<String>, VolcanoError> {
    let namespace = cluster.namespace().to_owned();
    let mut unchecked = Vec::new();
    let missing = |what: String, fix: String| VolcanoError::MissingObject { what, cluster: host.cluster.clone(), fix };
    let ns_key = if host.namespace.is_empty() {
        "set `namespace` in the host config (it is not set: the kubeconfig context's namespace was used)"
    } else {
        "fix `namespace` in the host config"
    };
    if readable(cluster.get_namespace(&namespace).await, "namespace", &namespace, &mut unchecked)? == Some(false) {
        return Err(missing(
            format!("namespace {namespace:?}"),
            format!("{ns_key}, or ask a cluster admin to create it (`kubectl get namespaces` lists them)"),
        ));
    }
    if let Some(sa) = host.service_account.as_deref().filter(|s| !s.is_empty()) {
        let found = readable(cluster.get_service_account(sa).await, "serviceaccount", sa, &mut unchecked)?;
        if found == Some(false) {
            return Err(missing(
                format!("serviceaccount {sa:?} in namespace {namespace:?}"),
                format!(
                    "fix `service_account` in the host config (`kubectl get serviceaccounts -n {namespace}` lists \
                     them), or remove it to use the namespace's `default`"
                ),
            ));
        }
    }
    if let Some(class) = host.priority_class.as_deref().filter(|s| !s.is_empty()) {
        let found = readable(cluster.get_priority_class(class).await, "priorityclass", class, &mut unchecked)?;
        if found == Some(false) {
            return Err(missing(
                format!("priorityclass {class:?}"),
                "fix `priority_class` in the host config (`kubectl get priorityclasses` lists them), or remove it \
                 to use the cluster's default priority"
                    .to_owned(),
            ));
        }
    }
    Ok(unchecked)
}

/// `Some(found)`, or `None` with a note when RBAC refuses the read.
fn readable<T>(
    got: Result<Option<T>, VolcanoError>,
    kind: &str,
    name: &str,
    unchecked: &mut Vec<String>,
) -> Result<Option<bool>, VolcanoError> {
    match got {
        Ok(found) => Ok(Some(found.is_some())),
        Err(VolcanoError::Forbidden { .. }) => {
            unchecked.push(format!(
                "could not check that {kind} {name:?} exists (RBAC refuses reading it); the cluster will say if not"
            ));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
