//! What `gc` must keep: the run paths of live runs, and which runs' submits are over.

use std::collections::BTreeSet;

use crate::backend::JobState;
use crate::ledger::{Ledger, Record};

/// Run paths of the runs of `records` that are submitting, pending or running (refresh them
/// first, see [`super::refresh_live`]: a row whose backend did not answer keeps its state).
pub fn live_run_paths(records: &[Record]) -> BTreeSet<String> {
    records
        .iter()
        .filter(|r| matches!(r.state, JobState::Submitting | JobState::Pending | JobState::Running))
        .map(|r| r.identity.run_path())
        .collect()
}

/// Run paths of the ledger's runs that no client is submitting (no live client holds their
/// submit lock): their submit is over, finished or killed, so a `.partial` or upload dir of
/// theirs will never be finished.
pub fn abandoned_run_paths(ledger: &Ledger) -> crate::Result<BTreeSet<String>> {
    Ok(ledger
        .list(i64::MAX as usize)?
        .into_iter()
        .filter(|r| !ledger.submit_in_progress(&r.identity.run_id))
        .map(|r| r.identity.run_path())
        .collect())
}
