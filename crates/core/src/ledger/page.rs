//! Pages of the ledger for the dashboard (`theseus ui`): runs matching filters, newest first,
//! with their total, the counts per state, every value a filter can take, the chips each run
//! asked for, and a mark that changes when the runs do. Each is one query; a 10,000-run ledger
//! answers a page in milliseconds (`cargo xtask bench`).

use std::collections::BTreeMap;

use rusqlite::OptionalExtension;
use rusqlite::types::Value;
use serde::Serialize;

use super::schema::CHANGES;
use super::{Ledger, Record, SELECT, ledger_err, row_to_record};
use crate::Result;
use crate::backend::JobState;

/// Which runs a page holds; `None` matches every value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only this project.
    pub project: Option<String>,
    /// Only this group.
    pub group: Option<String>,
    /// Only this host.
    pub host: Option<String>,
    /// Only this state.
    pub state: Option<JobState>,
}

/// A run of a page: its record and the chips it asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListedRun {
    /// The record.
    #[serde(flatten)]
    pub record: Record,
    /// The chips, as recorded at submit (see [`Ledger::set_chips`]); `None` for runs recorded
    /// before theseus kept them.
    pub chips: Option<String>,
}

/// A page of runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    /// Runs matching the filter, on every page.
    pub total: u64,
    /// This page's runs, newest first.
    pub rows: Vec<ListedRun>,
}

impl RunFilter {
    /// The `WHERE` clause and its parameters; `with_state` false leaves the state out.
    /// `by_date` keeps SQLite from looking the terms up in the filter index (a unary `+` on
    /// the column): a page then walks the runs newest first and stops after it, at worst one
    /// pass over the table (a rare value), where a lookup would sort every match (a value most
    /// runs have). Counts use the filter index, which holds every column they read.
    pub(super) fn clause(&self, with_state: bool, by_date: bool) -> (String, Vec<Value>) {
        let plus = if by_date { "+" } else { "" };
        let mut terms = Vec::new();
        let mut values = Vec::new();
        let columns = [("project", &self.project), ("grp", &self.group), ("host", &self.host)];
        for (column, value) in columns {
            if let Some(value) = value {
                values.push(Value::Text(value.clone()));
                terms.push(format!("{plus}{column} = ?{}", values.len()));
            }
        }
        if let (true, Some(state)) = (with_state, self.state) {
            values.push(Value::Text(state.as_str().to_owned()));
            terms.push(format!("{plus}state = ?{}", values.len()));
        }
        let clause = if terms.is_empty() { String::new() } else { format!(" WHERE {}", terms.join(" AND ")) };
        (clause, values)
    }
}

