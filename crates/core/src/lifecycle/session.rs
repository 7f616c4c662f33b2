//! A session's start (`repl`): waiting for Jupyter Lab's URL in the run's log, followed as it is
//! written (one read, not the whole log again and again), failing at once when the run ends
//! first, and after a timeout, with the state and the log's last lines.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

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

/// Waits until Jupyter prints its URL in the log of `handle`'s run, following the log as it is
/// written (the URL is taken as its line arrives); fails at once when the run ends first (its
/// log's follow ends and its status is final), and after `timeout`. A follow that cannot be
/// opened, or ends while the run does not, is opened again (from the log's start) after
/// [`REOPEN_AFTER`].
pub async fn wait_for_url(
    backend: &Arc<DynBackend>,
    handle: &JobHandle,
    timeout: Duration,
) -> Result<JupyterUrl, NoUrl> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut state = JobState::Submitting;
    let mut message = None;
    let mut tail = VecDeque::new();
    let mut pause = Duration::ZERO;
    let follow = LogOptions { follow: true, rank: None };
    loop {
        let read = async {
            tokio::time::sleep(pause).await;
            // The log from its start: what an earlier follow read is read again.
            let Ok(Ok(mut stream)) = tokio::time::timeout(LOOK_WITHIN, backend.logs(handle, &follow)).await else {
                return (None, false);
            };
            tail.clear();
            // A URL without a token is taken once no line with a token follows it within
            // TOKEN_GRACE (the log then said all it had to say about the server).
            let mut bare: Option<(JupyterUrl, tokio::time::Instant)> = None;
            loop {
                let next = match &bare {
                    Some((_, until)) => match tokio::time::timeout_at(*until, stream.next()).await {
                        Ok(next) => next,
                        Err(_) => return (bare.map(|(url, _)| url), true),
                    },
                    None => stream.next().await,
                };
                let Some(Ok(line)) = next else { return (bare.map(|(url, _)| url), next.is_none()) };
                match jupyter_url([line.text.as_str()]) {
                    Some(url) if !url.token.is_empty() => return (Some(url), true),
                    Some(url) if bare.is_none() => bare = Some((url, tokio::time::Instant::now() + TOKEN_GRACE)),
                    _ => {}
                }
                if tail.len() == TAIL {
                    tail.pop_front();
                }
                tail.push_back(line.text);
            }
        };
        // Out of time: (None, false).
        let (url, whole) = tokio::time::timeout_at(deadline, read).await.unwrap_or_default();
        if let Some(url) = url {
            return Ok(url);
        }
        if let Ok(Ok(status)) = tokio::time::timeout(LOOK_WITHIN, backend.status(handle)).await {
            (state, message) = (status.state, status.message);
        }
        let ended = state.is_terminal();
        let timed_out = tokio::time::Instant::now() >= deadline;
        if ended || timed_out {
            // A follow cut short by an error (or never opened) may have missed the last lines.
            let tail = if whole || (timed_out && !tail.is_empty()) {
                Vec::from(tail)
            } else {
                last_lines(backend, handle).await
            };
            return Err(NoUrl { ended, state, message, within: timeout, tail });
        }
        pause = REOPEN_AFTER;
    }
}

/// How long a URL without a token waits for a line with one, which is preferred (as
/// [`jupyter_url`] prefers it).
const TOKEN_GRACE: Duration = Duration::from_secs(1);

/// How long after a log follow that could not be opened, or ended while the run did not, the
/// next is opened.
const REOPEN_AFTER: Duration = Duration::from_millis(500);

