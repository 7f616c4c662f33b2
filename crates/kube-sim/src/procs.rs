//! A container's main process as the kubelet and the container runtime treat it: started in
//! its own process group with its output in a log file, stopped with PID 1 semantics, restarted
//! with the kubelet's back-off.
//!
//! PID 1 semantics: the simulator's processes are not PID 1 of a namespace, so it emulates
//! what the kernel does for one (pid_namespaces(7)): a signal from outside the namespace whose
//! disposition is the default is not delivered to the namespace's init. On a stop, the runtime
//! sends SIGTERM to the main process only (containerd signals the init process, not the group),
//! and only when the process has a handler for it (`SigCgt` in `/proc/<pid>/status`); without
//! one the signal is ignored, as on a real node. After the grace period, SIGKILL goes to the
//! whole group (the kubelet kills every process of the container).
//!
//! A container ends with all of its processes, as a PID namespace's do when its init exits:
//! every process started here carries a marker variable naming its container, and when the main
//! process has exited, the processes that still carry it (those that made process groups of
//! their own, e.g. a shell's job control) are killed too, and the container counts as stopped
//! only once none is left. Without that, a deleted pod could be gone from the API while its
//! processes still ran, which no container runtime allows.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::sync::oneshot;

/// The kubelet's crash-loop back-off after `restarts` restarts: 10 s, doubling, at most 5 min.
pub(crate) fn backoff(restarts: u32) -> Duration {
    Duration::from_secs(10u64.saturating_mul(1u64 << restarts.min(5)).min(300))
}

/// The variable every process of a container carries (see the module doc).
const MARKER_VAR: &str = "THESEUS_SIM_CONTAINER";

/// The marker of the container whose log is `log` (unique per container of a pod).
pub(crate) fn marker(log: &Path) -> String {
    format!("{MARKER_VAR}={}", log.display())
}

/// The processes that carry `marker` in their environment: the container's, wherever they went.
/// Reading every process's environment is the costly part (a node of a 1,024-pod gang has
/// thousands of processes, and all its containers stop at once on a cancel), so one scan of
/// `/proc` serves every container that asks after it began: `since` is when the caller's
/// container had stopped, and a scan started before that could miss what it left behind.
fn marked(marker: &str, since: Instant) -> Vec<Pid> {
    static SCAN: Mutex<Option<(Instant, ByMarker)>> = Mutex::new(None);
    let mut scan = SCAN.lock().unwrap_or_else(|e| e.into_inner());
    if scan.as_ref().is_none_or(|(at, _)| *at < since) {
        let at = Instant::now();
        *scan = Some((at, scan_markers()));
    }
    scan.as_ref().and_then(|(_, by_marker)| by_marker.get(marker.as_bytes()).cloned()).unwrap_or_default()
}

/// Processes by the container marker they carry.
type ByMarker = HashMap<Vec<u8>, Vec<Pid>>;

/// Every process that carries a container marker, by marker.
fn scan_markers() -> ByMarker {
    let mut by_marker = ByMarker::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return by_marker };
    let prefix = format!("{MARKER_VAR}=");
    for pid in entries.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok())) {
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let Some(marker) = env.split(|b| *b == 0).find(|kv| kv.starts_with(prefix.as_bytes())) else { continue };
        if let Some(pid) = Pid::from_raw(pid) {
            by_marker.entry(marker.to_vec()).or_default().push(pid);
        }
    }
    by_marker
}

/// Kills every process of every container whose files are under `root` (one runtime's), wherever
/// it went (other process groups, reparented to init), and waits (bounded) until none runs. For
/// the simulator's shutdown, when no container is supervised any more.
pub(crate) fn kill_marked_under(root: &Path) {
    let prefix = format!("{MARKER_VAR}={}/", root.display());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<Pid> = scan_markers()
            .into_iter()
            .filter(|(marker, _)| marker.starts_with(prefix.as_bytes()))
            .flat_map(|(_, pids)| pids)
            .collect();
        if left.is_empty() || Instant::now() >= deadline {
            return;
        }
        for pid in left {
            let _ = kill_process(pid, Signal::KILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills what is left of a container after its main process exited, and waits (bounded) until
/// none of it runs. The scans run off the async workers (they block on `/proc`).
async fn reap_leftovers(marker: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let since = Instant::now();
        let owned = marker.to_owned();
        let left = tokio::task::spawn_blocking(move || marked(&owned, since)).await.unwrap_or_default();
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return;
        }
        for pid in left {
            let _ = kill_process(pid, Signal::KILL);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts `argv` with exactly `env` (and the container's marker), in `cwd`, stdout and stderr
/// to `log` (appended: restarts keep the earlier output), in a new process group.
pub(crate) fn spawn(
    argv: &[String],
    env: &[(String, String)],
    cwd: &Path,
    log: &PathBuf,
) -> Result<tokio::process::Child, String> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| "the simulator runs containers without their image, so `command` is required".to_owned())?;
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("creating {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| format!("opening {}: {e}", log.display()))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env(MARKER_VAR, log.display().to_string())
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(true);
    cmd.spawn().map_err(|e| format!("starting `{program}`: {e}"))
}

/// Whether process `pid` has a handler for `signal` (its bit in `SigCgt`).
fn catches(pid: u32, signal: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

/// Waits for the main process to exit or for a stop request (carrying the grace period);
/// returns the exit code (128 + signal for a signal death, as container runtimes report it).
/// The process group gets SIGKILL at the end, as when a container's init process dies, and so
/// does every other process that carries the container's `marker`.
pub(crate) async fn supervise(
    mut child: tokio::process::Child,
    stop: oneshot::Receiver<Duration>,
    marker: &str,
) -> i32 {
    let pid = child.id();
    let pgid = pid.and_then(|id| i32::try_from(id).ok()).and_then(Pid::from_raw);
    let signal_group = |sig: Signal| {
        if let Some(pgid) = pgid {
            let _ = kill_process_group(pgid, sig);
        }
    };
    let status = tokio::select! {
        status = child.wait() => status,
        grace = stop => {
            if let (Some(id), Some(leader)) = (pid, pgid)
                && catches(id, Signal::TERM.as_raw())
            {
                let _ = kill_process(leader, Signal::TERM);
            }
            let grace = grace.unwrap_or(Duration::ZERO);
            match tokio::time::timeout(grace, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    signal_group(Signal::KILL);
                    child.wait().await
                }
            }
        }
    };
    signal_group(Signal::KILL);
    reap_leftovers(marker).await;
    match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1)
        }
        Err(_) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        let secs: Vec<u64> = (0..7).map(|r| backoff(r).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300]);
    }
}
