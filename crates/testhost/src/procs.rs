//! The processes of a sandbox run: those of the session its runner leads (the runner is
//! started with `setsid`, so its PID is the session's id; the bootstrap puts the job in a
//! process group of its own, inside that session). Read from `/proc`, leaving out zombies (a
//! process whose parent is gone may wait for a reaper that never comes), and signalled by
//! process group.

use std::collections::BTreeSet;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};

/// `(pid, pgid)` of the live (not zombie) processes of session `sid`.
fn members(sid: i32) -> Vec<(i32, i32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid pgrp session ...`; comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(") ") else { continue };
        let fields: Vec<&str> = rest.split(' ').take(4).collect();
        let [state, _ppid, pgrp, session] = fields[..] else { continue };
        if session.parse() == Ok(sid) && state != "Z" {
            found.push((pid, pgrp.parse().unwrap_or(pid)));
        }
    }
    found
}

/// PIDs of the live (not zombie) processes of session `sid`.
pub fn in_session(sid: i32) -> Vec<i32> {
    members(sid).into_iter().map(|(pid, _)| pid).collect()
}

/// Stops session `sid`: SIGTERM to each of its process groups, up to `grace` to exit, then
/// SIGKILL and up to two seconds more. Returns the PIDs still alive after that (none when it
/// worked).
pub async fn stop_session(sid: i32, grace: Duration) -> Vec<i32> {
    for (signal, wait) in [(Signal::TERM, grace), (Signal::KILL, Duration::from_secs(2))] {
        let groups: BTreeSet<i32> = members(sid).into_iter().map(|(_, pgid)| pgid).collect();
        if groups.is_empty() {
            return Vec::new();
        }
        for pgid in groups.into_iter().filter_map(Pid::from_raw) {
            let _ = kill_process_group(pgid, signal);
        }
        let deadline = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < deadline && !in_session(sid).is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    in_session(sid)
}
