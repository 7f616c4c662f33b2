//! Tests of the dashboard's pages of the ledger: filters, paging bounds, counts, facets, chips,
//! the change mark, the page index, and ledgers from before them.

use super::*;
use crate::config::HostKind;

fn run(run_id: &str, project: &str, host: &str, state: JobState, at: &str) -> Record {
    Record {
        identity: JobIdentity {
            name: format!("n-{run_id}"),
            project: project.into(),
            group: "g".into(),
            run_id: run_id.into(),
        },
        kind: RunKind::Job,
        host: host.into(),
        handle: JobHandle { kind: HostKind::LOCAL, host: host.into(), id: run_id.into(), data: serde_json::json!({}) },
        submitted_at: at.into(),
        updated_at: at.into(),
        state,
        exit_code: None,
        message: None,
    }
}

/// r0..r9, one a minute, r9 newest: projects a (even) and b (odd), host x (r0..r4) and y (r5..r9),
/// running when the number divides by 3 (r0, r3, r6, r9), completed otherwise.
fn ten(ledger: &Ledger) {
    for i in 0..10 {
        let project = if i % 2 == 0 { "a" } else { "b" };
        let host = if i < 5 { "x" } else { "y" };
        let state = if i % 3 == 0 { JobState::Running } else { JobState::Completed };
        ledger.insert(&run(&format!("r{i}"), project, host, state, &format!("2026-01-01T00:0{i}:00Z"))).unwrap();
    }
}

fn ids(page: &Page) -> Vec<&str> {
    page.rows.iter().map(|r| r.record.identity.run_id.as_str()).collect()
}

#[test]
fn filters_combine_and_pages_hold_the_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    ten(&ledger);
    let all = RunFilter::default();
    let page = ledger.page(&all, 0, 3).unwrap();
    assert_eq!((page.total, ids(&page)), (10, vec!["r9", "r8", "r7"]));
    assert_eq!(ids(&ledger.page(&all, 3, 3).unwrap()), ["r6", "r5", "r4"]);
    let filter = RunFilter { project: Some("a".into()), host: Some("y".into()), ..RunFilter::default() };
    let page = ledger.page(&filter, 0, 50).unwrap();
    assert_eq!((page.total, ids(&page)), (2, vec!["r8", "r6"]), "project a on host y");
    let running = RunFilter { state: Some(JobState::Running), ..filter.clone() };
    let page = ledger.page(&running, 0, 50).unwrap();
    assert_eq!((page.total, ids(&page)), (1, vec!["r6"]), "and running");
    let group = RunFilter { group: Some("nope".into()), ..RunFilter::default() };
    assert_eq!(ledger.page(&group, 0, 50).unwrap().total, 0);
    // A value is a value, never SQL.
    let hostile = RunFilter { project: Some("a' OR '1'='1".into()), ..RunFilter::default() };
    assert_eq!(ledger.page(&hostile, 0, 50).unwrap().total, 0);
    // Counts leave the state filter out (the dashboard shows every state's count).
    let counts = ledger.counts(&running).unwrap();
    assert_eq!(counts.into_iter().collect::<Vec<_>>(), [("completed".to_owned(), 1), ("running".to_owned(), 1)]);
    let counts = ledger.counts(&all).unwrap();
    assert_eq!((counts["running"], counts["completed"]), (4, 6));
}

#[test]
fn paging_bounds_give_short_or_empty_pages_with_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let empty = ledger.page(&RunFilter::default(), 0, 50).unwrap();
    assert_eq!((empty.total, empty.rows.len()), (0, 0), "an empty ledger");
    ten(&ledger);
    let all = RunFilter::default();
    assert_eq!(ids(&ledger.page(&all, 8, 5).unwrap()), ["r1", "r0"], "the last page is short");
    let past = ledger.page(&all, 10, 5).unwrap();
    assert_eq!((past.total, past.rows.len()), (10, 0), "past the end: no rows, the total still");
    assert_eq!(ledger.page(&all, usize::MAX, 5).unwrap().rows.len(), 0, "a huge offset");
    assert_eq!(ledger.page(&all, 0, 0).unwrap().rows.len(), 0, "a zero limit");
    assert_eq!(ledger.page(&all, 0, usize::MAX).unwrap().rows.len(), 10, "a huge limit is all");
}

