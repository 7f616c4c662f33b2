//! The Slurm backend (`type: slurm`): runs a job as one `sbatch` job on a Slurm cluster whose
//! login node is reached over SSH.
//!
//! - code: shipped once per run to `<work>/<run path>` through the cluster's store
//!   (`theseus_backend_ssh`'s `ship.rs`), with the bootstrap and the batch script
//!   `.theseus/job.sbatch` ([`crate::sbatch::render_job`]: one task per node, `srun --label`, the
//!   coordinator at the first node's `NodeAddr`);
//! - status: `<status>/<run path>` (the bootstrap's `metadata.json`, a `cancelled` mark);
//! - log: `<log>/<run path>.log`, Slurm's `--output` and `--error`.
//!
//! The handle's id is the Slurm job id. Status asks `squeue --json` (falling back to the text
//! form on Slurms without JSON), then `sacct` (when accounting exists), then what the run left
//! in its status dir. Secrets travel on the submit command's stdin into `sbatch`'s
//! environment, which Slurm hands to the job (`--export=ALL`): never in a file or on a
//! command line. Every process of the job carries the run's marker variable.
//!
//! One live job per (project, group, name): `submit` claims the name on the cluster's shared
//! status dir before shipping, and runs `sbatch` only while it still owns it
//! (`theseus_backend_ssh::claim`); the job id is recorded in the run dir, so a
//! [`Backend::planned_handle`] (which has no job id yet) finds its job there. `cancel` is confirmed by what Slurm knows, not by looking for
//! processes (the login node cannot see the compute nodes): the job is in a final state and Slurm
//! lists none of its steps, else it fails naming the steps left and their nodes.
//!
//! Slurm KILLs what it tracks `KillWait` seconds after its TERM, the bootstrap included; with
//! `proctrack/linuxproc` it tracks by parent links, so a background process whose parent exited
//! is reached only through the job's process group, which the bootstrap KILLs when its grace
//! ends. The batch script therefore reads `KillWait` (`scontrol show config`) into
//! `THESEUS_KILL_DEADLINE_SECONDS`, and the grace ends a second before it.

mod never;
mod node_local;
pub(crate) mod scripts;
pub(crate) mod status;

use node_local::RunPaths;
use scripts::RunState;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use theseus_core::availability::Availability;
use theseus_core::backend::{
    Backend, DryRunDocument, JobHandle, JobState, JobStatus, LogOptions, LogStream, PreparedJob, RunLayout,
    SubmitOptions,
};
use theseus_core::bootstrap::{BOOTSTRAP_DIR, Launch, Wiring};
use theseus_core::config::{ClusterConfig, join};
use theseus_core::plan::HostKind;

use crate::config::{KIND, SlurmHost};
use theseus_core::job::JobIdentity;
use theseus_core::solver::{Plan, Request};
use theseus_core::store::ExtraFile;
use theseus_core::{Error, Result};

use theseus_backend_ssh::claim;
use theseus_backend_ssh::remote::SshBackend;
use theseus_backend_ssh::run_dir::{self, Start};
use theseus_backend_ssh::ssh::{RemoteCommand, SshError, SshHost};

use crate::parse::sinfo::{self, SINFO_COMMAND};
use crate::sbatch::{self, Directives, SbatchPaths};

/// How the tasks of a Slurm job find their rank: `SLURM_PROCID`, `SLURM_NTASKS`,
/// `SLURM_LOCALID`, and the first node of `SLURM_JOB_NODELIST` as the coordinator.
pub const WIRING: Wiring = Wiring { scheme: "slurm", shell: include_str!("../wiring.sh") };

/// The batch script, relative to the work dir.
pub const BATCH_SCRIPT: &str = ".theseus/job.sbatch";

/// Knobs of the backend (defaults suit real clusters; tests shorten them).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The remote home, to expand `~` in cluster paths (paths must be absolute otherwise).
    pub remote_home: Option<String>,
    /// Timeout of short remote commands (status, availability, submit).
    pub command_timeout: Duration,
    /// How long `cancel` waits for the job to leave the queue (Slurm's `KillWait` is 30 s by
    /// default) and for its processes to go.
    pub cancel_timeout: Duration,
    /// Pause between two polls of `cancel`.
    pub poll_interval: Duration,
    /// How long a run that claimed its name but has not reached `sbatch` keeps the name (its
    /// submit may still be shipping code); after that the claim is stale and the name free.
    pub claim_stale: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            remote_home: None,
            command_timeout: Duration::from_secs(60),
            cancel_timeout: Duration::from_secs(120),
            poll_interval: Duration::from_millis(500),
            claim_stale: Duration::from_secs(30 * 60),
        }
    }
}

