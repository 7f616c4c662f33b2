//! What `theseus ui` shows: the [`theseus_ui::Source`] over the ledger and the backends.
//!
//! - `runs` pages the ledger (`pages`), never waiting on a host: a background refresher
//!   (`refresher`) asks every live run of its host every `--refresh` seconds, as `list` does,
//!   and keeps the hosts that did not answer.
//! - `run`, `logs` and `cancel` are `theseus status`, `logs -f` and `cancel` (`detail`, `logs`).
//! - `capacity` probes every configured host at once, as `plan` does (`capacity`).
//!
//! The ledger is SQLite (not `Sync`): the pages share one connection behind a mutex, used on a
//! blocking thread; core's lifecycle steps, which hold a ledger across awaits, each run on a
//! blocking thread of the runtime with a connection of their own ([`on_ledger`]).

mod capacity;
mod detail;
mod kept;
mod logs;
mod pages;
mod refresher;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use theseus_core::config::LoadedConfig;
use theseus_core::ledger::{Ledger, Record};
use theseus_ui::{LogEvents, RunDetail, RunPage, RunQuery, Source, SourceError};

use crate::context::Context;

/// What the refresher learned in its last round.
#[derive(Debug, Default, Clone)]
struct Refreshed {
    /// Hosts that did not answer, and why.
    unanswered: BTreeMap<String, String>,
    /// When the round ended (RFC 3339).
    at: Option<String>,
}

/// What every request shares.
struct Shared {
    ctx: Context,
    /// The config as loaded at start, or why it could not be.
    loaded: Result<LoadedConfig, String>,
    /// The connection the pages read through.
    pages: Mutex<Ledger>,
    refreshed: Mutex<Refreshed>,
    capacity: tokio::sync::Mutex<Option<(std::time::Instant, serde_json::Value)>>,
    /// The cancels this dashboard makes, for the follows of the same runs (see `logs`).
    cancels: tokio::sync::broadcast::Sender<(String, logs::Cancel)>,
    /// Ended runs' files read once where the backend reads them only while a run runs.
    kept: kept::Kept,
}

impl Shared {
    /// A connection of its own (read-only when the ledger cannot be written, as `status` reads it).
    fn open_ledger(&self) -> Result<Ledger, SourceError> {
        self.ctx
            .ledger()
            .or_else(|e| self.ctx.read_only_ledger().map_err(|_| e))
            .map_err(|e| SourceError::Failed(format!("{e:#}")))
    }

    fn loaded(&self) -> Result<&LoadedConfig, SourceError> {
        self.loaded.as_ref().map_err(|e| SourceError::Failed(e.clone()))
    }

    /// The run `run` (a name or a run id), or [`SourceError::NotFound`].
    fn find(&self, ledger: &Ledger, run: &str) -> Result<Record, SourceError> {
        ledger.find(run).map_err(failed)?.ok_or_else(|| SourceError::NotFound(run.to_owned()))
    }

    /// How long `host` is waited for (as `status` waits).
    fn within(&self, host: &str) -> Duration {
        crate::runs::answer_within(self.loaded.as_ref().ok(), host)
    }
}

/// The dashboard's [`Source`]; its refresher stops when it is dropped.
pub(crate) struct LedgerSource {
    shared: Arc<Shared>,
    refresher: tokio::task::JoinHandle<()>,
}

impl Drop for LedgerSource {
    fn drop(&mut self) {
        self.refresher.abort();
    }
}

impl LedgerSource {
    /// Opens the ledger and starts the refresher (a round every `every`). Call inside the
    /// runtime (a multi-thread one: lifecycle steps run on its blocking threads).
    pub(crate) fn start(
        ctx: Context,
        loaded: Result<LoadedConfig, String>,
        every: Duration,
    ) -> anyhow::Result<LedgerSource> {
        let pages = ctx.ledger_for_reading()?;
        let shared = Arc::new(Shared {
            ctx,
            loaded,
            pages: Mutex::new(pages),
            refreshed: Mutex::new(Refreshed::default()),
            capacity: tokio::sync::Mutex::new(None),
            cancels: tokio::sync::broadcast::channel(64).0,
            kept: kept::Kept::default(),
        });
        let refresher = tokio::spawn(refresher::run(Arc::clone(&shared), every));
        Ok(LedgerSource { shared, refresher })
    }

    /// Lets the reads still in flight end, at most `within` (after an interrupt: each deletes
    /// the helper pod it started).
    pub(crate) async fn settle(&self, within: Duration) {
        kept::settle(&self.shared.kept, within).await;
    }
}

#[async_trait]
impl Source for LedgerSource {
    async fn runs(&self, query: &RunQuery) -> Result<RunPage, SourceError> {
        let shared = Arc::clone(&self.shared);
        let query = query.clone();
        blocking(move || {
            let refreshed = shared.refreshed.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let ledger = shared.pages.lock().unwrap_or_else(|e| e.into_inner());
            pages::page(&ledger, &query, &refreshed.unanswered, refreshed.at)
        })
        .await?
    }

    async fn run(&self, run: &str) -> Result<RunDetail, SourceError> {
        let shared = Arc::clone(&self.shared);
        let run = run.to_owned();
        on_ledger(move || async move { detail::detail(&shared, &run, false).await }).await
    }

    async fn logs(&self, run: &str, follow: bool) -> Result<LogEvents, SourceError> {
        logs::logs(Arc::clone(&self.shared), run, follow).await
    }

    async fn cancel(&self, run: &str) -> Result<RunDetail, SourceError> {
        let shared = Arc::clone(&self.shared);
        let run = run.to_owned();
        on_ledger(move || async move { detail::detail(&shared, &run, true).await }).await
    }

    async fn capacity(&self) -> Result<serde_json::Value, SourceError> {
        capacity::cached(&self.shared).await
    }

    async fn version(&self) -> Result<String, SourceError> {
        let shared = Arc::clone(&self.shared);
        blocking(move || shared.pages.lock().unwrap_or_else(|e| e.into_inner()).change_mark().map_err(failed)).await?
    }
}

/// Runs blocking `work` (SQLite) off the async threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, SourceError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| SourceError::Failed(format!("internal error: {e}")))
}

/// Runs the future `make` returns on a blocking thread, driven by this runtime: core's lifecycle
/// steps hold a [`Ledger`] (not `Sync`) across awaits, so their futures cannot move between
/// the runtime's threads.
async fn on_ledger<F, Fut, T>(make: F) -> Result<T, SourceError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, SourceError>>,
    T: Send + 'static,
{
    let runtime = tokio::runtime::Handle::current();
    blocking(move || runtime.block_on(make())).await?
}

/// A failure as one line.
fn failed(e: impl std::error::Error) -> SourceError {
    SourceError::Failed(one_line(&e))
}

/// `error` and its causes on one line (`error: cause: cause`), each cause once.
fn one_line(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !line.contains(&next) {
            line.push_str(": ");
            line.push_str(&next);
        }
        cause = c.source();
    }
    line.replace('\n', " ")
}
