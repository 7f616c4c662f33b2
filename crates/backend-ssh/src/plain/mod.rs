//! The plain-SSH backend (`type: plain`): runs a job on one machine reached over SSH, detached
//! from the connection, laid out like the local backend.
//!
//! - code: `<work>/<project>/<group>/<name>/<run-id>`, materialised from the cluster's
//!   content-addressed store under `<work>/.theseus/objects` (only missing objects are sent)
//!   under a `.partial` name and renamed once complete (`crate::ship`);
//! - status: `<status>/<run path>` (`metadata.json`, `supervisor.pid`, exit codes);
//! - log: `<log>/<run path>.log`.
//!
//! The run is started by core's local supervisor script ([`theseus_core::local::supervisor`]),
//! detached with `setsid nohup`; its PID is the run's session and process group, recorded with
//! its start time in the run dir (`session`). The run's processes are the members of that
//! session and every process carrying the local backend's marker variable: the union is how
//! `status` counts live processes and `cancel` stops them and confirms that none is left (a child
//! that clears its environment stays in the session; one that starts its own session keeps the
//! marker). Secrets travel on the launch command's stdin into the supervisor's environment: never
//! in a file or on a command line.
//!
//! One live job per (project, group, name): `submit` claims the name on the host before shipping
//! anything, and starts the supervisor only while it still owns it (`crate::claim`).

mod host;
pub(crate) mod scripts;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use theseus_core::availability::Availability;
use theseus_core::backend::{
    Backend, JobHandle, JobStatus, LogLine, LogOptions, LogStream, PreparedJob, RunLayout, SubmitOptions,
};
use theseus_core::bootstrap::{BOOTSTRAP_DIR, Launch};
use theseus_core::config::join;
use theseus_core::job::JobIdentity;
use theseus_core::local::supervisor;
use theseus_core::plan::HostKind;
use theseus_core::solver::{ChipRequest, Plan, Request};
use theseus_core::store::ExtraFile;
use theseus_core::{Error, Result};

use crate::claim;
use crate::parse::nvidia_smi::{self, APPS_QUERY_COMMAND, GPU_QUERY_COMMAND};
use crate::remote::SshBackend;
use crate::run_dir::{self, Start};
use crate::ssh::{RemoteCommand, SshError};

pub use host::{KIND, PlainHost, PlainType};

/// Knobs of the backend (defaults suit real machines; tests shorten them).
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long `cancel` waits after SIGTERM before SIGKILL.
    pub cancel_grace: Duration,
    /// The remote home, to expand `~` in cluster paths (paths must be absolute otherwise).
    pub remote_home: Option<String>,
    /// Timeout of short remote commands (status, availability).
    pub command_timeout: Duration,
    /// The `nvidia-smi` program on the host (a name looked up on the remote `PATH`, or a path).
    pub nvidia_smi: String,
    /// How long a run that claimed its name but has not started yet keeps the name (its submit
    /// may still be shipping code); after that the claim is stale and the name free.
    pub claim_stale: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cancel_grace: Duration::from_secs(10),
            remote_home: None,
            command_timeout: Duration::from_secs(60),
            nvidia_smi: "nvidia-smi".into(),
            claim_stale: Duration::from_secs(30 * 60),
        }
    }
}

crate::remote::remote_settings!(Settings);

/// What a plain [`JobHandle`] carries in `data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlainHandleData {
    /// Code dir on the host.
    pub work_dir: String,
    /// Status dir on the host.
    pub run_dir: String,
    /// Log file on the host.
    pub log_file: String,
    /// Number of ranks.
    pub processes: u32,
    /// The supervisor's PID, which is also its session and process group id; 0 in a
    /// [`Backend::planned_handle`] (status and cancel read the session from the run dir).
    #[serde(default)]
    pub pgid: u32,
}

/// Runs jobs on a machine over SSH ([`PlainBackend::new`], [`PlainBackend::with_ssh`]).
pub type PlainBackend = SshBackend<PlainHost, Settings>;

impl PlainBackend {
    fn data(&self, handle: &JobHandle) -> Result<PlainHandleData> {
        self.handle_data(handle)
    }

    async fn report(&self, run_id: &str, data: &PlainHandleData) -> Result<scripts::Report> {
        let cmd = RemoteCommand::script(
            scripts::STATUS,
            [data.run_dir.clone(), run_id.to_owned(), data.processes.to_string()],
        )
        .retry_safe()
        .timeout(self.settings.command_timeout);
        let out =
            self.ssh.run(&cmd).await.map_err(|e| self.ssh_error(&format!("read the status of run `{run_id}`"), e))?;
        Ok(scripts::parse_report(&out.stdout_text()))
    }

