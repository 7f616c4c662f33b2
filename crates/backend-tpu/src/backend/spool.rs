//! What the client keeps of a run on a VM theseus created, so that the run can start again on
//! the VM created anew after a preemption: the job (identity, process count, rendered bootstrap)
//! and a copy of its code, under `<spool root>/<host>/<run id>/`, plus, per node incarnation the
//! run was started on again, its workers' runs (`incarnations/<id>.json`). A job with secrets is
//! not kept (secrets are never written to a file): after a preemption it is resubmitted by hand.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use theseus_core::backend::{JobState, JobStatus, LogLine, PreparedJob};
use theseus_core::bootstrap::{RenderedBootstrap, RenderedFile};
use theseus_core::job::JobIdentity;
use theseus_core::{Error, Result};

use super::WorkerRun;

/// The job as kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Kept {
    pub(crate) identity: JobIdentity,
    pub(crate) processes: u32,
    pub(crate) entry: String,
    pub(crate) files: Vec<KeptFile>,
    /// What the VM was created with at submit ([`super::Vm::creation`]).
    #[serde(default)]
    pub(crate) creation: Option<serde_json::Value>,
}

/// One rendered bootstrap file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct KeptFile {
    pub(crate) path: String,
    pub(crate) contents: String,
    pub(crate) executable: bool,
}

impl Kept {
    /// The rendered bootstrap again.
    pub(crate) fn bootstrap(&self) -> RenderedBootstrap {
        RenderedBootstrap {
            files: self
                .files
                .iter()
                .map(|f| RenderedFile { path: f.path.clone(), contents: f.contents.clone(), executable: f.executable })
                .collect(),
            entry: self.entry.clone(),
        }
    }
}

/// The spool of one run.
#[derive(Debug, Clone)]
pub(crate) struct Spool {
    dir: PathBuf,
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(action, path, e)
}

impl Spool {
    /// The spool of run `run` of host `host` under `root`.
    pub(crate) fn new(root: &Path, host: &str, run: &str) -> Spool {
        Spool { dir: root.join(host).join(run) }
    }

    /// The copy of the code.
    pub(crate) fn code(&self) -> PathBuf {
        self.dir.join("code")
    }

    /// Keeps `job` (a job with secrets is not kept: `Ok(false)`).
    pub(crate) fn save(&self, job: &PreparedJob, creation: Option<serde_json::Value>) -> Result<bool> {
        if job.env.iter().any(|v| v.secret) {
            return Ok(false);
        }
        let code = self.code();
        std::fs::create_dir_all(&code).map_err(io("create", &code))?;
        for f in &job.snapshot.files {
            let (from, to) = (job.snapshot.root.join(&f.path), code.join(&f.path));
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(io("create", parent))?;
            }
            match &f.symlink {
                Some(target) => {
                    let _ = std::fs::remove_file(&to);
                    std::os::unix::fs::symlink(target, &to).map_err(io("link", &to))?;
                }
                None => {
                    std::fs::copy(&from, &to).map_err(io("copy", &from))?;
                }
            }
        }
        let kept = Kept {
            identity: job.identity.clone(),
            processes: job.plan.processes().max(1),
            entry: job.bootstrap.entry.clone(),
            files: job
                .bootstrap
                .files
                .iter()
                .map(|f| KeptFile { path: f.path.clone(), contents: f.contents.clone(), executable: f.executable })
                .collect(),
            creation,
        };
        let path = self.dir.join("job.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&kept).expect("kept job serializes"))
            .map_err(io("write", &path))?;
        Ok(true)
    }

    /// Drops the kept job (a cancelled run does not start again); its statuses stay.
    pub(crate) fn forget_job(&self) {
        let _ = std::fs::remove_file(self.dir.join("job.json"));
        let _ = std::fs::remove_dir_all(self.code());
    }

    /// The kept job, when there is one.
    pub(crate) fn load(&self) -> Option<Kept> {
        serde_json::from_slice(&std::fs::read(self.dir.join("job.json")).ok()?).ok()
    }

