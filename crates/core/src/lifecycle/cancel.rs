//! The cancel rules: a run another client is still submitting refuses; a run recorded before
//! its backend could name it is looked up instead; a run whose client stopped during submit is
//! settled as cancelled, whatever its backend had started of it; a run whose job is gone after
//! a cancel was asked for (and interrupted) is settled as cancelled.

use std::sync::Arc;
use std::time::Duration;

use super::{
    CANCEL_ASKED, LifecycleError, STOPPED_DURING_SUBMIT, cancel_asked, refresh, save, status_of, stopped_during_submit,
};
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
    if !record.state.is_terminal() && record.state != JobState::Submitting {
        // Said before the backend is asked: a cancel stopped after its delete went out leaves
        // this, and the next look that finds the job gone knows why (see `cancel_asked`).
        let asked = format!("{CANCEL_ASKED}; not confirmed yet");
        ledger.update_state(run_id, record.state, record.exit_code, Some(&asked))?;
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
        // Ended and settled before (its backend removes ended jobs): nothing to stop, and the
        // last known state is the answer, as `status` gives it.
        Err(crate::Error::NotFound { what }) if record.state.is_terminal() => {
            return Ok(JobStatus {
                state: record.state,
                exit_code: record.exit_code,
                message: Some(format!("already {}; {what} no longer exists", record.state.as_str())),
                ranks: ledger.ended_ranks(run_id)?,
                attempt: None,
            });
        }
        // An earlier cancel deleted it and was stopped before it could say so.
        Err(crate::Error::NotFound { what }) if cancel_asked(record) => {
            status_of(JobState::Cancelled, format!("{what} is gone: an earlier cancel deleted it and was interrupted"))
        }
        // Ended and collected before anyone looked (Volcano's `ttlSecondsAfterFinished`): nothing
        // to stop. Its end is what the run left, when the backend can read that; otherwise the
        // run is left as it was (this cancel deleted nothing) and the error says what is gone.
        Err(crate::Error::NotFound { what }) if matches!(record.state, JobState::Pending | JobState::Running) => {
            let ended = super::refresh::remains(record, backend).await;
            match ended {
                Ok(Some(status)) => status,
                Ok(None) | Err(_) => {
                    ledger.update_state(run_id, record.state, record.exit_code, record.message.as_deref())?;
                    return Err(ended.err().unwrap_or_else(|| crate::Error::NotFound { what }.into()));
                }
            }
        }
        Err(e) => return Err(e.into()),
    };
    save(ledger, run_id, &status)?;
    Ok(status)
}