/// The run's last [`TAIL`] lines, read once (nothing while there is no log).
async fn last_lines(backend: &Arc<DynBackend>, handle: &JobHandle) -> Vec<String> {
    let lines = log_lines(backend, handle).await;
    lines.iter().rev().take(TAIL).rev().cloned().collect()
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use futures::StreamExt as _;

    use super::*;
    use crate::availability::Availability;
    use crate::backend::{Backend, JobStatus, LogLine, LogStream, PreparedJob, RunLayout, SubmitOptions};
    use crate::config::HostKind;
    use crate::job::JobIdentity;
    use crate::solver::{Plan, Request};
    use crate::{Error, Result};

    /// A run whose log gets `lines`, one every 300 ms from its start, then ends in `end` (or
    /// runs on); counts its `logs` calls.
    #[derive(Debug)]
    struct Jupyter {
        born: tokio::time::Instant,
        lines: Vec<&'static str>,
        end: Option<JobState>,
        logs: Mutex<u32>,
    }

    const EVERY: Duration = Duration::from_millis(300);

    impl Jupyter {
        fn new(lines: Vec<&'static str>, end: Option<JobState>) -> Arc<Jupyter> {
            Arc::new(Jupyter { born: tokio::time::Instant::now(), lines, end, logs: Mutex::new(0) })
        }

        /// When line `i` is written (`lines.len()`: the end).
        fn at(&self, i: usize) -> tokio::time::Instant {
            self.born + EVERY * (u32::try_from(i).unwrap() + 1)
        }
    }

    impl std::fmt::Display for Jupyter {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "jupyter double")
        }
    }

    #[async_trait]
    impl Backend for Jupyter {
        fn kind(&self) -> HostKind {
            HostKind::named("box")
        }
        fn layout(&self, _: &JobIdentity, _: &Plan) -> Result<RunLayout> {
            Err(crate::backend::not_supported("layout", self))
        }
        async fn availability(&self, _: &Request) -> Result<Availability> {
            Err(crate::backend::not_supported("availability", self))
        }
        async fn submit(&self, _: &PreparedJob, _: &SubmitOptions) -> Result<JobHandle> {
            Err(crate::backend::not_supported("submit", self))
        }
        async fn status(&self, _: &JobHandle) -> Result<JobStatus> {
            let now = tokio::time::Instant::now();
            let state = match self.end {
                Some(end) if now >= self.at(self.lines.len()) => end,
                _ => JobState::Running,
            };
            Ok(JobStatus { state, exit_code: None, message: None, ranks: Vec::new(), attempt: None })
        }
        async fn logs(&self, _: &JobHandle, options: &LogOptions) -> Result<LogStream> {
            *self.logs.lock().unwrap() += 1;
            let line = |text: &str| Ok(LogLine { rank: None, text: text.to_owned(), source: None });
            if !options.follow {
                let now = tokio::time::Instant::now();
                let so_far = (0..self.lines.len()).take_while(|i| self.at(*i) <= now).map(|i| line(self.lines[i]));
                return Ok(futures::stream::iter(so_far.collect::<Vec<_>>()).boxed());
            }
            let timed: Vec<_> = self.lines.iter().enumerate().map(|(i, l)| (self.at(i), line(l))).collect();
            let lines = futures::stream::iter(timed).then(|(at, line)| async move {
                tokio::time::sleep_until(at).await;
                line
            });
            let end = self.at(self.lines.len());
            let rest = if self.end.is_some() {
                // The follow ends with the run.
                futures::stream::once(tokio::time::sleep_until(end)).filter_map(|()| async { None }).boxed()
            } else {
                futures::stream::pending::<Result<LogLine>>().boxed()
            };
            Ok(lines.chain(rest).boxed())
        }
        async fn cancel(&self, _: &JobHandle) -> Result<JobStatus> {
            Err(Error::NotSupported { operation: "cancel", backend: self.to_string() })
        }
    }

    fn handle() -> JobHandle {
        JobHandle { kind: HostKind::named("box"), host: "box".into(), id: "j".into(), data: serde_json::Value::Null }
    }

    /// The wait follows the log once: the URL is taken from the line as it arrives, not found
    /// by reading the whole log again and again; a run that ends without one is reported with
    /// the lines its follow read.
    #[tokio::test]
    async fn the_wait_for_jupyter_follows_the_log_once() {
        let url = "http://127.0.0.1:8890/lab?token=t0k";
        let up = Jupyter::new(vec!["starting", "still starting", "almost", url], None);
        let backend: Arc<DynBackend> = up.clone();
        let found = wait_for_url(&backend, &handle(), Duration::from_secs(30)).await.unwrap();
        assert_eq!((found.port, found.token.as_str()), (8890, "t0k"));
        assert_eq!(*up.logs.lock().unwrap(), 1, "the log was opened more than once");

        let failed = Jupyter::new(vec!["starting", "Traceback: no jupyter"], Some(JobState::Failed));
        let backend: Arc<DynBackend> = failed.clone();
        let none = wait_for_url(&backend, &handle(), Duration::from_secs(30)).await.unwrap_err();
        assert!(none.ended && none.state == JobState::Failed, "{none:?}");
        assert_eq!(none.tail, ["starting", "Traceback: no jupyter"]);
        assert_eq!(*failed.logs.lock().unwrap(), 1, "the log was opened more than once");

        // A URL with a token is preferred to one without printed just before it; one without
        // is taken when no other follows.
        let bare = "http://127.0.0.1:8891/lab";
        let both = Jupyter::new(vec![bare, "http://127.0.0.1:8891/lab?token=late"], None);
        let backend: Arc<DynBackend> = both.clone();
        let found = wait_for_url(&backend, &handle(), Duration::from_secs(30)).await.unwrap();
        assert_eq!(found.token, "late");
        let only = Jupyter::new(vec![bare, "the server runs"], None);
        let backend: Arc<DynBackend> = only.clone();
        let found = wait_for_url(&backend, &handle(), Duration::from_secs(30)).await.unwrap();
        assert_eq!((found.port, found.token.as_str()), (8891, ""));
        assert_eq!(*only.logs.lock().unwrap(), 1, "the log was opened more than once");

        // Without a URL in time: the lines so far, the state it is in.
        let slow = Jupyter::new(vec!["starting", "slowly"], None);
        let backend: Arc<DynBackend> = slow.clone();
        let none = wait_for_url(&backend, &handle(), EVERY * 4).await.unwrap_err();
        assert!(!none.ended && none.state == JobState::Running, "{none:?}");
        assert_eq!(none.tail, ["starting", "slowly"]);
    }
}