theseus_backend_ssh::remote::remote_settings!(Settings);

/// What a Slurm [`JobHandle`] carries in `data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmHandleData {
    /// The run id (the value of the run's marker variable).
    pub run_id: String,
    /// Code dir on the cluster.
    pub work_dir: String,
    /// Status dir on the cluster.
    pub run_dir: String,
    /// Log file on the cluster.
    pub log_file: String,
    /// Nodes asked for.
    pub nodes: u32,
    /// The shipped code on the cluster's shared `share`, when `work` is node-local (the batch
    /// script copies it into `work_dir` on each node, see `node_local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_dir: Option<String>,
}

/// Runs jobs on a Slurm cluster through its login node ([`SlurmBackend::new`],
/// [`SlurmBackend::with_ssh`]): an [`SshBackend`] of Slurm host entries and [`Settings`]
/// ([`SlurmBackend::remote`]), whose shared steps it calls by name.
#[derive(Debug)]
pub struct SlurmBackend {
    remote: SshBackend<SlurmHost, Settings>,
}

impl SlurmBackend {
    /// A backend for host `name`, connecting to the host's `ssh` with default SSH options
    /// (`~/.ssh/config`, strict host keys).
    pub fn new(name: impl Into<String>, host: SlurmHost, cluster: ClusterConfig) -> Self {
        SlurmBackend { remote: SshBackend::new(name, host, cluster) }
    }

    /// A backend over an existing connection (shared with other backends of the same machine).
    pub fn with_ssh(
        name: impl Into<String>,
        host: SlurmHost,
        cluster: ClusterConfig,
        ssh: Arc<SshHost>,
        settings: Settings,
    ) -> Self {
        SlurmBackend { remote: SshBackend::with_ssh(name, host, cluster, ssh, settings) }
    }

    /// What the backend is made of: the host entry, its cluster, the connection, the settings
    /// and the steps every backend reached over SSH shares.
    pub fn remote(&self) -> &SshBackend<SlurmHost, Settings> {
        &self.remote
    }
}

impl fmt::Display for SlurmBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.remote, f)
    }
}

impl SlurmBackend {
    fn data(&self, handle: &JobHandle) -> Result<SlurmHandleData> {
        let data: SlurmHandleData = self.remote.handle_data(handle)?;
        // A planned handle carries the run id until the job id is known.
        if !is_job_id(&handle.id) && handle.id != data.run_id {
            return Err(Error::NotFound {
                what: format!("slurm job `{}` on `{}` (not a job id)", handle.id, self.remote.name),
            });
        }
        Ok(data)
    }

    /// The handle's data and its Slurm job id: the handle's own, or for a planned handle the one
    /// its submit recorded in the run dir (`None` while there is none; then also the run dir's
    /// state).
    async fn resolve(&self, handle: &JobHandle) -> Result<(SlurmHandleData, Option<String>, Option<RunState>)> {
        let data = self.data(handle)?;
        if is_job_id(&handle.id) {
            return Ok((data, Some(handle.id.clone()), None));
        }
        let run = status::run_state(self, &data).await?;
        if !run.exists {
            return Err(Error::NotFound {
                what: format!("run `{}` on `{}` (no run dir `{}`)", data.run_id, self.remote.name, data.run_dir),
            });
        }
        match run.job.clone().filter(|j| is_job_id(j)) {
            Some(job) => Ok((data, Some(job), None)),
            None => Ok((data, None, Some(run))),
        }
    }

    /// The handle of run `identity`: with its Slurm job id when known, else planned (the run id).
    fn handle_for(&self, identity: &JobIdentity, job: Option<String>, nodes: u32) -> Result<JobHandle> {
        let RunPaths { work_dir, run_dir, log_file, stage_dir } = self.run_paths(identity)?;
        let data = SlurmHandleData { run_id: identity.run_id.clone(), work_dir, run_dir, log_file, nodes, stage_dir };
        Ok(self.remote.handle(job.unwrap_or_else(|| identity.run_id.clone()), &data))
    }

    /// Claims the job's name before anything is shipped ([`claim::take`]); `--replace` cancels
    /// the holder (its Slurm job, or its submit when it has none yet), confirmed.
    async fn claim(&self, job: &PreparedJob, run_dir: &str, options: &SubmitOptions) -> Result<()> {
        self.remote
            .claim_name(job, run_dir, options, scripts::CLAIM, |run, slurm_job| async move {
                let old = JobIdentity { run_id: run, ..job.identity.clone() };
                self.cancel(&self.handle_for(&old, slurm_job, 1)?).await.map(drop)
            })
            .await
    }

