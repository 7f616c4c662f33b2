//! The JSON shapes of the API under `/api/` (documented in the README), shared by the server and
//! the [`Source`](crate::Source).

use std::collections::BTreeMap;

use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use theseus_core::backend::{JobState, JobStatus, LogLine};
use theseus_core::ledger::Record;

/// The most runs one page holds.
pub const MAX_PAGE: usize = 500;

/// `GET /api/runs?offset=&limit=&project=&group=&host=&state=`: which runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RunQuery {
    /// Rows to skip (newest first).
    #[serde(default)]
    pub offset: usize,
    /// Rows wanted (default 50, at most [`MAX_PAGE`]).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only this project.
    #[serde(default)]
    pub project: Option<String>,
    /// Only this group.
    #[serde(default)]
    pub group: Option<String>,
    /// Only this host.
    #[serde(default)]
    pub host: Option<String>,
    /// Only this state (`running`, `pending`, ...).
    #[serde(default)]
    pub state: Option<String>,
}

/// A row of the run list: the ledger's record as `theseus list --output json` prints it, and
/// what the dashboard adds.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    /// The record (flattened: `identity`, `kind`, `host`, `handle`, `state`, ...).
    #[serde(flatten)]
    pub record: Record,
    /// The chips it asked for (`8 x h100`, `2 cpu processes`), when recorded.
    pub chips: Option<String>,
    /// Set when its host did not answer the last refresh: the row shows its last known state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unanswered: Option<String>,
}

/// `GET /api/runs`: a page of runs and what the filters offer.
#[derive(Debug, Clone, Serialize)]
pub struct RunPage {
    /// Runs matching the filters (all pages).
    pub total: u64,
    /// The first row's index.
    pub offset: usize,
    /// The page size used.
    pub limit: usize,
    /// The rows, newest first.
    pub runs: Vec<RunRow>,
    /// Runs per state under the filters other than `state`.
    pub counts: BTreeMap<String, u64>,
    /// Every value each filter can take: `project`, `group`, `host`.
    pub facets: BTreeMap<String, Vec<String>>,
    /// Hosts that did not answer the last refresh, and why.
    pub unanswered: BTreeMap<String, String>,
    /// When live rows were last asked of their hosts (RFC 3339), if ever.
    pub refreshed_at: Option<String>,
}

/// The commands a user types for a run, shown on its page.
#[derive(Debug, Clone, Serialize)]
pub struct Commands {
    /// `theseus status RUN`.
    pub status: String,
    /// `theseus logs -f RUN`.
    pub logs: String,
    /// `theseus shell RUN`.
    pub shell: String,
    /// `theseus forward RUN PORT` (with a placeholder port).
    pub forward: String,
    /// `theseus cancel RUN`.
    pub cancel: String,
}

/// `GET /api/runs/{id}`: one run, live.
#[derive(Debug, Clone, Serialize)]
pub struct RunDetail {
    /// The ledger's row (after the refresh).
    pub run: RunRow,
    /// Its live state as its host answered (`theseus status --output json`'s `status`), or
    /// `None` with `status_error` when the host could not be asked.
    pub status: Option<JobStatus>,
    /// Why `status` is missing.
    pub status_error: Option<String>,
    /// What it was submitted to resume from (`--restore`, `--fresh`).
    pub resume: Option<serde_json::Value>,
    /// Its `batch-search.json`, when it has one.
    pub batch_search: Option<serde_json::Value>,
    /// Its `metadata.json` (rank 0), where the backend reads run files.
    pub metadata: Option<serde_json::Value>,
    /// Its `checkpoints.json` (the checkpoint dir, the `latest` marker, the checkpoints), where
    /// the backend reads run files.
    pub checkpoints: Option<serde_json::Value>,
    /// Why `metadata`/`checkpoints` are missing when the backend cannot read run files.
    pub files_note: Option<String>,
    /// The run's files are still being read (an ended run's, from its cluster's storage): the
    /// page asks again in a moment.
    pub files_pending: bool,
    /// The commands for it.
    pub commands: Commands,
}

/// What a run's log stream carries (`/api/runs/{id}/logs/stream`, as SSE events of the same
/// names).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LogEvent {
    /// A line of the run's output (`rank`, `text`, `source`).
    Line(LogLine),
    /// A line from theseus about the stream (waiting for the pods, reconnecting).
    Note {
        /// The line.
        text: String,
    },
    /// The run is over (or the stream of an ended run is complete).
    End {
        /// Its state.
        state: JobState,
        /// Its exit code.
        exit_code: Option<i32>,
    },
    /// The stream broke; the page may reopen it.
    Error {
        /// One line, without secrets.
        error: String,
    },
}

/// A run's log events.
pub type LogEvents = BoxStream<'static, LogEvent>;
