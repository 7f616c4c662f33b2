//! The sandbox's [`Backend`]: a job's code goes through the store of the sandbox dir into
//! `<dir>/code/<run path>`, and a runner ([`crate::runner`]) started with `setsid` runs its ranks
//! as local processes ([`crate::run`]). Its state is the files of `<dir>/runs/<run path>` (the runner's PID, exit
//! codes, a `cancelled` marker, the log); `cancel` stops the session of the recorded PID;
//! the leftovers `gc` removes are the code dirs of runs whose processes are gone.
//!
//! One name, one live job: `submit` holds `<dir>/runs/<project>/<group>/<name>/.claim` (made
//! with `mkdir`, which fails when it exists) while it looks for a live run of the name, ships
//! and starts.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use theseus_core::availability::Availability;
use theseus_core::backend::{
    Backend, DryRunDocument, JobHandle, JobState, JobStatus, LogOptions, LogStream, PortStream, PreparedJob, RunLayout,
    SubmitOptions, SyncOptions, SyncReport,
};
use theseus_core::bootstrap::{DataDirs, Launch};
use theseus_core::config::{ClusterConfig, HostKind, expand_tilde};
use theseus_core::job::JobIdentity;
use theseus_core::plan::{Plan, Request};
use theseus_core::session::{ShellProgram, ShellRequest, ShellSession};
use theseus_core::snapshot::Snapshot;
use theseus_core::store::{self, ExtraFile, ShipRequest, StoreError};
use theseus_core::{Error, Result};

use crate::config::{KIND, SandboxHost};
use crate::run::{Claim, HandleData, live_runs, modified_age, path_str, read_status, run_dirs, start, stop};
use crate::runner::{self, files};
use crate::{logs, procs};

/// A run dir without a PID is a crashed submit's only when older than this (a submit may be
/// between making it and starting the runner).
const SUBMIT_GRACE: Duration = Duration::from_secs(60);

/// Runs jobs of one sandbox host.
#[derive(Debug, Clone)]
pub struct SandboxBackend {
    name: String,
    host: SandboxHost,
    cluster: ClusterConfig,
    home: PathBuf,
}

impl SandboxBackend {
    /// The backend of sandbox host `name` of `cluster`; `home` expands `~`.
    pub fn new(name: impl Into<String>, host: SandboxHost, cluster: ClusterConfig, home: impl Into<PathBuf>) -> Self {
        SandboxBackend { name: name.into(), host, cluster, home: home.into() }
    }

    /// The sandbox dir: the host's `dir`, else `<cluster root>/sandbox`.
    pub fn dir(&self) -> PathBuf {
        match &self.host.dir {
            Some(dir) => expand_tilde(dir, &self.home),
            None => expand_tilde(&self.cluster.root, &self.home).join("sandbox"),
        }
    }

    /// The code dir and status dir of a run.
    fn paths(&self, identity: &JobIdentity) -> (PathBuf, PathBuf) {
        let rel = identity.run_path();
        (self.dir().join("code").join(&rel), self.dir().join("runs").join(&rel))
    }

    /// The data of a handle this backend made.
    pub fn data(&self, handle: &JobHandle) -> Result<HandleData> {
        if handle.kind != KIND {
            return Err(Error::backend(self, format!("handle of a {} job given to the sandbox backend", handle.kind)));
        }
        serde_json::from_value(handle.data.clone())
            .map_err(|e| Error::backend(self, format!("malformed sandbox job handle: {e}")))
    }

    fn expand(&self, path: &str) -> Result<String> {
        path_str(&expand_tilde(path, &self.home))
    }

    /// An error unless the run of `handle` is still going.
    fn live(&self, handle: &JobHandle) -> Result<HandleData> {
        let data = self.data(handle)?;
        let status = read_status(&data);
        if status.state.is_terminal() || status.state == JobState::Unknown {
            return Err(Error::backend(self, format!("run `{}` has ended ({})", handle.id, status.state)));
        }
        Ok(data)
    }
}

impl fmt::Display for SandboxBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sandbox({})", self.name)
    }
}

#[async_trait]
impl Backend for SandboxBackend {
    fn kind(&self) -> HostKind {
        KIND
    }