    /// The steps Slurm still lists for job `id`: `(step, nodes)`.
    async fn steps(&self, id: &str) -> Result<Vec<(String, String)>> {
        let cmd = RemoteCommand::script(scripts::STEPS, [id.to_owned()])
            .retry_safe()
            .timeout(self.remote.settings.command_timeout);
        let out = self
            .remote
            .ssh
            .run(&cmd)
            .await
            .map_err(|e| self.remote.ssh_error(&format!("list the steps of slurm job `{id}`"), e))?;
        Ok(scripts::parse_steps(&out.stdout_text()))
    }

    /// The batch script of `job`.
    fn batch_script(&self, job: &PreparedJob) -> Result<String> {
        let RunPaths { work_dir, log_file, stage_dir, .. } = self.run_paths(&job.identity)?;
        let bootstrap = join(&work_dir, &job.bootstrap.entry);
        let paths = SbatchPaths { bootstrap: bootstrap.clone(), output: log_file, error: None };
        let name = job_name(&job.identity);
        let comment = format!("{}{}", scripts::COMMENT_PREFIX, job.identity.run_id);
        let directives = Directives::new(&self.remote.host, &job.plan, &name, &paths)
            .and_then(|d| d.with_comment(&comment))
            .map_err(|e| Error::Backend {
                backend: self.to_string(),
                message: "cannot write the batch script".into(),
                source: Some(Box::new(e)),
            })?;
        let port = match self.layout(&job.identity, &job.plan)?.launch {
            Launch::Wired { coordinator_port, .. } => Some(coordinator_port),
            _ => None,
        };
        let materialize = stage_dir.map(|stage| -> Vec<String> {
            vec!["sh".into(), "-c".into(), node_local::MATERIALIZE.into(), "sh".into(), stage, work_dir.clone()]
        });
        Ok(sbatch::render_job(&directives, &bootstrap, port, materialize.as_deref()))
    }

    /// Runs `sbatch` on the shipped batch script; returns the job id, or (inner error) why the
    /// run may no longer start: it lost its name or was cancelled while its code was shipped.
    async fn sbatch(
        &self,
        job: &PreparedJob,
        data: &SlurmHandleData,
        options: &SubmitOptions,
    ) -> Result<Result<String>> {
        let secrets = run_dir::secret_records(job)?;
        // The shipped dir: sbatch runs from there, on the login node.
        let shipped = data.stage_dir.as_deref().unwrap_or(&data.work_dir);
        let script = join(shipped, BATCH_SCRIPT);
        let start = Start {
            run_dir: &data.run_dir,
            log_file: &data.log_file,
            work_dir: shipped,
            run_id: &data.run_id,
            name_dir: self.remote.name_dir(&data.run_id, &data.run_dir)?,
            program: &script,
        };
        let cmd = start
            .command(scripts::SUBMIT)
            .label("sbatch")
            .timeout(self.remote.settings.command_timeout + Duration::from_secs(claim::LOCK_WAIT_SECONDS.into()));
        let out = match self.remote.ssh.run_with_writer(&cmd, move |w| w.write_all(&secrets), None).await {
            Ok(out) => out,
            Err(SshError::Failed { code: Some(claim::REPLACED), stderr, .. }) => {
                return Ok(Err(claim::lost(self, &job.identity.name, &data.run_id, &self.remote.name, &stderr)));
            }
            Err(SshError::Failed { code: Some(scripts::EXIT_NO_JOB_ID), stderr, .. }) => {
                return Err(Error::backend(
                    self,
                    format!(
                        "sbatch of run `{}` answered without a job id, and Slurm lists no job of the run (its \
                         --comment); nothing was submitted. sbatch printed: {}",
                        data.run_id,
                        stderr.trim()
                    ),
                ));
            }
            Err(SshError::Failed { stderr, code, .. }) => {
                // Slurm's own words: `sbatch: error: Batch job submission failed: ...`.
                let said = stderr.trim();
                return Err(Error::backend(
                    self,
                    format!(
                        "Slurm rejected run `{}` (sbatch exit code {}): {}",
                        data.run_id,
                        code.map_or("none".to_owned(), |c| c.to_string()),
                        if said.is_empty() { "sbatch printed nothing" } else { said }
                    ),
                ));
            }
            Err(e @ (SshError::Disconnected { .. } | SshError::Timeout { .. })) => {
                return self.recover_lost_sbatch(data, e, options).await.map(Ok);
            }
            Err(e) => return Err(self.remote.ssh_error(&format!("submit run `{}` with sbatch", data.run_id), e)),
        };
        let text = out.stdout_text();
        match scripts::parse_submitted(&text).filter(|id| is_job_id(id)) {
            Some(id) => Ok(Ok(id)),
            None => Err(Error::backend(self, format!("the submit printed no job id: `{}`", text.trim()))),
        }
    }

