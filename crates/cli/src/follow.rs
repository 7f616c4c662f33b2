//! Following a run to its end on the terminal (`logs -f`, `submit --follow`): core's
//! [`lifecycle::follow`] with its output on stdout, its progress on stderr, and its end as the
//! exit code.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use theseus_core::backend::{DynBackend, JobHandle, JobState};
use theseus_core::ledger::Ledger;
use theseus_core::lifecycle::{self, FollowEnd, FollowEvent, FollowOptions};

use crate::context::Context;
use crate::output::print_line;
use crate::signals::Interrupted;

/// Streams a run's output until it ends and returns the exit code: 0 when completed, the job's
/// exit code (else 1) otherwise, 1 when it was cancelled for not starting (see
/// [`FollowOptions`]). A signal (SIGINT, SIGTERM) stops following and leaves the job running,
/// as `kubectl logs -f` and `docker logs -f` do: the program ends with [`Interrupted`], which
/// says how to follow again or stop the job.
pub(crate) async fn follow(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    ledger: &Ledger,
    (handle, run_id): (&JobHandle, &str),
    options: FollowOptions,
) -> Result<ExitCode> {
    let end = lifecycle::follow(ledger, backend, (handle, run_id), options, |event| match event {
        FollowEvent::Line(line) => print_line(&line),
        FollowEvent::NotStarted(reason) => ctx.info(format!("theseus: not started yet: {reason}")),
        FollowEvent::NeverStarts(reason) => ctx.info(format!("theseus: run {run_id} can never start: {reason}")),
        FollowEvent::StartTimedOut { within, reason } => {
            ctx.info(format!("theseus: run {run_id} did not start within {} s: {reason}", within.as_secs()))
        }
        FollowEvent::Cancelling => ctx.info(format!("theseus: cancelling run {run_id}")),
    })
    .await?;
    let status = match end {
        FollowEnd::Ended(status) => status,
        FollowEnd::GaveUp(_) => return Ok(ExitCode::from(1)),
        FollowEnd::Detached(signal) => {
            return Err(Interrupted {
                signal,
                what: format!(
                    "stopped following run {run_id}, which keeps running (`theseus logs -f {run_id}` follows it again, `theseus cancel {run_id}` stops it)"
                ),
            }
            .into());
        }
    };
    let code = status.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
    ctx.info(format!("theseus: run {run_id} {}{code}", status.state));
    if let Some(m) = &status.message {
        ctx.info(format!("theseus: {m}"));
    }
    Ok(match status.state {
        JobState::Completed => ExitCode::SUCCESS,
        _ => ExitCode::from(status.exit_code.filter(|c| (1..=255).contains(c)).unwrap_or(1) as u8),
    })
}