    fn layout(&self, identity: &JobIdentity, plan: &Plan) -> Result<RunLayout> {
        let (work, run) = self.paths(identity);
        let launch = if plan.processes() > 1 {
            Launch::Local { coordinator_port: theseus_core::local::free_port()? }
        } else {
            Launch::Single
        };
        Ok(RunLayout {
            work_dir: path_str(&work)?,
            log_file: path_str(&run.join(files::LOG))?,
            run_dir: path_str(&run)?,
            root_dir: self.expand(&self.cluster.root)?,
            uv_cache_dir: self.cluster.uv_dir.as_deref().map(|d| self.expand(d)).transpose()?,
            data_dirs: DataDirs {
                data: self.expand(&self.cluster.data_dir())?,
                checkpoints: self.expand(&self.cluster.checkpoints_dir())?,
                results: self.expand(&self.cluster.results_dir())?,
            },
            launch,
        })
    }

    async fn availability(&self, _request: &Request) -> Result<Availability> {
        Ok(Availability::Free { chips: self.host.slots, source: "sandbox slots".into() })
    }

    async fn creates(&self, _job: &PreparedJob) -> Result<Vec<String>> {
        match self.host.creates.as_deref().map(|c| (c, c.strip_prefix("error: "))) {
            Some((_, Some(error))) => Err(Error::backend(self, error)),
            Some((what, None)) => Ok(vec![what.to_owned()]),
            None => Ok(Vec::new()),
        }
    }

