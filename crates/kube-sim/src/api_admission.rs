//! Kubernetes' own admission plugins that a dispatcher can trip over, run where the API server
//! runs them (after decoding and defaults, before the object is stored, dry runs included):
//!
//! - `NamespaceLifecycle` (kubernetes `plugin/pkg/admission/namespace/lifecycle/admission.go`,
//!   `Admit`): a namespaced object is not created in a namespace that does not exist (`404`,
//!   `namespaces "x" not found`, details kind `namespaces`) or that is being terminated (`403`,
//!   `unable to create new content in namespace x because it is being terminated`). Namespaces
//!   themselves are exempt. Read from the v1.33 source, not run against a real server.
//! - `ServiceAccount` (`plugin/pkg/admission/serviceaccount/admission.go`, `Admit`): a pod
//!   without `spec.serviceAccountName` gets `default`; one naming a ServiceAccount that does not
//!   exist is refused (`403`, `pods "p" is forbidden: error looking up service account ns/sa:
//!   serviceaccount "sa" not found`). The token volume it also mounts is not added. Read, not run.
//! - `Priority` (`plugin/pkg/admission/priority/admission.go`, `admitPod`): a pod naming a
//!   PriorityClass that does not exist is refused (`403`, `pods "p" is forbidden: no
//!   PriorityClass with name x was found`); otherwise `spec.priority` and `spec.preemptionPolicy`
//!   are set from the class (or from the `globalDefault` class, or `0` and
//!   `PreemptLowerPriority` when there is none), and a pod that gives a different priority or
//!   policy itself is refused. PriorityClasses get the API's default `preemptionPolicy`
//!   (`SetDefaults_PriorityClass`); their validation (reserved `system-` names, values above
//!   one billion) is not ported. Read, not run.
//!
//! The service-account controller's part is here too ([`namespace_created`]): every namespace
//! gets a `default` ServiceAccount (kubernetes `pkg/controller/serviceaccount/serviceaccounts_controller.go`,
//! `syncNamespace`), at once rather than a moment after the namespace, as in a real cluster.

use serde_json::{Value, json};

use crate::discovery::{ResourceInfo, known};
use crate::status::ApiError;
use crate::store::Store;

/// The built-in plugins on create of `obj` (a `res`) in `ns`, in the API server's order
/// (`NamespaceLifecycle` first), mutating `obj` as they do.
pub(crate) fn admit_create(res: &ResourceInfo, ns: &str, obj: &mut Value, store: &Store) -> Result<(), ApiError> {
    namespace_lifecycle(res, ns, obj, store)?;
    service_account(res, ns, obj, store)?;
    priority(res, obj, store)?;
    if std::ptr::eq(res, known::priorityclasses()) && obj.get("preemptionPolicy").is_none_or(Value::is_null) {
        obj["preemptionPolicy"] = json!(PREEMPT_LOWER);
    }
    Ok(())
}

/// The default `preemptionPolicy`.
const PREEMPT_LOWER: &str = "PreemptLowerPriority";

/// The PriorityClasses every cluster has (kubernetes `pkg/apis/scheduling/helpers.go`,
/// `SystemPriorityClasses`), created at start.
pub(crate) fn seed_priority_classes(store: &Store) {
    let classes = [
        (
            "system-node-critical",
            2_000_001_000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        (
            "system-cluster-critical",
            2_000_000_000,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ];
    for (name, value, description) in classes {
        let class = json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "description": description, "preemptionPolicy": PREEMPT_LOWER,
        });
        let _ = store.create(known::priorityclasses(), "", class);
    }
}

/// The service-account controller's work for a new namespace `ns`: its `default` ServiceAccount.
pub(crate) fn namespace_created(store: &Store, ns: &str) {
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
    let _ = store.create(known::serviceaccounts(), ns, sa);
}

