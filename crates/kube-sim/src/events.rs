//! `v1` Events about objects, written by the controller and the runtime (deduplicated by
//! object, reason and message so reconcile loops do not pile them up).

use serde_json::{Value, json};

use crate::discovery::known;
use crate::selector::{FieldSelector, Selectors};
use crate::store::Store;
use crate::util;

/// Records an Event about `object` unless the same one (reason and message) exists.
pub(crate) fn emit(store: &Store, object: &Value, kind: &str, reason: &str, message: &str, component: &str) {
    let meta = &object["metadata"];
    let ns = meta["namespace"].as_str().unwrap_or("default");
    let name = meta["name"].as_str().unwrap_or("");
    let uid = meta["uid"].as_str().unwrap_or("");
    let Ok(fields) = FieldSelector::parse(&format!("involvedObject.uid={uid},reason={reason}")) else { return };
    let (existing, _) = store.list(known::events(), Some(ns), &Selectors { fields, ..Selectors::default() });
    if existing.iter().any(|e| e["message"].as_str() == Some(message)) {
        return;
    }
    let now = util::now_rfc3339();
    let event = json!({
        "metadata": {"name": format!("{name}.{}", util::name_suffix()), "namespace": ns},
        "involvedObject": {
            "kind": object["kind"], "apiVersion": object["apiVersion"], "name": name, "namespace": ns,
            "uid": uid, "resourceVersion": meta["resourceVersion"],
        },
        "reason": reason, "message": message, "type": kind, "count": 1,
        "firstTimestamp": now, "lastTimestamp": now,
        "source": {"component": component},
        "reportingComponent": component,
    });
    if let Err(err) = store.create(known::events(), ns, event) {
        tracing::warn!(%err, "could not record an event");
    }
}
