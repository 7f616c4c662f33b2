//! The life of a run after [`crate::dispatch`] submitted it, as a library: what `status`,
//! `list`, `logs -f`, `cancel`, `submit --replace`/`--follow` and `gc` decide between asking a
//! run's backend and recording the answer in the [`Ledger`]. Nothing here prints: results are
//! typed, and progress while following a run is a stream of [`FollowEvent`]s for the caller to
//! show.
//!
//! - [`refresh()`] and [`refresh_live`]: a run's state now, and every live run's at once; a run
//!   whose client stopped in the middle of `submit` is settled from what its backend says.
//! - [`cancel()`]: the cancel rules (a run still being submitted refuses, one that never started
//!   anything is settled as cancelled).
//! - [`follow()`]: a run's output to its end, saying why it has not started, and cancelling it
//!   when it never can or after its backend's start timeout ([`StartProgress`] decides).
//! - [`settle_replaced`]: the older runs a `--replace` stopped are recorded as replaced.
//! - [`live_run_paths`] and [`abandoned_run_paths`]: what `gc` must keep.
//! - [`wait_for_url`], [`stop()`] and [`wait_for_end`]: a session a client attends (`repl`): its
//!   start, and its stop with a reason or its end.
//!
//! Backends are the caller's (core knows no backend crate): each function takes the run's
//! backend, already made.

use std::time::Duration;

use crate::backend::{JobState, JobStatus};
use crate::ledger::{Ledger, Record};

mod cancel;
mod follow;
mod gc;
#[cfg(test)]
mod gone_tests;
mod refresh;
mod session;
mod settle;
mod start;
mod stop;
#[cfg(test)]
mod tests;

pub use cancel::cancel;
pub use follow::{FollowEnd, FollowEvent, FollowOptions, follow};
pub use gc::{abandoned_run_paths, live_run_paths};
pub use refresh::{LiveRefresh, SilentHost, refresh, refresh_live};
pub use session::{NoUrl, wait_for_url};
pub use settle::{Unsettled, settle_replaced};
pub use start::{StartProgress, StartStep};
pub use stop::{Stopped, stop, wait_for_end};

/// How long a backend's answer about one run is waited for (`status`, `list`, a replaced run,
/// whether a followed run can ever start), unless the host says otherwise.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// What a run's state says when its client stopped in the middle of `submit`.
const STOPPED_DURING_SUBMIT: &str = "the client stopped during submit (interrupted)";

/// The start of a live run's message while its cancel is under way: a cancel interrupted after
/// its backend deleted the job leaves it, so that a later look that finds the job gone settles
/// the run as cancelled instead of unknown.
const CANCEL_ASKED: &str = "a cancel was asked for";

/// Whether `record` is a live run whose cancel was asked for and not confirmed.
fn cancel_asked(record: &crate::ledger::Record) -> bool {
    !record.state.is_terminal() && record.message.as_deref().is_some_and(|m| m.starts_with(CANCEL_ASKED))
}

/// Why a lifecycle step failed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// The run's host did not answer within the time given.
    #[error("host `{host}` did not answer within {}s about run {run_id}", within.as_secs())]
    NoAnswer {
        /// The host asked.
        host: String,
        /// The run asked about.
        run_id: String,
        /// How long it was given.
        within: Duration,
    },
    /// Another client is submitting the run right now.
    #[error("run {run_id} is being submitted right now; cancel it once its submit has returned")]
    SubmitInProgress {
        /// The run.
        run_id: String,
    },
    /// The backend or the ledger failed.
    #[error(transparent)]
    Failed(#[from] crate::Error),
}

/// Whether `record` is a run whose client stopped in the middle of `submit`: still
/// `submitting` with nobody holding its submit lock, or already settled as such.
fn stopped_during_submit(ledger: &Ledger, record: &Record) -> bool {
    match record.state {
        JobState::Submitting => !ledger.submit_in_progress(&record.identity.run_id),
        JobState::Unknown => record.message.as_deref().is_some_and(|m| m.starts_with(STOPPED_DURING_SUBMIT)),
        _ => false,
    }
}

fn status_of(state: JobState, message: String) -> JobStatus {
    JobStatus { state, exit_code: None, message: Some(message), ranks: Vec::new(), attempt: None }
}

/// Records `status` as the run's state, and its ranks when it has any ([`Ledger::set_ranks`]).
fn save(ledger: &Ledger, run_id: &str, status: &JobStatus) -> crate::Result<()> {
    ledger.update_state(run_id, status.state, status.exit_code, status.message.as_deref())?;
    ledger.set_ranks(run_id, &status.ranks)
}

/// `error` and its causes on one line, `error: cause: cause` (as `anyhow` shows them with `{:#}`).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        line.push_str(&format!(": {c}"));
        cause = c.source();
    }
    line
}
