//! [`SshBackend`]: what the plain and Slurm backends are made of, and the steps they share,
//! written once: a host entry of the dispatch config reached over one SSH connection, its
//! cluster's dirs, and a submit's middle (ship the claimed run's code, start it, and clean up
//! when either fails).
//!
//! [`crate::plain::PlainBackend`] is this type with its own host entry and settings, and so is
//! the Slurm backend of `theseus-backend-slurm` (a type of its own wrapping this one); each adds
//! its own `Backend` implementation.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use theseus_core::availability::Availability;
use theseus_core::backend::{JobHandle, LogLine, LogStream, PortStream, PreparedJob, RunLayout, SubmitOptions};
use theseus_core::bootstrap::Launch;
use theseus_core::config::ClusterConfig;
use theseus_core::job::JobIdentity;
use theseus_core::plan::HostKind;
use theseus_core::session::{ShellProgram, ShellSession};
use theseus_core::solver::Plan;
use theseus_core::store::ExtraFile;
use theseus_core::{Error, Result};

use crate::claim;
use crate::logs::log_stream;
use crate::paths::{RemoteDirs, coordinator_port};
use crate::ship::{self, Target};
use crate::ssh::{RemoteCommand, SshError, SshHost, SshOptions};

/// A host entry of a backend reached over SSH.
pub trait HostEntry: fmt::Debug + Send + Sync {
    /// The host type, as the config spells it (`plain`, `slurm`).
    const KIND: &'static str;
    /// The host type.
    const HOST_KIND: HostKind;
    /// The SSH destination.
    fn ssh(&self) -> &str;
    /// The name of the host's cluster.
    fn cluster(&self) -> &str;
}

/// The settings of a backend reached over SSH.
pub trait RemoteSettings: fmt::Debug + Default + Send + Sync {
    /// The remote home, to expand `~` in cluster paths.
    fn remote_home(&self) -> Option<&str>;
    /// Timeout of short remote commands.
    fn command_timeout(&self) -> Duration;
    /// How long a run that claimed its name but has not started keeps it.
    fn claim_stale(&self) -> Duration;
}

/// Implements [`RemoteSettings`] for a settings struct with the fields `remote_home`,
/// `command_timeout` and `claim_stale`.
#[doc(hidden)]
#[macro_export]
macro_rules! __remote_settings {
    ($settings:ty) => {
        impl $crate::remote::RemoteSettings for $settings {
            fn remote_home(&self) -> Option<&str> {
                self.remote_home.as_deref()
            }
            fn command_timeout(&self) -> std::time::Duration {
                self.command_timeout
            }
            fn claim_stale(&self) -> std::time::Duration {
                self.claim_stale
            }
        }
    };
}
#[doc(inline)]
pub use __remote_settings as remote_settings;

/// A backend of host entries `H` with settings `S`, over one SSH connection.
#[derive(Debug)]
pub struct SshBackend<H, S> {
    /// The host's name in the dispatch config.
    pub name: String,
    /// Its host entry.
    pub host: H,
    /// Its cluster.
    pub cluster: ClusterConfig,
    /// The connection.
    pub ssh: Arc<SshHost>,
    /// The backend's settings.
    pub settings: S,
}

impl<H: HostEntry, S: RemoteSettings> SshBackend<H, S> {
    /// A backend for host `name`, connecting to the host's `ssh` with default SSH options
    /// (`~/.ssh/config`, strict host keys).
    pub fn new(name: impl Into<String>, host: H, cluster: ClusterConfig) -> Self {
        let ssh = SshHost::new(SshOptions::new(host.ssh()));
        Self::with_ssh(name, host, cluster, Arc::new(ssh), S::default())
    }

    /// A backend over an existing connection (shared with other backends of the same machine).
    pub fn with_ssh(name: impl Into<String>, host: H, cluster: ClusterConfig, ssh: Arc<SshHost>, settings: S) -> Self {
        SshBackend { name: name.into(), host, cluster, ssh, settings }
    }

    /// The connection.
    pub fn ssh(&self) -> &Arc<SshHost> {
        &self.ssh
    }