    /// Starts the supervisor; returns its PID, or (inner error) why the run may no longer start:
    /// it lost its name or was cancelled while its code was shipped.
    async fn launch(&self, job: &PreparedJob, data: &PlainHandleData, supervisor_path: &str) -> Result<Result<u32>> {
        let secrets = run_dir::secret_records(job)?;
        let start = Start {
            run_dir: &data.run_dir,
            log_file: &data.log_file,
            work_dir: &data.work_dir,
            run_id: &job.identity.run_id,
            name_dir: self.name_dir(&job.identity.run_id, &data.run_dir)?,
            program: supervisor_path,
        };
        let cmd = start.command(scripts::LAUNCH).label("the job's launch (setsid nohup supervise.sh)");
        let out = match self.ssh.run_with_writer(&cmd, move |w| w.write_all(&secrets), None).await {
            Ok(out) => out,
            Err(SshError::Failed { code: Some(claim::REPLACED), stderr, .. }) => {
                let (name, run) = (&job.identity.name, &job.identity.run_id);
                return Ok(Err(claim::lost(self, name, run, &self.name, &stderr)));
            }
            Err(e @ (SshError::Disconnected { .. } | SshError::Timeout { .. })) => {
                // The supervisor may have started: stop whatever did, under the name's lock,
                // before the run is reported failed. When even that cannot be done, the run is
                // neither started nor failed as far as anyone can tell.
                let run = &job.identity.run_id;
                let stop = RemoteCommand::script(scripts::CANCEL, [data.run_dir.clone(), run.clone(), "1".to_owned()])
                    .label(format!("the stop of run `{run}` after its launch lost its answer"))
                    .timeout(self.settings.command_timeout + Duration::from_secs(claim::LOCK_WAIT_SECONDS.into()));
                return match self.ssh.output(&stop).await {
                    Ok(_) => Err(self.ssh_error(&format!("start run `{run}` (stopped what it had started)"), e)),
                    Err(stop) => Err(Error::OutcomeUnknown {
                        backend: self.to_string(),
                        message: format!(
                            "the launch of run `{run}` lost its answer ({e}), and stopping it failed too: it may \
                             run; `theseus cancel` settles it once the host answers"
                        ),
                        source: Some(Box::new(stop)),
                    }),
                };
            }
            Err(e) => return Err(self.ssh_error(&format!("start run `{}`", job.identity.run_id), e)),
        };
        out.stdout_text().trim().parse().map(Ok).map_err(|_| {
            Error::backend(self, format!("the launch printed no supervisor pid: `{}`", out.stdout_text().trim()))
        })
    }

    /// Best-effort removal of a run that failed to start: its processes, code and status dirs,
    /// and its claim of the name.
    async fn discard(&self, identity: &JobIdentity, data: &PlainHandleData) {
        let run_id = &identity.run_id;
        let stop = RemoteCommand::script(scripts::CANCEL, [data.run_dir.clone(), run_id.to_owned(), "1".to_owned()]);
        if self.ssh.output(&stop).await.is_err() {
            // The host cannot be asked: its run dir stays, so that a later `cancel` finds the run.
            return;
        }
        self.release(run_id, &data.run_dir).await;
        self.remove(&data.work_dir, &[&data.run_dir]).await;
    }

    /// The handle of run `identity` before it starts (pgid unknown).
    fn handle_for(&self, identity: &JobIdentity, processes: u32) -> Result<JobHandle> {
        let (work_dir, run_dir, log_file) = self.paths(identity)?;
        let data = PlainHandleData { work_dir, run_dir, log_file, processes, pgid: 0 };
        Ok(self.handle(identity.run_id.clone(), &data))
    }

    /// Claims the job's name on the host before anything is shipped; with `options.replace`,
    /// stops the live run that holds it first (and whoever took it over meanwhile).
    async fn claim(&self, job: &PreparedJob, run_dir: &str, options: &SubmitOptions) -> Result<()> {
        self.claim_name(job, run_dir, options, scripts::CLAIM, |run, _| async move {
            let old = JobIdentity { run_id: run, ..job.identity.clone() };
            self.cancel(&self.handle_for(&old, 1)?).await.map(drop)
        })
        .await
    }
}

#[async_trait]
impl Backend for PlainBackend {
    fn layout(&self, identity: &JobIdentity, plan: &Plan) -> Result<RunLayout> {
        // Ranks on one machine talk over loopback.
        self.layout_with(identity, plan, |coordinator_port| Launch::Local { coordinator_port })
    }

    fn kind(&self) -> HostKind {
        KIND
    }

