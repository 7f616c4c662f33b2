//! The background refresher of `theseus ui`: every `--refresh` seconds, every live run of the
//! ledger (all of them, not only a page) is asked of its host, as `theseus list` asks them
//! (core's [`lifecycle::refresh_live`], each host within its `answer_within`), and what is
//! learned is stored in the ledger, where the pages read it. Hosts that did not answer are kept
//! (host to why) for [`theseus_ui::RunPage::unanswered`]; nothing is printed per round.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use theseus_core::ledger::{Ledger, Record, RunFilter, now_rfc3339};
use theseus_core::lifecycle;

use super::{Refreshed, Shared, on_ledger};

/// The most live runs one round asks about.
const MAX_LIVE: usize = 100_000;

/// Refreshes every `every` until the task is aborted; one round at a time.
pub(super) async fn run(shared: Arc<Shared>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let round = Arc::clone(&shared);
        match on_ledger(move || async move { round_of(&round).await }).await {
            Ok(unanswered) => {
                *shared.refreshed.lock().unwrap_or_else(|e| e.into_inner()) =
                    Refreshed { unanswered, at: Some(now_rfc3339()) };
            }
            Err(e) => tracing::warn!("ui: the live runs could not be refreshed: {e}"),
        }
    }
}

/// One round: the hosts that did not answer, and why.
async fn round_of(shared: &Shared) -> Result<BTreeMap<String, String>, theseus_ui::SourceError> {
    let ledger = shared.open_ledger()?;
    let mut records = live(&ledger).map_err(super::failed)?;
    if records.is_empty() {
        return Ok(BTreeMap::new());
    }
    let loaded = match shared.loaded() {
        Ok(loaded) => loaded,
        // Without a config no backend can be made: every live run's host is silent.
        Err(e) => return Ok(records.into_iter().map(|r| (r.host, e.to_string())).collect()),
    };
    let learned = lifecycle::refresh_live(
        &ledger,
        &mut records,
        |record| crate::runs::backend_for(&shared.ctx, loaded, &ledger, record).map_err(|e| format!("{e:#}")),
        |host| shared.within(host),
    )
    .await;
    Ok(learned.silent.into_iter().map(|silent| (silent.host, silent.reason)).collect())
}

/// Every run of the ledger that is not over.
pub(super) fn live(ledger: &Ledger) -> theseus_core::Result<Vec<Record>> {
    let mut records = Vec::new();
    for state in super::pages::ALL_STATES.into_iter().filter(|s| !s.is_terminal()) {
        let filter = RunFilter { state: Some(state), ..RunFilter::default() };
        records.extend(ledger.page(&filter, 0, MAX_LIVE)?.rows.into_iter().map(|row| row.record));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use theseus_core::backend::{JobHandle, JobState};
    use theseus_core::config::HostKind;
    use theseus_core::job::JobIdentity;
    use theseus_core::ledger::RunKind;

    use super::*;

    #[test]
    fn every_run_not_over_is_refreshed_whatever_page_it_is_on() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path()).unwrap();
        let states = [JobState::Completed, JobState::Running, JobState::Pending, JobState::Unknown, JobState::Failed];
        for (i, state) in states.into_iter().cycle().take(200).enumerate() {
            let identity = JobIdentity::new(&format!("r{i}"), None, None);
            let record = Record {
                handle: JobHandle {
                    kind: HostKind::LOCAL,
                    host: "local".into(),
                    id: identity.run_id.clone(),
                    data: Default::default(),
                },
                identity,
                kind: RunKind::Job,
                host: "local".into(),
                submitted_at: format!("2026-01-01T00:{:02}:{:02}Z", i / 60, i % 60),
                updated_at: String::new(),
                state,
                exit_code: None,
                message: None,
            };
            ledger.insert(&record).unwrap();
            ledger.update_state(&record.identity.run_id, state, None, None).unwrap();
        }
        let live = live(&ledger).unwrap();
        assert_eq!(live.len(), 120, "running, pending and unknown rows of 200");
        assert!(live.iter().all(|r| !r.state.is_terminal()));
    }
}
