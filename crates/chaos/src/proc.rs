//! Running the binary under test: bounded in time, its output collected, and killed with
//! SIGKILL (by PID: it is our child) on a deadline or at a chosen line of its stderr.

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// What a command did.
pub(crate) struct Ran {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    /// Killed at the deadline.
    pub(crate) timed_out: bool,
    /// Killed because its stderr showed the line asked for.
    pub(crate) killed_at: Option<String>,
}

/// When to kill the command on purpose.
pub(crate) enum KillAt<'a> {
    /// Never (only at the deadline).
    Never,
    /// After this long.
    After(Duration),
    /// At the first stderr line that contains this text (then after a little more when given).
    Line(&'a str, Duration),
}

/// Runs `cmd` (stdin closed, stdout and stderr collected) and kills it at `bound` or `kill`.
pub(crate) fn run(mut cmd: Command, bound: Duration, kill: KillAt<'_>) -> Result<Ran, String> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let shown = format!("{:?}", cmd.get_program());
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {shown}: {e}"))?;
    // Collected as they come: a process the command left (an ssh master, a job) may hold the
    // pipes open after it is gone, so the end is not waited for forever.
    let (out_text, err_text) = (Arc::new(Mutex::new(String::new())), Arc::new(Mutex::new(String::new())));
    let (done_tx, done) = mpsc::channel::<()>();
    let mut stdout = child.stdout.take().expect("piped");
    let (text, tx) = (out_text.clone(), done_tx.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let _ = tx.send(());
    });
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stderr = BufReader::new(child.stderr.take().expect("piped"));
    let text = err_text.clone();
    std::thread::spawn(move || {
        for line in stderr.lines() {
            let line = line.unwrap_or_default();
            {
                let mut text = text.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
            let _ = lines_tx.send(line);
        }
        let _ = done_tx.send(());
    });
    let started = Instant::now();
    let deadline = started + bound;
    let mut kill_deadline = match kill {
        KillAt::After(after) => Some(started + after),
        _ => None,
    };
    let mut killed_at = None;
    let (code, timed_out) = loop {
        if let KillAt::Line(text, extra) = kill
            && kill_deadline.is_none()
        {
            while let Ok(line) = lines.try_recv() {
                if line.contains(text) {
                    killed_at = Some(line);
                    kill_deadline = Some(Instant::now() + extra);
                    break;
                }
            }
        }
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break (status.code(), false);
        }
        let now = Instant::now();
        if kill_deadline.is_some_and(|at| now >= at) {
            if killed_at.is_none() {
                killed_at = Some(format!("after {:.2}s", (now - started).as_secs_f64()));
            }
            let _ = child.kill();
            let status = child.wait().map_err(|e| e.to_string())?;
            break (status.code(), false);
        }
        if now > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let until = Instant::now() + Duration::from_secs(3);
    for _ in 0..2 {
        let _ = done.recv_timeout(until.saturating_duration_since(Instant::now()));
    }
    let stdout = out_text.lock().unwrap().clone();
    let stderr = err_text.lock().unwrap().clone();
    Ok(Ran { code, stdout, stderr, timed_out, killed_at })
}

/// `theseus` with nothing of this environment but `PATH`: its own HOME and state dir (under
/// `home`), no colour, run from `code`.
pub(crate) fn theseus(bin: &std::path::Path, home: &std::path::Path, code: &std::path::Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .current_dir(code);
    cmd
}

/// `text` with every line indented, for reports.
pub(crate) fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}
