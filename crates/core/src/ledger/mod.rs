//! The ledger: every submission in SQLite under the user's state dir, so `list`, `status`,
//! `logs` and `cancel` find jobs by name or run id from any later command.
//!
//! Several `theseus` commands may use the ledger at once: the database runs in WAL mode with a
//! busy timeout, and every write is one short transaction (one statement; a schema upgrade is
//! one `BEGIN IMMEDIATE` transaction, see `schema`): a client killed in the middle of a write
//! leaves the state before it. A file that is not a ledger, or one from a newer theseus, is
//! refused at open with the fix, and never written.
//!
//! A run is recorded before its backend creates anything ([`Ledger::begin_submit`], state
//! `submitting`), and settled when `submit` returns. While a client submits, it holds a lock on
//! `<state dir>/submitting/<run id>.lock`; a `submitting` record whose lock nobody holds belongs
//! to a client that stopped in the middle ([`Ledger::submit_in_progress`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::backend::{JobHandle, JobState};
use crate::job::JobIdentity;
use crate::{Error, Result};

mod page;
mod ranks;
mod schema;

pub use page::{ListedRun, Page, RunFilter};

/// File name of the ledger inside the state dir.
pub const LEDGER_FILE: &str = "ledger.sqlite3";

/// How long a client waits for the ledger's lock before it gives up. Every write holds it for
/// one short statement, but a writer can be descheduled while holding it: with 200 submits at
/// once on 2 busy cores, 8 of 200 clients waited more than 10 s (the fault matrix's load case).
/// Waiting is what a user wants here; a minute keeps a truly stuck lock from hanging forever.
const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// What a run is: a batch job, or an interactive session (`theseus repl`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// `theseus submit`.
    #[default]
    Job,
    /// `theseus repl`: Jupyter Lab.
    Repl,
}

impl RunKind {
    /// Lowercase name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Job => "job",
            RunKind::Repl => "repl",
        }
    }

    fn parse(s: &str) -> RunKind {
        if s == "repl" { RunKind::Repl } else { RunKind::Job }
    }
}

/// One submission.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    /// Who the job is.
    pub identity: JobIdentity,
    /// A job or an interactive session.
    pub kind: RunKind,
    /// Host name.
    pub host: String,
    /// How to find the job again.
    pub handle: JobHandle,
    /// Submission time (RFC 3339, UTC).
    pub submitted_at: String,
    /// Last time the state was refreshed (RFC 3339, UTC).
    pub updated_at: String,
    /// Last known state.
    pub state: JobState,
    /// Exit code when finished.
    pub exit_code: Option<i32>,
    /// Last status message.
    pub message: Option<String>,
}

/// An open ledger.
#[derive(Debug)]
pub struct Ledger {
    conn: Connection,
    path: PathBuf,
    state_dir: PathBuf,
    /// Opened by [`Ledger::open_read_only`]: state updates are dropped.
    read_only: bool,
}

/// Held by the client that submits a run (see [`Ledger::begin_submit`]); dropping it says that
/// this client no longer works on the run.
#[derive(Debug)]
pub struct SubmitGuard {
    _file: std::fs::File,
    path: PathBuf,
}

impl Drop for SubmitGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Marks a handle that the CLI made up because the backend could not tell its handle before
/// `submit` (see [`Ledger::begin_submit`]); backends cannot look such a handle up.
pub const PLACEHOLDER_KEY: &str = "theseus_placeholder";

/// A handle for a run whose backend gives no planned handle: kind, host and run id only.
pub fn placeholder_handle(kind: crate::plan::HostKind, host: &str, run_id: &str) -> JobHandle {
    JobHandle { kind, host: host.to_owned(), id: run_id.to_owned(), data: serde_json::json!({ PLACEHOLDER_KEY: true }) }
}

/// Whether `handle` was made by [`placeholder_handle`].
pub fn is_placeholder(handle: &JobHandle) -> bool {
    handle.data.get(PLACEHOLDER_KEY).is_some_and(|v| v == true)
}

/// The default state dir: `$XDG_STATE_HOME/theseus`, else `~/.local/state/theseus`.
pub fn default_state_dir(home: &Path, xdg_state_home: Option<&str>) -> PathBuf {
    match xdg_state_home.filter(|s| !s.is_empty()) {
        Some(x) => PathBuf::from(x).join("theseus"),
        None => home.join(".local/state/theseus"),
    }
}