#[test]
fn facets_list_every_value_sorted_and_chips_come_with_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    ten(&ledger);
    let facets = ledger.facets().unwrap();
    assert_eq!(facets["project"], ["a", "b"]);
    assert_eq!(facets["group"], ["g"]);
    assert_eq!(facets["host"], ["x", "y"]);
    ledger.set_chips("r9", "8 x h100").unwrap();
    assert_eq!(ledger.chips("r9").unwrap().as_deref(), Some("8 x h100"));
    assert_eq!(ledger.chips("r8").unwrap(), None, "not recorded");
    assert_eq!(ledger.chips("nope").unwrap(), None, "no such run");
    let page = ledger.page(&RunFilter::default(), 0, 2).unwrap();
    let chips: Vec<_> = page.rows.iter().map(|r| r.chips.as_deref()).collect();
    assert_eq!(chips, [Some("8 x h100"), None]);
}

/// A ledger written before `chips` (and the page index and change counter), opened read-only:
/// pages, chips and the mark still answer, and nothing is added to the file.
#[test]
fn an_old_ledger_without_chips_reads_read_only() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = Ledger::open(dir.path()).unwrap();
        ten(&ledger);
        ledger
            .conn
            .execute_batch(
                "DROP TRIGGER run_changes_insert; DROP TRIGGER run_changes_update; DROP TRIGGER run_changes_delete;
             DROP TABLE run_changes; DROP INDEX runs_by_submitted_at; DROP INDEX runs_by_filters;
             ALTER TABLE runs DROP COLUMN chips;",
            )
            .unwrap();
    }
    let ledger = Ledger::open_read_only(dir.path()).unwrap();
    let page = ledger.page(&RunFilter::default(), 0, 3).unwrap();
    assert_eq!((page.total, ids(&page)), (10, vec!["r9", "r8", "r7"]));
    assert!(page.rows.iter().all(|r| r.chips.is_none()));
    assert_eq!(ledger.chips("r9").unwrap(), None);
    ledger.set_chips("r9", "8 x h100").unwrap();
    assert!(!ledger.change_mark().unwrap().is_empty());
    let objects: i64 = ledger
        .conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name IN ('run_changes', 'runs_by_submitted_at', 'runs_by_filters')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(objects, 0, "a read-only ledger is never upgraded");
    drop(ledger);
    // Opened for writing, it gains them, and the mark counts from then on.
    let ledger = Ledger::open(dir.path()).unwrap();
    let before = ledger.change_mark().unwrap();
    ledger.set_chips("r9", "8 x h100").unwrap();
    assert_eq!(ledger.chips("r9").unwrap().as_deref(), Some("8 x h100"));
    assert_ne!(ledger.change_mark().unwrap(), before);
}

