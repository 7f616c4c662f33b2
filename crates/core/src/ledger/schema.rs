//! The ledger's schema and its versions, kept in SQLite's `PRAGMA user_version`.
//!
//! - 0: a new, empty file (or a ledger from before versions were recorded: its `runs` table
//!   may lack `kind`).
//! - 1: `runs` with `kind`; later `host_config` (the run's host, for commands without the
//!   `-d FILE` it was submitted with) was added in place by [`ensure_host_config`]: older
//!   versions read and write such a ledger as before (their rows have none); `resume` (the
//!   run's `--restore`/`--fresh`) the same way; so were `chips` (what the dashboard shows), the
//!   indexes `runs_by_submitted_at` (pages of runs, newest first) and `runs_by_filters` (counts
//!   and filter values), and the table `run_changes` with the triggers that count every change
//!   of `runs` (the dashboard's change mark).
//!
//! [`migrate`] brings an older ledger to [`SCHEMA_VERSION`] in one `BEGIN IMMEDIATE`
//! transaction, so that a client killed in the middle leaves the previous schema and two
//! clients upgrading at once do it one after the other. A ledger from a newer theseus is
//! refused, never written.

use std::path::Path;

use rusqlite::Connection;

use super::{damaged, ledger_err};
use crate::{Error, Result};

/// The schema this theseus writes.
pub(crate) const SCHEMA_VERSION: i64 = 1;

const CREATE: &str = "CREATE TABLE IF NOT EXISTS runs (
        run_id       TEXT PRIMARY KEY,
        name         TEXT NOT NULL,
        project      TEXT NOT NULL,
        grp          TEXT NOT NULL,
        host         TEXT NOT NULL,
        handle       TEXT NOT NULL,
        submitted_at TEXT NOT NULL,
        updated_at   TEXT NOT NULL,
        state        TEXT NOT NULL,
        exit_code    INTEGER,
        message      TEXT,
        kind         TEXT NOT NULL DEFAULT 'job'
    );
    CREATE INDEX IF NOT EXISTS runs_by_name ON runs(name, submitted_at);";

fn version(conn: &Connection, path: &Path) -> Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| damaged(path, e).unwrap_or_else(|e| ledger_err(format!("cannot read `{}`", path.display()))(e)))
}

fn newer(path: &Path, found: i64) -> Error {
    let shown = path.display();
    Error::Ledger {
        message: format!(
            "`{shown}` was written by a newer theseus (ledger schema {found}; this theseus reads up to \
             {SCHEMA_VERSION}): run that newer theseus, or move the ledger aside with `mv {shown} {shown}.newer` \
             to start a new, empty one with this version (the file is left as it is)"
        ),
        source: None,
    }
}

/// Refuses a ledger from a newer theseus before anything (even the journal mode) is written.
pub(crate) fn refuse_newer(conn: &Connection, path: &Path) -> Result<()> {
    match version(conn, path)? {
        found if found > SCHEMA_VERSION => Err(newer(path, found)),
        _ => Ok(()),
    }
}

/// Adds `runs.host_config` to a ledger that lacks it, once, under the write lock.
pub(crate) fn ensure_host_config(conn: &Connection, path: &Path) -> Result<()> {
    ensure_text_column(conn, path, "host_config")
}

/// Adds `runs.resume` (the run's `--restore`/`--fresh` as JSON) the same way.
pub(crate) fn ensure_resume(conn: &Connection, path: &Path) -> Result<()> {
    ensure_text_column(conn, path, "resume")
}

/// Adds `runs.chips` (the chips a run asked for, as shown) the same way.
pub(crate) fn ensure_chips(conn: &Connection, path: &Path) -> Result<()> {
    ensure_text_column(conn, path, "chips")
}

/// Adds `runs.ranks` (the run's last per-rank state, as JSON) the same way.
pub(crate) fn ensure_ranks(conn: &Connection, path: &Path) -> Result<()> {
    ensure_text_column(conn, path, "ranks")
}

/// The index that keeps a page of runs, newest first, fast on big ledgers ([`super::Ledger::page`]).
pub(crate) const PAGE_INDEX: &str = "runs_by_submitted_at";

/// The index that answers counts and filter values from its own pages ([`super::Ledger::counts`],
/// [`super::Ledger::facets`], a page's total): every column they read is in it.
pub(crate) const FILTER_INDEX: &str = "runs_by_filters";

/// The table counting every change of `runs`, kept by triggers (for [`super::Ledger::change_mark`]).
pub(crate) const CHANGES: &str = "run_changes";

/// Adds [`PAGE_INDEX`] to a ledger that lacks it, once, under the write lock.
pub(crate) fn ensure_page_index(conn: &Connection, path: &Path) -> Result<()> {
    ensure_schema(
        conn,
        path,
        "index",
        PAGE_INDEX,
        &format!("CREATE INDEX IF NOT EXISTS {PAGE_INDEX} ON runs(submitted_at)"),
    )
}

