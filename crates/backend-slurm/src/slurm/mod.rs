//! The Slurm backend (`type: slurm`): runs a job as one `sbatch` job on a Slurm cluster whose
//! login node is reached over SSH.
//!
//! - code: shipped once per run to `<work>/<run path>` ([`crate::ship`]), with the bootstrap
//!   and the batch script `.theseus/job.sbatch` ([`crate::sbatch::render_job`]: one task per
//!   node, `srun --label`, the coordinator at the first node's `NodeAddr`);
//! - status: `<status>/<run path>` (the bootstrap's `metadata.json`, a `cancelled` mark);
//! - log: `<log>/<run path>.log`, Slurm's `--output` and `--error`.
//!
//! The handle's id is the Slurm job id. Status asks `squeue --json` (falling back to the text
//! form on Slurms without JSON), then `sacct` (when accounting exists), then what the run left
//! in its status dir. Secrets travel on the submit command's stdin into `sbatch`'s
//! environment, which Slurm hands to the job (`--export=ALL`): never in a file or on a
//! command line. Every process of the job carries the run's marker variable.

mod scripts;
mod status;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use theseus_core::availability::Availability;
use theseus_core::backend::{
    Backend, DryRunDocument, JobHandle, JobStatus, LogOptions, LogStream, PreparedJob, RunLayout,
    SubmitOptions,
};
use theseus_core::bootstrap::{BOOTSTRAP_DIR, Launch};
use theseus_core::config::{ClusterConfig, HostKind, SlurmHost, join};
use theseus_core::job::JobIdentity;
use theseus_core::solver::{Plan, Request};
use theseus_core::{Error, Result};

use crate::parse::sinfo::{self, SINFO_COMMAND};
use crate::sbatch::{self, Directives, SbatchPaths};
use crate::logs::log_stream;
use crate::paths::{RemoteDirs, coordinator_port};
use crate::ship::{self, ExtraFile};
use crate::ssh::{RemoteCommand, SshError, SshHost, SshOptions};

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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            remote_home: None,
            command_timeout: Duration::from_secs(60),
            cancel_timeout: Duration::from_secs(120),
            poll_interval: Duration::from_millis(500),
        }
    }
}

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
}

/// Runs jobs on a Slurm cluster through its login node.
#[derive(Debug)]
pub struct SlurmBackend {
    name: String,
    host: SlurmHost,
    cluster: ClusterConfig,
    ssh: Arc<SshHost>,
    settings: Settings,
}

impl SlurmBackend {
    /// A backend for Slurm host `name`, connecting to `host.ssh` with default SSH options
    /// (`~/.ssh/config`, strict host keys).
    pub fn new(name: impl Into<String>, host: SlurmHost, cluster: ClusterConfig) -> Self {
        let ssh = SshHost::new(SshOptions::new(host.ssh.clone()));
        Self::with_ssh(name, host, cluster, Arc::new(ssh), Settings::default())
    }

    /// A backend over an existing connection.
    pub fn with_ssh(
        name: impl Into<String>,
        host: SlurmHost,
        cluster: ClusterConfig,
        ssh: Arc<SshHost>,
        settings: Settings,
    ) -> Self {
        SlurmBackend { name: name.into(), host, cluster, ssh, settings }
    }

    /// The connection.
    pub fn ssh(&self) -> &Arc<SshHost> {
        &self.ssh
    }

    fn data(&self, handle: &JobHandle) -> Result<SlurmHandleData> {
        if handle.kind != HostKind::Slurm {
            return Err(Error::backend(self, format!("handle of a {} job given to the slurm backend", handle.kind)));
        }
        if !is_job_id(&handle.id) {
            return Err(Error::NotFound {
                what: format!("slurm job `{}` on `{}` (not a job id)", handle.id, self.name),
            });
        }
        serde_json::from_value(handle.data.clone())
            .map_err(|e| Error::backend(self, format!("malformed slurm job handle: {e}")))
    }