    async fn reclaim(
        &self,
        options: &theseus_core::backend::ReclaimOptions,
    ) -> Result<theseus_core::backend::ReclaimReport> {
        let (stale, timeout) = (self.settings.claim_stale, self.settings.command_timeout);
        crate::reclaim::reclaim(&self.ssh, &self.dirs(), crate::reclaim::PLAIN_LIVE, stale, timeout, options).await
    }

    async fn usage(&self) -> Result<theseus_core::backend::StoreUsage> {
        crate::reclaim::usage(&self.ssh, &self.dirs()).await
    }

    async fn availability(&self, request: &Request) -> Result<Availability> {
        if let Some(unusable) = self.probe_connect().await? {
            return Ok(unusable);
        }
        let timeout = self.settings.command_timeout;
        if request.chip == ChipRequest::Cpu {
            let out = self.ssh.run(&RemoteCommand::new("nproc").probe().timeout(timeout)).await;
            let out = out.map_err(|e| self.ssh_error("count CPU cores", e))?;
            let cpus = out.stdout_text().trim().parse().unwrap_or(1);
            return Ok(Availability::Free { chips: cpus, source: format!("CPU cores on {}", self.host.ssh) });
        }
        let smi = self.settings.nvidia_smi.clone();
        let probe = RemoteCommand::script("command -v \"$1\" >/dev/null 2>&1", [smi.clone()]).probe();
        let has_smi = self
            .ssh
            .output(&probe.timeout(timeout))
            .await
            .map_err(|e| self.ssh_error("look for nvidia-smi", e))?
            .success();
        if !has_smi {
            return Ok(Availability::Free { chips: 0, source: "no nvidia-smi on the host (CPU-only)".into() });
        }
        let query = |line: &str| {
            let argv = theseus_core::shell::split(line).expect("the nvidia-smi commands are valid words");
            RemoteCommand::new(smi.clone()).args(argv[1..].iter().cloned()).probe().timeout(timeout)
        };
        let gpus = self
            .ssh
            .run(&query(GPU_QUERY_COMMAND))
            .await
            .map_err(|e| self.ssh_error("list GPUs with nvidia-smi", e))?;
        // A failing process query leaves every GPU free, as in the original.
        let apps = self
            .ssh
            .output(&query(APPS_QUERY_COMMAND))
            .await
            .map_err(|e| self.ssh_error("list GPU processes with nvidia-smi", e))?;
        let apps = if apps.success() { apps.stdout_text() } else { String::new() };
        let inventory = nvidia_smi::parse(&gpus.stdout_text(), &apps).map_err(|e| Error::Backend {
            backend: self.to_string(),
            message: e.to_string(),
            source: Some(Box::new(e)),
        })?;
        Ok(match request.chip {
            ChipRequest::Chip(chip) => inventory.availability(Some(chip)),
            _ => inventory.availability(None),
        })
    }

    async fn submit(&self, job: &PreparedJob, options: &SubmitOptions) -> Result<JobHandle> {
        let processes = job.plan.processes().max(1);
        let (work_dir, run_dir, log_file) = self.paths(&job.identity)?;
        let supervisor_rel = format!("{BOOTSTRAP_DIR}/supervise.sh");
        let supervisor_path = join(&work_dir, &supervisor_rel);
        let script = supervisor::render(&supervisor::SupervisorInput {
            bootstrap: &join(&work_dir, &job.bootstrap.entry),
            run_dir: &run_dir,
            log_file: &log_file,
            processes,
        });
        let mut extra = ExtraFile::bootstrap(&job.bootstrap);
        extra.push(ExtraFile { path: supervisor_rel, contents: script.into_bytes(), mode: 0o755 });

        self.claim(job, &run_dir, options).await?;
        let mut data = PlainHandleData { work_dir, run_dir, log_file, processes, pgid: 0 };
        let (start, discard) = (self.launch(job, &data, &supervisor_path), self.discard(&job.identity, &data));
        let dirs = (data.work_dir.as_str(), data.run_dir.as_str());
        let pgid = self.ship_and_start(job, dirs, extra, options, start, discard).await?;
        data.pgid = pgid;
        Ok(self.handle(job.identity.run_id.clone(), &data))
    }

    async fn status(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        let report = self.report(&handle.id, &data).await?;
        if !report.exists {
            return Err(Error::NotFound {
                what: format!("run dir `{}` of run `{}` on `{}`", data.run_dir, handle.id, self.name),
            });
        }
        Ok(scripts::status_from(&report, data.processes, &self.host.ssh, self.settings.claim_stale.as_secs()))
    }