    /// Settles a run that has no known Slurm job, under its name's lock (so after any submit
    /// of it that still runs): the job id its submit recorded, or `None` once it is marked
    /// cancelled, so that no later `sbatch` of it can happen.
    async fn settle_unsubmitted(&self, data: &SlurmHandleData) -> Result<Option<String>> {
        let dir = self.remote.name_dir(&data.run_id, &data.run_dir)?;
        let cmd = RemoteCommand::script(scripts::CANCEL_UNSUBMITTED, [dir.to_owned(), data.run_dir.clone()])
            .label(format!("the cancel of run `{}` before sbatch", data.run_id))
            .timeout(self.remote.settings.command_timeout + Duration::from_secs(claim::LOCK_WAIT_SECONDS.into()));
        let out = self
            .remote
            .ssh
            .run(&cmd)
            .await
            .map_err(|e| self.remote.ssh_error(&format!("cancel run `{}`", data.run_id), e))?;
        Ok(scripts::parse_job_line(&out.stdout_text()).filter(|j| is_job_id(j)))
    }

    /// The command that marks run `data` cancelled and `scancel`s its job `id`.
    fn scancel(&self, data: &SlurmHandleData, id: &str) -> RemoteCommand {
        RemoteCommand::script(scripts::CANCEL, [data.run_dir.clone(), id.to_owned()])
            .label(format!("scancel {id}"))
            .retry_safe()
            .timeout(self.remote.settings.command_timeout)
    }

    /// Whether `e` (of [`Self::settle_unsubmitted`]) says the run dir does not exist.
    fn no_run_dir(e: &Error) -> bool {
        let source = std::error::Error::source(e).and_then(|s| s.downcast_ref::<SshError>());
        matches!(source, Some(SshError::Failed { code: Some(scripts::EXIT_NO_RUN_DIR), .. }))
    }

    /// The submit command's outcome was lost with its connection (or it outlived its
    /// timeout): `sbatch` may have run. Asked again on a new connection: the job it submitted,
    /// adopted; or the run marked cancelled (so it never will), and `lost` is the error.
    async fn recover_lost_sbatch(
        &self,
        data: &SlurmHandleData,
        lost: SshError,
        options: &SubmitOptions,
    ) -> Result<String> {
        let lost = self.remote.ssh_error(&format!("submit run `{}` with sbatch", data.run_id), lost);
        match self.settle_unsubmitted(data).await {
            Ok(Some(id)) => {
                options.note(&format!(
                    "the answer of sbatch was lost with the connection; it had submitted slurm job {id}"
                ));
                Ok(id)
            }
            Ok(None) => Err(lost),
            Err(settle) => Err(Error::OutcomeUnknown {
                backend: self.to_string(),
                message: format!(
                    "failed to submit run `{run}` with sbatch ({lost}), and could not learn whether sbatch ran: \
                     run `{run}` may have a Slurm job; `theseus cancel` settles it once the host answers",
                    run = data.run_id,
                    lost = std::error::Error::source(&lost).map_or_else(|| lost.to_string(), ToString::to_string),
                ),
                source: Some(Box::new(settle)),
            }),
        }
    }

    /// Best-effort removal of a run that failed to start: settled first under its name's lock
    /// (a job its submit made after all is cancelled; none can be made later), then its code
    /// and status dirs and its claim of the name. When the host cannot be asked, everything
    /// stays: the run dir is what lets a later `cancel` find and settle the run.
    async fn discard(&self, data: &SlurmHandleData) {
        match self.settle_unsubmitted(data).await {
            Ok(None) => {}
            Ok(Some(id)) => {
                if self.remote.ssh.run(&self.scancel(data, &id)).await.is_err() {
                    return;
                }
            }
            // No run dir, nothing to settle: giving the name back below stops any submit of the
            // run (its start check needs the name).
            Err(e) if Self::no_run_dir(&e) => {}
            Err(_) => return,
        }
        self.remote.release(&data.run_id, &data.run_dir).await;
        self.remote.remove(data.stage_dir.as_deref().unwrap_or(&data.work_dir), &[&data.run_dir]).await;
    }
}

