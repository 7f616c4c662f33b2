//! The local backend (`type: local`): runs a job on this machine, detached from the CLI.
//!
//! Layout of a run (paths from the host's cluster, `~` expanded):
//! - code: `<work>/<project>/<group>/<name>/<run-id>`, hard links to (or, with
//!   `materialize: copy`, copies of) the objects of the store `<work>/.theseus/objects`
//!   ([`crate::store::ship_local`]), written under a `.partial` name and renamed when complete,
//!   so a half-shipped dir is never used;
//! - status: `<status>/<project>/<group>/<name>/<run-id>` (`metadata.json`, exit codes,
//!   the supervisor script);
//! - log: `<log>/<project>/<group>/<name>/<run-id>.log`.
//!
//! A supervisor script (see [`supervisor`]) becomes a session leader with `setsid`, starts N
//! ranks of the bootstrap wired as one JAX job on 127.0.0.1, and records exit codes.
//!
//! One name, one live job: `submit` holds a claim on `<status>/<project>/<group>/<name>` (see
//! [`claim`]) while it looks for a live run of the name, ships and starts; a live run makes it
//! fail with [`Error::AlreadyExists`] before anything is shipped, unless `replace`, which stops
//! the live run (and confirms that none of its processes is left) first.

pub mod claim;
mod host;
pub mod logs;
pub mod process;
mod reclaim;
mod ship;
pub mod supervisor;
mod watch;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::availability::Availability;
use crate::backend::{
    Backend, JobHandle, JobState, JobStatus, LogOptions, LogStream, PreparedJob, RankStatus, RunLayout, SubmitOptions,
};
use crate::bootstrap::{DataDirs, Launch};
use crate::config::{ClusterConfig, HostKind, expand_tilde};
use crate::job::JobIdentity;
use crate::solver::{ChipRequest, Plan, Request};
use crate::{Error, Result};

pub use host::{LocalHost, LocalType, local_cluster};
use supervisor::files;

/// Runs jobs on this machine.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    name: String,
    host: LocalHost,
    cluster: ClusterConfig,
    home: PathBuf,
}

/// What a local [`JobHandle`] carries in `data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalHandleData {
    /// Code dir.
    pub work_dir: PathBuf,
    /// Status dir.
    pub run_dir: PathBuf,
    /// Log file.
    pub log_file: PathBuf,
    /// Number of ranks.
    pub processes: u32,
    /// PID of the supervisor (also its session and process group id); 0 in a handle made by
    /// [`Backend::planned_handle`] before the supervisor started. `supervisor.json` in the run
    /// dir is what `status` and `cancel` use.
    #[serde(default)]
    pub supervisor_pid: u32,
}

impl LocalBackend {
    /// A backend for the local host `name` of cluster `cluster`; `home` expands `~`.
    pub fn new(name: impl Into<String>, host: LocalHost, cluster: ClusterConfig, home: impl Into<PathBuf>) -> Self {
        LocalBackend { name: name.into(), host, cluster, home: home.into() }
    }

    fn expand(&self, path: &str) -> PathBuf {
        expand_tilde(path, &self.home)
    }

    fn data(&self, handle: &JobHandle) -> Result<LocalHandleData> {
        if handle.kind != HostKind::LOCAL {
            return Err(Error::backend(self, format!("handle of a {} job given to the local backend", handle.kind)));
        }
        serde_json::from_value(handle.data.clone())
            .map_err(|e| Error::backend(self, format!("malformed local job handle: {e}")))
    }
}

impl fmt::Display for LocalBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "local({})", self.name)
    }
}

fn path_str(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::InvalidConfig(format!("path `{}` is not valid UTF-8", p.display())))
}

/// A coordinator port on 127.0.0.1 whose next port is free too (torch's `MASTER_PORT`, see
/// [`crate::bootstrap`]): both bound and released (the small race is accepted).
pub fn free_port() -> Result<u16> {
    let bind = |addr: &str| std::net::TcpListener::bind(addr).map_err(|e| Error::io("bind", addr, e));
    let mut last = None;
    for _ in 0..32 {
        let listener = bind("127.0.0.1:0")?;
        let port = listener.local_addr().map_err(|e| Error::io("bind", "127.0.0.1:0", e))?.port();
        if port == u16::MAX {
            continue;
        }
        match bind(&format!("127.0.0.1:{}", port + 1)) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::InvalidConfig("no free pair of ports on 127.0.0.1".into())))
}

