//! Kubernetes' own admission plugins that a dispatcher can trip over, run where the API server
//! runs them (after decoding and defaults, before the object is stored, dry runs included):
//!
//! - `NamespaceLifecycle` (kubernetes `plugin/pkg/admission/namespace/lifecycle/admission.go`,
//!   `Admit`): a namespaced object is not created in a namespace that does not exist (`404`,
//!   `namespaces "x" not found`, details kind `namespaces`) or that is being terminated (`403`,
//!   `unable to create new content in namespace x because it is being terminated`). Namespaces
//!   themselves are exempt. Read from the v1.33 source, not run against a real server.

use serde_json::Value;

use crate::discovery::{ResourceInfo, known};
use crate::status::ApiError;
use crate::store::Store;

/// An admission plugin's refusal: `403`, worded as `errors.NewForbidden` words it
/// (`<resource> "<name>" is forbidden: <why>`, without the name when the object has none yet).
fn forbidden(res: &ResourceInfo, obj: &Value, why: &str) -> ApiError {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let resource = if res.group.is_empty() { res.plural.to_owned() } else { format!("{}.{}", res.plural, res.group) };
    let message = if name.is_empty() {
        format!("{resource} is forbidden: {why}")
    } else {
        format!("{resource} {name:?} is forbidden: {why}")
    };
    ApiError::forbidden(&resource, name, message)
}

/// `NamespaceLifecycle` on create of `obj` (a `res`) in `ns` (`""` for a cluster-scoped resource).
pub(crate) fn namespace_lifecycle(res: &ResourceInfo, ns: &str, obj: &Value, store: &Store) -> Result<(), ApiError> {
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
