//! The cancel rules: a run another client is still submitting refuses; a run recorded before
//! its backend could name it is looked up instead; a run whose client stopped during submit is
//! settled as cancelled, whatever its backend had started of it.

use std::sync::Arc;
use std::time::Duration;

use super::{LifecycleError, STOPPED_DURING_SUBMIT, refresh, save, status_of, stopped_during_submit};
use crate::backend::{DynBackend, JobState, JobStatus};
use crate::ledger::{Ledger, Record, is_placeholder};

/// Cancels the run of `record` on `backend` and records its state; returns that state. A run
/// whose handle is a placeholder cannot be reached: its state is refreshed instead (see
/// [`refresh()`](super::refresh())), waiting as long as `within()` says (asked only then).
pub async fn cancel(
    ledger: &Ledger,
    record: &Record,
    backend: &Arc<DynBackend>,
    within: impl FnOnce() -> Duration,
) -> Result<JobStatus, LifecycleError> {
    let run_id = &record.identity.run_id;
    if record.state == JobState::Submitting && ledger.submit_in_progress(run_id) {
        return Err(LifecycleError::SubmitInProgress { run_id: run_id.clone() });
    }
    if is_placeholder(&record.handle) {
        return refresh(ledger, record, backend, within()).await;
    }
    let status = match backend.cancel(&record.handle).await {
        // Stopped, and nothing will start it again: its client is gone.
        Ok(status) if !status.state.is_terminal() && stopped_during_submit(ledger, record) => status_of(
            JobState::Cancelled,
            format!(
                "{STOPPED_DURING_SUBMIT}; stopped what it had started (host `{}` said: {})",
                record.host,
                status.message.as_deref().unwrap_or(status.state.as_str())
            ),
        ),
        Ok(status) => status,
        // A client killed before it made anything: nothing runs, and nothing ever will (no
        // client works on it), so the run is settled as cancelled.
        Err(crate::Error::NotFound { what }) if stopped_during_submit(ledger, record) => status_of(
            JobState::Cancelled,
            format!("{STOPPED_DURING_SUBMIT} before it started anything ({what} not found); nothing to stop"),
        ),
        Err(e) => return Err(e.into()),
    };
    save(ledger, run_id, &status)?;
    Ok(status)
}