#[async_trait]
impl Backend for SlurmBackend {
    fn kind(&self) -> HostKind {
        KIND
    }

    async fn reclaim(
        &self,
        options: &theseus_core::backend::ReclaimOptions,
    ) -> Result<theseus_core::backend::ReclaimReport> {
        let (stale, timeout) = (self.remote.settings.claim_stale, self.remote.settings.command_timeout);
        // With a node-local `work`, the store and the code the login node sees are the stage's.
        let staged = self.staged()?;
        let dirs = staged.as_ref().map_or_else(|| self.remote.dirs(), |b| b.remote.dirs());
        theseus_backend_ssh::reclaim::reclaim(&self.remote.ssh, &dirs, scripts::RECLAIM_LIVE, stale, timeout, options)
            .await
    }

    async fn usage(&self) -> Result<theseus_core::backend::StoreUsage> {
        let staged = self.staged()?;
        theseus_backend_ssh::reclaim::usage(
            &self.remote.ssh,
            &staged.as_ref().map_or_else(|| self.remote.dirs(), |b| b.remote.dirs()),
        )
        .await
    }

    fn layout(&self, identity: &JobIdentity, plan: &Plan) -> Result<RunLayout> {
        let mut layout = self
            .remote
            .layout_with(identity, plan, |coordinator_port| Launch::Wired { coordinator_port, wiring: WIRING })?;
        layout.log_file = self.run_paths(identity)?.log_file;
        Ok(layout)
    }

    async fn availability(&self, _request: &Request) -> Result<Availability> {
        if let Some(unusable) = self.remote.probe_connect().await? {
            return Ok(unusable);
        }
        let argv = theseus_core::shell::split(SINFO_COMMAND).expect("the sinfo command is valid words");
        let cmd = RemoteCommand::new("env")
            .args(crate::parse::clean_env().into_iter().skip(1))
            .args(argv)
            .probe()
            .timeout(self.remote.settings.command_timeout);
        let out = self.remote.ssh.run(&cmd).await.map_err(|e| self.remote.ssh_error("list nodes with sinfo", e))?;
        let avail = sinfo::parse(&out.stdout_text()).map_err(|e| Error::Backend {
            backend: self.to_string(),
            message: e.to_string(),
            source: Some(Box::new(e)),
        })?;
        Ok(Availability::Partitions(avail))
    }

    async fn submit(&self, job: &PreparedJob, options: &SubmitOptions) -> Result<JobHandle> {
        let RunPaths { work_dir, run_dir, log_file, stage_dir } = self.run_paths(&job.identity)?;
        let script = self.batch_script(job)?;
        let mut extra = ExtraFile::bootstrap(&job.bootstrap);
        extra.push(ExtraFile { path: BATCH_SCRIPT.into(), contents: script.into_bytes(), mode: 0o644 });
        let hold = std::path::Path::new(&job.bootstrap.entry).with_file_name(sbatch::PREEMPT_HOLD_FILE);
        extra.push(ExtraFile {
            path: hold.to_string_lossy().into_owned(),
            contents: sbatch::PREEMPT_HOLD.as_bytes().to_vec(),
            mode: 0o644,
        });
        debug_assert!(BATCH_SCRIPT.starts_with(BOOTSTRAP_DIR));

        self.claim(job, &run_dir, options).await?;
        let nodes = job.plan.nodes;
        let data =
            SlurmHandleData { run_id: job.identity.run_id.clone(), work_dir, run_dir, log_file, nodes, stage_dir };
        let start = async {
            options.note("submitting with sbatch");
            self.sbatch(job, &data, options).await
        };
        let id = match data.stage_dir.as_deref() {
            None => {
                let dirs = (data.work_dir.as_str(), data.run_dir.as_str());
                self.remote.ship_and_start(job, dirs, extra, options, start, self.discard(&data)).await?
            }
            // Node-local `work`: shipped to the stage on the share; each node copies it.
            Some(stage) => {
                let staged = self.staged()?.expect("a stage dir comes from a share");
                let dirs = (stage, data.run_dir.as_str());
                staged.remote.ship_and_start(job, dirs, extra, options, start, self.discard(&data)).await?
            }
        };
        Ok(self.remote.handle(id, &data))
    }

    async fn never_starts(&self, handle: &JobHandle) -> Result<Option<String>> {
        match self.resolve(handle).await? {
            (data, Some(id), _) => never::never_starts(self, &id, data.nodes).await,
            _ => Ok(None),
        }
    }