#[async_trait]
impl Backend for LocalBackend {
    fn kind(&self) -> HostKind {
        HostKind::LOCAL
    }

    fn layout(&self, identity: &JobIdentity, plan: &Plan) -> Result<RunLayout> {
        let (work, run, log) = self.paths(identity)?;
        let launch = if plan.processes() > 1 {
            let port = match self.host.coordinator_port {
                Some(p @ (0 | u16::MAX)) => {
                    return Err(Error::InvalidConfig(format!(
                        "hosts.{}.coordinator_port: {p} cannot be used: a port from 1 to 65534 (torch's MASTER_PORT \
                         is the next one)",
                        self.name
                    )));
                }
                Some(p) => p,
                None => free_port()?,
            };
            Launch::Local { coordinator_port: port }
        } else {
            Launch::Single
        };
        Ok(RunLayout {
            work_dir: path_str(&work)?,
            run_dir: path_str(&run)?,
            log_file: path_str(&log)?,
            root_dir: path_str(&self.expand(&self.cluster.root))?,
            uv_cache_dir: self.cluster.uv_dir.as_deref().map(|d| path_str(&self.expand(d))).transpose()?,
            data_dirs: DataDirs {
                data: path_str(&self.expand(&self.cluster.data_dir()))?,
                checkpoints: path_str(&self.expand(&self.cluster.checkpoints_dir()))?,
                results: path_str(&self.expand(&self.cluster.results_dir()))?,
            },
            launch,
        })
    }

    async fn availability(&self, request: &Request) -> Result<Availability> {
        Ok(match request.chip {
            ChipRequest::Cpu => {
                let cpus = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
                Availability::Free { chips: cpus, source: "CPU cores on this machine".into() }
            }
            // GPUs of this machine are not probed: the configured count is what the solver uses.
            ChipRequest::AnyGpu | ChipRequest::Chip(_) => Availability::NotChecked,
        })
    }

    async fn submit(&self, job: &PreparedJob, options: &SubmitOptions) -> Result<JobHandle> {
        let processes = job.plan.processes().max(1);
        let (work_dir, run_dir, log_file) = self.paths(&job.identity)?;
        let name_dir = run_dir.parent().ok_or_else(|| Error::InvalidConfig("run dir has no parent".into()))?;
        // One name, one live job: claimed and checked before anything is shipped.
        let _claim = match claim::NameClaim::try_acquire(name_dir, &job.identity.run_id)? {
            Ok(claim) => claim,
            Err(claim::Busy::Held { run_id }) => {
                return Err(Error::AlreadyExists {
                    what: format!(
                        "live run `{run_id}` of job `{}` on host `{}` (being submitted right now)",
                        job.identity.name, self.name
                    ),
                });
            }
        };
        for live in self.live_runs(name_dir, &job.identity) {
            if !options.replace {
                return Err(Error::AlreadyExists {
                    what: format!("live run `{}` of job `{}` on host `{}`", live.run_id, job.identity.name, self.name),
                });
            }
            options.note(&format!("--replace: stopping run {} of job {}", live.run_id, job.identity.name));
            self.stop(&live.run_id, &live.run_dir).await?;
        }
        if work_dir.exists() || run_dir.exists() {
            return Err(Error::AlreadyExists { what: format!("run dir `{}`", work_dir.display()) });
        }
        // `ship` stops at the next block it writes when the program is interrupted, and removes
        // its partial copy on every error.
        let root = self.expand(&self.cluster.work);
        let mode = self.cluster.materialize.unwrap_or_default();
        let shipped = ship::ship(job, &root, &work_dir, mode, options).await;
        if let Some(signal) = crate::interrupt::triggered() {
            let _ = tokio::fs::remove_dir_all(&work_dir).await;
            return Err(Error::backend(
                self,
                format!(
                    "interrupted ({}) while shipping the code; nothing was started and the copy was removed",
                    signal.name()
                ),
            ));
        }
        shipped?;

        let res = self.start(job, &work_dir, &run_dir, &log_file, processes).await;
        match res {
            Ok(pid) => {
                Ok(self.handle(job, LocalHandleData { work_dir, run_dir, log_file, processes, supervisor_pid: pid }))
            }
            Err(e) => {
                // Nothing half-done is left behind: no process, no run dir.
                process::stop_run(
                    &job.identity.run_id,
                    process::Session::read(&run_dir).as_ref(),
                    Duration::from_secs(2),
                )
                .await;
                let _ = tokio::fs::remove_dir_all(&work_dir).await;
                let _ = tokio::fs::remove_dir_all(&run_dir).await;
                Err(e)
            }
        }
    }

