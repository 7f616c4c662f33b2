//! A session's start (`repl`): waiting for Jupyter Lab's URL in the run's log, failing at once
//! when the run ends first, and after a timeout, with the state and the log's last lines.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;

use crate::backend::{DynBackend, JobHandle, JobState, LogOptions};
use crate::session::{JupyterUrl, jupyter_url};

/// Log lines shown when a session fails to start.
const TAIL: usize = 20;

/// How long one look at the log or the status may take.
const LOOK_WITHIN: Duration = Duration::from_secs(15);

/// Why a session has no URL: it ended, or printed none in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct NoUrl {
    /// The session ended before Jupyter Lab started (else: the time ran out).
    pub ended: bool,
    /// Its last state.
    pub state: JobState,
    /// Its backend's last message.
    pub message: Option<String>,
    /// How long it was given.
    pub within: Duration,
    /// The log's last lines.
    pub tail: Vec<String>,
}

impl NoUrl {
    fn describe(&self) -> String {
        let state = self.state;
        let why = if self.ended {
            format!("the session ended ({state}) before Jupyter Lab started")
        } else {
            format!("Jupyter Lab printed no URL within {}s (the session is {state})", self.within.as_secs())
        };
        let message = self.message.as_ref().map(|m| format!(": {m}")).unwrap_or_default();
        let shown = if self.tail.is_empty() {
            "  (the log is empty)".to_owned()
        } else {
            format!("  {}", self.tail.join("\n  "))
        };
        format!("{why}{message}; the log's last lines:\n{shown}")
    }
}

/// Waits until Jupyter prints its URL in the log of `handle`'s run; fails at once when the run
/// ends first, and after `timeout`.
pub async fn wait_for_url(
    backend: &Arc<DynBackend>,
    handle: &JobHandle,
    timeout: Duration,
) -> Result<JupyterUrl, NoUrl> {
    let deadline = Instant::now() + timeout;
    let mut state = JobState::Submitting;
    let mut message = None;
    loop {
        let lines = log_lines(backend, handle).await;
        if let Some(url) = jupyter_url(lines.iter().map(String::as_str)) {
            return Ok(url);
        }
        if let Ok(Ok(status)) = tokio::time::timeout(LOOK_WITHIN, backend.status(handle)).await {
            (state, message) = (status.state, status.message);
        }
        let ended = state.is_terminal();
        if ended || Instant::now() >= deadline {
            // The last lines may have arrived with the end.
            let lines = log_lines(backend, handle).await;
            let tail = lines.iter().rev().take(TAIL).rev().cloned().collect();
            return Err(NoUrl { ended, state, message, within: timeout, tail });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The run's log so far (nothing while there is none).
async fn log_lines(backend: &Arc<DynBackend>, handle: &JobHandle) -> Vec<String> {
    let read = async {
        let Ok(mut stream) = backend.logs(handle, &LogOptions { follow: false, rank: None }).await else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        while let Some(Ok(line)) = stream.next().await {
            lines.push(line.text);
        }
        lines
    };
    tokio::time::timeout(LOOK_WITHIN, read).await.unwrap_or_default()
}
