//! A run's state now ([`refresh`]), and every live run's at once ([`refresh_live`]): the
//! backend is asked, a record left `submitting` by a client that stopped is settled, and what
//! was learned is stored in the ledger.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::{LifecycleError, STOPPED_DURING_SUBMIT, cancel_asked, save, status_of, stopped_during_submit};
use crate::backend::{DynBackend, JobState, JobStatus};
use crate::ledger::{Ledger, Record, is_placeholder};

/// The state of a run now: asks its backend (within `within`), settles a record left
/// `submitting` by a client that stopped, and stores what it learned in the ledger.
pub async fn refresh(
    ledger: &Ledger,
    record: &Record,
    backend: &Arc<DynBackend>,
    within: Duration,
) -> Result<JobStatus, LifecycleError> {
    let run_id = &record.identity.run_id;
    if record.state == JobState::Submitting {
        if ledger.submit_in_progress(run_id) {
            return Ok(status_of(JobState::Submitting, "another theseus is submitting it right now".into()));
        }
        if is_placeholder(&record.handle) {
            let status = status_of(
                JobState::Unknown,
                format!(
                    "{STOPPED_DURING_SUBMIT}; host `{}` cannot look the run up from what was recorded before submit",
                    record.host
                ),
            );
            save(ledger, run_id, &status)?;
            return Ok(status);
        }
    }
    let answer = tokio::time::timeout(within, backend.status(&record.handle))
        .await
        .map_err(|_| LifecycleError::NoAnswer { host: record.host.clone(), run_id: run_id.clone(), within })?;
    let status = match answer {
        Ok(status) => status,
        // Backends that delete finished, cancelled or replaced jobs (Volcano) cannot report them
        // any more: the ledger's last known state is the answer, and says so.
        Err(crate::Error::NotFound { what }) => {
            // As the ledger has it now: a cancel may have been asked for, or recorded, while the
            // backend was asked (the job it deleted is what is not found).
            let seen = record;
            let record = &ledger.find(run_id)?.filter(|r| &r.identity.run_id == run_id).unwrap_or_else(|| seen.clone());
            let status = match record.state {
                state if state.is_terminal() => JobStatus {
                    state,
                    exit_code: record.exit_code,
                    // What the ledger said of its end (how it ended, why), then what is gone.
                    message: Some(match record.message.as_deref().filter(|m| !m.is_empty()) {
                        Some(said) => {
                            format!("last known state (as of {}): {said}; {what} no longer exists", record.updated_at)
                        }
                        None => format!("last known state (as of {}); {what} no longer exists", record.updated_at),
                    }),
                    // How each rank ended, as last recorded.
                    ranks: ledger.ended_ranks(run_id)?,
                    attempt: None,
                },
                JobState::Pending | JobState::Running if !cancel_asked(record) => {
                    // The job ended and was collected (or deleted) before anyone looked: how it
                    // ended is in the files it left, when the backend can read them.
                    match remains(record, backend).await? {
                        Some(status) => status,
                        None => status_of(
                            JobState::Unknown,
                            format!(
                                "{what} no longer exists on host `{}` (replaced, deleted or cleaned up)",
                                record.host
                            ),
                        ),
                    }
                }
                _ if cancel_asked(record) => status_of(
                    JobState::Cancelled,
                    format!("{what} is gone: an earlier cancel deleted it and was interrupted"),
                ),
                JobState::Submitting => status_of(
                    JobState::Unknown,
                    format!("{STOPPED_DURING_SUBMIT}; host `{}` has no such run ({what} not found)", record.host),
                ),
                JobState::Unknown => status_of(
                    JobState::Unknown,
                    record.message.clone().unwrap_or_else(|| format!("{what} no longer exists")),
                ),
                _ => status_of(
                    JobState::Unknown,
                    format!("{what} no longer exists on host `{}` (replaced, deleted or cleaned up)", record.host),
                ),
            };
            if record.state.is_terminal() {
                return Ok(status);
            }
            return meanwhile(ledger, record, status);
        }
        Err(e) => return Err(e.into()),
    };
    let mut status = status;
    if status.state == JobState::Submitting && stopped_during_submit(ledger, record) {
        // The backend sees a submit under way (its claim, its helper); the ledger knows that
        // the client doing it is gone (its lock is free), so it will never finish.
        let seen = status.message.take().unwrap_or_else(|| "the submit had started".into());
        status = status_of(JobState::Unknown, format!("{STOPPED_DURING_SUBMIT}; host `{}` says: {seen}", record.host));
    }
    if record.state.is_terminal() && status.state == record.state && record.message.is_some() {
        // The ledger's reason ("replaced by run R") says more than the backend's ("cancelled").
        status.message = record.message.clone();
    }
    meanwhile(ledger, record, status)
}