    fn planned_handle(&self, job: &PreparedJob) -> Option<JobHandle> {
        let (work_dir, run_dir, log_file) = self.paths(&job.identity).ok()?;
        let processes = job.plan.processes().max(1);
        Some(self.handle(job, LocalHandleData { work_dir, run_dir, log_file, processes, supervisor_pid: 0 }))
    }

    async fn status(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        if !data.run_dir.exists() {
            return Err(Error::NotFound {
                what: format!("run dir `{}` of run `{}`", data.run_dir.display(), handle.id),
            });
        }
        Ok(read_status(&handle.id, &data))
    }

    async fn run_file(&self, handle: &JobHandle, name: &str) -> Result<Option<Vec<u8>>> {
        if !crate::backend::is_run_file_name(name) {
            return Ok(None);
        }
        let path = self.data(handle)?.run_dir.join(name);
        match crate::files::read_bounded(&path, crate::backend::RUN_FILE_LIMIT, "run file") {
            Ok(text) => Ok(Some(text.into_bytes())),
            Err(_) if !path.exists() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn logs(&self, handle: &JobHandle, options: &LogOptions) -> Result<LogStream> {
        let data = self.data(handle)?;
        Ok(logs::stream(handle.id.clone(), data, options.clone()))
    }

    async fn cancel(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        let before = read_status(&handle.id, &data);
        if before.state.is_terminal() {
            return Ok(before);
        }
        self.stop(&handle.id, &data.run_dir).await?;
        Ok(read_status(&handle.id, &data))
    }

    async fn reclaim(&self, options: &crate::backend::ReclaimOptions) -> Result<crate::backend::ReclaimReport> {
        reclaim::reclaim(self, options).await
    }

    async fn usage(&self) -> Result<crate::backend::StoreUsage> {
        reclaim::usage(self).await
    }

    /// Every rank runs on this machine: a port of the job is that port on 127.0.0.1.
    async fn connect_port(&self, handle: &JobHandle, rank: u32, port: u16) -> Result<crate::backend::PortStream> {
        let data = self.data(handle)?;
        let status = read_status(&handle.id, &data);
        if status.state.is_terminal() {
            return Err(Error::backend(self, format!("run `{}` has ended ({})", handle.id, status.state.as_str())));
        }
        let _ = rank;
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(stream) => Ok(Box::pin(stream)),
            Err(e) => Err(Error::backend(
                self,
                format!(
                    "nothing answers on port {port} of run `{}` (127.0.0.1:{port}: {e}); is the job listening yet?",
                    handle.id
                ),
            )),
        }
    }

    /// Through the store of this machine's work root, with the store scripts run by `sh`.
    async fn sync(
        &self,
        handle: &JobHandle,
        snapshot: &crate::snapshot::Snapshot,
        options: &crate::backend::SyncOptions,
    ) -> Result<crate::backend::SyncReport> {
        let data = self.data(handle)?;
        let status = read_status(&handle.id, &data);
        if status.state.is_terminal() {
            return Err(Error::backend(self, format!("run `{}` has ended ({})", handle.id, status.state.as_str())));
        }
        let request = crate::store::sync::SyncRequest {
            snapshot: snapshot.clone(),
            root: path_str(&self.expand(&self.cluster.work))?,
            dest: path_str(&data.work_dir)?,
            mode: self.cluster.materialize.unwrap_or_default(),
            progress: options.progress.clone(),
            status: options.status.clone(),
        };
        crate::store::sync::sync(&crate::store::LocalShell, request).await.map_err(|e| match e {
            crate::store::StoreError::Failed(e) => e,
            e => Error::backend(self, e.to_string()),
        })
    }

    /// A local `sh` in the run's code dir with the job's variables (no TTY to make: it runs on
    /// the user's own terminal).
    async fn shell(
        &self,
        handle: &JobHandle,
        request: &crate::session::ShellRequest,
    ) -> Result<crate::session::ShellSession> {
        let data = self.data(handle)?;
        let status = read_status(&handle.id, &data);
        if status.state.is_terminal() {
            return Err(Error::backend(self, format!("run `{}` has ended ({})", handle.id, status.state.as_str())));
        }
        if request.rank >= data.processes.max(1) {
            return Err(Error::backend(
                self,
                format!("run `{}` has {} rank(s); there is no rank {}", handle.id, data.processes.max(1), request.rank),
            ));
        }
        let work = data.work_dir.to_string_lossy();
        let script = crate::bootstrap::enter::script(Some(&work), request.rank, &request.command);
        Ok(crate::session::ShellSession::Program(crate::session::ShellProgram {
            program: "sh".into(),
            args: vec!["-c".into(), script],
            env: vec![("THESEUS_LOCAL_RANK".into(), request.rank.to_string())],
            cwd: None,
        }))
    }
}

/// A run of a job name whose processes are alive.
struct LiveRun {
    run_id: String,
    run_dir: PathBuf,
}

impl LocalBackend {
    fn handle(&self, job: &PreparedJob, data: LocalHandleData) -> JobHandle {
        JobHandle {
            kind: HostKind::LOCAL,
            host: self.name.clone(),
            id: job.identity.run_id.clone(),
            data: serde_json::to_value(data).expect("handle data serializes"),
        }
    }

