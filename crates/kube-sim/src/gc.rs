//! Volcano's garbage collector (pkg/controllers/garbagecollector/garbagecollector.go, read, not
//! run): a vcjob with `spec.ttlSecondsAfterFinished` is deleted, foreground and with its uid as
//! a precondition, once that many seconds have passed since it finished (`processJob`,
//! `processTTL`). Finished means `Completed`, `Failed` or `Terminated` (`isJobFinished`: an
//! `Aborted` job is kept), at `status.state.lastTransitionTime` (`jobFinishTime`). Deleting the
//! job collects its pods, PodGroup and the rest it owns.

use serde_json::Value;

use crate::discovery::known;
use crate::jobpods::str_at;
use crate::selector::Selectors;
use crate::store::{Preconditions, Propagation, Store};
use crate::util;

/// Deletes every finished job whose TTL has expired at `now` (seconds since the epoch).
/// Returns the earliest expiry still to come, for the controller to run a pass then.
pub(crate) fn collect(store: &Store, now: u64) -> Option<u64> {
    let (jobs, _) = store.list(known::jobs(), None, &Selectors::default());
    let mut next: Option<u64> = None;
    for job in &jobs {
        let Some(expire_at) = expiry(job) else { continue };
        if expire_at > now {
            next = Some(next.map_or(expire_at, |n| n.min(expire_at)));
            continue;
        }
        let pre = Preconditions { uid: Some(str_at(job, "/metadata/uid").to_owned()), resource_version: None };
        let (ns, name) = (str_at(job, "/metadata/namespace"), str_at(job, "/metadata/name"));
        if let Err(err) = store.delete_if(known::jobs(), ns, name, Propagation::Foreground, &pre) {
            tracing::debug!(%err, job = %name, "the garbage collector did not delete a job");
        }
    }
    next
}

/// When a job's TTL expires: `None` for a job being deleted, without a TTL, not finished, or
/// without the time it finished (`needsCleanup`, `getFinishAndExpireTime`).
fn expiry(job: &Value) -> Option<u64> {
    if job.pointer("/metadata/deletionTimestamp").is_some() {
        return None;
    }
    let ttl = job.pointer("/spec/ttlSecondsAfterFinished").and_then(Value::as_u64)?;
    if !matches!(str_at(job, "/status/state/phase"), "Completed" | "Failed" | "Terminated") {
        return None;
    }
    let finished = util::parse_rfc3339(str_at(job, "/status/state/lastTransitionTime"))?;
    Some(finished.saturating_add(ttl))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_finished_jobs_with_a_ttl_expire() {
        let job = |phase: &str, ttl: Value| {
            json!({"spec": {"ttlSecondsAfterFinished": ttl},
                   "status": {"state": {"phase": phase, "lastTransitionTime": "1970-01-01T00:01:40Z"}}})
        };
        assert_eq!(expiry(&job("Completed", json!(30))), Some(130));
        assert_eq!(expiry(&job("Failed", json!(0))), Some(100));
        assert_eq!(expiry(&job("Terminated", json!(5))), Some(105));
        assert_eq!(expiry(&job("Aborted", json!(5))), None, "isJobFinished leaves Aborted out");
        assert_eq!(expiry(&job("Running", json!(5))), None);
        assert_eq!(expiry(&job("Completed", Value::Null)), None);
    }
}