/// An admission plugin's refusal: `403`, worded as `errors.NewForbidden` words it
/// (`<resource> "<name>" is forbidden: <why>`, without the name when the object has none yet).
fn forbidden(res: &ResourceInfo, obj: &Value, why: &str) -> ApiError {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let resource = res.qualified();
    let message = if name.is_empty() {
        format!("{resource} is forbidden: {why}")
    } else {
        format!("{resource} {name:?} is forbidden: {why}")
    };
    ApiError::forbidden(&resource, name, message)
}

/// `NamespaceLifecycle` on create of `obj` (a `res`) in `ns` (`""` for a cluster-scoped resource).
fn namespace_lifecycle(res: &ResourceInfo, ns: &str, obj: &Value, store: &Store) -> Result<(), ApiError> {
    if !res.namespaced || ns.is_empty() {
        return Ok(());
    }
    let namespace = store.get(known::namespaces(), "", ns).map_err(|_| ApiError::not_found("namespaces", ns))?;
    if namespace.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") {
        let why = format!("unable to create new content in namespace {ns} because it is being terminated");
        return Err(forbidden(res, obj, &why));
    }
    Ok(())
}

/// The `ServiceAccount` plugin on create of a pod in `ns`: defaults `spec.serviceAccountName`
/// and refuses a ServiceAccount that does not exist.
fn service_account(res: &ResourceInfo, ns: &str, pod: &mut Value, store: &Store) -> Result<(), ApiError> {
    if !std::ptr::eq(res, known::pods()) {
        return Ok(());
    }
    let named = pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).filter(|s| !s.is_empty());
    let name = named.unwrap_or("default").to_owned();
    if store.get(known::serviceaccounts(), ns, &name).is_err() {
        let why = format!("error looking up service account {ns}/{name}: serviceaccount {name:?} not found");
        return Err(forbidden(res, pod, &why));
    }
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("serviceAccountName".into(), json!(name));
    }
    Ok(())
}

/// The `Priority` plugin on create of a pod: resolves its PriorityClass into `spec.priority`
/// and `spec.preemptionPolicy`.
fn priority(res: &ResourceInfo, pod: &mut Value, store: &Store) -> Result<(), ApiError> {
    if !std::ptr::eq(res, known::pods()) {
        return Ok(());
    }
    let named = pod.pointer("/spec/priorityClassName").and_then(Value::as_str).filter(|s| !s.is_empty());
    let class = match named {
        Some(name) => {
            let class = store.get(known::priorityclasses(), "", name);
            let why = format!("no PriorityClass with name {name} was found");
            Some(class.map_err(|_| forbidden(res, pod, &why))?)
        }
        // `getDefaultPriority`: the `globalDefault` class, if any.
        None => {
            let (classes, _) = store.list(known::priorityclasses(), None, &crate::selector::Selectors::default());
            classes.into_iter().find(|c| c["globalDefault"] == json!(true))
        }
    };
    let value = class.as_ref().and_then(|c| c["value"].as_i64()).unwrap_or(0);
    let policy = class.as_ref().and_then(|c| c["preemptionPolicy"].as_str()).unwrap_or(PREEMPT_LOWER).to_owned();
    if let Some(given) = pod.pointer("/spec/priority").and_then(Value::as_i64)
        && given != value
    {
        let why = format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission \
             controller computed {value} from the given PriorityClass name"
        );
        return Err(forbidden(res, pod, &why));
    }
    if let Some(given) = pod.pointer("/spec/preemptionPolicy").and_then(Value::as_str)
        && given != policy
    {
        let why = format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission \
             controller computed {policy} from the given PriorityClass name"
        );
        return Err(forbidden(res, pod, &why));
    }
    let class_name = class.as_ref().and_then(|c| c.pointer("/metadata/name")).cloned();
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        if let Some(name) = class_name {
            spec.insert("priorityClassName".into(), name);
        }
        spec.insert("priority".into(), json!(value));
        spec.insert("preemptionPolicy".into(), json!(policy));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