    /// Marks a run cancelled and stops all its processes; fails naming what is left.
    async fn stop(&self, run_id: &str, run_dir: &Path) -> Result<()> {
        // A run whose submit stopped before its status dir was made has no marker to leave
        // (and nothing started from it); its processes, if any, are still looked for.
        if run_dir.is_dir() {
            let marker = run_dir.join(files::CANCELLED);
            std::fs::write(&marker, ledger_now()).map_err(|e| Error::io("write", &marker, e))?;
        }
        let session = process::Session::read(run_dir);
        let left = process::stop_run(run_id, session.as_ref(), Duration::from_secs(5)).await;
        if !left.is_empty() {
            return Err(Error::backend(
                self,
                format!("processes {left:?} of run `{run_id}` are still alive after SIGKILL"),
            ));
        }
        Ok(())
    }

    /// Runs of `identity`'s name (other than its own run) that have a live process.
    fn live_runs(&self, name_dir: &Path, identity: &JobIdentity) -> Vec<LiveRun> {
        let Ok(entries) = std::fs::read_dir(name_dir) else { return Vec::new() };
        let table = process::ProcTable::scan();
        let mut live = Vec::new();
        for entry in entries.flatten() {
            let Some(run_id) = entry.file_name().to_str().map(str::to_owned) else { continue };
            if run_id.starts_with('.') || run_id == identity.run_id || !entry.path().is_dir() {
                continue;
            }
            let run_dir = entry.path();
            if !table.of_run(&run_id, process::Session::read(&run_dir).as_ref()).is_empty() {
                live.push(LiveRun { run_id, run_dir });
            }
        }
        live.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        live
    }

    /// Work dir, run dir and log file of a run, each checked to lie under its configured dir
    /// (`work`, `status`, `log`): a name that slipped past the name rule cannot leave them.
    fn paths(&self, identity: &JobIdentity) -> Result<(PathBuf, PathBuf, PathBuf)> {
        let rel = identity.run_path();
        let under = |base: PathBuf, rel: &str| -> Result<PathBuf> {
            let path = base.join(rel);
            crate::paths::check_under(&path_str(&base)?, &path_str(&path)?)
                .map_err(|m| Error::backend(self, format!("refusing a run path of `{}`: {m}", identity.name)))?;
            Ok(path)
        };
        Ok((
            under(self.expand(&self.cluster.work), &rel)?,
            under(self.expand(&self.cluster.status_dir()), &rel)?,
            under(self.expand(&self.cluster.log_dir()), &format!("{rel}.log"))?,
        ))
    }

    async fn start(
        &self,
        job: &PreparedJob,
        work_dir: &Path,
        run_dir: &Path,
        log_file: &Path,
        processes: u32,
    ) -> Result<u32> {
        tokio::fs::create_dir_all(run_dir).await.map_err(|e| Error::io("create", run_dir, e))?;
        if let Some(parent) = log_file.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| Error::io("create", parent, e))?;
        }
        let bootstrap = work_dir.join(&job.bootstrap.entry);
        let script = supervisor::render(&supervisor::SupervisorInput {
            bootstrap: &path_str(&bootstrap)?,
            run_dir: &path_str(run_dir)?,
            log_file: &path_str(log_file)?,
            processes,
        });
        let script_path = run_dir.join("supervise.sh");
        tokio::fs::write(&script_path, script).await.map_err(|e| Error::io("write", &script_path, e))?;

