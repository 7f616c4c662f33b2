//! Finding and stopping the processes of one local run.
//!
//! Every process of a local run inherits the marker variable [`MARKER_VAR`] with the run id from
//! the supervisor. The processes of a run are exactly those of this user whose environment holds
//! that marker, read from `/proc/<pid>/environ`; they are stopped one by one, by PID. A process
//! that left the supervisor's process group (a daemonizing child) is still found.

use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};

/// Environment variable that marks the processes of a local run.
pub const MARKER_VAR: &str = "THESEUS_LOCAL_RUN";

/// PIDs of the live processes of run `run_id` (zombies excluded).
pub fn job_processes(run_id: &str) -> Vec<i32> {
    let needle = format!("{MARKER_VAR}={run_id}");
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let me = std::process::id() as i32;
    let mut pids = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if !environ.split(|b| *b == 0).any(|var| var == needle.as_bytes()) {
            continue;
        }
        if is_zombie(pid) {
            continue;
        }
        pids.push(pid);
    }
    pids.sort_unstable();
    pids
}

fn is_zombie(pid: i32) -> bool {
    // /proc/<pid>/stat: "pid (comm) S ..." where comm may contain spaces and parentheses.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// Sends `signal` to each PID, ignoring those that are already gone.
pub fn signal_all(pids: &[i32], signal: Signal) {
    for &pid in pids {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = kill_process(pid, signal);
        }
    }
}

/// Stops every process of the run: SIGTERM, then SIGKILL after `grace`. Returns the PIDs still
/// alive after the SIGKILL round (empty on success).
pub async fn stop_run(run_id: &str, grace: Duration) -> Vec<i32> {
    let pids = job_processes(run_id);
    if pids.is_empty() {
        return pids;
    }
    signal_all(&pids, Signal::TERM);
    if wait_until_gone(run_id, grace).await {
        return Vec::new();
    }
    // Children may have been started between the two scans: kill whatever carries the marker.
    signal_all(&job_processes(run_id), Signal::KILL);
    wait_until_gone(run_id, Duration::from_secs(5)).await;
    job_processes(run_id)
}

/// Polls until no process of the run is left or `within` passes. True when none is left.
pub async fn wait_until_gone(run_id: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if job_processes(run_id).is_empty() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
