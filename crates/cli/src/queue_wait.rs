//! Waiting while a session sits in a Slurm queue (`repl`; issue 28, part `standalone`): the
//! time its job is `pending` does not count against `--startup-timeout`, which starts once it
//! runs; a job Slurm says can never start (`Backend::never_starts`) is given up at once. Progress goes to stderr (the state, the
//! scheduler's reason, the time waited) when it changes and every half minute;
//! `--slurm-wait-timeout` bounds the wait (the original's flag; unbounded by default).

use std::sync::Arc;
use std::time::Duration;

use theseus_core::backend::{DynBackend, JobHandle, JobState};

use crate::context::Context;

/// How often the state is asked for (one `squeue` over the host's SSH master on Slurm, as the
/// original polled `wait_until_running`).
const POLL: Duration = Duration::from_secs(5);

/// How often an unchanged wait is shown again.
const SHOW_EVERY: Duration = Duration::from_secs(30);

/// How long one status call may take before the wait gives up asking (the start timeout then
/// takes over).
const ASK_WITHIN: Duration = Duration::from_secs(30);

/// Why the wait ended without the job starting.
#[derive(Debug)]
pub(crate) enum StillQueued {
    /// `--slurm-wait-timeout` ran out.
    TimedOut {
        /// How long it waited.
        waited: Duration,
        /// The scheduler's last word on it.
        reason: Option<String>,
    },
    /// The scheduler says it can never start (`Backend::never_starts`).
    Never(String),
}

impl std::fmt::Display for StillQueued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StillQueued::TimedOut { waited, reason } => write!(
                f,
                "it waited {} in the queue ({}) and --slurm-wait-timeout ran out",
                human(*waited),
                reason.as_deref().unwrap_or("pending")
            ),
            StillQueued::Never(why) => write!(f, "it can never start: {why}"),
        }
    }
}

/// Waits while the job of `handle` is submitting or pending; `Ok` once it is anything else (or
/// its state cannot be read), `Err` when `limit` ran out first.
pub(crate) async fn wait_while_pending(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    handle: &JobHandle,
    name: &str,
    limit: Option<Duration>,
) -> Result<(), StillQueued> {
    let start = tokio::time::Instant::now();
    let mut shown: Option<(String, tokio::time::Instant)> = None;
    loop {
        let status = match tokio::time::timeout(ASK_WITHIN, backend.status(handle)).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => {
                tracing::debug!("status of session {name} while waiting in the queue: {e}");
                return Ok(());
            }
            Err(_) => return Ok(()),
        };
        if !matches!(status.state, JobState::Pending | JobState::Submitting) {
            if shown.is_some() {
                ctx.info(format!("theseus: session {name} left the queue after {}", human(start.elapsed())));
            }
            return Ok(());
        }
        let waited = start.elapsed();
        let line = status.message.clone().unwrap_or_else(|| status.state.as_str().to_owned());
        if let Some(limit) = limit
            && waited >= limit
        {
            return Err(StillQueued::TimedOut { waited, reason: status.message });
        }
        if status.state == JobState::Pending
            && let Ok(Ok(Some(why))) = tokio::time::timeout(ASK_WITHIN, backend.never_starts(handle)).await
        {
            return Err(StillQueued::Never(why));
        }
        let now = tokio::time::Instant::now();
        let due = match &shown {
            None => true,
            Some((last, at)) => *last != line || now.duration_since(*at) >= SHOW_EVERY,
        };
        if due {
            let bound = limit.map(|l| format!(" of --slurm-wait-timeout {}", human(l))).unwrap_or_default();
            ctx.info(format!("theseus: session {name} is waiting in the queue: {line}; {}{bound}", human(waited)));
            shown = Some((line, now));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `1h2m3s`, `4m0s`, `5s`.
pub(crate) fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}
