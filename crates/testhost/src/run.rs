//! The files and processes of one sandbox run: what its handle carries, its status read from
//! its run dir and its session, the claim on its name, starting its runner and stopping it, and
//! the runs a sandbox dir holds.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use theseus_core::backend::{JobState, JobStatus, PreparedJob, RankStatus};
use theseus_core::{Error, Result};

use crate::procs;
use crate::runner::{self, files};

/// How long `submit` waits for the runner to record its PID.
const RUNNER_START: Duration = Duration::from_secs(20);

/// What a sandbox `JobHandle` carries in `data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleData {
    /// The code dir.
    pub work_dir: PathBuf,
    /// The status dir: PID, exit codes, log.
    pub run_dir: PathBuf,
    /// Number of ranks.
    pub processes: u32,
}

impl HandleData {
    /// The session of the run's runner (its PID), once it recorded it.
    pub fn sid(&self) -> Option<i32> {
        std::fs::read_to_string(self.run_dir.join(files::PID)).ok()?.trim().parse().ok()
    }
}

pub(crate) fn path_str(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::InvalidConfig(format!("path `{}` is not valid UTF-8", p.display())))
}

fn read_code(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The status of a run from its files and its live processes.
pub fn read_status(data: &HandleData) -> JobStatus {
    let cancelled = data.run_dir.join(files::CANCELLED).exists();
    let sid = data.sid();
    let alive = sid.is_some_and(|sid| !procs::in_session(sid).is_empty());
    let ranks = (0..data.processes.max(1))
        .map(|i| {
            let code = read_code(&data.run_dir.join(files::rank_exit(i)));
            let state = match code {
                Some(0) => JobState::Completed,
                Some(_) if cancelled => JobState::Cancelled,
                Some(_) => JobState::Failed,
                None if alive => JobState::Running,
                None if cancelled => JobState::Cancelled,
                None => JobState::Unknown,
            };
            RankStatus {
                rank: i,
                state,
                exit_code: code,
                location: sid.map(|s| format!("session {s}")),
                restarts: None,
            }
        })
        .collect();
    let exit_code = read_code(&data.run_dir.join(files::EXIT_CODE));
    let (state, message) = match exit_code {
        _ if cancelled && !alive => (JobState::Cancelled, Some("cancelled by the user".to_owned())),
        Some(0) => (JobState::Completed, None),
        Some(c) => (JobState::Failed, Some(format!("exited with code {c}"))),
        None if alive => (JobState::Running, None),
        None if sid.is_none() => (JobState::Pending, Some("the runner has not started yet".to_owned())),
        None => (JobState::Unknown, Some("no process of the run is alive and it left no exit code".to_owned())),
    };
    JobStatus { state, exit_code, message, ranks, attempt: None }
}

/// Held while a submit looks for a live run of its name and starts its own.
pub(crate) struct Claim(PathBuf);

impl Claim {
    pub(crate) fn take(name_dir: &Path) -> std::io::Result<Option<Claim>> {
        std::fs::create_dir_all(name_dir)?;
        let path = name_dir.join(".claim");
        match std::fs::create_dir(&path) {
            Ok(()) => Ok(Some(Claim(path))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Writes the runner into the run dir and starts it in a session of its own; returns once it
/// recorded its PID.
pub(crate) async fn start(job: &PreparedJob, data: &HandleData) -> Result<()> {
    let run_dir = &data.run_dir;
    tokio::fs::create_dir_all(run_dir).await.map_err(|e| Error::io("create", run_dir, e))?;
    let bootstrap = path_str(&data.work_dir.join(&job.bootstrap.entry))?;
    let script = runner::render(&bootstrap, &path_str(run_dir)?, data.processes);
    let script_path = run_dir.join(files::RUNNER);
    tokio::fs::write(&script_path, script).await.map_err(|e| Error::io("write", &script_path, e))?;
    let mut cmd = tokio::process::Command::new("setsid");
    cmd.arg("bash")
        .arg(&script_path)
        .current_dir(&data.work_dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(false);
    // Secrets reach the processes through the environment only, never through files.
    for var in job.env.iter().filter(|v| v.secret) {
        cmd.env(&var.name, &var.value);
    }
    let command = || format!("setsid bash {}", script_path.display());
    let mut child = cmd.spawn().map_err(|e| Error::Command { command: command(), message: e.to_string() })?;
    let deadline = tokio::time::Instant::now() + RUNNER_START;
    let started = loop {
        if data.sid().is_some() {
            break Ok(());
        }
        if let Ok(Some(status)) = child.try_wait()
            && !status.success()
            && data.sid().is_none()
        {
            break Err(format!("the runner exited ({status}) before it started any rank"));
        }
        if tokio::time::Instant::now() >= deadline {
            break Err(format!("the runner did not start within {RUNNER_START:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Reaped by a detached task: the job does not depend on this process.
    tokio::spawn(async move { child.wait().await });
    started.map_err(|message| Error::Command { command: command(), message })
}

/// Marks a run cancelled and stops its session; fails naming what is left.
pub(crate) async fn stop(backend: &(dyn fmt::Display + Sync), data: &HandleData) -> Result<()> {
    if data.run_dir.is_dir() {
        let marker = data.run_dir.join(files::CANCELLED);
        std::fs::write(&marker, "").map_err(|e| Error::io("write", &marker, e))?;
    }
    let Some(sid) = data.sid() else { return Ok(()) };
    let left = procs::stop_session(sid, Duration::from_secs(5)).await;
    if !left.is_empty() {
        return Err(Error::backend(backend, format!("processes {left:?} are still alive after SIGKILL")));
    }
    Ok(())
}

/// Runs of a name (other than `own`) whose processes are alive, by run id.
pub(crate) fn live_runs(name_dir: &Path, own: &str) -> Vec<(String, HandleData)> {
    let Ok(entries) = std::fs::read_dir(name_dir) else { return Vec::new() };
    let mut live = Vec::new();
    for entry in entries.flatten() {
        let Some(run_id) = entry.file_name().to_str().map(str::to_owned) else { continue };
        if run_id.starts_with('.') || run_id == own || !entry.path().is_dir() {
            continue;
        }
        let data = HandleData { work_dir: PathBuf::new(), run_dir: entry.path(), processes: 1 };
        if data.sid().is_some_and(|p| !procs::in_session(p).is_empty()) {
            live.push((run_id, data));
        }
    }
    live.sort_by(|a, b| a.0.cmp(&b.0));
    live
}

/// Every run dir under `runs` (`<project>/<group>/<name>/<run id>`), with its run path.
pub(crate) fn run_dirs(runs: &Path) -> Vec<(String, PathBuf)> {
    let mut level = vec![(String::new(), runs.to_path_buf())];
    for _ in 0..4 {
        let mut next = Vec::new();
        for (rel, dir) in level {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
                if name.starts_with('.') || !entry.path().is_dir() {
                    continue;
                }
                let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
                next.push((rel, entry.path()));
            }
        }
        level = next;
    }
    level.sort();
    level
}

/// How long ago `path` last changed (zero when unknown).
pub(crate) fn modified_age(path: &Path) -> Duration {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default()
}
