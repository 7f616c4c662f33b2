//! A page of the run list from the ledger (`GET /api/runs`): the query checked, the rows with
//! their chips, the counts and facets, and the rows of hosts the last refresh did not hear from.

use std::collections::BTreeMap;

use theseus_core::backend::JobState;
use theseus_core::ledger::{Ledger, RunFilter};
use theseus_ui::{MAX_PAGE, RunPage, RunQuery, RunRow, SourceError};

use super::failed;

/// Rows of a page when the query does not say.
pub(super) const DEFAULT_LIMIT: usize = 50;

/// The page `query` asks for; `unanswered` (host to why) marks the live rows of those hosts.
pub(super) fn page(
    ledger: &Ledger,
    query: &RunQuery,
    unanswered: &BTreeMap<String, String>,
    refreshed_at: Option<String>,
) -> Result<RunPage, SourceError> {
    let filter = filter(query)?;
    let limit = match query.limit {
        None => DEFAULT_LIMIT,
        Some(n) if (1..=MAX_PAGE).contains(&n) => n,
        Some(n) => return Err(SourceError::BadRequest(format!("limit {n}: give 1 to {MAX_PAGE} runs per page"))),
    };
    let page = ledger.page(&filter, query.offset, limit).map_err(failed)?;
    let runs = page
        .rows
        .into_iter()
        .map(|row| {
            let unanswered = unanswered.get(&row.record.host).filter(|_| !row.record.state.is_terminal()).cloned();
            RunRow { record: row.record, chips: row.chips, unanswered }
        })
        .collect();
    Ok(RunPage {
        total: page.total,
        offset: query.offset,
        limit,
        runs,
        counts: ledger.counts(&filter).map_err(failed)?,
        facets: ledger.facets().map_err(failed)?,
        unanswered: unanswered.clone(),
        refreshed_at,
    })
}

/// The ledger's filter for `query`: empty values mean no filter; a state must be one of the
/// states.
fn filter(query: &RunQuery) -> Result<RunFilter, SourceError> {
    let given = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
    let state = match given(&query.state) {
        None => None,
        Some(s) => Some(JobState::parse(&s).ok_or_else(|| {
            let states = ALL_STATES.map(JobState::as_str).join(", ");
            SourceError::BadRequest(format!("state `{s}`: not a state (one of {states})"))
        })?),
    };
    Ok(RunFilter { project: given(&query.project), group: given(&query.group), host: given(&query.host), state })
}

/// Every state, in the order a run goes through them.
pub(super) const ALL_STATES: [JobState; 8] = [
    JobState::Submitting,
    JobState::Pending,
    JobState::Running,
    JobState::Completed,
    JobState::Failed,
    JobState::Cancelled,
    JobState::Preempted,
    JobState::Unknown,
];

#[cfg(test)]
mod tests {
    use theseus_core::backend::JobHandle;
    use theseus_core::config::HostKind;
    use theseus_core::job::JobIdentity;
    use theseus_core::ledger::{Record, RunKind};

    use super::*;

    fn record(name: &str, host: &str, state: JobState, at: &str) -> Record {
        let identity = JobIdentity::new(name, Some("proj"), None);
        Record {
            handle: JobHandle {
                kind: HostKind::LOCAL,
                host: host.into(),
                id: identity.run_id.clone(),
                data: Default::default(),
            },
            identity,
            kind: RunKind::Job,
            host: host.into(),
            submitted_at: at.into(),
            updated_at: at.into(),
            state,
            exit_code: None,
            message: None,
        }
    }

    fn ledger() -> (tempfile::TempDir, Ledger) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path()).unwrap();
        let rows = [
            ("a", "local", JobState::Completed, "2026-01-01T00:00:01Z"),
            ("b", "far", JobState::Running, "2026-01-01T00:00:02Z"),
            ("c", "far", JobState::Failed, "2026-01-01T00:00:03Z"),
            ("d", "local", JobState::Running, "2026-01-01T00:00:04Z"),
        ];
        for (name, host, state, at) in rows {
            let r = record(name, host, state, at);
            ledger.insert(&r).unwrap();
            ledger.update_state(&r.identity.run_id, state, None, None).unwrap();
            ledger.set_chips(&r.identity.run_id, "1 x cpu").unwrap();
        }
        (dir, ledger)
    }

    #[test]
    fn a_page_has_its_rows_counts_facets_and_the_silent_hosts_live_rows_marked() {
        let (_dir, ledger) = ledger();
        let silent = BTreeMap::from([("far".to_owned(), "no answer within 10s".to_owned())]);
        let query = RunQuery { limit: Some(2), ..RunQuery::default() };
        let page = page(&ledger, &query, &silent, Some("2026-01-01T00:01:00Z".into())).unwrap();
        assert_eq!((page.total, page.offset, page.limit), (4, 0, 2));
        let names: Vec<_> = page.runs.iter().map(|r| r.record.identity.name.as_str()).collect();
        assert_eq!(names, ["d", "c"]);
        assert_eq!(page.runs[0].chips.as_deref(), Some("1 x cpu"));
        // Only live rows of a silent host show its reason: an ended run's state is final.
        assert!(page.runs.iter().all(|r| r.unanswered.is_none()));
        let second = super::page(&ledger, &RunQuery { offset: 2, ..query }, &silent, None).unwrap();
        let b = second.runs.iter().find(|r| r.record.identity.name == "b").unwrap();
        assert_eq!(b.unanswered.as_deref(), Some("no answer within 10s"));
        assert_eq!(page.counts.get("running"), Some(&2));
        assert_eq!(page.facets["host"], ["far", "local"]);
        assert_eq!(page.unanswered, silent);
    }

    #[test]
    fn filters_apply_empty_values_mean_none_and_bad_values_are_refused() {
        let (_dir, ledger) = ledger();
        let none = BTreeMap::new();
        let query = RunQuery {
            host: Some("far".into()),
            state: Some("running".into()),
            project: Some(String::new()),
            ..RunQuery::default()
        };
        let page = page(&ledger, &query, &none, None).unwrap();
        assert_eq!(page.total, 1);
        assert_eq!(page.runs[0].record.identity.name, "b");
        // Counts leave the state filter out: the other states of the host stay visible.
        assert_eq!(page.counts.get("failed"), Some(&1));
        for bad in [
            RunQuery { state: Some("sleeping".into()), ..RunQuery::default() },
            RunQuery { limit: Some(0), ..RunQuery::default() },
            RunQuery { limit: Some(MAX_PAGE + 1), ..RunQuery::default() },
        ] {
            assert!(matches!(super::page(&ledger, &bad, &none, None), Err(SourceError::BadRequest(_))), "{bad:?}");
        }
    }
}