    async fn submit(&self, job: &PreparedJob, options: &SubmitOptions) -> Result<JobHandle> {
        if let Some(what) = self.host.creates.as_ref().filter(|_| !options.create_confirmed) {
            return Err(Error::Backend {
                backend: self.to_string(),
                message: format!("will not create {what} without the user's confirmation (`--yes`)"),
                source: Some(Box::new(theseus_core::NothingCreated)),
            });
        }
        let (work_dir, run_dir) = self.paths(&job.identity);
        let name_dir = run_dir.parent().ok_or_else(|| Error::InvalidConfig("run dir has no parent".into()))?;
        let Some(_claim) = Claim::take(name_dir).map_err(|e| Error::io("create", name_dir, e))? else {
            return Err(Error::AlreadyExists {
                what: format!(
                    "a run of job `{}` on host `{}` (being submitted right now)",
                    job.identity.name, self.name
                ),
            });
        };
        for (run_id, live) in live_runs(name_dir, &job.identity.run_id) {
            if !options.replace {
                return Err(Error::AlreadyExists {
                    what: format!("live run `{run_id}` of job `{}` on host `{}`", job.identity.name, self.name),
                });
            }
            options.note(&format!("--replace: stopping run {run_id} of job {}", job.identity.name));
            stop(self, &live).await?;
        }
        if work_dir.exists() || run_dir.exists() {
            return Err(Error::AlreadyExists { what: format!("run dir `{}`", run_dir.display()) });
        }
        if let Some(parent) = work_dir.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| Error::io("create", parent, e))?;
        }
        // The ship stops at the next file when the program is interrupted and removes its
        // partial copy on every error; an interrupt starts nothing.
        let shipped = store::ship_local(ShipRequest {
            snapshot: job.snapshot.clone(),
            root: path_str(&self.dir())?,
            dest: path_str(&work_dir)?,
            mode: self.cluster.materialize.unwrap_or_default(),
            extra: ExtraFile::bootstrap(&job.bootstrap),
            progress: options.progress.clone(),
            status: options.status.clone(),
        })
        .await;
        if let Some(signal) = theseus_core::interrupt::triggered() {
            let _ = tokio::fs::remove_dir_all(&work_dir).await;
            let message = format!("interrupted ({}) while shipping the code; nothing was started", signal.name());
            return Err(Error::backend(self, message));
        }
        options.report_shipped(&shipped?);
        let data = HandleData { work_dir, run_dir, processes: job.plan.processes().max(1) };
        match start(job, &data).await {
            Ok(()) => Ok(handle(&self.name, job, &data)),
            Err(e) => {
                // Nothing half-done is left: no process, no dirs.
                if let Some(sid) = data.sid() {
                    procs::stop_session(sid, Duration::from_secs(2)).await;
                }
                let _ = tokio::fs::remove_dir_all(&data.work_dir).await;
                let _ = tokio::fs::remove_dir_all(&data.run_dir).await;
                Err(e)
            }
        }
    }

    async fn status(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        if !data.run_dir.is_dir() {
            return Err(Error::NotFound {
                what: format!("run dir `{}` of run `{}`", data.run_dir.display(), handle.id),
            });
        }
        Ok(read_status(&data))
    }

    async fn logs(&self, handle: &JobHandle, options: &LogOptions) -> Result<LogStream> {
        let data = self.data(handle)?;
        let log = data.run_dir.join(files::LOG);
        Ok(logs::stream(log, options.follow, move || {
            !matches!(read_status(&data).state, JobState::Running | JobState::Pending)
        }))
    }

    async fn cancel(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        let before = read_status(&data);
        if before.state.is_terminal() {
            return Ok(before);
        }
        stop(self, &data).await?;
        Ok(read_status(&data))
    }

    fn dry_run(&self, job: &PreparedJob) -> Result<Vec<DryRunDocument>> {
        let (work_dir, run_dir) = self.paths(&job.identity);
        let bootstrap = path_str(&work_dir.join(&job.bootstrap.entry))?;
        let plan = format!(
            "ship the code through the store of {dir} into {work}\nstart `setsid bash {runner}` in it \
             ({n} rank(s)); status, exit codes and output in {run}\n",
            dir = self.dir().display(),
            work = work_dir.display(),
            runner = run_dir.join(files::RUNNER).display(),
            n = job.plan.processes().max(1),
            run = run_dir.display(),
        );
        Ok(vec![
            DryRunDocument { title: "what the sandbox does".into(), text: plan },
            DryRunDocument {
                title: "sandbox runner (bash)".into(),
                text: runner::render(&bootstrap, &path_str(&run_dir)?, job.plan.processes()),
            },
        ])
    }

    fn locate(&self, handle: &JobHandle) -> Vec<String> {
        match self.data(handle) {
            Ok(data) => vec![format!("sandbox run dir: {}", data.run_dir.display())],
            Err(_) => Vec::new(),
        }
    }

    /// The code dirs of runs whose processes are gone (their status and log stay, so `status`
    /// and `logs` still answer), and both dirs of a submit that died before its runner started.
    async fn leftovers(&self, older_than: Duration, dry_run: bool) -> Result<Option<Vec<String>>> {
        let dir = self.dir();
        let mut found = Vec::new();
        for (rel, run_dir) in run_dirs(&dir.join("runs")) {
            let data = HandleData { work_dir: dir.join("code").join(&rel), run_dir, processes: 1 };
            let age = modified_age(&data.run_dir);
            let (what, remove) = match data.sid() {
                Some(sid) if procs::in_session(sid).is_empty() && data.work_dir.exists() => {
                    ("the code dir of ended run", vec![&data.work_dir])
                }
                None if age >= SUBMIT_GRACE => ("the dirs of crashed submit", vec![&data.work_dir, &data.run_dir]),
                _ => continue,
            };
            if age < older_than {
                continue;
            }
            if !dry_run {
                for path in remove {
                    match tokio::fs::remove_dir_all(path).await {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(Error::io("remove", path, e)),
                    }
                }
            }
            found.push(format!("{what} {rel}"));
        }
        Ok(Some(found))
    }

    /// Every rank runs on this machine: a port of the job is that port on 127.0.0.1.
    async fn connect_port(&self, handle: &JobHandle, _rank: u32, port: u16) -> Result<PortStream> {
        self.live(handle)?;
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(stream) => Ok(Box::pin(stream)),
            Err(e) => Err(Error::backend(self, format!("nothing answers on port {port} of run `{}`: {e}", handle.id))),
        }
    }

    async fn shell(&self, handle: &JobHandle, request: &ShellRequest) -> Result<ShellSession> {
        let data = self.live(handle)?;
        if request.rank >= data.processes.max(1) {
            return Err(Error::backend(self, format!("run `{}` has no rank {}", handle.id, request.rank)));
        }
        let work = path_str(&data.work_dir)?;
        Ok(ShellSession::Program(ShellProgram {
            program: "sh".into(),
            args: vec![
                "-c".into(),
                theseus_core::bootstrap::enter::script(Some(&work), request.rank, &request.command),
            ],
            env: vec![("THESEUS_LOCAL_RANK".into(), request.rank.to_string())],
            cwd: None,
        }))
    }

    async fn sync(&self, handle: &JobHandle, snapshot: &Snapshot, options: &SyncOptions) -> Result<SyncReport> {
        let data = self.live(handle)?;
        let request = store::sync::SyncRequest {
            snapshot: snapshot.clone(),
            root: path_str(&self.dir())?,
            dest: path_str(&data.work_dir)?,
            mode: self.cluster.materialize.unwrap_or_default(),
            progress: options.progress.clone(),
            status: options.status.clone(),
        };
        store::sync::sync(&store::LocalShell, request).await.map_err(|e| match e {
            StoreError::Failed(e) => e,
            e => Error::backend(self, e.to_string()),
        })
    }
}

fn handle(host: &str, job: &PreparedJob, data: &HandleData) -> JobHandle {
    JobHandle {
        kind: KIND,
        host: host.to_owned(),
        id: job.identity.run_id.clone(),
        data: serde_json::to_value(data).expect("handle data serializes"),
    }
}
