//! The SSH transport of the plain and Slurm backends: one multiplexed `openssh` session per host
//! (a ControlMaster), made on first use and reused by every command until it breaks.
//!
//! - [`SshOptions`]: destination (an `~/.ssh/config` alias or `user@host`), user, port, key, an
//!   ssh config file, the known-hosts policy, the connect timeout, retries and the per-host
//!   limit on concurrent commands. `BatchMode=yes` is always on (no prompts).
//! - [`SshHost`]: runs [`RemoteCommand`]s (argv, each word quoted once) and returns their
//!   [`Output`]; streams bytes into a command's stdin from a blocking writer
//!   ([`SshHost::run_with_writer`], used to ship a tar with no temp file on either side); streams a
//!   command's stdout as lines ([`SshHost::lines`], used by `logs -f`).
//!
//! Every command reaches the user's login shell as one line that bash, dash, zsh, tcsh and fish
//! read alike, and its output is framed by a random marker, so nothing the rc files print reaches
//! a caller; commands run with the user's login environment, read once per host (the
//! private `frame` module).
//!
//! Connection failures that look transient (refused, reset, timed out, closed by the remote)
//! are retried with exponential backoff, except for a [`RemoteCommand::probe`] (availability),
//! which connects once so that a host that refuses costs one attempt, not the backoff. A command
//! whose connection broke under it is run again on a fresh connection only when it is marked
//! [`RemoteCommand::retry_safe`] (and is not a probe).

mod attach;
mod command;
mod error;
mod frame;
mod login;
mod options;
mod stream;

use std::fmt;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use openssh::{Session, Stdio};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Mutex, OnceCell, Semaphore};
use tokio_util::io::SyncIoBridge;

pub use command::{Backoff, RemoteCommand, is_transient};
pub use error::{SshError, host_key_problem};
pub use options::{KnownHostsPolicy, Mux, SshOptions};
pub use stream::RemoteLines;

/// The SSH connection to `destination` (an `~/.ssh/config` alias or `user@host`), with the
/// host's connection keys; what they leave unset, the user's ssh config decides. With
/// `THESEUS_SSH_CONFIG=FILE`, ssh reads FILE instead of `~/.ssh/config` (as `ssh -F FILE`).
pub fn connect(destination: &str, settings: &theseus_core::config::SshSettings) -> Arc<SshHost> {
    let mut options = SshOptions::from_settings(destination, settings);
    if let Some(file) = std::env::var_os("THESEUS_SSH_CONFIG").filter(|f| !f.is_empty()) {
        options.config_file = Some(file.into());
    }
    Arc::new(SshHost::new(options))
}

/// What a finished remote command left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit code; `None` when the remote process was killed by a signal.
    pub code: Option<i32>,
    /// Its stdout.
    pub stdout: Vec<u8>,
    /// Its stderr.
    pub stderr: Vec<u8>,
}

impl Output {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Stdout as text (lossy).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as text (lossy), trimmed.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_owned()
    }
}

/// One host: a lazily made, shared ControlMaster connection plus a limit on concurrent commands.
pub struct SshHost {
    options: SshOptions,
    session: Mutex<Option<Arc<Session>>>,
    permits: Arc<Semaphore>,
    connect_attempts: AtomicU32,
    /// `export` lines of the login environment, read on first use ([`frame::login_prelude`]).
    login_env: OnceCell<String>,
}

impl fmt::Debug for SshHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshHost").field("destination", &self.options.destination).finish_non_exhaustive()
    }
}

impl fmt::Display for SshHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.options.destination)
    }
}

/// Longest stderr kept in an error.
const STDERR_KEEP: usize = 4000;

impl SshHost {
    /// A host; nothing is contacted until the first command.
    pub fn new(options: SshOptions) -> Self {
        let permits = Arc::new(Semaphore::new(options.max_concurrent.max(1)));
        SshHost {
            options,
            session: Mutex::new(None),
            permits,
            connect_attempts: AtomicU32::new(0),
            login_env: OnceCell::new(),
        }
    }