    /// The cluster's dirs as this host resolves them.
    pub fn dirs(&self) -> RemoteDirs<'_> {
        RemoteDirs {
            kind: H::KIND,
            host: &self.name,
            cluster_name: self.host.cluster(),
            cluster: &self.cluster,
            home: self.settings.remote_home(),
        }
    }

    /// The run's work dir, status dir and log file.
    pub fn paths(&self, identity: &JobIdentity) -> Result<(String, String, String)> {
        self.dirs().run_paths(identity)
    }

    /// The run's layout: `multi` wires the ranks of a plan with more than one process.
    pub fn layout_with(&self, identity: &JobIdentity, plan: &Plan, multi: fn(u16) -> Launch) -> Result<RunLayout> {
        let launch = if plan.processes() > 1 { multi(coordinator_port(&identity.run_id)) } else { Launch::Single };
        self.dirs().layout(identity, launch)
    }

    /// Connects for a probe, in one attempt: `Some` when the host refused us for its host key
    /// (unusable until the user acts, with the fix), an error for any other failure.
    pub async fn probe_connect(&self) -> Result<Option<Availability>> {
        match self.ssh.connect_once().await {
            Ok(()) => Ok(None),
            Err(e) => match crate::ssh::host_key_problem(&e) {
                Some(reason) => Ok(Some(Availability::Unusable { reason })),
                None => Err(self.ssh_error("connect", e)),
            },
        }
    }

    /// A backend error of this host for an SSH failure while trying to `action`.
    pub fn ssh_error(&self, action: &str, e: SshError) -> Error {
        Error::Backend { backend: self.to_string(), message: format!("failed to {action}"), source: Some(Box::new(e)) }
    }

    /// One connection to `target:port` as the host sees it, through a forward added to the
    /// host's ssh master onto a unix socket of this process (one per target and port, made on
    /// first use and shared by later connections; the user's own connection is not touched).
    pub async fn open_forward(&self, target: &str, port: u16, what: &str) -> Result<PortStream> {
        let dir = std::env::temp_dir().join(format!("theseus-forward-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("create", &dir, e))?;
        // The target is a host or node name; keep the socket name to safe characters.
        let safe: String =
            target.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
        let socket = dir.join(format!("{}-{safe}-{port}.sock", self.name));
        if let Ok(stream) = tokio::net::UnixStream::connect(&socket).await {
            return Ok(Box::pin(stream));
        }
        let _ = std::fs::remove_file(&socket);
        self.ssh
            .forward_unix(&socket, target, port)
            .await
            .map_err(|e| self.ssh_error(&format!("forward port {port} of {what}"), e))?;
        let stream = tokio::net::UnixStream::connect(&socket).await.map_err(|e| {
            Error::backend(self, format!("the forward of port {port} did not open ({}): {e}", socket.display()))
        })?;
        Ok(Box::pin(stream))
    }

    /// `theseus sync` of the run whose code is in `work_dir`, through the host's store over
    /// the master connection.
    pub async fn sync_run(
        &self,
        work_dir: &str,
        snapshot: &theseus_core::snapshot::Snapshot,
        options: &theseus_core::backend::SyncOptions,
    ) -> Result<theseus_core::backend::SyncReport> {
        let request = theseus_core::store::sync::SyncRequest {
            snapshot: snapshot.clone(),
            root: self.dirs().resolve(&self.cluster.work)?,
            dest: work_dir.to_owned(),
            mode: self.cluster.materialize.unwrap_or_default(),
            progress: options.progress.clone(),
            status: options.status.clone(),
        };
        let shell = crate::store_shell::SshShell::new(Arc::clone(&self.ssh));
        theseus_core::store::sync::sync(&shell, request).await.map_err(|e| match e {
            theseus_core::store::StoreError::Failed(e) => e,
            e => Error::backend(self, format!("{e}: `theseus sync` needs it (the store's tools)")),
        })
    }

    /// `theseus shell` over the host's master: `remote` (argv, quoted here once for the remote
    /// shell) run by the user's `ssh`, with a terminal when asked.
    pub async fn terminal(&self, remote: &[String], tty: bool) -> Result<ShellSession> {
        let line = theseus_core::shell::join(remote);
        if !tty {
            // Through the transport, which drops what the login shell's rc files print.
            let attached = self.ssh.attach(&line).await.map_err(|e| self.ssh_error("open a shell", e))?;
            return Ok(ShellSession::Attached(attached));
        }
        let argv = self.ssh.terminal_argv(&line, tty).await.map_err(|e| self.ssh_error("open a shell", e))?;
        let (program, args) = argv.split_first().expect("ssh argv has the program");
        Ok(ShellSession::Program(ShellProgram {
            program: program.clone(),
            args: args.to_vec(),
            env: Vec::new(),
            cwd: None,
        }))
    }

    /// [`theseus_core::backend::Backend::run_file`] of a run whose status dir is `run_dir`.
    pub async fn read_run_file(&self, run_dir: &str, name: &str) -> Result<Option<Vec<u8>>> {
        if !theseus_core::backend::is_run_file_name(name) {
            return Ok(None);
        }
        let cmd =
            crate::ssh::RemoteCommand::script(crate::run_dir::READ_RUN_FILE, [run_dir.to_owned(), name.to_owned()])
                .retry_safe()
                .timeout(self.settings.command_timeout())
                .label(format!("read `{run_dir}/{name}`"));
        let out = self.ssh.run(&cmd).await.map_err(|e| self.ssh_error(&format!("read `{run_dir}/{name}`"), e))?;
        Ok(out.stdout.strip_prefix(b"present\n".as_slice()).map(<[u8]>::to_vec))
    }

    /// The dir of the job's name on the host (the parent of its runs' status dirs).
    pub fn name_dir<'a>(&self, run_id: &str, run_dir: &'a str) -> Result<&'a str> {
        claim::name_dir(run_dir, run_id)
            .ok_or_else(|| Error::backend(self, format!("run dir `{run_dir}` does not end in the run id `{run_id}`")))
    }

    /// The data of a handle of this backend's kind.
    pub fn handle_data<D: serde::de::DeserializeOwned>(&self, handle: &JobHandle) -> Result<D> {
        let kind = H::KIND;
        if handle.kind != H::HOST_KIND {
            return Err(Error::backend(self, format!("handle of a {} job given to the {kind} backend", handle.kind)));
        }
        serde_json::from_value(handle.data.clone())
            .map_err(|e| Error::backend(self, format!("malformed {kind} job handle: {e}")))
    }

    /// The handle of this host's run `id` carrying `data`.
    pub fn handle(&self, id: String, data: &impl serde::Serialize) -> JobHandle {
        JobHandle {
            kind: H::HOST_KIND,
            host: self.name.clone(),
            id,
            data: serde_json::to_value(data).expect("handle data serializes"),
        }
    }

    /// Claims the job's name on the host with the backend's claim `script` before anything is
    /// shipped ([`claim::take`]); with `options.replace`, `stop(run, slurm_job)` stops the live
    /// run that holds it first (and whoever took it over meanwhile).
    pub async fn claim_name<F, Fut>(
        &self,
        job: &PreparedJob,
        run_dir: &str,
        options: &SubmitOptions,
        script: &'static str,
        stop: F,
    ) -> Result<()>
    where
        F: Fn(String, Option<String>) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let spec = claim::ClaimSpec {
            backend: self,
            host: &self.name,
            ssh: &self.ssh,
            script,
            dir: self.name_dir(&job.identity.run_id, run_dir)?,
            stale: self.settings.claim_stale(),
            timeout: self.settings.command_timeout(),
        };
        claim::take(&spec, &job.identity, options, stop).await.map_err(unreached)
    }

    /// Best-effort: gives the job's name back when run `run_id` still holds it.
    pub async fn release(&self, run_id: &str, run_dir: &str) {
        if let Ok(dir) = self.name_dir(run_id, run_dir) {
            let release = RemoteCommand::script(claim::RELEASE, [dir.to_owned(), run_id.to_owned()]);
            let _ = self.ssh.output(&release).await;
        }
    }

    /// Best-effort removal of a run's code dir (with its `.partial`) and `others`.
    pub async fn remove(&self, work_dir: &str, others: &[&str]) {
        let partial = format!("{work_dir}.partial");
        let rm = RemoteCommand::new("rm").args(["-rf", "--", work_dir, &partial]).args(others.iter().copied());
        let _ = self.ssh.output(&rm).await;
    }

    /// Reads a log with `cmd`, each line parsed by `parse`; `what` names the run in errors.
    pub async fn read_log(
        &self,
        cmd: &RemoteCommand,
        what: &str,
        rank: Option<u32>,
        parse: fn(&str) -> LogLine,
    ) -> Result<LogStream> {
        let lines = self.ssh.lines(cmd).await.map_err(|e| self.ssh_error(&format!("read the log of {what}"), e))?;
        Ok(log_stream(lines, self.to_string(), rank, parse))
    }

    /// The middle of a submit, once the run claimed its name: ships the code and `extra` into
    /// `work_dir` through the cluster's store (`ship.rs`), then awaits `start`. When the
    /// ship fails it gives the name back if the run dir is another submit's of this run id, and
    /// otherwise awaits `discard`; when `start` says the run may no longer start (inner error:
    /// it lost its name or was cancelled meanwhile) only its code goes; when `start` fails,
    /// `discard`.
    pub async fn ship_and_start<T>(
        &self,
        job: &PreparedJob,
        (work_dir, run_dir): (&str, &str),
        extra: Vec<ExtraFile>,
        options: &SubmitOptions,
        start: impl Future<Output = Result<Result<T>>>,
        discard: impl Future<Output = ()>,
    ) -> Result<T> {
        options.note(&format!("shipping code to {}", self.host.ssh()));
        let shipped = async {
            let root = self.dirs().resolve(&self.cluster.work)?;
            let target = Target { root: &root, work_dir, mode: self.cluster.materialize.unwrap_or_default() };
            ship::ship_run(&self.ssh, self, job, &target, extra, options).await
        };
        if let Err(e) = shipped.await {
            if matches!(e, Error::AlreadyExists { .. }) {
                // The work dir is another submit's of this very run id: leave it, give the name back.
                self.release(&job.identity.run_id, run_dir).await;
            } else {
                discard.await;
            }
            return Err(e);
        }
        match start.await {
            Ok(Ok(started)) => Ok(started),
            Ok(Err(lost)) => {
                // Cancelled or taken over: the run dir keeps saying so; only its code goes.
                self.remove(work_dir, &[]).await;
                Err(lost)
            }
            Err(e) => {
                discard.await;
                Err(e)
            }
        }
    }
}

