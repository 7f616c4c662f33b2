//! The seam between the server and what it shows: [`Source`], implemented by the CLI over the
//! ledger and the backends (and by the crate's tests).

use async_trait::async_trait;

use crate::api::{LogEvents, RunDetail, RunPage, RunQuery};

/// Why a [`Source`] could not answer; the server maps each to an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// No such run (404).
    #[error("no run `{0}` in the ledger")]
    NotFound(String),
    /// The request is wrong: a filter value, a paging bound (400).
    #[error("{0}")]
    BadRequest(String),
    /// Anything else, as one line (500); never carries a secret.
    #[error("{0}")]
    Failed(String),
}

/// What the dashboard shows, from the ledger and the backends. Every string it returns is
/// already free of secrets.
#[async_trait]
pub trait Source: Send + Sync + 'static {
    /// A page of runs, newest first, matching `query`, with counts and filter values.
    /// Answered from the ledger (as last refreshed), never waiting on a host.
    async fn runs(&self, query: &RunQuery) -> Result<RunPage, SourceError>;

    /// One run, its live state asked of its host (bounded as `theseus status`).
    async fn run(&self, run: &str) -> Result<RunDetail, SourceError>;

    /// The run's merged output: its whole history, then, when `follow` and the run is not
    /// over, the new lines as they are printed, and last [`LogEvent::End`](crate::LogEvent).
    async fn logs(&self, run: &str, follow: bool) -> Result<LogEvents, SourceError>;

    /// Cancels the run (as `theseus cancel`) and returns it after.
    async fn cancel(&self, run: &str) -> Result<RunDetail, SourceError>;

    /// What `plan` sees per host and queue (see `Capacity` in the README's API section):
    /// `{"hosts": [{"host", "kind", "availability", "queues", "queues_error"}], "probed_at"}`.
    async fn capacity(&self) -> Result<serde_json::Value, SourceError>;

    /// A mark that changes whenever a run is added, removed or changes state (the ledger's
    /// [`change_mark`](theseus_core::ledger::Ledger::change_mark)); `/api/events` announces it.
    async fn version(&self) -> Result<String, SourceError>;
}