        let mut cmd = tokio::process::Command::new("setsid");
        cmd.arg("bash")
            .arg(&script_path)
            .current_dir(work_dir)
            .env(process::MARKER_VAR, &job.identity.run_id)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(false);
        // Secrets reach the processes through the environment only, never through files.
        for var in job.env.iter().filter(|v| v.secret) {
            cmd.env(&var.name, &var.value);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::Command { command: "setsid bash supervise.sh".into(), message: e.to_string() })?;
        let pid = child.id().unwrap_or(0);
        // Wait until the supervisor has recorded its session: from then on, `status` finds the
        // run's processes without depending on the environment of a process in `exec`.
        let deadline = tokio::time::Instant::now() + SUPERVISOR_START;
        let started = loop {
            if process::Session::read(run_dir).is_some() {
                break Ok(());
            }
            // `setsid` forks (and its parent exits 0) when started as a process group leader:
            // only a failure means the supervisor will never write its session.
            if let Ok(Some(status)) = child.try_wait()
                && !status.success()
            {
                // It may have recorded itself and finished between the two checks.
                if process::Session::read(run_dir).is_some() {
                    break Ok(());
                }
                break Err(format!("the supervisor exited ({status}) before it started any rank"));
            }
            if tokio::time::Instant::now() >= deadline {
                break Err(format!("the supervisor did not start within {SUPERVISOR_START:?}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // The supervisor is reaped by a detached task; the job does not depend on this process.
        tokio::spawn(async move {
            let mut child = child;
            let _ = child.wait().await;
        });
        started
            .map_err(|message| Error::Command { command: format!("setsid bash {}", script_path.display()), message })?;
        Ok(pid)
    }
}

/// How long `submit` waits for the supervisor to record its session.
const SUPERVISOR_START: Duration = Duration::from_secs(20);

fn ledger_now() -> String {
    crate::ledger::now_rfc3339()
}

fn read_code(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The status of a local run from its files and live processes.
pub(crate) fn read_status(run_id: &str, data: &LocalHandleData) -> JobStatus {
    // Processes first, files after: a run that ends in between wrote its exit codes (and a
    // cancel its mark) before its last process was gone, so they are read.
    let session = process::Session::read(&data.run_dir);
    let alive = !process::run_processes(run_id, session.as_ref()).is_empty();
    let cancelled = data.run_dir.join(files::CANCELLED).exists();
    let ranks: Vec<RankStatus> = (0..data.processes)
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
            RankStatus { rank: i, state, exit_code: code, location: Some("127.0.0.1".into()), restarts: None }
        })
        .collect();
    let exit_code = read_code(&data.run_dir.join(files::EXIT_CODE));
    let preempted = std::fs::read_to_string(data.run_dir.join("metadata.json"))
        .map(|m| m.contains("\"preempted\""))
        .unwrap_or(false);
    // With stages (`-s FILE`), which one is running, or ended the run.
    let stage = std::fs::read_to_string(data.run_dir.join("metadata.json"))
        .ok()
        .and_then(|m| serde_json::from_str::<serde_json::Value>(&m).ok())
        .and_then(|m| crate::job::stages::current(&m));
    let (state, exit_code, message) = match exit_code {
        _ if cancelled && !alive => (JobState::Cancelled, exit_code, Some("cancelled by the user".to_owned())),
        Some(0) => (JobState::Completed, Some(0), None),
        Some(c) if preempted => (JobState::Preempted, Some(c), Some(format!("stopped by a signal (exit code {c})"))),
        Some(c) => {
            let stage = stage.map(|s| format!(" in {s}")).unwrap_or_default();
            (JobState::Failed, Some(c), Some(format!("exited with code {c}{stage}")))
        }
        None if alive => (JobState::Running, None, stage),
        None => (
            JobState::Unknown,
            None,
            Some("no process of the run is alive and it left no exit code (was the machine restarted?)".to_owned()),
        ),
    };
    JobStatus { state, exit_code, message, ranks, attempt: None }
}

#[cfg(test)]
mod path_tests;
#[cfg(test)]
mod tests;