    fn dirs(&self) -> RemoteDirs<'_> {
        RemoteDirs {
            kind: "slurm",
            host: &self.name,
            cluster_name: &self.host.cluster,
            cluster: &self.cluster,
            home: self.settings.remote_home.as_deref(),
        }
    }

    fn paths(&self, identity: &JobIdentity) -> Result<(String, String, String)> {
        self.dirs().run_paths(identity)
    }

    fn ssh_error(&self, action: &str, e: SshError) -> Error {
        Error::Backend { backend: self.to_string(), message: format!("failed to {action}"), source: Some(Box::new(e)) }
    }

    /// The batch script of `job`.
    fn batch_script(&self, job: &PreparedJob) -> Result<String> {
        let (work_dir, _, log_file) = self.paths(&job.identity)?;
        let bootstrap = join(&work_dir, &job.bootstrap.entry);
        let paths = SbatchPaths { bootstrap: bootstrap.clone(), output: log_file, error: None };
        let name = job_name(&job.identity);
        let directives = Directives::new(&self.host, &job.plan, &name, &paths).map_err(|e| Error::Backend {
            backend: self.to_string(),
            message: "cannot write the batch script".into(),
            source: Some(Box::new(e)),
        })?;
        let port = match self.layout(&job.identity, &job.plan)?.launch {
            Launch::Slurm { coordinator_port } => Some(coordinator_port),
            _ => None,
        };
        Ok(sbatch::render_job(&directives, &bootstrap, port))
    }

    /// Runs `sbatch` on the shipped batch script; returns the job id.
    async fn sbatch(&self, job: &PreparedJob, data: &SlurmHandleData) -> Result<String> {
        let mut secrets = Vec::new();
        for var in job.env.iter().filter(|v| v.secret) {
            if !theseus_core::shell::is_env_name(&var.name) || var.value.contains('\0') {
                return Err(Error::InvalidConfig(format!("secret `{}` cannot be passed to a process", var.name)));
            }
            secrets.extend_from_slice(format!("{}={}", var.name, var.value).as_bytes());
            secrets.push(0);
        }
        let cmd = RemoteCommand::new("bash")
            .arg("-c")
            .arg(scripts::SUBMIT)
            .arg("bash")
            .args([
                data.work_dir.clone(),
                join(&data.work_dir, BATCH_SCRIPT),
                data.run_dir.clone(),
                data.log_file.clone(),
                data.run_id.clone(),
            ])
            .label("sbatch")
            .timeout(self.settings.command_timeout);
        let out = match self.ssh.run_with_writer(&cmd, move |w| w.write_all(&secrets), None).await {
            Ok(out) => out,
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
            Err(e) => return Err(self.ssh_error(&format!("submit run `{}` with sbatch", data.run_id), e)),
        };
        let text = out.stdout_text();
        let id = text.trim().lines().last().unwrap_or("").split(';').next().unwrap_or("").trim().to_owned();
        if !is_job_id(&id) {
            return Err(Error::backend(self, format!("sbatch printed no job id: `{}`", text.trim())));
        }
        Ok(id)
    }

    /// Best-effort removal of a run that failed to start: its code and status dirs.
    async fn discard(&self, data: &SlurmHandleData) {
        let rm = RemoteCommand::new("rm").args(["-rf", "--", &data.work_dir, &data.run_dir]);
        let _ = self.ssh.output(&rm).await;
    }

    /// Live processes of the run on the login node (the only machine this backend can look
    /// at; on a cluster whose nodes are other machines this finds nothing).
    async fn left(&self, data: &SlurmHandleData) -> Result<Vec<u32>> {
        let cmd = RemoteCommand::script(scripts::LEFT, [data.run_id.clone()])
            .retry_safe()
            .timeout(self.settings.command_timeout);
        let out = self.ssh.run(&cmd).await.map_err(|e| self.ssh_error("look for the run's processes", e))?;
        Ok(scripts::parse_left(&out.stdout_text()))
    }
}

impl fmt::Display for SlurmBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slurm({})", self.name)
    }
}

#[async_trait]
impl Backend for SlurmBackend {
    fn kind(&self) -> HostKind {
        HostKind::Slurm
    }

    fn layout(&self, identity: &JobIdentity, plan: &Plan) -> Result<RunLayout> {
        let launch = if plan.processes() > 1 {
            Launch::Slurm { coordinator_port: coordinator_port(&identity.run_id) }
        } else {
            Launch::Single
        };
        self.dirs().layout(identity, launch)
    }

    async fn availability(&self, _request: &Request) -> Result<Availability> {
        let argv = theseus_core::shell::split(SINFO_COMMAND).expect("the sinfo command is valid words");
        let cmd = RemoteCommand::new(argv[0].clone())
            .args(argv[1..].iter().cloned())
            .retry_safe()
            .timeout(self.settings.command_timeout);
        let out = self.ssh.run(&cmd).await.map_err(|e| self.ssh_error("list nodes with sinfo", e))?;
        let avail = sinfo::parse(&out.stdout_text()).map_err(|e| Error::Backend {
            backend: self.to_string(),
            message: e.to_string(),
            source: Some(Box::new(e)),
        })?;
        Ok(Availability::Slurm(avail))
    }

