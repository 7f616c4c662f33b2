//! After a `submit --replace`: the older runs of the name on the host that the ledger still
//! shows as live are settled from what their backend says now; those it reports gone or
//! cancelled are recorded as replaced by the new run.

use std::sync::Arc;

use super::STATUS_TIMEOUT;
use crate::backend::{DynBackend, JobState};
use crate::job::JobIdentity;
use crate::ledger::Ledger;

/// An older run whose state could not be settled (it keeps its last known state).
#[derive(Debug, thiserror::Error)]
pub enum Unsettled {
    /// Its backend failed to say.
    #[error("cannot tell whether run {run_id} was replaced: {error}")]
    Unclear {
        /// The older run.
        run_id: String,
        /// What the backend said.
        error: crate::Error,
    },
    /// Its backend did not answer within [`STATUS_TIMEOUT`].
    #[error("status of run {run_id} did not answer in time")]
    NoAnswer {
        /// The older run.
        run_id: String,
    },
}

/// Settles the runs of `identity`'s name on `host` (other than its own) that the ledger shows as
/// live, asking `backend` about each; each it cannot settle goes to `unsettled`, as it comes. A
/// run another client is still submitting is left alone.
pub async fn settle_replaced(
    ledger: &Ledger,
    backend: &Arc<DynBackend>,
    identity: &JobIdentity,
    host: &str,
    mut unsettled: impl FnMut(Unsettled),
) -> crate::Result<()> {
    for old in ledger.live_of_name(identity, host)? {
        let run_id = &old.identity.run_id;
        if old.state == JobState::Submitting && ledger.submit_in_progress(run_id) {
            continue;
        }
        let replaced = format!("replaced by run {}", identity.run_id);
        let status = tokio::time::timeout(STATUS_TIMEOUT, backend.status(&old.handle)).await;
        match status {
            Ok(Err(crate::Error::NotFound { .. })) => {
                ledger.update_state(run_id, JobState::Cancelled, None, Some(&replaced))?;
            }
            Ok(Ok(status)) if matches!(status.state, JobState::Cancelled | JobState::Unknown) => {
                ledger.update_state(run_id, JobState::Cancelled, status.exit_code, Some(&replaced))?;
            }
            Ok(Ok(status)) => {
                ledger.update_state(run_id, status.state, status.exit_code, status.message.as_deref())?;
            }
            Ok(Err(error)) => unsettled(Unsettled::Unclear { run_id: run_id.clone(), error }),
            Err(_) => unsettled(Unsettled::NoAnswer { run_id: run_id.clone() }),
        }
    }
    Ok(())
}