    /// The options.
    pub fn options(&self) -> &SshOptions {
        &self.options
    }

    /// Connection attempts made so far (successful or not), for diagnostics and tests.
    pub fn connect_attempts(&self) -> u32 {
        self.connect_attempts.load(Ordering::Relaxed)
    }

    /// Connects now (otherwise the first command does).
    pub async fn connect(&self) -> Result<(), SshError> {
        self.session().await.map(drop)
    }

    /// Connects now in at most one attempt, as a probe does.
    pub async fn connect_once(&self) -> Result<(), SshError> {
        self.session_with(1).await.map(drop)
    }

    /// Asks the master to listen on the unix socket `local` and forward every connection made
    /// to it to `host:port` as the remote end sees it (`ssh -L local:host:port`, added to the
    /// running master: the user's own multiplexed connection is not touched).
    pub async fn forward_unix(&self, local: &std::path::Path, host: &str, port: u16) -> Result<(), SshError> {
        let session = self.session().await?;
        session
            .request_port_forward(
                openssh::ForwardType::Local,
                openssh::Socket::UnixSocket { path: local.into() },
                openssh::Socket::TcpSocket { host: host.into(), port },
            )
            .await
            .map_err(|e| SshError::Run {
                host: self.to_string(),
                command: format!("a port forward to {host}:{port}"),
                source: Box::new(e),
            })
    }

    /// The `ssh` argv that runs `remote` (one shell command line, already quoted for the remote
    /// shell) over this host's master connection, with a terminal when `tty` (`ssh -tt`): for
    /// `theseus shell`, which runs it on the user's own terminal. The master is made first if
    /// there is none; it must outlive the program.
    pub async fn terminal_argv(&self, remote: &str, tty: bool) -> Result<Vec<String>, SshError> {
        let session = self.session().await?;
        let prelude = self.login_env(&RemoteCommand::new("sh").label("a shell"), &session).await?;
        // No marker: the output is the user's own terminal.
        let remote = &frame::line(remote, frame::Env::Inline(&prelude), None);
        let mut argv = vec!["ssh".to_owned()];
        if let Some(file) = &self.options.config_file {
            argv.extend(["-F".to_owned(), file.display().to_string()]);
        }
        argv.extend(
            [
                "-S",
                &session.control_socket().display().to_string(),
                "-o",
                "ControlMaster=no",
                "-o",
                "BatchMode=yes",
                // Quiet: no "Shared connection closed" line after the command.
                "-o",
                "LogLevel=ERROR",
                if tty { "-tt" } else { "-T" },
                // The destination only names the master's connection, which is already made.
                "--",
                &self.options.destination,
                remote,
            ]
            .map(str::to_owned),
        );
        Ok(argv)
    }

    /// Closes the connection (the next command opens a new one).
    pub async fn close(&self) {
        let session = self.session.lock().await.take();
        if let Some(session) = session.and_then(|s| Arc::try_unwrap(s).ok()) {
            let _ = session.close().await;
        }
    }

    /// Runs `cmd` and captures its output, whatever its exit code.
    pub async fn output(&self, cmd: &RemoteCommand) -> Result<Output, SshError> {
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
        // A probe never runs twice: its budget is the caller's, not ours to spend on retries.
        let mut retried = cmd.is_probe();
        loop {
            let session = self.session_for(cmd).await?;
            let prelude = self.login_env(cmd, &session).await?;
            let marker = frame::new_marker();
            let line = frame::line(&cmd.command_line(), frame::Env::Stdin(prelude.len()), Some(&marker));
            let run = run_line(&session, &line, prelude.as_bytes());
            let res = match cmd.get_timeout() {
                Some(after) => tokio::time::timeout(after, run).await.map_err(|_| self.timeout(cmd, after))?,
                None => run.await,
            };
            let err = match res {
                // With process-mux, 255 is also what a broken connection looks like.
                Ok(out) if out.code != Some(255) || session.check().await.is_ok() => {
                    return self.unframe(cmd, out, &marker);
                }
                Ok(_) => None,
                Err(e) => Some(e),
            };
            if session.check().await.is_ok() {
                // The connection is fine: the remote process was killed or could not start.
                return match err {
                    Some(openssh::Error::RemoteProcessTerminated) => {
                        Ok(Output { code: None, stdout: Vec::new(), stderr: Vec::new() })
                    }
                    Some(e) => Err(self.run_error(cmd, e)),
                    None => Ok(Output { code: Some(255), stdout: Vec::new(), stderr: Vec::new() }),
                };
            }
            self.forget(&session).await;
            if cmd.is_retry_safe() && !retried {
                tracing::debug!(host = %self, command = %cmd.describe(), "connection broke; running the command again");
                retried = true;
                continue;
            }
            return Err(SshError::Disconnected { host: self.to_string(), command: cmd.describe(), source: err });
        }
    }