fn ledger_err(message: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> Error {
    let message = message.into();
    move |e| Error::Ledger { message, source: Some(Box::new(e)) }
}

/// The error for a ledger file SQLite says is not a database or is corrupt: which file, and how
/// to move it aside (a new, empty ledger is made at the next command). Other errors come back.
fn damaged(path: &Path, e: rusqlite::Error) -> std::result::Result<Error, rusqlite::Error> {
    match &e {
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) =>
        {
            let shown = path.display();
            Ok(Error::Ledger {
                message: format!(
                    "`{shown}` is not a readable job ledger (damaged, or not a theseus file); move it aside with \
                     `mv {shown} {shown}.bad` and run the command again: theseus starts a new, empty ledger \
                     (runs recorded only in the old file are no longer listed; their jobs are not touched)"
                ),
                source: Some(Box::new(e)),
            })
        }
        _ => Err(e),
    }
}

impl Ledger {
    /// Opens (creating if needed) the ledger in `state_dir`.
    pub fn open(state_dir: &Path) -> Result<Ledger> {
        std::fs::create_dir_all(state_dir).map_err(|e| Error::io("create", state_dir, e))?;
        let path = state_dir.join(LEDGER_FILE);
        let conn = Connection::open(&path).map_err(ledger_err(format!("cannot open `{}`", path.display())))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(ledger_err("cannot set busy timeout"))?;
        schema::refuse_newer(&conn, &path)?;
        // WAL lets readers and one writer work at the same time; the pragma answers with a row.
        // Switching a new database to WAL needs an exclusive lock, and SQLite reports a client
        // doing the same at that moment as "database is locked" at once, without the busy
        // handler: retry for as long as the busy timeout would have waited.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
                Ok(_) => break,
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(5 + u64::from(rand::random::<u8>() % 20)));
                }
                Err(e) => return Err(damaged(&path, e).unwrap_or_else(|e| ledger_err("cannot enable WAL")(e))),
            }
        }
        schema::migrate(&conn, &path)?;
        // A damaged file can open and still fail at its first read.
        conn.query_row("SELECT count(*) FROM runs", [], |r| r.get::<_, i64>(0)).map_err(|e| {
            damaged(&path, e).unwrap_or_else(|e| ledger_err(format!("cannot read `{}`", path.display()))(e))
        })?;
        schema::ensure_host_config(&conn, &path)?;
        schema::ensure_resume(&conn, &path)?;
        schema::ensure_chips(&conn, &path)?;
        schema::ensure_ranks(&conn, &path)?;
        schema::ensure_page_index(&conn, &path)?;
        schema::ensure_filter_index(&conn, &path)?;
        schema::ensure_change_counter(&conn, &path)?;
        Ok(Ledger { conn, path, state_dir: state_dir.to_owned(), read_only: false })
    }

    /// Opens an existing ledger for reading only, for commands that read (`list`, `status`,
    /// `logs`) when [`Ledger::open`] cannot write (a read-only filesystem or dir). The states
    /// such a ledger is told ([`Ledger::update_state`], [`Ledger::settle`]) are not stored; it
    /// never creates, upgrades or repairs anything.
    pub fn open_read_only(state_dir: &Path) -> Result<Ledger> {
        use rusqlite::OpenFlags;
        let path = state_dir.join(LEDGER_FILE);
        if !path.is_file() {
            return Err(Error::Ledger { message: format!("`{}` does not exist", path.display()), source: None });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        // A WAL ledger needs its `-shm` file, which a read-only dir cannot have made: then it is
        // read as immutable (what its last writer checkpointed into the file).
        let immutable = format!("file:{}?immutable=1", uri_path(&path));
        let mut failure = None;
        for (name, flags) in [(path.display().to_string(), flags), (immutable, flags | OpenFlags::SQLITE_OPEN_URI)] {
            let opened = Connection::open_with_flags(&name, flags).and_then(|conn| {
                conn.busy_timeout(BUSY_TIMEOUT)?;
                conn.query_row("SELECT count(*) FROM runs", [], |r| r.get::<_, i64>(0))?;
                Ok(conn)
            });
            match opened {
                Ok(conn) => {
                    schema::refuse_newer(&conn, &path)?;
                    return Ok(Ledger { conn, path, state_dir: state_dir.to_owned(), read_only: true });
                }
                Err(e) => failure = Some(e),
            }
        }
        let e = failure.expect("two attempts were made");
        Err(damaged(&path, e).unwrap_or_else(|e| ledger_err(format!("cannot read `{}`", path.display()))(e)))
    }

    /// Whether the ledger was opened by [`Ledger::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Keeps the config of the host a run went to (a [`crate::config::DispatchConfig`] with
    /// that host and its cluster, secrets removed), for commands run without the `-d FILE`
    /// it was submitted with.
    pub fn set_host_config(&self, run_id: &str, config: &serde_json::Value) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.conn
            .execute("UPDATE runs SET host_config = ?2 WHERE run_id = ?1", params![run_id, config.to_string()])
            .map_err(ledger_err(format!("cannot update run `{run_id}`")))?;
        Ok(())
    }

    /// The host config kept by [`Ledger::set_host_config`], if any (none in ledgers written
    /// before it was kept).
    pub fn host_config(&self, run_id: &str) -> Result<Option<serde_json::Value>> {
        let Ok(mut stmt) = self.conn.prepare("SELECT host_config FROM runs WHERE run_id = ?1") else {
            return Ok(None);
        };
        let text: Option<Option<String>> =
            stmt.query_row([run_id], |r| r.get(0)).optional().map_err(ledger_err("cannot read runs"))?;
        Ok(text.flatten().and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Keeps what a run was submitted to resume from (`--restore`, `--fresh`: a
    /// [`crate::bootstrap::Resume`]).
    pub fn set_resume(&self, run_id: &str, resume: &crate::bootstrap::Resume) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        let text = serde_json::to_string(resume).unwrap_or_else(|_| "{}".into());
        self.conn
            .execute("UPDATE runs SET resume = ?2 WHERE run_id = ?1", params![run_id, text])
            .map_err(ledger_err(format!("cannot update run `{run_id}`")))?;
        Ok(())
    }

    /// What [`Ledger::set_resume`] kept, if anything (as JSON: `restore`, `fresh`).
    pub fn resume(&self, run_id: &str) -> Result<Option<serde_json::Value>> {
        let Ok(mut stmt) = self.conn.prepare("SELECT resume FROM runs WHERE run_id = ?1") else {
            return Ok(None);
        };
        let text: Option<Option<String>> =
            stmt.query_row([run_id], |r| r.get(0)).optional().map_err(ledger_err("cannot read runs"))?;
        Ok(text.flatten().and_then(|t| serde_json::from_str(&t).ok()))
    }

    fn submit_lock_path(&self, run_id: &str) -> PathBuf {
        self.state_dir.join("submitting").join(format!("{run_id}.lock"))
    }

    /// Records a run in state `submitting` before its backend creates anything, and holds the
    /// lock that tells other clients this one is still submitting it, until the guard is dropped.
    pub fn begin_submit(&self, record: &Record) -> Result<SubmitGuard> {
        let path = self.submit_lock_path(&record.identity.run_id);
        let dir = path.parent().expect("lock paths have a parent");
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
        let file = std::fs::File::create(&path).map_err(|e| Error::io("create", &path, e))?;
        file.lock().map_err(|e| Error::io("lock", &path, e))?;
        let guard = SubmitGuard { _file: file, path };
        let record = Record { state: JobState::Submitting, ..record.clone() };
        self.insert(&record)?;
        Ok(guard)
    }

    /// Whether a live client still holds the submit lock of `run_id`.
    pub fn submit_in_progress(&self, run_id: &str) -> bool {
        let Ok(file) = std::fs::File::open(self.submit_lock_path(run_id)) else { return false };
        matches!(file.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock))
    }

    /// Stores the handle `submit` returned and the run's state.
    pub fn settle(&self, run_id: &str, handle: &JobHandle, state: JobState, message: Option<&str>) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        let handle = serde_json::to_string(handle).expect("handles serialize");
        self.conn
            .execute(
                "UPDATE runs SET handle = ?2, state = ?3, message = ?4, updated_at = ?5 WHERE run_id = ?1",
                params![run_id, handle, state.as_str(), message, now_rfc3339()],
            )
            .map_err(ledger_err(format!("cannot update run `{run_id}`")))?;
        Ok(())
    }

    /// Forgets a run (a submit that created nothing and never owned the name).
    pub fn delete(&self, run_id: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM runs WHERE run_id = ?1", [run_id])
            .map_err(ledger_err(format!("cannot delete run `{run_id}`")))?;
        Ok(())
    }

    /// Runs of the same project, group and name on `host`, other than `identity`'s own, whose
    /// last known state is not terminal.
    pub fn live_of_name(&self, identity: &JobIdentity, host: &str) -> Result<Vec<Record>> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "{SELECT} WHERE project = ?1 AND grp = ?2 AND name = ?3 AND host = ?4 AND run_id != ?5 ORDER BY submitted_at, rowid"
            ))
            .map_err(ledger_err("cannot read runs"))?;
        let rows = stmt
            .query_map(params![identity.project, identity.group, identity.name, host, identity.run_id], row_to_record)
            .map_err(ledger_err("cannot read runs"))?;
        let records = rows.collect::<Result<Vec<_>, _>>().map_err(ledger_err("cannot read runs"))?;
        Ok(records.into_iter().filter(|r| !r.state.is_terminal()).collect())
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a new submission.
    pub fn insert(&self, record: &Record) -> Result<()> {
        let handle = serde_json::to_string(&record.handle).expect("handles serialize");
        self.conn
            .execute(
                "INSERT INTO runs (run_id, name, project, grp, host, handle, submitted_at, updated_at, state, exit_code, message, kind)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    record.identity.run_id,
                    record.identity.name,
                    record.identity.project,
                    record.identity.group,
                    record.host,
                    handle,
                    record.submitted_at,
                    record.updated_at,
                    record.state.as_str(),
                    record.exit_code,
                    record.message,
                    record.kind.as_str(),
                ],
            )
            .map_err(ledger_err(format!("cannot record run `{}`", record.identity.run_id)))?;
        Ok(())
    }

    /// Stores the latest known state of a run.
    pub fn update_state(
        &self,
        run_id: &str,
        state: JobState,
        exit_code: Option<i32>,
        message: Option<&str>,
    ) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.conn
            .execute(
                "UPDATE runs SET state = ?2, exit_code = ?3, message = ?4, updated_at = ?5 WHERE run_id = ?1",
                params![run_id, state.as_str(), exit_code, message, now_rfc3339()],
            )
            .map_err(ledger_err(format!("cannot update run `{run_id}`")))?;
        Ok(())
    }

    /// The run with this id, else the run of this job name that is most likely live: the newest
    /// submitting, pending or running one, else the newest in an unknown state, else the newest.
    /// (After a `--replace` race the newest row may be a loser that failed while an older run
    /// holds the name; `status NAME` and `cancel NAME` are about that one.)
    pub fn find(&self, name_or_run_id: &str) -> Result<Option<Record>> {
        let by_id = self
            .conn
            .query_row(&format!("{SELECT} WHERE run_id = ?1"), [name_or_run_id], row_to_record)
            .optional()
            .map_err(ledger_err("cannot read runs"))?;
        if by_id.is_some() {
            return Ok(by_id);
        }
        self.conn
            .query_row(
                &format!(
                    "{SELECT} WHERE name = ?1 ORDER BY CASE state WHEN 'submitting' THEN 0 WHEN 'pending' THEN 0 \
                     WHEN 'running' THEN 0 WHEN 'unknown' THEN 1 ELSE 2 END, submitted_at DESC, rowid DESC LIMIT 1"
                ),
                [name_or_run_id],
                row_to_record,
            )
            .optional()
            .map_err(ledger_err("cannot read runs"))
    }

    /// The newest `limit` runs, newest first.
    pub fn list(&self, limit: usize) -> Result<Vec<Record>> {
        let mut stmt = self
            .conn
            .prepare(&format!("{SELECT} ORDER BY submitted_at DESC, rowid DESC LIMIT ?1"))
            .map_err(ledger_err("cannot read runs"))?;
        let rows = stmt.query_map([limit as i64], row_to_record).map_err(ledger_err("cannot read runs"))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(ledger_err("cannot read runs"))
    }
}

