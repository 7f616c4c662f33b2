//! Network namespaces as the simulator uses them: commands (`ip`, `nsenter`) with their
//! errors, running code on a thread inside a namespace, and killing every process of a
//! namespace (SIGTERM, a grace, SIGKILL). Each simulator records its pid under
//! `/run/theseus-tpu-sim/PREFIX.pid`; the next one to start removes the namespaces of those
//! whose process is gone (killed with SIGKILL, which no handler sees).

use std::os::fd::AsFd as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Making or tearing down workers failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A command (ip, nsenter, ssh-keygen) failed.
    #[error(
        "`{command}` failed: {detail} (the simulator's workers need root, iproute2, util-linux and OpenSSH's sshd)"
    )]
    Command { command: String, detail: String },
    /// A file or socket could not be made.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    /// sshd did not answer in time.
    #[error("sshd of worker {0} did not answer on port 22 within 10 s; see {1}")]
    SshdTimeout(String, PathBuf),
    /// The simulator is stopping.
    #[error("the simulator is stopping")]
    Closing,
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> WorkerError {
    let what = what.into();
    move |source| WorkerError::Io { what, source }
}

pub(crate) fn run(args: &[&str]) -> Result<String, WorkerError> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| WorkerError::Command { command: args.join(" "), detail: e.to_string() })?;
    if !out.status.success() {
        return Err(WorkerError::Command {
            command: args.join(" "),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `f` on a new thread that entered the network namespace `ns` (`setns` moves only the
/// calling thread; sockets keep the namespace they were made in).
pub(crate) fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path)?;
        rustix::thread::move_into_link_name_space(file.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))?;
        f()
    })
    .join()
    .map_err(|_| std::io::Error::other("a namespace thread panicked"))?
}

/// The processes in a network namespace.
pub(crate) fn pids_in(ns: &str) -> Vec<i32> {
    run(&["ip", "netns", "pids", ns]).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

fn signal(pids: &[i32], sig: rustix::process::Signal) {
    for pid in pids {
        if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }
}

/// SIGTERM, up to `grace` for them to end, SIGKILL, and up to 5 s for them to be gone.
pub(crate) fn kill_all(ns: &str, grace: Duration) {
    signal(&pids_in(ns), rustix::process::Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && !pids_in(ns).is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = pids_in(ns);
        if left.is_empty() || Instant::now() > deadline {
            break;
        }
        signal(&left, rustix::process::Signal::KILL);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where simulators record which process owns which namespace prefix.
const OWNERS: &str = "/run/theseus-tpu-sim";

/// Kills every process in, and removes, each namespace named `{prefix}-...` (workers first,
/// the vpc last).
pub(crate) fn sweep_prefix(prefix: &str) {
    let list = run(&["ip", "netns", "list"]).unwrap_or_default();
    let mut mine: Vec<String> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .map(str::to_owned)
        .collect();
    mine.sort_by_key(|n| n.ends_with("-vpc"));
    for ns in &mine {
        kill_all(ns, Duration::ZERO);
        let _ = run(&["ip", "netns", "del", ns]);
    }
}

/// Records this process as the owner of `prefix`.
pub(crate) fn record_owner(prefix: &str) {
    let _ = std::fs::create_dir_all(OWNERS);
    let _ = std::fs::write(format!("{OWNERS}/{prefix}.pid"), std::process::id().to_string());
}

pub(crate) fn forget_owner(prefix: &str) {
    let _ = std::fs::remove_file(format!("{OWNERS}/{prefix}.pid"));
}

/// Sweeps the prefixes whose owner process is gone.
pub(crate) fn reap_stale() {
    let Ok(entries) = std::fs::read_dir(OWNERS) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(prefix) = name.strip_suffix(".pid") else { continue };
        let pid = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let alive = pid.trim().parse::<u32>().is_ok_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            tracing::warn!(prefix, "removing the namespaces of a simulator that died");
            sweep_prefix(prefix);
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