    async fn status(&self, handle: &JobHandle) -> Result<JobStatus> {
        match self.resolve(handle).await? {
            (data, Some(id), _) => status::status(self, &id, &data).await,
            (data, None, run) => Ok(status::unsubmitted(
                &run.unwrap_or_default(),
                self.remote.settings.claim_stale.as_secs(),
                data.nodes,
            )),
        }
    }

    async fn run_file(&self, handle: &JobHandle, name: &str) -> Result<Option<Vec<u8>>> {
        self.remote.read_run_file(&self.data(handle)?.run_dir, name).await
    }

    async fn logs(&self, handle: &JobHandle, options: &LogOptions) -> Result<LogStream> {
        let (data, id, _) = self.resolve(handle).await?;
        let Some(id) = id else {
            return Err(Error::NotFound {
                what: format!("the log of run `{}` on `{}` (it has no Slurm job yet)", data.run_id, self.remote.name),
            });
        };
        let handle = &JobHandle { id, ..handle.clone() };
        let cmd = if options.follow {
            run_dir::follow_command(
                scripts::FOLLOW_LOG,
                [data.log_file.clone(), handle.id.clone(), data.run_dir.clone(), data.nodes.max(1).to_string()],
            )
            .label(format!("log follow of `{}`", data.log_file))
        } else {
            RemoteCommand::script(run_dir::CAT_LOG, [data.log_file.clone()]).label(format!("cat `{}`", data.log_file))
        };
        self.remote.read_log(&cmd, &format!("slurm job `{}`", handle.id), options.rank, scripts::parse_line).await
    }

    fn planned_handle(&self, job: &PreparedJob) -> Option<JobHandle> {
        self.handle_for(&job.identity, None, job.plan.nodes).ok()
    }

    /// Rank `rank` runs on the `rank`-th node of the allocation: its port is reached from the
    /// login node at the node's `NodeAddr` (node names need not resolve there), through a
    /// forward of the login node's ssh master.
    async fn connect_port(
        &self,
        handle: &JobHandle,
        rank: u32,
        port: u16,
    ) -> Result<theseus_core::backend::PortStream> {
        let status = self.status(handle).await?;
        if status.state != JobState::Running {
            return Err(Error::backend(
                self,
                format!("slurm job `{}` is {}, not running: it has no port to reach", handle.id, status.state),
            ));
        }
        let node = status.ranks.iter().find(|r| r.rank == rank).and_then(|r| r.location.clone()).ok_or_else(|| {
            Error::backend(self, format!("slurm job `{}` has no rank {rank} on a known node", handle.id))
        })?;
        let cmd = RemoteCommand::script(scripts::NODE_ADDR, [node.clone()])
            .retry_safe()
            .timeout(self.remote.settings.command_timeout)
            .label(format!("scontrol show node {node}"));
        let out = self
            .remote
            .ssh
            .run(&cmd)
            .await
            .map_err(|e| self.remote.ssh_error(&format!("look up the address of node `{node}`"), e))?;
        let addr = out.stdout_text().trim().to_owned();
        let addr = if addr.is_empty() { node.clone() } else { addr };
        self.remote.open_forward(&addr, port, &format!("slurm job `{}` (rank {rank} on `{node}`)", handle.id)).await
    }

    /// The code dir is on the cluster's shared filesystem: synced from the login node.
    async fn sync(
        &self,
        handle: &JobHandle,
        snapshot: &theseus_core::snapshot::Snapshot,
        options: &theseus_core::backend::SyncOptions,
    ) -> Result<theseus_core::backend::SyncReport> {
        let (data, _, _) = self.resolve(handle).await?;
        if data.stage_dir.is_some() {
            return Err(Error::backend(
                self,
                format!(
                    "slurm job `{}` runs from a node-local work dir `{}` (the cluster has a `share`), which the \
                     login node cannot reach: `theseus sync` needs a shared `work`; submit again instead",
                    handle.id, data.work_dir
                ),
            ));
        }
        let status = self.status(handle).await?;
        if status.state.is_terminal() {
            return Err(Error::backend(self, format!("slurm job `{}` has ended ({})", handle.id, status.state)));
        }
        self.remote.sync_run(&data.work_dir, snapshot, options).await
    }