/// Records `status`, which the backend was asked for after `seen` was read, unless another
/// client recorded the run's end meanwhile (a cancel: the end of a slow read of what the run left
/// must not replace it), which then stands and is returned; a cancel asked for meanwhile of a run
/// still live stays said (see `cancel_asked`).
fn meanwhile(ledger: &Ledger, seen: &Record, mut status: JobStatus) -> Result<JobStatus, LifecycleError> {
    let run_id = &seen.identity.run_id;
    let now = ledger.find(run_id)?.filter(|r| &r.identity.run_id == run_id);
    match now {
        Some(now) if !seen.state.is_terminal() && now.state.is_terminal() => {
            let ranks = if status.ranks.is_empty() { ledger.ended_ranks(run_id)? } else { status.ranks };
            return Ok(JobStatus { state: now.state, exit_code: now.exit_code, message: now.message, ranks, ..status });
        }
        Some(now) if cancel_asked(&now) && !status.state.is_terminal() => status.message = now.message,
        _ => {}
    }
    save(ledger, run_id, &status)?;
    Ok(status)
}

/// How long the files a run left are read for ([`crate::backend::Backend::remains`]: a helper
/// pod may have to start), once per run whose job is gone. A backstop: backends bound their own
/// steps well within it, so that what they start is also taken back by them.
const REMAINS_TIMEOUT: Duration = Duration::from_secs(300);

/// How many runs' remains are read at once by this process.
static REMAINS_AT_ONCE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

/// The end of a run whose job is gone, from what it left; `None` when the backend cannot tell.
/// A failure to read it is an error, and the run is left as the ledger has it: a later look
/// tries again.
pub(super) async fn remains(record: &Record, backend: &Arc<DynBackend>) -> Result<Option<JobStatus>, LifecycleError> {
    // `list` may settle many gone runs at once, and a backend may start a pod for each read:
    // a few at a time, so a look at a big ledger never floods a shared cluster with helpers.
    let _turn = REMAINS_AT_ONCE.acquire().await;
    match tokio::time::timeout(REMAINS_TIMEOUT, backend.remains(&record.handle)).await {
        Ok(answer) => Ok(answer?),
        Err(_) => Err(LifecycleError::NoAnswer {
            host: record.host.clone(),
            run_id: record.identity.run_id.clone(),
            within: REMAINS_TIMEOUT,
        }),
    }
}

/// What [`refresh_live`] could not learn.
#[derive(Debug, Default)]
pub struct LiveRefresh {
    /// Rows left in their last known state: run id to why.
    pub unanswered: HashMap<String, String>,
    /// Each host that could not be asked or did not answer, once, by host name.
    pub silent: Vec<SilentHost>,
}

/// A host whose live runs are shown as last known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SilentHost {
    /// The host.
    pub host: String,
    /// Why (its first failure).
    pub reason: String,
    /// How many of its rows that leaves as they were.
    pub rows: usize,
}

/// Asks the backends about every row of `records` that is not terminal, all at once, each
/// within `within(host)`, and updates the rows: a row is never shown live when its backend no
/// longer has the run. `backend_of` makes the backend of a row's host (asked once per host);
/// rows whose backend cannot be made, or does not answer in time, keep their last known state
/// and are returned with their hosts.
pub async fn refresh_live(
    ledger: &Ledger,
    records: &mut [Record],
    mut backend_of: impl FnMut(&Record) -> Result<Arc<DynBackend>, String>,
    within: impl Fn(&str) -> Duration,
) -> LiveRefresh {
    let mut unanswered = HashMap::new();
    let mut backends: HashMap<String, Result<Arc<DynBackend>, String>> = HashMap::new();
    let mut asks = Vec::new();
    // Per host: why it could not be asked, and how many rows that leaves as they were.
    let mut silent: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for (i, record) in records.iter().enumerate().filter(|(_, r)| !r.state.is_terminal()) {
        let backend = backends.entry(record.host.clone()).or_insert_with(|| backend_of(record)).clone();
        match backend {
            Ok(backend) => {
                let within = within(&record.host);
                asks.push(async move { (i, refresh(ledger, record, &backend, within).await) })
            }
            Err(reason) => {
                silent.entry(record.host.clone()).or_insert((reason.clone(), 0)).1 += 1;
                unanswered.insert(record.identity.run_id.clone(), reason);
            }
        }
    }
    let answers = futures::future::join_all(asks).await;
    for (i, answer) in answers {
        let record = &mut records[i];
        match answer {
            Ok(status) => {
                record.state = status.state;
                record.exit_code = status.exit_code;
                record.message = status.message;
            }
            Err(e) => {
                let reason = super::with_causes(&e);
                tracing::debug!("list: {reason}");
                silent.entry(record.host.clone()).or_insert((reason.clone(), 0)).1 += 1;
                unanswered.insert(record.identity.run_id.clone(), reason);
            }
        }
    }
    let silent = silent.into_iter().map(|(host, (reason, rows))| SilentHost { host, reason, rows }).collect();
    LiveRefresh { unanswered, silent }
}