/// A claim that failed because the host could not be reached at all: nothing of the run exists
/// there, so the error says so ([`theseus_core::NothingCreated`], one line with its causes) and
/// the submit leaves no failed run behind. Other errors pass unchanged.
fn unreached(e: Error) -> Error {
    match e {
        Error::Backend { backend, message, source: Some(source) }
            if matches!(source.downcast_ref::<SshError>(), Some(SshError::Connect { .. })) =>
        {
            let mut line = format!("{message}: {source}");
            let mut cause = std::error::Error::source(source.as_ref());
            while let Some(c) = cause {
                line.push_str(&format!(": {c}"));
                cause = c.source();
            }
            Error::Backend { backend, message: line, source: Some(Box::new(theseus_core::NothingCreated)) }
        }
        e => e,
    }
}

impl<H: HostEntry, S> fmt::Display for SshBackend<H, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", H::KIND, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths_must_be_absolute_or_have_a_home<H: HostEntry + Clone, S: RemoteSettings>(
        host: H,
        settings: S,
        home: fn(&mut S),
    ) {
        let cluster = ClusterConfig { root: "/r".into(), work: "~/w".into(), ..ClusterConfig::default() };
        let b = SshBackend::<H, S>::new("box", host.clone(), cluster.clone());
        let id = JobIdentity::new("n", None, None);
        assert!(matches!(b.paths(&id), Err(Error::InvalidConfig(_))));
        let ssh = Arc::new(SshHost::new(SshOptions::new("box")));
        let mut settings = settings;
        home(&mut settings);
        let b = SshBackend::with_ssh("box", host, cluster, ssh, settings);
        let (work, run, log) = b.paths(&id).unwrap();
        assert_eq!(work, format!("/home/u/w/{}", id.run_path()));
        assert_eq!(run, format!("/r/status/{}", id.run_path()));
        assert_eq!(log, format!("/home/u/w/logs/{}.log", id.run_path()));
        assert_eq!(b.to_string(), format!("{}(box)", H::KIND));
    }

    #[test]
    fn plain_and_slurm_paths_must_be_absolute_or_have_a_home() {
        let plain =
            crate::plain::PlainHost { ssh: "box".into(), cluster: "c".into(), ..crate::plain::PlainHost::default() };
        paths_must_be_absolute_or_have_a_home(plain, crate::plain::Settings::default(), |s| {
            s.remote_home = Some("/home/u".into())
        });
        /// The Slurm backend's settings, as far as this module sees them.
        #[derive(Debug, Default)]
        struct SlurmSettings {
            remote_home: Option<String>,
            command_timeout: Duration,
            claim_stale: Duration,
        }
        remote_settings!(SlurmSettings);
        /// A host entry like Slurm's, as far as this module sees it.
        #[derive(Debug, Clone)]
        struct SlurmEntry;
        impl HostEntry for SlurmEntry {
            const KIND: &'static str = "slurm";
            const HOST_KIND: HostKind = HostKind::named("slurm");
            fn ssh(&self) -> &str {
                "login"
            }
            fn cluster(&self) -> &str {
                "c"
            }
        }
        let slurm = SlurmEntry;
        paths_must_be_absolute_or_have_a_home(slurm, SlurmSettings::default(), |s| {
            s.remote_home = Some("/home/u".into())
        });
    }
}