    /// Runs `cmd` and fails unless it exits 0.
    pub async fn run(&self, cmd: &RemoteCommand) -> Result<Output, SshError> {
        let out = self.output(cmd).await?;
        if out.success() { Ok(out) } else { Err(self.failed(cmd, &out)) }
    }

    /// Runs `cmd` with its stdin fed by `produce`, which runs on a blocking thread and writes
    /// into the remote process as it goes (nothing is buffered whole or written to a file).
    /// `progress` is called with the bytes sent so far. Not retried: the caller decides whether
    /// a second attempt is safe. Fails unless the command exits 0.
    pub async fn run_with_writer<F>(
        &self,
        cmd: &RemoteCommand,
        produce: F,
        progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    ) -> Result<Output, SshError>
    where
        F: FnOnce(&mut dyn Write) -> std::io::Result<()> + Send + 'static,
    {
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
        let session = self.session().await?;
        let prelude = self.login_env(cmd, &session).await?;
        let marker = frame::new_marker();
        let line = frame::line(&cmd.command_line(), frame::Env::Stdin(prelude.len()), Some(&marker));
        let mut child = remote(&session, &line)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .await
            .map_err(|e| self.run_error(cmd, e))?;
        let mut stdin = child.stdin().take().expect("stdin is piped");
        // The login environment first (a few KiB at most: the pipe takes it at once).
        stdin.write_all(prelude.as_bytes()).await.map_err(|e| self.run_error(cmd, e))?;
        let stdout = child.stdout().take().expect("stdout is piped");
        let stderr = child.stderr().take().expect("stderr is piped");
        let out_task = tokio::spawn(read_all(stdout));
        let err_task = tokio::spawn(read_all(stderr));
        let bridge = SyncIoBridge::new(stdin);
        let writer = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            // Archives are written in small pieces (a 512-byte header per entry) and each write
            // through the bridge is a trip through the runtime: batch them.
            let buffered = std::io::BufWriter::with_capacity(WRITE_BUFFER, bridge);
            let mut counting = Counting { inner: buffered, sent: 0, progress };
            produce(&mut counting)?;
            counting.flush()?;
            counting.inner.into_inner().map_err(|e| e.into_error())?.shutdown()
        });
        let wrote = writer.await.unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        let stdout = out_task.await.unwrap_or_default();
        let stderr = err_task.await.unwrap_or_default();
        let status = child.wait().await;
        let code = match status {
            Ok(status) => status.code(),
            Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(127),
            Err(e) => {
                if session.check().await.is_err() {
                    self.forget(&session).await;
                    return Err(SshError::Disconnected {
                        host: self.to_string(),
                        command: cmd.describe(),
                        source: Some(e),
                    });
                }
                None
            }
        };
        let out = Output { code, stdout, stderr };
        // A local failure of the writer (not a pipe the remote side closed) is the cause of
        // whatever the remote command then made of its cut-off input.
        if let Err(e) = &wrote
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            return Err(self.run_error(cmd, wrote.unwrap_err()));
        }
        if !out.success() && session.check().await.is_err() {
            self.forget(&session).await;
            return Err(SshError::Disconnected { host: self.to_string(), command: cmd.describe(), source: None });
        }
        let out = self.unframe(cmd, out, &marker)?;
        if !out.success() {
            return Err(self.failed(cmd, &out));
        }
        wrote.map_err(|e| self.run_error(cmd, e))?;
        Ok(out)
    }

    /// Runs `cmd` and streams its stdout as lines (without the newline; invalid UTF-8 is
    /// replaced). The stream ends when the command exits 0 and yields an error otherwise;
    /// dropping it closes the channel. It holds one of the host's command slots while open.
    pub async fn lines(&self, cmd: &RemoteCommand) -> Result<RemoteLines, SshError> {
        let permit = self.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        let session = self.session().await?;
        let prelude = self.login_env(cmd, &session).await?;
        let marker = frame::new_marker();
        let line = frame::line(&cmd.command_line(), frame::Env::Stdin(prelude.len()), Some(&marker));
        let mut child = remote(&session, &line)
            .stdin(if prelude.is_empty() { Stdio::null() } else { Stdio::piped() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .await
            .map_err(|e| self.run_error(cmd, e))?;
        if let Some(mut stdin) = child.stdin().take() {
            // Then end of input, as with no stdin.
            stdin.write_all(prelude.as_bytes()).await.map_err(|e| self.run_error(cmd, e))?;
        }
        Ok(RemoteLines::new(child_parts(&mut child), child, permit, self.to_string(), cmd.describe(), marker))
    }

    async fn session(&self) -> Result<Arc<Session>, SshError> {
        self.session_with(self.options.backoff.attempts).await
    }

    /// The session for `cmd`: a probe makes at most one connection attempt.
    async fn session_for(&self, cmd: &RemoteCommand) -> Result<Arc<Session>, SshError> {
        let attempts = if cmd.is_probe() { 1 } else { self.options.backoff.attempts };
        self.session_with(attempts).await
    }

    /// The cached session, or a new one made in at most `attempts` connection attempts.
    async fn session_with(&self, attempts: u32) -> Result<Arc<Session>, SshError> {
        let mut guard = self.session.lock().await;
        if let Some(session) = guard.as_ref() {
            // A master that died while idle is replaced before a command is started on it (a
            // cheap check over the local control socket), so only commands already running
            // when a connection breaks see the break.
            if session.check().await.is_ok() {
                return Ok(session.clone());
            }
            tracing::debug!(host = %self, "the ssh master is gone; reconnecting");
            *guard = None;
        }
        let session = Arc::new(self.connect_with_retries(attempts).await?);
        *guard = Some(session.clone());
        Ok(session)
    }

    /// Drops the cached session if it is still `dead` (another task may have replaced it).
    async fn forget(&self, dead: &Arc<Session>) {
        let mut guard = self.session.lock().await;
        if guard.as_ref().is_some_and(|s| Arc::ptr_eq(s, dead)) {
            *guard = None;
        }
    }

    async fn connect_with_retries(&self, max_attempts: u32) -> Result<Session, SshError> {
        // openssh puts the destination last on the master's argv with no `--` before it (its
        // `SessionBuilder::launch_master`), so ssh would parse `-oProxyCommand=...` as an
        // option. Such a destination never reaches ssh (config validation refuses it too).
        if self.options.destination.starts_with('-') {
            let why = "the destination starts with `-`, which ssh would read as an option";
            return Err(SshError::Connect {
                host: self.to_string(),
                attempts: 0,
                source: openssh::Error::Connect(std::io::Error::new(std::io::ErrorKind::InvalidInput, why)),
            });
        }
        let (builder, _private_config) = self.options.builder().await?;
        let backoff = self.options.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.connect_attempts.fetch_add(1, Ordering::Relaxed);
            let res = match self.options.mux {
                Mux::Native => builder.connect_mux(&self.options.destination).await,
                Mux::Process => builder.connect(&self.options.destination).await,
            };
            let err = match res {
                Ok(session) => return Ok(session),
                Err(e) => e,
            };
            let transient = transient_connect_error(&err);
            if !transient || attempt >= max_attempts.max(1) {
                return Err(SshError::Connect { host: self.to_string(), attempts: attempt, source: err });
            }
            let delay = backoff.delay(attempt);
            tracing::debug!(host = %self, attempt, ?delay, error = %error_chain(&err), "ssh connect failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    fn failed(&self, cmd: &RemoteCommand, out: &Output) -> SshError {
        let stderr = out.stderr_text();
        let start = stderr.len().saturating_sub(STDERR_KEEP);
        let start = (start..=stderr.len()).find(|i| stderr.is_char_boundary(*i)).unwrap_or(0);
        SshError::Failed {
            host: self.to_string(),
            command: cmd.describe(),
            code: out.code,
            stderr: stderr[start..].to_owned(),
        }
    }

    fn timeout(&self, cmd: &RemoteCommand, after: Duration) -> SshError {
        SshError::Timeout { host: self.to_string(), command: cmd.describe(), after }
    }

    fn run_error(&self, cmd: &RemoteCommand, e: impl std::error::Error + Send + Sync + 'static) -> SshError {
        SshError::Run { host: self.to_string(), command: cmd.describe(), source: Box::new(e) }
    }
}

/// The openssh command running `line` ([`frame::line`]), passed raw: the login shell parses it.
fn remote(session: &Arc<Session>, line: &str) -> openssh::OwningCommand<Arc<Session>> {
    session.clone().arc_raw_command(line)
}

/// Runs `line` with `stdin` as its whole input and captures its output whatever its exit code; 127 (which openssh
/// turns into an error) comes back as the code, with the output.
async fn run_line(session: &Arc<Session>, line: &str, stdin: &[u8]) -> Result<Output, openssh::Error> {
    let input = if stdin.is_empty() { Stdio::null() } else { Stdio::piped() };
    let mut child = remote(session, line).stdin(input).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().await?;
    if let Some(mut pipe) = child.stdin().take() {
        // Then end of input, as with no stdin; a command that exits without reading it is fine.
        let _ = pipe.write_all(stdin).await;
    }
    let (stdout, stderr) = child_parts(&mut child);
    // All the output first, then the exit (as openssh's own `output` does).
    let (stdout, stderr) = tokio::join!(read_all(stdout), read_all(stderr));
    let code = match child.wait().await {
        Ok(status) => status.code(),
        Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(127),
        Err(e) => return Err(e),
    };
    Ok(Output { code, stdout, stderr })
}

fn child_parts(child: &mut openssh::Child<Arc<Session>>) -> (openssh::ChildStdout, openssh::ChildStderr) {
    (child.stdout().take().expect("stdout is piped"), child.stderr().take().expect("stderr is piped"))
}

async fn read_all<R: tokio::io::AsyncRead + Unpin>(mut r: R) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = r.read_to_end(&mut buf).await;
    buf
}

/// Whether a failed connection attempt may succeed when tried again.
fn transient_connect_error(err: &openssh::Error) -> bool {
    let kind = match err {
        openssh::Error::Connect(io) => io.kind(),
        // Cannot create the control dir or run `ssh`: trying again will not help.
        openssh::Error::Master(_) | openssh::Error::Ssh(_) => return false,
        _ => std::io::ErrorKind::Other,
    };
    is_transient(kind, &error_chain(err))
}

/// An error and its causes on one line.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Counts bytes written through it and reports them.
/// Bytes of stdin gathered before they are handed to the SSH channel.
const WRITE_BUFFER: usize = 256 * 1024;

struct Counting<W> {
    inner: W,
    sent: u64,
    progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sent += n as u64;
        if let Some(p) = &self.progress {
            p(self.sent);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod destination_tests {
    use super::*;

    #[tokio::test]
    async fn a_destination_that_ssh_would_read_as_an_option_is_never_passed_to_ssh() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let host = SshHost::new(SshOptions::new(format!("-oProxyCommand=touch {}", marker.display())));
        let err = host.connect().await.unwrap_err();
        assert!(matches!(err, SshError::Connect { attempts: 0, .. }), "{err:?}");
        assert!(error_chain(&err).contains("starts with `-`"), "{}", error_chain(&err));
        assert!(!marker.exists());
    }
}
