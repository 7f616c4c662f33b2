//! Finding and stopping the processes of one local run.
//!
//! A process of a run is found by either of two things, and the run's processes are the union:
//! - the marker variable [`MARKER_VAR`] with the run id, which every process inherits from the
//!   supervisor (read from `/proc/<pid>/environ`). It survives `setsid`, but a child started with
//!   `env -i` sheds it.
//! - the supervisor's session, recorded by the supervisor in `supervisor.json` ([`Session`]):
//!   the session id, which no process can leave except by `setsid`, and the supervisor's start
//!   time, so that a later session that reuses the number is never taken for the run's.
//!
//! Only processes of this user are considered, and they are stopped one by one, by PID. A process
//! that both calls `setsid` and sheds the environment escapes both (only a cgroup would hold it).

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use serde::{Deserialize, Serialize};

/// Environment variable that marks the processes of a local run.
pub const MARKER_VAR: &str = "THESEUS_LOCAL_RUN";

/// What the supervisor records about itself in `<run dir>/supervisor.json` before it starts any
/// rank (written to a temporary name and renamed, so a reader never sees half of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The supervisor's PID.
    pub pid: i32,
    /// Its session id (the supervisor runs under `setsid`, so it equals `pid`).
    pub sid: i32,
    /// Its process group id (equal to `sid`).
    pub pgid: i32,
    /// Its start time, in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    pub start_time: u64,
}

impl Session {
    /// Reads `supervisor.json` of a run dir; `None` while the supervisor has not written it.
    pub fn read(run_dir: &Path) -> Option<Session> {
        let text = std::fs::read(run_dir.join(super::supervisor::files::SUPERVISOR_JSON)).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

/// One process of this user, as `/proc` shows it.
#[derive(Debug, Clone)]
struct ProcInfo {
    pid: i32,
    session: i32,
    start_time: u64,
    marker: Option<String>,
}

/// The live (non-zombie) processes of this user, read once from `/proc`.
#[derive(Debug, Default)]
pub struct ProcTable {
    procs: Vec<ProcInfo>,
}

impl ProcTable {
    /// Reads `/proc` now.
    pub fn scan() -> ProcTable {
        ProcTable::scan_uid(Some(rustix::process::getuid().as_raw()))
    }

    /// Like [`ProcTable::scan`] but over every user's processes: for looking, never for
    /// stopping (a run on another account, e.g. a test's SSH user on this machine).
    pub fn scan_any_user() -> ProcTable {
        ProcTable::scan_uid(None)
    }

    fn scan_uid(uid: Option<u32>) -> ProcTable {
        let Ok(dir) = std::fs::read_dir("/proc") else { return ProcTable::default() };
        let me = std::process::id() as i32;
        let needle = format!("{MARKER_VAR}=");
        let mut procs = Vec::new();
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            if pid == me || !entry.metadata().is_ok_and(|m| uid.is_none_or(|uid| m.uid() == uid)) {
                continue;
            }
            let Some((state, session, start_time)) = read_stat(pid) else { continue };
            if state == 'Z' {
                continue;
            }
            let marker = std::fs::read(format!("/proc/{pid}/environ")).ok().and_then(|env| {
                env.split(|b| *b == 0)
                    .find_map(|var| var.strip_prefix(needle.as_bytes()))
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            });
            procs.push(ProcInfo { pid, session, start_time, marker });
        }
        ProcTable { procs }
    }

    /// PIDs of run `run_id`: those with its marker, and those in its supervisor's session.
    pub fn of_run(&self, run_id: &str, session: Option<&Session>) -> Vec<i32> {
        let pids: BTreeSet<i32> = self
            .procs
            .iter()
            .filter(|p| {
                p.marker.as_deref() == Some(run_id)
                    || session.is_some_and(|s| s.sid > 1 && p.session == s.sid && p.start_time >= s.start_time)
            })
            .map(|p| p.pid)
            .collect();
        pids.into_iter().collect()
    }
}

/// `(state, session, start time)` from `/proc/<pid>/stat`, where the command name may contain
/// spaces and parentheses: the fields after the last `)` are split.
fn read_stat(pid: i32) -> Option<(char, i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); session is field 6, start time field 22.
    let state = fields.first()?.chars().next()?;
    Some((state, fields.get(3)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

/// PIDs of the live processes of any user that carry run `run_id`'s marker (zombies excluded):
/// for looking (tests, probes), never for stopping, which only takes this user's processes.
pub fn job_processes(run_id: &str) -> Vec<i32> {
    ProcTable::scan_any_user().of_run(run_id, None)
}

/// PIDs of the live processes of a run: its marker, and its supervisor's session when known.
pub fn run_processes(run_id: &str, session: Option<&Session>) -> Vec<i32> {
    ProcTable::scan().of_run(run_id, session)
}

/// Sends `signal` to each PID, ignoring those that are already gone.
pub fn signal_all(pids: &[i32], signal: Signal) {
    for &pid in pids {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = kill_process(pid, signal);
        }
    }
}

/// Stops every process of the run (marker and session): SIGTERM, then SIGKILL after `grace`,
/// repeated while new ones appear. Returns the PIDs still alive at the end (empty on success).
pub async fn stop_run(run_id: &str, session: Option<&Session>, grace: Duration) -> Vec<i32> {
    let pids = run_processes(run_id, session);
    if pids.is_empty() {
        return pids;
    }
    signal_all(&pids, Signal::TERM);
    if wait_until_gone(run_id, session, grace).await {
        return Vec::new();
    }
    // Children may have been started between two scans: kill whatever belongs to the run,
    // until nothing is left or the time is up.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = run_processes(run_id, session);
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        signal_all(&left, Signal::KILL);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until no process of the run is left or `within` passes. True when none is left.
pub async fn wait_until_gone(run_id: &str, session: Option<&Session>, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if run_processes(run_id, session).is_empty() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
