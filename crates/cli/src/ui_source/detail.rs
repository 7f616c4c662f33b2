//! One run for its page (`GET /api/runs/{id}`), as `theseus status` shows it: its state asked
//! of its host (bounded as `status`), what it resumed from, its batch-size search, its
//! `metadata.json` and `checkpoints.json` where the backend reads run files (an ended Volcano
//! run's once, from its PVC: `kept`), and the commands for it; and its cancel
//! (`POST /api/runs/{id}/cancel`), as `theseus cancel`.

use std::sync::Arc;

use theseus_core::backend::{DynBackend, JobHandle};
use theseus_core::lifecycle;
use theseus_core::shell;
use theseus_ui::{Commands, RunDetail, RunRow, SourceError};

use super::logs::Cancel;
use super::{Shared, failed, one_line};

/// Host types whose backends read no run files (their runs' files are on each VM's disk).
const NO_RUN_FILES: [&str; 1] = ["tpu"];

/// Host types whose backends read run files only while the run has a running pod; an ended
/// run's are read once through [`theseus_core::backend::Backend::ended_run_files`].
const LIVE_RUN_FILES: [&str; 1] = ["volcano"];

/// The run `run` (a name or a run id), live; cancelled first when `cancel`.
pub(super) async fn detail(shared: &Arc<Shared>, run: &str, cancel: bool) -> Result<RunDetail, SourceError> {
    let ledger = shared.open_ledger()?;
    let record = shared.find(&ledger, run)?;
    let run_id = record.identity.run_id.clone();
    let within = shared.within(&record.host);
    let backend = shared
        .loaded()
        .and_then(|loaded| {
            crate::runs::backend_for(&shared.ctx, loaded, &ledger, &record)
                .map_err(|e| SourceError::Failed(format!("{e:#}")))
        })
        .map_err(|e| e.to_string());
    let (status, status_error) = match &backend {
        Ok(backend) if cancel => {
            // The follows of the run stop first, and end with what this cancel records.
            let _ = shared.cancels.send((run_id.clone(), Cancel::Started));
            let cancelled = lifecycle::cancel(&ledger, &record, backend, || within).await;
            let _ = shared.cancels.send((run_id.clone(), Cancel::Done));
            let status = cancelled.map_err(|e| match e {
                // Asked too early, not a failure: the page may ask again.
                lifecycle::LifecycleError::SubmitInProgress { .. } => SourceError::BadRequest(e.to_string()),
                e => failed(e),
            })?;
            (Some(status), None)
        }
        Err(e) if cancel => return Err(SourceError::Failed(format!("cannot cancel run {run_id}: {e}"))),
        Ok(backend) => match lifecycle::refresh(&ledger, &record, backend, within).await {
            Ok(status) => (Some(status), None),
            Err(e) => (None, Some(one_line(&e))),
        },
        Err(e) => (None, Some(e.clone())),
    };
    // The row as the refresh (or cancel) left it.
    let record = shared.find(&ledger, &run_id)?;
    let chips = ledger.chips(&run_id).map_err(failed)?;
    let resume = ledger.resume(&run_id).unwrap_or_default();
    let live_only = backend.as_ref().is_ok_and(|b| LIVE_RUN_FILES.contains(&b.kind().as_str()));
    let mut files_pending = false;
    // Why the files are missing, when the read said (a kept read's state, a refused exec).
    let mut said = None;
    let files = match &backend {
        Ok(backend) if live_only && record.state.is_terminal() => {
            let look = super::kept::look(shared, backend, &record);
            files_pending = look.pending;
            said = look.note;
            Some(look.files)
        }
        Ok(backend) if !NO_RUN_FILES.contains(&backend.kind().as_str()) => {
            let (files, error) = files(backend, &record.handle, within).await;
            said = error.filter(|_| files[1].is_none()).map(|e| format!("the run's files could not be read: {e}"));
            Some(files)
        }
        _ => None,
    };
    let files_note = match (&backend, &files) {
        _ if said.is_some() => said,
        (Ok(backend), Some([_, None, _])) if live_only => Some(format!(
            "host `{}` is a {} host: its runs' files (metadata.json, checkpoints.json) are read from rank 0's \
             pod while it runs, and this run has none running",
            record.host,
            backend.kind(),
        )),
        (Ok(backend), None) => Some(format!(
            "host `{}` is a {} host: its runs' files (metadata.json, checkpoints.json) stay on the cluster, \
             where theseus ui does not read them; `theseus shell {}` reaches them while the run is live",
            record.host,
            backend.kind(),
            shell::quote(&run_id)
        )),
        _ => None,
    };
    let [batch_search, metadata, checkpoints] = files.unwrap_or_default();
    Ok(RunDetail {
        run: RunRow { record, chips, unanswered: None },
        status,
        status_error,
        resume,
        batch_search,
        metadata,
        checkpoints,
        files_note,
        files_pending,
        commands: commands(&run_id),
    })
}

/// The run's `batch-search.json`, `metadata.json` and `checkpoints.json`, each read within
/// `within` (at most [`theseus_core::backend::RUN_FILE_LIMIT`] bytes, the backend's bound);
/// `None` when missing, unreadable or not JSON; and the first failure to read one.
async fn files(
    backend: &Arc<DynBackend>,
    handle: &JobHandle,
    within: std::time::Duration,
) -> (super::kept::Files, Option<String>) {
    let read = |name: &'static str| async move {
        match tokio::time::timeout(within, backend.run_file(handle, name)).await {
            Ok(Ok(bytes)) => (bytes.and_then(|b| serde_json::from_slice(&b).ok()), None),
            Ok(Err(e)) => (None, Some(one_line(&e))),
            Err(_) => (None, Some(format!("reading {name}: no answer within {} s", within.as_secs()))),
        }
    };
    let [search, metadata, checkpoints] = super::kept::NAMES;
    let (search, metadata, checkpoints) = tokio::join!(read(search), read(metadata), read(checkpoints));
    let error = [&search.1, &metadata.1, &checkpoints.1].into_iter().flatten().next().cloned();
    ([search.0, metadata.0, checkpoints.0], error)
}

/// The commands a user types for run `run_id`, the id shell-quoted.
pub(super) fn commands(run_id: &str) -> Commands {
    let id = shell::quote(run_id);
    Commands {
        status: format!("theseus status {id}"),
        logs: format!("theseus logs -f {id}"),
        shell: format!("theseus shell {id}"),
        forward: format!("theseus forward {id} 8888"),
        cancel: format!("theseus cancel {id}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn commands_quote_the_run_id() {
        let plain = super::commands("train-20260101-abc");
        assert_eq!(plain.forward, "theseus forward train-20260101-abc 8888");
        assert_eq!(plain.logs, "theseus logs -f train-20260101-abc");
        let odd = super::commands("a b;rm -rf ~");
        assert_eq!(odd.cancel, "theseus cancel 'a b;rm -rf ~'");
        assert_eq!(odd.shell, "theseus shell 'a b;rm -rf ~'");
    }
}