/// Every change a row of the dashboard shows changes the mark, however fast it comes.
#[test]
fn the_mark_changes_on_insert_state_message_and_delete_within_one_second() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let other = Ledger::open(dir.path()).unwrap();
    let mut seen = vec![ledger.change_mark().unwrap()];
    let mut changed = |why: &str| {
        let mark = other.change_mark().unwrap();
        assert!(!seen.contains(&mark), "{why}: the mark {mark} was seen before ({seen:?})");
        seen.push(mark);
    };
    ledger.insert(&run("r1", "a", "x", JobState::Pending, "2026-01-01T00:00:00Z")).unwrap();
    changed("insert");
    ledger.update_state("r1", JobState::Pending, None, Some("queue q is full")).unwrap();
    changed("a pending reason");
    ledger.update_state("r1", JobState::Pending, None, Some("queue r is full")).unwrap();
    changed("another reason of the same length, in the same second");
    ledger.update_state("r1", JobState::Running, None, Some("queue r is full")).unwrap();
    changed("a state change in the same second");
    // Two runs whose changes would cancel out in a sum.
    ledger.insert(&run("r2", "a", "x", JobState::Running, "2026-01-01T00:00:01Z")).unwrap();
    changed("a second insert");
    ledger
        .conn
        .execute_batch("UPDATE runs SET state = CASE run_id WHEN 'r1' THEN 'failed' ELSE 'running' END")
        .unwrap();
    changed("a state change by another client's SQL");
    ledger.set_chips("r2", "1 x cpu").unwrap();
    changed("chips");
    ledger.delete("r1").unwrap();
    changed("delete");
    ledger.delete("r2").unwrap();
    changed("the last delete");
    ledger.insert(&run("r1", "a", "x", JobState::Pending, "2026-01-01T00:00:00Z")).unwrap();
    changed("a run back under an id deleted before");
}

/// `EXPLAIN QUERY PLAN` of `sql` with `values`, its steps joined by `; `.
fn query_plan(ledger: &Ledger, sql: &str, values: &[rusqlite::types::Value]) -> String {
    let mut stmt = ledger.conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let steps: Vec<String> = stmt
        .query_map(rusqlite::params_from_iter(values), |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    steps.join("; ")
}

fn filters() -> [RunFilter; 3] {
    [
        RunFilter::default(),
        RunFilter { project: Some("a".into()), ..RunFilter::default() },
        RunFilter {
            project: Some("a".into()),
            host: Some("x".into()),
            state: Some(JobState::Running),
            ..RunFilter::default()
        },
    ]
}

/// The page's query walks the index newest first, whatever the filter: no sort of the matches
/// per page (a filter most runs match would sort them all).
#[test]
fn a_page_uses_the_index_for_every_filter() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    ten(&ledger);
    for filter in filters() {
        let (clause, values) = filter.clause(true, true);
        let plan = query_plan(&ledger, &ledger.page_sql(&clause, 50, 50), &values);
        assert!(plan.contains("USING INDEX runs_by_submitted_at"), "{filter:?}: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{filter:?} sorts: {plan}");
    }
}

/// Counts, totals and filter values read the filter index alone, never the runs' rows (which
/// hold each run's host config: a pass over them is most of a big ledger's file).
#[test]
fn counts_totals_and_facets_read_only_the_filter_index() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    ten(&ledger);
    for filter in filters() {
        let (clause, values) = filter.clause(false, false);
        let plan = query_plan(&ledger, &format!("SELECT state, count(*) FROM runs{clause} GROUP BY state"), &values);
        assert!(plan.contains("COVERING INDEX runs_by_filters"), "{filter:?}: {plan}");
        let (clause, values) = filter.clause(true, false);
        let plan = query_plan(&ledger, &format!("SELECT count(*) FROM runs{clause}"), &values);
        assert!(plan.contains("COVERING INDEX"), "{filter:?}: {plan}");
    }
    for column in ["project", "grp", "host"] {
        let plan = query_plan(&ledger, &format!("SELECT DISTINCT {column} FROM runs ORDER BY {column}"), &[]);
        assert!(plan.contains("COVERING INDEX runs_by_filters"), "{column}: {plan}");
    }
}

/// An existing ledger (from before the index) gains it when opened for writing.
#[test]
fn an_existing_ledger_gains_the_page_index() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = Ledger::open(dir.path()).unwrap();
        ledger.conn.execute_batch("DROP INDEX runs_by_submitted_at").unwrap();
    }
    let ledger = Ledger::open(dir.path()).unwrap();
    let found: i64 = ledger
        .conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'runs_by_submitted_at'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(found, 1);
}