    async fn run_file(&self, handle: &JobHandle, name: &str) -> Result<Option<Vec<u8>>> {
        self.read_run_file(&self.data(handle)?.run_dir, name).await
    }

    async fn logs(&self, handle: &JobHandle, options: &LogOptions) -> Result<LogStream> {
        let data = self.data(handle)?;
        let cmd = if options.follow {
            run_dir::follow_command(
                scripts::FOLLOW_LOG,
                [data.log_file.clone(), data.run_dir.clone(), handle.id.clone()],
            )
            .label(format!("log follow of `{}`", data.log_file))
        } else {
            RemoteCommand::script(run_dir::CAT_LOG, [data.log_file.clone()]).label(format!("cat `{}`", data.log_file))
        };
        self.read_log(&cmd, &format!("run `{}`", handle.id), options.rank, parse_line).await
    }

    fn planned_handle(&self, job: &PreparedJob) -> Option<JobHandle> {
        self.handle_for(&job.identity, job.plan.processes().max(1)).ok()
    }

    /// Every rank runs on the host: its port is `127.0.0.1:PORT` there, reached through a
    /// forward of the host's ssh master onto a unix socket of this process (one per port,
    /// reused by later connections).
    async fn connect_port(
        &self,
        handle: &JobHandle,
        rank: u32,
        port: u16,
    ) -> Result<theseus_core::backend::PortStream> {
        let _ = rank;
        let status = self.status(handle).await?;
        if status.state.is_terminal() {
            return Err(Error::backend(self, format!("run `{}` has ended ({})", handle.id, status.state.as_str())));
        }
        self.open_forward("127.0.0.1", port, &format!("run `{}`", handle.id)).await
    }

    async fn sync(
        &self,
        handle: &JobHandle,
        snapshot: &theseus_core::snapshot::Snapshot,
        options: &theseus_core::backend::SyncOptions,
    ) -> Result<theseus_core::backend::SyncReport> {
        let data = self.data(handle)?;
        let status = self.status(handle).await?;
        if status.state.is_terminal() {
            return Err(Error::backend(self, format!("run `{}` has ended ({})", handle.id, status.state.as_str())));
        }
        self.sync_run(&data.work_dir, snapshot, options).await
    }

    /// `ssh -tt host sh -c SCRIPT` over the host's master: every rank runs on the host.
    async fn shell(
        &self,
        handle: &JobHandle,
        request: &theseus_core::session::ShellRequest,
    ) -> Result<theseus_core::session::ShellSession> {
        let data = self.data(handle)?;
        let status = self.status(handle).await?;
        if status.state.is_terminal() {
            return Err(Error::backend(self, format!("run `{}` has ended ({})", handle.id, status.state.as_str())));
        }
        if request.rank >= data.processes.max(1) {
            return Err(Error::backend(
                self,
                format!("run `{}` has {} rank(s); there is no rank {}", handle.id, data.processes.max(1), request.rank),
            ));
        }
        let script = theseus_core::bootstrap::enter::script(Some(&data.work_dir), request.rank, &request.command);
        self.terminal(&["sh".into(), "-c".into(), script], request.tty.is_some()).await
    }

    async fn cancel(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        let before = self.status(handle).await?;
        if before.state.is_terminal() {
            return Ok(before);
        }
        let grace = self.settings.cancel_grace.as_secs().max(1).to_string();
        let cmd = RemoteCommand::script(scripts::CANCEL, [data.run_dir.clone(), handle.id.clone(), grace])
            .label("the cancel script (kill -TERM, then -KILL, the run's process group)")
            .retry_safe();
        let out = self.ssh.run(&cmd).await.map_err(|e| self.ssh_error(&format!("cancel run `{}`", handle.id), e))?;
        let left = scripts::parse_left(&out.stdout_text());
        if !left.is_empty() {
            return Err(Error::backend(
                self,
                format!(
                    "processes {left:?} of run `{}` are still alive on `{}` after SIGKILL",
                    handle.id, self.host.ssh
                ),
            ));
        }
        self.status(handle).await
    }
}

/// Splits the supervisor's `[rank-N] ` prefix off a line.
fn parse_line(line: &str) -> LogLine {
    if let Some((n, text)) = line.strip_prefix("[rank-").and_then(|rest| rest.split_once("] "))
        && let Ok(rank) = n.parse()
    {
        return LogLine { rank: Some(rank), text: text.to_owned(), source: None };
    }
    LogLine { rank: None, text: line.to_owned(), source: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_prefixes() {
        assert_eq!(parse_line("[rank-2] hi").rank, Some(2));
        assert_eq!(parse_line("[rank-2] hi").text, "hi");
        assert_eq!(parse_line("[rank-x] hi").rank, None);
    }
}