    /// Records the workers' runs of node incarnation `node_id`.
    pub(crate) fn save_incarnation(&self, node_id: &str, runs: &[WorkerRun]) -> Result<()> {
        let dir = self.dir.join("incarnations");
        std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let path = dir.join(format!("{}.json", safe(node_id)));
        std::fs::write(&path, serde_json::to_vec(runs).expect("runs serialize")).map_err(io("write", &path))
    }

    /// The workers' runs of node incarnation `node_id`, when the run was started on it again.
    pub(crate) fn incarnation(&self, node_id: &str) -> Option<Vec<WorkerRun>> {
        let path = self.dir.join("incarnations").join(format!("{}.json", safe(node_id)));
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// How many times the run was started again.
    pub(crate) fn restarts(&self) -> u32 {
        std::fs::read_dir(self.dir.join("incarnations")).map_or(0, |d| d.count() as u32)
    }

    /// Records the run's final status (what `status` answers once the VM is gone).
    pub(crate) fn save_final(&self, status: &JobStatus) {
        let _ = std::fs::create_dir_all(&self.dir);
        let _ = std::fs::write(self.dir.join("final.json"), serde_json::to_vec(status).expect("status serializes"));
    }

    /// Records why the run was last started again (`VM x was preempted (PREEMPTED)`).
    pub(crate) fn save_restart_reason(&self, why: &str) {
        let _ = std::fs::write(self.dir.join("restarted"), why);
    }

    /// Why the run was last started again, when it was.
    pub(crate) fn restart_reason(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("restarted")).ok().filter(|s| !s.is_empty())
    }

    /// Forgets a recorded final status (the run started again).
    pub(crate) fn clear_final(&self) {
        let _ = std::fs::remove_file(self.dir.join("final.json"));
    }

    /// The run's final status, when one was recorded.
    pub(crate) fn final_status(&self) -> Option<JobStatus> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(self.dir.join("final.json")).ok()?).ok()?;
        let state = JobState::parse(v.get("state")?.as_str()?)?;
        Some(JobStatus {
            state,
            exit_code: v.get("exit_code").and_then(serde_json::Value::as_i64).map(|c| c as i32),
            message: v.get("message").and_then(serde_json::Value::as_str).map(str::to_owned),
            ranks: vec![],
            attempt: v.get("attempt").and_then(serde_json::Value::as_u64).map(|a| a as u32),
        })
    }

    /// Keeps the run's final logs (what `logs` answers once the VM is gone), once.
    pub(crate) fn save_logs(&self, lines: &[LogLine]) {
        let path = self.dir.join("logs.json");
        if path.exists() {
            return;
        }
        let _ = std::fs::create_dir_all(&self.dir);
        let tmp = self.dir.join("logs.json.tmp");
        if std::fs::write(&tmp, serde_json::to_vec(lines).expect("log lines serialize")).is_ok() {
            let _ = std::fs::rename(tmp, path);
        }
    }

    /// Whether the run's final logs are kept.
    pub(crate) fn has_logs(&self) -> bool {
        self.dir.join("logs.json").exists()
    }

    /// The run's final logs, when kept.
    pub(crate) fn logs(&self) -> Option<Vec<LogLine>> {
        let v: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(self.dir.join("logs.json")).ok()?).ok()?;
        Some(
            v.into_iter()
                .map(|l| LogLine {
                    rank: l.get("rank").and_then(serde_json::Value::as_u64).map(|r| r as u32),
                    text: l.get("text").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned(),
                    source: l.get("source").and_then(serde_json::Value::as_str).map(str::to_owned),
                })
                .collect(),
        )
    }

    /// Takes the run's resume lock (one client recreates at a time), given back when the guard
    /// drops (also when a client's status is given up on mid-way); `None` when another holds it
    /// (a lock older than `stale` is taken over).
    pub(crate) fn lock(&self, stale: Duration) -> Option<LockGuard> {
        let path = self.dir.join("resume.lock");
        let fresh = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() < stale);
        if fresh {
            return None;
        }
        let _ = std::fs::remove_file(&path);
        std::fs::OpenOptions::new().write(true).create_new(true).open(&path).ok()?;
        Some(LockGuard { path })
    }
}

/// A held resume lock ([`Spool::lock`]).
#[derive(Debug)]
pub(crate) struct LockGuard {
    path: PathBuf,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn safe(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}