    /// A step of the job's allocation on the rank's node, sharing its resources
    /// (`srun --jobid J --overlap -w NODE -N1 -n1 [--pty] sh -c SCRIPT`), run from the login
    /// node by the user's `ssh` over the master.
    async fn shell(
        &self,
        handle: &JobHandle,
        request: &theseus_core::session::ShellRequest,
    ) -> Result<theseus_core::session::ShellSession> {
        let (data, id, _) = self.resolve(handle).await?;
        let status = self.status(handle).await?;
        let (Some(id), JobState::Running) = (id, status.state) else {
            return Err(Error::backend(
                self,
                format!("slurm job `{}` is {}, not running: there is nothing to enter", handle.id, status.state),
            ));
        };
        let rank = request.rank;
        let node = status
            .ranks
            .iter()
            .find(|r| r.rank == rank)
            .and_then(|r| r.location.clone())
            .ok_or_else(|| Error::backend(self, format!("slurm job `{id}` has no rank {rank} on a known node")))?;
        let script = theseus_core::bootstrap::enter::script(Some(&data.work_dir), rank, &request.command);
        let mut argv: Vec<String> =
            ["srun", "--jobid", &id, "--overlap", "--nodelist", &node, "--nodes=1", "--ntasks=1", "--quiet"]
                .map(str::to_owned)
                .into();
        if request.tty.is_some() {
            argv.push("--pty".into());
        }
        argv.extend(["sh".to_owned(), "-c".to_owned(), script]);
        self.remote.terminal(&argv, request.tty.is_some()).await
    }

    async fn cancel(&self, handle: &JobHandle) -> Result<JobStatus> {
        let (data, id, _) = self.resolve(handle).await?;
        let id = match id {
            Some(id) => id,
            None => match self.settle_unsubmitted(&data).await? {
                Some(id) => id,
                None => return self.status(handle).await,
            },
        };
        let before = status::status(self, &id, &data).await?;
        if !before.state.is_terminal() {
            self.remote
                .ssh
                .run(&self.scancel(&data, &id))
                .await
                .map_err(|e| self.remote.ssh_error(&format!("cancel slurm job `{id}`"), e))?;
        }
        // Confirmed by Slurm: the job is in a final state (it stays COMPLETING until every
        // process of it has ended on every node) and Slurm lists none of its steps.
        let deadline = tokio::time::Instant::now() + self.remote.settings.cancel_timeout;
        loop {
            let status = status::status(self, &id, &data).await?;
            let steps = self.steps(&id).await?;
            if status.state.is_terminal() && steps.is_empty() {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                let left = if steps.is_empty() {
                    "no step is listed".to_owned()
                } else {
                    let list: Vec<String> = steps.iter().map(|(s, n)| format!("step {s} on {n}")).collect();
                    format!("Slurm still lists {}", list.join(", "))
                };
                return Err(Error::backend(
                    self,
                    format!(
                        "slurm job `{id}` is still {} {:?} after scancel: {left} (processes that ignore SIGTERM are \
                         killed after Slurm's KillWait; a step that never ends drains its node)",
                        status.state, self.remote.settings.cancel_timeout
                    ),
                ));
            }
            tokio::time::sleep(self.remote.settings.poll_interval).await;
        }
    }

    fn dry_run(&self, job: &PreparedJob) -> Result<Vec<DryRunDocument>> {
        Ok(vec![DryRunDocument { title: format!("batch script ({BATCH_SCRIPT})"), text: self.batch_script(job)? }])
    }
}