    async fn submit(&self, job: &PreparedJob, options: &SubmitOptions) -> Result<JobHandle> {
        let (work_dir, run_dir, log_file) = self.paths(&job.identity)?;
        let script = self.batch_script(job)?;
        let mut extra = ExtraFile::bootstrap(job);
        extra.push(ExtraFile { path: BATCH_SCRIPT.into(), contents: script.into_bytes(), mode: 0o644 });
        debug_assert!(BATCH_SCRIPT.starts_with(BOOTSTRAP_DIR));

        options.note(&format!("shipping code to {}", self.host.ssh));
        ship::ship(&self.ssh, self, &self.name, job, &work_dir, extra, options).await?;
        let data =
            SlurmHandleData { run_id: job.identity.run_id.clone(), work_dir, run_dir, log_file, nodes: job.plan.nodes };
        options.note("submitting with sbatch");
        let id = match self.sbatch(job, &data).await {
            Ok(id) => id,
            Err(e) => {
                self.discard(&data).await;
                return Err(e);
            }
        };
        Ok(JobHandle {
            kind: HostKind::Slurm,
            host: self.name.clone(),
            id,
            data: serde_json::to_value(&data).expect("handle data serializes"),
        })
    }

    async fn status(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        status::status(self, &handle.id, &data).await
    }

    async fn logs(&self, handle: &JobHandle, options: &LogOptions) -> Result<LogStream> {
        let data = self.data(handle)?;
        let cmd = if options.follow {
            RemoteCommand::script(scripts::FOLLOW_LOG, [data.log_file.clone(), handle.id.clone()])
                .label(format!("log follow of `{}`", data.log_file))
        } else {
            RemoteCommand::script(scripts::CAT_LOG, [data.log_file.clone()]).label(format!("cat `{}`", data.log_file))
        };
        let lines = self
            .ssh
            .lines(&cmd)
            .await
            .map_err(|e| self.ssh_error(&format!("read the log of slurm job `{}`", handle.id), e))?;
        Ok(log_stream(lines, self.to_string(), options.rank, scripts::parse_line))
    }

    async fn cancel(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        let before = self.status(handle).await?;
        if before.state.is_terminal() {
            return Ok(before);
        }
        let cmd = RemoteCommand::script(scripts::CANCEL, [data.run_dir.clone(), handle.id.clone()])
            .label(format!("scancel {}", handle.id))
            .retry_safe()
            .timeout(self.settings.command_timeout);
        self.ssh.run(&cmd).await.map_err(|e| self.ssh_error(&format!("cancel slurm job `{}`", handle.id), e))?;
        // Slurm keeps the job COMPLETING until every process of it is gone.
        let deadline = tokio::time::Instant::now() + self.settings.cancel_timeout;
        let status = loop {
            let status = self.status(handle).await?;
            if status.state.is_terminal() {
                break status;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::backend(
                    self,
                    format!(
                        "slurm job `{}` is still {} {:?} after scancel",
                        handle.id, status.state, self.settings.cancel_timeout
                    ),
                ));
            }
            tokio::time::sleep(self.settings.poll_interval).await;
        };
        loop {
            let left = self.left(&data).await?;
            if left.is_empty() {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::backend(
                    self,
                    format!("processes {left:?} of slurm job `{}` are still alive after it left the queue", handle.id),
                ));
            }
            tokio::time::sleep(self.settings.poll_interval).await;
        }
    }

    fn dry_run(&self, job: &PreparedJob) -> Result<Vec<DryRunDocument>> {
        Ok(vec![DryRunDocument { title: format!("batch script ({BATCH_SCRIPT})"), text: self.batch_script(job)? }])
    }
}

/// `--job-name`: the job's name, with what sbatch cannot read in a directive replaced.
fn job_name(identity: &JobIdentity) -> String {
    let name: String = identity
        .name
        .chars()
        .map(|c| if c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\') { '_' } else { c })
        .collect();
    if name.is_empty() { "theseus".into() } else { name }
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

    #[test]
    fn job_ids() {
        assert!(is_job_id("42"));
        assert!(is_job_id("42_3"));
        for bad in ["", "no-such-run", "42;x", "4 2", "_1", "1_"] {
            assert!(!is_job_id(bad), "{bad}");
        }
    }

    #[test]
    fn paths_must_be_absolute_or_have_a_home() {
        let cluster = ClusterConfig { root: "/r".into(), work: "~/w".into(), ..ClusterConfig::default() };
        let host = SlurmHost { ssh: "login".into(), cluster: "c".into(), ..SlurmHost::default() };
        let b = SlurmBackend::new("hpc", host.clone(), cluster.clone());
        let id = JobIdentity::new("n", None, None);
        assert!(matches!(b.paths(&id), Err(Error::InvalidConfig(_))));
        let ssh = Arc::new(SshHost::new(SshOptions::new("login")));
        let settings = Settings { remote_home: Some("/home/u".into()), ..Settings::default() };
        let b = SlurmBackend::with_ssh("hpc", host, cluster, ssh, settings);
        let (work, run, log) = b.paths(&id).unwrap();
        assert_eq!(work, format!("/home/u/w/{}", id.run_path()));
        assert_eq!(run, format!("/r/status/{}", id.run_path()));
        assert_eq!(log, format!("/home/u/w/logs/{}.log", id.run_path()));
    }
}