impl Ledger {
    /// The runs matching `filter`, newest first, from `offset`, at most `limit` of them.
    pub fn page(&self, filter: &RunFilter, offset: usize, limit: usize) -> Result<Page> {
        let (clause, values) = filter.clause(true, false);
        let err = || ledger_err("cannot read runs");
        let total: i64 = self
            .conn
            .query_row(&format!("SELECT count(*) FROM runs{clause}"), rusqlite::params_from_iter(&values), |r| r.get(0))
            .map_err(err())?;
        let (clause, values) = filter.clause(true, true);
        let sql = self.page_sql(&clause, offset, limit);
        let mut stmt = self.conn.prepare(&sql).map_err(err())?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(&values), |row| {
                Ok(ListedRun { record: row_to_record(row)?, chips: row.get(12)? })
            })
            .map_err(err())?;
        let rows = rows.collect::<Result<Vec<_>, _>>().map_err(err())?;
        Ok(Page { total: total as u64, rows })
    }

    /// The query of [`Ledger::page`] (walks the index `runs_by_submitted_at`, newest first, and
    /// stops after the page).
    pub(super) fn page_sql(&self, clause: &str, offset: usize, limit: usize) -> String {
        let chips = if self.has_column("chips") { "chips" } else { "NULL" };
        let columns = SELECT.strip_suffix(" FROM runs").expect("SELECT ends with its table");
        // Beyond i64, SQLite reads a limit as "no limit": clamp, so a huge one is just "all".
        let (limit, offset) = (limit.min(i64::MAX as usize) as i64, offset.min(i64::MAX as usize) as i64);
        format!(
            "{columns}, {chips} FROM runs{clause} ORDER BY submitted_at DESC, rowid DESC LIMIT {limit} OFFSET {offset}"
        )
    }

    /// How many runs matching `filter` (its state left out) are in each state.
    pub fn counts(&self, filter: &RunFilter) -> Result<BTreeMap<String, u64>> {
        let (clause, values) = filter.clause(false, false);
        let err = || ledger_err("cannot read runs");
        let mut stmt =
            self.conn.prepare(&format!("SELECT state, count(*) FROM runs{clause} GROUP BY state")).map_err(err())?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(&values), |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })
            .map_err(err())?;
        rows.collect::<Result<BTreeMap<_, _>, _>>().map_err(err())
    }

    /// Every project, group and host of the ledger, sorted (keys `project`, `group`, `host`).
    pub fn facets(&self) -> Result<BTreeMap<String, Vec<String>>> {
        let err = || ledger_err("cannot read runs");
        let mut facets = BTreeMap::new();
        for (key, column) in [("project", "project"), ("group", "grp"), ("host", "host")] {
            let mut stmt =
                self.conn.prepare(&format!("SELECT DISTINCT {column} FROM runs ORDER BY {column}")).map_err(err())?;
            let values = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(err())?;
            facets.insert(key.to_owned(), values.collect::<Result<Vec<_>, _>>().map_err(err())?);
        }
        Ok(facets)
    }

    /// Records the chips a run asked for, as shown (`8 x h100`).
    pub fn set_chips(&self, run_id: &str, chips: &str) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.conn
            .execute("UPDATE runs SET chips = ?1 WHERE run_id = ?2", [chips, run_id])
            .map_err(ledger_err("cannot record the run's chips"))?;
        Ok(())
    }

    /// The chips a run asked for, when recorded.
    pub fn chips(&self, run_id: &str) -> Result<Option<String>> {
        if !self.has_column("chips") {
            return Ok(None);
        }
        let found: Option<Option<String>> = self
            .conn
            .query_row("SELECT chips FROM runs WHERE run_id = ?1", [run_id], |r| r.get(0))
            .optional()
            .map_err(ledger_err("cannot read runs"))?;
        Ok(found.flatten())
    }

    /// A mark that changes whenever a run is added or removed, or changes in any way (by any
    /// client, older theseus versions included): the dashboard polls it to know when to fetch
    /// again. Ledgers from before the change counter (read-only ones are never upgraded) get a
    /// sum over the runs instead, which misses some changes made within one second.
    pub fn change_mark(&self) -> Result<String> {
        let err = || ledger_err("cannot read runs");
        let counted = self
            .conn
            .query_row(
                &format!(
                    "SELECT (SELECT count(*) FROM runs), (SELECT coalesce(max(rowid), 0) FROM runs), n FROM {CHANGES}"
                ),
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)),
            )
            .optional();
        if let Ok(Some((count, last, n))) = counted {
            return Ok(format!("{count}-{last}-{n}"));
        }
        // Each state's position in this list is distinct, so any change of state changes the sum.
        let mark: (i64, i64, String, i64) = self
            .conn
            .query_row(
                "SELECT count(*), coalesce(max(rowid), 0), coalesce(max(updated_at), ''), \
                 coalesce(sum((instr('submitting pending running completed failed cancelled preempted unknown', state) \
                 + 97 * (coalesce(exit_code, 0) + 1000) + 7919 * length(coalesce(message, ''))) * rowid), 0) FROM runs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .map_err(err())?;
        Ok(format!("{}-{}-{}-{}", mark.0, mark.1, mark.2, mark.3))
    }

    fn has_column(&self, column: &str) -> bool {
        self.conn.prepare(&format!("SELECT {column} FROM runs LIMIT 0")).is_ok()
    }
}
