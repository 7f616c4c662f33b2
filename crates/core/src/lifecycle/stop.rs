//! A run that a client attends (a `repl` session): stopping it with a reason, and waiting for
//! its end; both record what the backend says.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{DynBackend, JobHandle, JobStatus};
use crate::ledger::Ledger;

/// How [`stop`] ended.
#[derive(Debug)]
pub enum Stopped {
    /// Cancelled; the state its backend gave, recorded with the reason.
    Done(JobStatus),
    /// The backend could not cancel it (nothing recorded).
    Failed(crate::Error),
    /// The backend did not finish cancelling in time (nothing recorded).
    TimedOut,
}

/// Cancels run `run_id` (`handle` on `backend`) within `within` and records its state with
/// `why` as the message.
pub async fn stop(
    ledger: &Ledger,
    backend: &Arc<DynBackend>,
    (handle, run_id): (&JobHandle, &str),
    why: &str,
    within: Duration,
) -> Stopped {
    match tokio::time::timeout(within, backend.cancel(handle)).await {
        Ok(Ok(status)) => {
            // The run is stopped either way; a ledger that cannot take it keeps the last state.
            let _ = ledger.update_state(run_id, status.state, status.exit_code, Some(why));
            Stopped::Done(status)
        }
        Ok(Err(e)) => Stopped::Failed(e),
        Err(_) => Stopped::TimedOut,
    }
}

/// Waits until run `run_id` ends, asking its backend every `every` (each answer within
/// `within`; a failed or late answer is asked again), and records its final state.
pub async fn wait_for_end(
    ledger: &Ledger,
    backend: &Arc<DynBackend>,
    (handle, run_id): (&JobHandle, &str),
    every: Duration,
    within: Duration,
) -> JobStatus {
    loop {
        tokio::time::sleep(every).await;
        if let Ok(Ok(status)) = tokio::time::timeout(within, backend.status(handle)).await
            && status.state.is_terminal()
        {
            let _ = ledger.update_state(run_id, status.state, status.exit_code, status.message.as_deref());
            return status;
        }
    }
}
