//! What the scheduler leaves when it evicts a pod for `preempt` or `reclaim`, as Volcano
//! v1.15.1 does (read, not run): `defaultEvictor.Evict` in pkg/scheduler/cache/cache.go records
//! a `Warning` `Evict` event on the pod (`Pod is evicted, because of <reason>`), sets its
//! conditions `Ready=False` (reason `Evict`) and `DisruptionTarget=True` (reason
//! `PreemptionByScheduler`, `<schedulerName>: preempting to accommodate a higher priority pod`),
//! then deletes it without a grace period of its own, so the pod's
//! `terminationGracePeriodSeconds` holds (its processes get SIGTERM, then SIGKILL);
//! `SchedulerCache.Evict` records a `Normal` `Evict` event on the PodGroup with the reason.
//! The job controller then sees the running pod deleted: `PodEvicted` (controller.rs).

use serde_json::{Value, json};

use crate::discovery::known;
use crate::events;
use crate::jobpods::str_at;
use crate::store::{Propagation, Store};
use crate::util;

/// Evicts `pod` of `group` because of `reason` (`preempt` or `reclaim`).
pub(crate) fn evict(store: &Store, pod: &Value, group: Option<&Value>, reason: &str) {
    let (ns, name) = (str_at(pod, "/metadata/namespace"), str_at(pod, "/metadata/name"));
    let uid = str_at(pod, "/metadata/uid").to_owned();
    let message = format!("Pod is evicted, because of {reason}");
    events::emit(store, pod, "Warning", "Evict", &message, "volcano");
    let scheduler = match str_at(pod, "/spec/schedulerName") {
        "" => "volcano",
        s => s,
    }
    .to_owned();
    let now = util::now_rfc3339();
    let updated = store.update(known::pods(), ns, name, |obj| {
        if str_at(obj, "/metadata/uid") != uid {
            return;
        }
        let ready = json!({"type": "Ready", "status": "False", "reason": "Evict", "message": message, "lastTransitionTime": now});
        let target = json!({
            "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
            "message": format!("{scheduler}: preempting to accommodate a higher priority pod"),
            "lastTransitionTime": now,
        });
        let mut conds: Vec<Value> = obj
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !matches!(c["type"].as_str(), Some("Ready" | "DisruptionTarget")))
            .collect();
        conds.push(ready);
        conds.push(target);
        obj["status"]["conditions"] = json!(conds);
    });
    if updated.is_err() {
        return;
    }
    if let Err(err) = store.delete(known::pods(), ns, name, Propagation::Background) {
        tracing::debug!(%err, pod = name, "evicted pod not deleted");
        return;
    }
    if let Some(group) = group {
        events::emit(store, group, "Normal", "Evict", reason, "volcano");
    }
}