const SELECT: &str = "SELECT run_id, name, project, grp, host, handle, submitted_at, updated_at, state, exit_code, message, kind FROM runs";

fn row_to_record(row: &rusqlite::Row<'_>) -> rusqlite::Result<Record> {
    let handle: String = row.get(5)?;
    let state: String = row.get(8)?;
    Ok(Record {
        identity: JobIdentity { run_id: row.get(0)?, name: row.get(1)?, project: row.get(2)?, group: row.get(3)? },
        kind: RunKind::parse(&row.get::<_, String>(11)?),
        host: row.get(4)?,
        handle: serde_json::from_str(&handle)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(5, rusqlite::types::Type::Text, Box::new(e)))?,
        submitted_at: row.get(6)?,
        updated_at: row.get(7)?,
        state: JobState::parse(&state).unwrap_or(JobState::Unknown),
        exit_code: row.get(9)?,
        message: row.get(10)?,
    })
}

/// `path` for an SQLite `file:` URI: bytes other than letters, digits and `/-._~` are %-escaped.
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for b in path.as_os_str().as_bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'/' | b'-' | b'.' | b'_' | b'~' => out.push(char::from(*b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Now, as RFC 3339 UTC with second precision.
pub fn now_rfc3339() -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    time::OffsetDateTime::now_utc().format(&fmt).unwrap_or_default()
}

#[cfg(test)]
mod page_tests;
#[cfg(test)]
mod tests;
