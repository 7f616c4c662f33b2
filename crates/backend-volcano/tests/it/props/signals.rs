//! The pod script forwards SIGTERM/SIGINT to the bootstrap: run for real against a fake bootstrap
//! that traps TERM like the real one (records, then exits 143), signal the pod script's bash, and
//! check the bootstrap's handler ran, its output reached both stdout and the log file, and the pod
//! script exited with the bootstrap's status.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use theseus_backend_volcano::render::pod_script;
use theseus_core::backend::RunLayout;

use super::script::{real_bash, wait_deadline};
use crate::fixtures::layout;

const DEADLINE: Duration = Duration::from_secs(20);

const FAKE_BOOTSTRAP: &str = r#"trap 'echo "bootstrap got TERM"; echo preempted > "$THESEUS_MARKER"; exit 143' TERM
echo "to stderr" >&2
echo "bootstrap ready"
while :; do sleep 0.05; done
"#;

/// Kills a process group when dropped, also when a failed assertion unwinds, so a bootstrap the
/// pod script failed to stop does not outlive the test.
struct GroupGuard(u32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0)]).stderr(Stdio::null()).status();
    }
}

/// Runs the pod script against [`FAKE_BOOTSTRAP`], sends `signal` once the bootstrap printed
/// its first line, and returns (exit code, stdout lines, log file, marker).
fn signal_pod_script(signal: &str) -> (Option<i32>, Vec<String>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work dir/it's $(x)");
    std::fs::create_dir_all(work.join(".theseus")).unwrap();
    std::fs::write(work.join(".theseus/bootstrap.sh"), FAKE_BOOTSTRAP).unwrap();
    let log = dir.path().join("logs/ü \"quoted\"/run.log");
    let marker = dir.path().join("marker");
    let layout = RunLayout { work_dir: work.display().to_string(), log_file: log.display().to_string(), ..layout() };
    let script = pod_script(&layout, ".theseus/bootstrap.sh");

    let mut child = Command::new(real_bash())
        .args(["-c", &script])
        .env("THESEUS_MARKER", &marker)
        .env("TMPDIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let _group = GroupGuard(child.id());
    let (lines_tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let end = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    while !seen.iter().any(|l| l == "bootstrap ready") {
        let left = end.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(e) => {
                let _ = child.kill();
                panic!("the bootstrap never started ({e}); output so far: {seen:?}");
            }
        }
    }
    let sent = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let status = wait_deadline(&mut child, DEADLINE);
    // The rest of the output, until every writer closed stdout; a process left behind (the
    // bootstrap, when the signal was not forwarded) is killed with the group by the guard.
    let drained = loop {
        match lines.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(line) => seen.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => break true,
            Err(mpsc::RecvTimeoutError::Timeout) => break false,
        }
    };
    if drained {
        reader.join().unwrap();
    }
    assert!(drained, "processes of the pod script kept its stdout open after it exited: {seen:?}");
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    let marker = std::fs::read_to_string(&marker).unwrap_or_default();
    (status.code(), seen, log, marker)
}

#[test]
fn sigterm_reaches_the_bootstrap() {
    let (code, stdout, log, marker) = signal_pod_script("TERM");
    assert_eq!(marker, "preempted\n", "the bootstrap's TERM handler did not run");
    assert_eq!(code, Some(143), "the pod script must exit with the bootstrap's status");
    let want = ["to stderr", "bootstrap ready", "bootstrap got TERM"];
    assert_eq!(stdout, want, "container stdout (kubectl logs)");
    assert_eq!(log.lines().collect::<Vec<_>>(), want, "the run's log file");
}

#[test]
fn sigint_is_forwarded_as_sigterm() {
    let (code, stdout, log, marker) = signal_pod_script("INT");
    assert_eq!(marker, "preempted\n");
    assert_eq!(code, Some(143));
    assert_eq!(stdout.last().map(String::as_str), Some("bootstrap got TERM"));
    assert!(log.ends_with("bootstrap got TERM\n"), "{log}");
}