/// `--job-name`: `<project>-<group>-<name>` as the original dispatcher named its Slurm jobs
/// (so `squeue` tells apart two projects' `train`), with what sbatch cannot read in a directive
/// replaced. Nothing finds a job by this name: a run's job is its id, recorded in the run dir,
/// or its `--comment` ([`scripts::COMMENT_PREFIX`]), so jobs an older theseus named `<name>`
/// are found as before.
pub fn job_name(identity: &JobIdentity) -> String {
    let full = format!("{}-{}-{}", identity.project, identity.group, identity.name);
    full.chars()
        .map(|c| if c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\') { '_' } else { c })
        .collect()
}

/// A Slurm job id: `123`, or `123_4` for an array task.
fn is_job_id(id: &str) -> bool {
    let mut parts = id.splitn(2, '_');
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    parts.next().is_some_and(digits) && parts.next().is_none_or(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slurm jobs are named `<project>-<group>-<name>` as the original named them, the defaults
    /// filled in; what a directive cannot carry is replaced.
    #[test]
    fn slurm_jobs_are_named_project_group_name() {
        let named =
            |name: &str, project: Option<&str>, group: Option<&str>| job_name(&JobIdentity::new(name, project, group));
        assert_eq!(named("train", Some("lm"), Some("sweep")), "lm-sweep-train");
        assert_eq!(named("train", None, None), "general-default-train");
        assert_eq!(named("train", Some(""), Some("ablate")), "general-ablate-train");
        assert_eq!(named("a b\"c", Some("p"), None), "p-default-a_b_c");
    }

    /// Ranks' ports are reached from the login node, so what they serve (a `repl`'s Jupyter)
    /// listens beyond loopback; an address the user set stays.
    #[test]
    fn the_wiring_makes_rank_ports_reachable_from_the_login_node() {
        let bind = |preset: Option<&str>| {
            let script = format!(
                "theseus_die() {{ echo \"die: $*\"; exit 1; }}\ntheseus_wire() {{\n{}\n}}\ntheseus_wire\necho \"bind=$THESEUS_BIND_ADDRESS\"",
                WIRING.shell
            );
            let mut cmd = std::process::Command::new("bash");
            cmd.args(["-c", &script])
                .env("SLURM_PROCID", "0")
                .env("SLURM_JOB_NODELIST", "node1")
                .env_remove("THESEUS_BIND_ADDRESS");
            if let Some(preset) = preset {
                cmd.env("THESEUS_BIND_ADDRESS", preset);
            }
            String::from_utf8(cmd.output().unwrap().stdout).unwrap().trim().to_owned()
        };
        assert_eq!(bind(None), "bind=0.0.0.0");
        assert_eq!(bind(Some("10.0.0.7")), "bind=10.0.0.7");
    }

    /// The ranks come from Slurm's task variables and the coordinator is the job's first node,
    /// read with `scontrol` or, without it, from the node list itself.
    #[test]
    fn the_wiring_finds_each_tasks_rank_and_the_first_node() {
        use theseus_core::testing::run_wiring;
        let unset = ["THESEUS_COORDINATOR_ADDRESS", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_NODELIST"];
        let tasks = [("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4"), ("SLURM_LOCALID", "1")];
        let wired = run_wiring(&WIRING, &[tasks[0], tasks[1], tasks[2], ("SLURM_JOB_NODELIST", "node1,node2")], &unset);
        assert_eq!(
            (wired.rank.as_str(), wired.count.as_str(), wired.local_rank.as_str(), wired.first_host.as_str()),
            ("3", "4", "1", "node1"),
            "{wired:?}"
        );
        // A compressed node list without scontrol on PATH.
        let no_tools = [("PATH", "/nonexistent"), ("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")];
        for (list, first) in [("gpu[07-08,11],cpu1", "gpu07"), ("node[1-2]", "node1"), ("solo", "solo")] {
            let wired =
                run_wiring(&WIRING, &[no_tools[0], no_tools[1], no_tools[2], ("SLURM_JOB_NODELIST", list)], &unset);
            assert_eq!(wired.first_host, first, "{list}: {wired:?}");
        }
        // An explicit coordinator needs no node name.
        let wired =
            run_wiring(&WIRING, &[tasks[0], tasks[1], ("THESEUS_COORDINATOR_ADDRESS", "127.0.0.1:9")], &unset[1..]);
        assert_eq!(wired.died, None);
        // Nothing to go by: the reason, not a guess.
        let wired = run_wiring(&WIRING, &[tasks[0], tasks[1], ("SLURM_JOB_NODELIST", "")], &unset);
        assert!(wired.died.as_deref().is_some_and(|d| d.contains("cannot find the first node")), "{wired:?}");
        let wired = run_wiring(&WIRING, &[("SLURM_JOB_NODELIST", "node1")], &["SLURM_PROCID"]);
        assert!(wired.died.as_deref().is_some_and(|d| d.contains("SLURM_PROCID is not set")), "{wired:?}");
    }

    #[test]
    fn job_ids() {
        assert!(is_job_id("42"));
        assert!(is_job_id("42_3"));
        for bad in ["", "no-such-run", "42;x", "4 2", "_1", "1_"] {
            assert!(!is_job_id(bad), "{bad}");
        }
    }

    /// The backend names itself as every `SshBackend` does, in errors and logs.
    #[test]
    fn the_backend_is_named_by_kind_and_host() {
        let host = SlurmHost { ssh: "login".into(), cluster: "c".into(), ..SlurmHost::default() };
        let b = SlurmBackend::new("hpc", host, ClusterConfig::default());
        assert_eq!(b.to_string(), "slurm(hpc)");
        assert_eq!(b.remote.name, "hpc");
    }
}