/// Adds [`FILTER_INDEX`] to a ledger that lacks it, once, under the write lock.
pub(crate) fn ensure_filter_index(conn: &Connection, path: &Path) -> Result<()> {
    let sql = format!("CREATE INDEX IF NOT EXISTS {FILTER_INDEX} ON runs(project, grp, host, state)");
    ensure_schema(conn, path, "index", FILTER_INDEX, &sql)
}

/// Adds the [`CHANGES`] counter and the triggers that bump it on every insert, update and delete
/// of a run, by any client (older theseus versions included: the triggers live in the file).
pub(crate) fn ensure_change_counter(conn: &Connection, path: &Path) -> Result<()> {
    let bump = format!("BEGIN UPDATE {CHANGES} SET n = n + 1; END");
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {CHANGES} (n INTEGER NOT NULL);
         INSERT INTO {CHANGES} (n) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM {CHANGES});
         CREATE TRIGGER IF NOT EXISTS {CHANGES}_insert AFTER INSERT ON runs {bump};
         CREATE TRIGGER IF NOT EXISTS {CHANGES}_update AFTER UPDATE ON runs {bump};
         CREATE TRIGGER IF NOT EXISTS {CHANGES}_delete AFTER DELETE ON runs {bump};"
    );
    // The delete trigger is made last: once it exists, everything before it does.
    ensure_schema(conn, path, "trigger", &format!("{CHANGES}_delete"), &sql)
}

/// Runs `sql` (idempotent) when the schema lacks the `kind` object `name`, once, under the
/// write lock.
fn ensure_schema(conn: &Connection, path: &Path, kind: &str, name: &str, sql: &str) -> Result<()> {
    let has = || {
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = ?1 AND name = ?2", [kind, name], |r| {
            r.get::<_, i64>(0)
        })
        .map(|n| n > 0)
    };
    let fail = |e: rusqlite::Error| {
        damaged(path, e).unwrap_or_else(|e| ledger_err(format!("cannot upgrade `{}`", path.display()))(e))
    };
    if has().map_err(fail)? {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE").map_err(fail)?;
    let added = match has() {
        Ok(true) => Ok(()),
        Ok(false) => conn.execute_batch(sql),
        Err(e) => Err(e),
    };
    match added {
        Ok(()) => conn.execute_batch("COMMIT").map_err(fail),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(fail(e))
        }
    }
}

/// Adds the TEXT column `column` to `runs` when it lacks it, once, under the write lock.
fn ensure_text_column(conn: &Connection, path: &Path, column: &str) -> Result<()> {
    let has = || conn.prepare(&format!("SELECT {column} FROM runs LIMIT 0")).is_ok();
    if has() {
        return Ok(());
    }
    let fail = |e: rusqlite::Error| {
        damaged(path, e).unwrap_or_else(|e| ledger_err(format!("cannot upgrade `{}`", path.display()))(e))
    };
    conn.execute_batch("BEGIN IMMEDIATE").map_err(fail)?;
    let added = if has() { Ok(()) } else { conn.execute_batch(&format!("ALTER TABLE runs ADD COLUMN {column} TEXT")) };
    match added {
        Ok(()) => conn.execute_batch("COMMIT").map_err(fail),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(fail(e))
        }
    }
}

/// Brings the ledger at `path` to [`SCHEMA_VERSION`], or refuses it when it is newer.
pub(crate) fn migrate(conn: &Connection, path: &Path) -> Result<()> {
    let found = version(conn, path)?;
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    if found > SCHEMA_VERSION {
        return Err(newer(path, found));
    }
    let fail = |what: &'static str| {
        move |e: rusqlite::Error| {
            damaged(path, e).unwrap_or_else(|e| ledger_err(format!("cannot {what} `{}`", path.display()))(e))
        }
    };
    // IMMEDIATE takes the write lock now (waiting as the busy timeout says), so the version
    // read below is the one this transaction upgrades.
    conn.execute_batch("BEGIN IMMEDIATE").map_err(fail("upgrade"))?;
    let upgraded = (|| {
        let found = version(conn, path)?;
        if found > SCHEMA_VERSION {
            return Err(newer(path, found));
        }
        if found < 1 {
            conn.execute_batch(CREATE).map_err(fail("create tables in"))?;
            // Ledgers from before `kind` gain it.
            if conn.prepare("SELECT kind FROM runs LIMIT 0").is_err() {
                conn.execute_batch("ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'job'")
                    .map_err(fail("upgrade"))?;
            }
        }
        conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}")).map_err(fail("upgrade"))?;
        Ok(())
    })();
    match upgraded {
        Ok(()) => conn.execute_batch("COMMIT").map_err(fail("upgrade")),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
