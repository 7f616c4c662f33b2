//! An ended run's own files (`batch-search.json`, `metadata.json`, `checkpoints.json`) where its
//! backend reads them only while the run runs (Volcano: in rank 0's pod), read once with
//! [`theseus_core::backend::Backend::ended_run_files`] (a short-lived helper pod that mounts
//! the PVC) and kept (up to [`MOST_KEPT`] runs), since an ended run's files no longer change.
//! The read runs in the background: the run's page answers at once, says that the files are
//! being read ([`theseus_ui::RunDetail::files_pending`]) and asks again. A failed read is tried
//! again on a look after [`RETRY_AFTER`]. [`settle`] lets reads in flight finish (and delete
//! their helper) when the dashboard stops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use theseus_core::backend::{DynBackend, JobHandle};
use theseus_core::ledger::Record;

use super::Shared;

/// The files read, in the order of [`super::detail`]'s `files`.
pub(super) const NAMES: [&str; 3] = ["batch-search.json", "metadata.json", "checkpoints.json"];

/// How long a failed read is shown before a look tries again.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The most one read may take: core's bound on a backend's helper-pod reads.
const READ_WITHIN: Duration = Duration::from_secs(300);

/// The most runs kept at once (each up to three files of at most 1 MiB); past it, a read run is
/// forgotten to make room (read again if looked at again).
const MOST_KEPT: usize = 256;

/// The files as JSON (`None`: missing, too large or not JSON).
pub(super) type Files = [Option<serde_json::Value>; 3];

/// What is known of one run's kept files.
#[derive(Debug, Clone)]
enum Entry {
    Reading,
    Read(Files),
    Failed { why: String, at: Instant },
}

/// How many helper pods read at once: a user opening many ended runs does not start a helper
/// for each at once on a cluster other teams share.
const READS_AT_ONCE: usize = 2;

/// The reads, by run id, and the tasks still running.
pub(super) struct Kept {
    entries: Mutex<HashMap<String, Entry>>,
    tasks: Mutex<tokio::task::JoinSet<()>>,
    permits: Arc<tokio::sync::Semaphore>,
}

impl Default for Kept {
    fn default() -> Kept {
        Kept {
            entries: Mutex::default(),
            tasks: Mutex::default(),
            permits: Arc::new(tokio::sync::Semaphore::new(READS_AT_ONCE)),
        }
    }
}

/// What the page shows of an ended run's files now.
pub(super) struct Look {
    pub(super) files: Files,
    /// Still being read: the page asks again.
    pub(super) pending: bool,
    /// Why they are missing.
    pub(super) note: Option<String>,
}

/// The files of `record` (ended, on `backend`) as far as they are read; starts the read on the
/// first look.
pub(super) fn look(shared: &Arc<Shared>, backend: &Arc<DynBackend>, record: &Record) -> Look {
    let run_id = record.identity.run_id.clone();
    let mut entries = shared.kept.entries.lock().unwrap_or_else(|e| e.into_inner());
    match entries.get(&run_id) {
        Some(Entry::Read(files)) => {
            let note = (files[1].is_none() && files[2].is_none()).then(|| {
                format!(
                    "run {run_id} ended and left no metadata.json or checkpoints.json in its status dir on the \
                     PVC of host `{}` (it may never have started its bootstrap)",
                    record.host
                )
            });
            return Look { files: files.clone(), pending: false, note };
        }
        Some(Entry::Reading) => return reading(record),
        Some(Entry::Failed { why, at }) if at.elapsed() < RETRY_AFTER => {
            let note = format!(
                "run {run_id} ended; its files on the PVC of host `{}` could not be read: {why} (tried again \
                 on a look after {} s)",
                record.host,
                RETRY_AFTER.as_secs()
            );
            return Look { files: Files::default(), pending: false, note: Some(note) };
        }
        _ => {}
    }
    if entries.len() >= MOST_KEPT {
        let done = entries.iter().find(|(_, e)| !matches!(e, Entry::Reading)).map(|(id, _)| id.clone());
        if let Some(id) = done {
            entries.remove(&id);
        }
    }
    entries.insert(run_id.clone(), Entry::Reading);
    drop(entries);
    let (shared2, backend, handle) = (Arc::clone(shared), Arc::clone(backend), record.handle.clone());
    let mut tasks = shared.kept.tasks.lock().unwrap_or_else(|e| e.into_inner());
    // Reap what ended, so the set holds only reads in flight.
    while tasks.try_join_next().is_some() {}
    let permits = Arc::clone(&shared.kept.permits);
    tasks.spawn(async move {
        // Waiting for a turn ends with the dashboard (no helper was started).
        let turn = tokio::select! {
            turn = permits.acquire_owned() => turn.ok(),
            _ = theseus_core::interrupt::wait() => None,
        };
        let Some(_turn) = turn else { return };
        let entry = read(&backend, &handle).await;
        shared2.kept.entries.lock().unwrap_or_else(|e| e.into_inner()).insert(run_id, entry);
    });
    reading(record)
}

fn reading(record: &Record) -> Look {
    let note = format!(
        "run {} ended: its files (metadata.json, checkpoints.json) stay in its status dir on the PVC of host \
         `{}`, read now through a short-lived helper pod",
        record.identity.run_id, record.host
    );
    Look { files: Files::default(), pending: true, note: Some(note) }
}

async fn read(backend: &Arc<DynBackend>, handle: &JobHandle) -> Entry {
    let got = tokio::time::timeout(READ_WITHIN, backend.ended_run_files(handle, &NAMES)).await;
    match got {
        Ok(Ok(Some(files))) => {
            let mut json = Files::default();
            for (slot, bytes) in json.iter_mut().zip(files) {
                *slot = bytes.and_then(|b| serde_json::from_slice(&b).ok());
            }
            Entry::Read(json)
        }
        Ok(Ok(None)) => Entry::Read(Files::default()),
        Ok(Err(e)) => Entry::Failed { why: super::one_line(&e), at: Instant::now() },
        Err(_) => Entry::Failed { why: format!("no answer within {} s", READ_WITHIN.as_secs()), at: Instant::now() },
    }
}

/// Waits, at most `within`, for the reads in flight: on an interrupt each deletes its helper
/// pod and ends.
pub(super) async fn settle(kept: &Kept, within: Duration) {
    let mut tasks = std::mem::take(&mut *kept.tasks.lock().unwrap_or_else(|e| e.into_inner()));
    let _ = tokio::time::timeout(within, async { while tasks.join_next().await.is_some() {} }).await;
}
