//! One command in a pod over the Kubernetes exec websocket, with a stdin whose exact length and
//! sha256 are known in advance, so that the command can take exactly that many bytes and never
//! needs stdin EOF: the same code works on `v5.channel.k8s.io` (which can close stdin) and
//! `v4.channel.k8s.io` (which cannot: closing stdin closes the websocket and loses the status).
//!
//! The last chunk of stdin is held back until the whole source has been read and matched the
//! announced sha256 ([`pump`]): a source that changed since it was counted never reaches the
//! pod whole. Used by the full ship ([`crate::ship`]) and the store's exec shell
//! ([`crate::store_shell`]).

use std::io::{self, Write};

use futures::future;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Api;
use kube::api::AttachParams;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes per websocket frame (kube-rs `max_stdin_buf_size`) and per read of the source.
pub(crate) const FRAME_BYTES: usize = 256 * 1024;
/// Buffer of the output channels in kube-rs.
const OUTPUT_BUFFER: usize = 64 * 1024;

/// Writes a stdin into `bridge` through a buffer of one frame, then ends the stream. The
/// archives are written in small pieces (`io::copy` moves a file 8 KiB at a time), and every
/// write into the bridge wakes the task that sends: unbuffered, that was a wake-up per 8 KiB.
pub(crate) fn write_framed(
    bridge: &mut tokio_util::io::SyncIoBridge<tokio::io::DuplexStream>,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let mut frames = io::BufWriter::with_capacity(FRAME_BYTES, &mut *bridge);
    write(&mut frames)?;
    frames.flush()?;
    drop(frames);
    bridge.shutdown()
}

/// Length and, when the source is checked against one, sha256 of a stdin. Without a sha256
/// (a stdin whose producer checks its own content, such as the store's object archive, and
/// whose length is known without reading it) [`pump`] checks only that the source ends at
/// exactly `len` bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted {
    pub(crate) len: u64,
    pub(crate) sha256: Option<[u8; 32]>,
}

impl Counted {
    pub(crate) fn of(bytes: &[u8]) -> Counted {
        Counted { len: bytes.len() as u64, sha256: Some(Sha256::digest(bytes).into()) }
    }

    /// A stdin of `len` bytes that is not hashed on the way.
    pub(crate) fn length(len: u64) -> Counted {
        Counted { len, sha256: None }
    }

    /// The sha256 in hex (empty without one).
    pub(crate) fn hex(&self) -> String {
        self.sha256.map(hex::encode).unwrap_or_default()
    }
}

/// A `Write` that only counts and hashes (the first pass over a stdin).
#[derive(Default)]
pub(crate) struct HashingSink {
    len: u64,
    hasher: Sha256,
}

impl HashingSink {
    pub(crate) fn finish(self) -> Counted {
        Counted { len: self.len, sha256: Some(self.hasher.finalize().into()) }
    }
}

impl Write for HashingSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.hasher.update(buf);
        self.len += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why [`pump`] stopped early.
#[derive(Debug)]
pub(crate) enum PumpError {
    /// The source is not the counted stdin (shorter, longer or different bytes).
    Changed,
    /// Reading the source failed.
    Source(io::Error),
}

/// A refused exec in words: the API server's own message and code for an answer (RBAC's
/// "User ... cannot create resource \"pods/exec\" ... (403)"), else the error.
pub(crate) fn refused_words(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => format!("{} ({})", status.message, status.code),
        e => e.to_string(),
    }
}

/// Why [`run`] could not finish a session.
#[derive(Debug)]
pub(crate) enum ExecFailure {
    /// The exec request was refused (RBAC, pod gone, apiserver down).
    Refused(kube::Error),
    /// The API server did not answer the exec request (the websocket upgrade) in time.
    NoAnswer,
    /// kube-rs did not hand out a stream it was asked for.
    Missing(&'static str),
    /// Feeding stdin stopped; the connection was dropped before the pod had all of it.
    Pump(PumpError),
}

/// How a session ended.
#[derive(Debug)]
pub(crate) struct Finished {
    /// The apiserver's status; `None` when the connection broke first.
    pub(crate) status: Option<Status>,
    /// Stdout, at most the cap given to [`run`].
    pub(crate) stdout: Vec<u8>,
    /// Whether stdout was longer than the cap.
    pub(crate) stdout_truncated: bool,
    /// Stderr, at most the cap given to [`run`].
    pub(crate) stderr: Vec<u8>,
    /// Bytes of stdin handed to the connection.
    pub(crate) sent: u64,
    /// The websocket's error when the connection broke.
    pub(crate) broken: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// Time the API server has to answer an exec request (to upgrade it to a websocket): one
/// that took the request and never answers would otherwise hold the caller until its idle
/// deadline, minutes later (found by `cargo xtask chaos --full`).
pub(crate) const OPEN_TIMEOUT: std::time::Duration = crate::retry::DEFAULT_API_TIMEOUT;

/// Where [`run`] runs a command.
pub(crate) struct ExecTarget<'a> {
    pub(crate) pods: &'a Api<Pod>,
    pub(crate) pod: &'a str,
    pub(crate) container: Option<&'a str>,
    /// How long the API server has to answer the request.
    pub(crate) open_timeout: std::time::Duration,
}

/// Runs `command` in the target's pod (and container), feeding it `stdin` (a source that must
/// yield exactly the counted bytes), and returns its status and output (each capped at
/// `output_cap`). `on_sent` gets the bytes of stdin sent so far after each chunk.
pub(crate) async fn run<R: AsyncRead + Unpin>(
    target: &ExecTarget<'_>,
    command: Vec<String>,
    stdin: Option<(R, &Counted)>,
    output_cap: usize,
    on_sent: &(dyn Fn(u64) + Sync),
) -> Result<Finished, ExecFailure> {
    let mut ap = AttachParams::default()
        .stdin(stdin.is_some())
        .stdout(true)
        .stderr(true)
        .max_stdin_buf_size(FRAME_BYTES)
        .max_stdout_buf_size(OUTPUT_BUFFER)
        .max_stderr_buf_size(OUTPUT_BUFFER);
    if let Some(container) = target.container {
        ap = ap.container(container.to_owned());
    }
    let mut proc = tokio::time::timeout(target.open_timeout, target.pods.exec(target.pod, command, &ap))
        .await
        .map_err(|_| ExecFailure::NoAnswer)?
        .map_err(ExecFailure::Refused)?;
    let mut writer = match stdin.is_some() {
        true => Some(proc.stdin().ok_or(ExecFailure::Missing("stdin"))?),
        false => None,
    };
    let stdout = proc.stdout().ok_or(ExecFailure::Missing("stdout"))?;
    let stderr = proc.stderr().ok_or(ExecFailure::Missing("stderr"))?;
    let status = proc.take_status().ok_or(ExecFailure::Missing("status"))?;

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (mut out_cut, mut err_cut) = (false, false);
    let mut sent = 0u64;
    let (pumped, status) = {
        let session = async {
            let mut status = std::pin::pin!(status);
            match (stdin, writer.as_mut()) {
                (Some((source, expected)), Some(sink)) => {
                    let pump = pump(source, sink, expected, &mut sent, on_sent);
                    // stdin stays open (we hold it) until the status arrives: on v4 closing it
                    // would close the whole websocket.
                    tokio::select! {
                        pumped = pump => match pumped {
                            Ok(()) => (Ok(()), status.await),
                            Err(e) => (Err(e), None),
                        },
                        status = &mut status => (Ok(()), status),
                    }
                }
                _ => (Ok(()), status.await),
            }
        };
        let readers = future::join(
            read_capped(stdout, &mut out, output_cap, &mut out_cut),
            read_capped(stderr, &mut err, output_cap, &mut err_cut),
        );
        let (mut session, mut readers) = (std::pin::pin!(session), std::pin::pin!(readers));
        tokio::select! {
            done = &mut session => {
                // kube-rs ends the output streams only after a clean session; don't wait forever.
                let _ = tokio::time::timeout(std::time::Duration::from_secs(5), readers).await;
                done
            }
            _ = &mut readers => session.await,
        }
    };
    if let Err(pump_error) = pumped {
        // Drop the connection before the pod can hold the whole stdin.
        proc.abort();
        return Err(ExecFailure::Pump(pump_error));
    }
    drop(writer);
    let broken = match status {
        Some(_) => None,
        None => proc.join().await.err().map(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>),
    };
    Ok(Finished { status, stdout: out, stdout_truncated: out_cut, stderr: err, sent, broken })
}

/// Copies exactly `expected.len` bytes from `source` to `sink`, holding back the last chunk
/// until the source has ended and (when `expected` has one) everything hashed to
/// `expected.sha256`.
///
/// A failed write to `sink` (the connection is gone) is not an error here: it stops the copy
/// and the missing status tells the caller what happened.
pub(crate) async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut source: R,
    sink: &mut W,
    expected: &Counted,
    sent: &mut u64,
    on_sent: &(dyn Fn(u64) + Sync),
) -> Result<(), PumpError> {
    if expected.len == 0 {
        let mut probe = [0u8; 1];
        let longer = source.read(&mut probe).await.map_err(PumpError::Source)? > 0;
        if longer || expected.sha256.is_some_and(|want| <[u8; 32]>::from(Sha256::digest([])) != want) {
            return Err(PumpError::Changed);
        }
        return Ok(());
    }
    let mut buf = vec![0u8; FRAME_BYTES];
    let mut hasher = expected.sha256.map(|_| Sha256::new());
    loop {
        let n = source.read(&mut buf).await.map_err(PumpError::Source)?;
        if n == 0 {
            return Err(PumpError::Changed);
        }
        let remaining = expected.len - *sent;
        let chunk = &buf[..n.min(usize::try_from(remaining).unwrap_or(usize::MAX))];
        if let Some(hasher) = hasher.as_mut() {
            hasher.update(chunk);
        }
        let last = chunk.len() as u64 == remaining;
        if last {
            let mut probe = [0u8; 1];
            let longer = n > chunk.len() || source.read(&mut probe).await.map_err(PumpError::Source)? > 0;
            let differs = match (hasher.take(), expected.sha256) {
                (Some(hasher), Some(want)) => <[u8; 32]>::from(hasher.finalize()) != want,
                _ => false,
            };
            if longer || differs {
                return Err(PumpError::Changed);
            }
        }
        if sink.write_all(chunk).await.is_err() {
            // The connection is gone; park until the caller sees the status (none) resolve.
            return future::pending().await;
        }
        *sent += chunk.len() as u64;
        on_sent(*sent);
        if last {
            let _ = sink.flush().await;
            return Ok(());
        }
    }
}

/// Reads a stream to its end, keeping the first `cap` bytes; sets `cut` when it dropped some.
async fn read_capped(mut reader: impl AsyncRead + Unpin, keep: &mut Vec<u8>, cap: usize, cut: &mut bool) {
    let mut chunk = [0u8; 8192];
    while let Ok(n @ 1..) = reader.read(&mut chunk).await {
        let room = cap.saturating_sub(keep.len());
        *cut |= n > room;
        keep.extend_from_slice(&chunk[..n.min(room)]);
    }
}

/// Starts `command` in `pod` attached to the caller (`theseus shell`): stdin, stdout and,
/// without a TTY, stderr as streams; with a TTY, a channel for the terminal's size (sent once
/// at once). The exit future gives the command's exit code from the exec status.
pub(crate) async fn attach(
    pods: &Api<Pod>,
    pod: &str,
    command: Vec<String>,
    tty: Option<theseus_core::session::TtySize>,
) -> Result<theseus_core::session::ShellSession, kube::Error> {
    use futures::SinkExt as _;
    use theseus_core::session::{AttachedShell, ShellSession};
    let ap = AttachParams::default().stdin(true).stdout(true).stderr(tty.is_none()).tty(tty.is_some());
    let mut proc = pods.exec(pod, command, &ap).await?;
    let missing = |what: &str| kube::Error::Service(format!("the exec gave no {what}").into());
    let stdin = proc.stdin().ok_or_else(|| missing("stdin"))?;
    let stdout = proc.stdout().ok_or_else(|| missing("stdout"))?;
    let stderr = proc.stderr().map(|s| Box::pin(s) as std::pin::Pin<Box<dyn AsyncRead + Send>>);
    let status = proc.take_status().ok_or_else(|| missing("status"))?;
    let resize = match tty {
        Some(size) => {
            let mut sizes = proc.terminal_size().ok_or_else(|| missing("terminal size channel"))?;
            let _ = sizes.send(kube::api::TerminalSize { width: size.cols, height: size.rows }).await;
            let (tx, mut rx) = tokio::sync::mpsc::channel::<theseus_core::session::TtySize>(4);
            tokio::spawn(async move {
                while let Some(size) = rx.recv().await {
                    if sizes.send(kube::api::TerminalSize { width: size.cols, height: size.rows }).await.is_err() {
                        break;
                    }
                }
            });
            Some(tx)
        }
        None => None,
    };
    let exit = async move {
        let status = status.await;
        // The process (and its websocket) lives until the status is in.
        drop(proc);
        match status {
            Some(s) if s.status.as_deref() == Some("Success") => Ok(0),
            Some(s) => Ok(exit_code(&s).unwrap_or(1)),
            None => Err(theseus_core::Error::InvalidConfig("the exec ended without a status (connection lost)".into())),
        }
    };
    Ok(ShellSession::Attached(AttachedShell {
        stdin: Box::pin(stdin),
        stdout: Box::pin(stdout),
        stderr,
        resize,
        exit: Box::pin(exit),
    }))
}

/// The exit code in a `NonZeroExitCode` status.
pub(crate) fn exit_code(status: &Status) -> Option<i32> {
    let causes = status.details.as_ref()?.causes.as_ref()?;
    let cause = causes.iter().find(|c| c.reason.as_deref() == Some("ExitCode"))?;
    cause.message.as_deref()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run_pump(source: &[u8], expected: &[u8]) -> (Result<(), PumpError>, Vec<u8>) {
        let mut sink = Vec::new();
        let mut sent = 0;
        let res = pump(source, &mut sink, &Counted::of(expected), &mut sent, &|_| {}).await;
        assert_eq!(sent, sink.len() as u64);
        (res, sink)
    }

    #[tokio::test]
    async fn pump_copies_the_counted_stdin() {
        let data: Vec<u8> = (0..FRAME_BYTES * 3 + 17).map(|i| (i % 253) as u8).collect();
        let (res, sink) = run_pump(&data, &data).await;
        assert!(res.is_ok());
        assert!(sink == data);
        let (res, sink) = run_pump(b"", b"").await;
        assert!(res.is_ok() && sink.is_empty());
        let (res, _) = run_pump(b"x", b"").await;
        assert!(matches!(res, Err(PumpError::Changed)));
    }

    #[tokio::test]
    async fn pump_never_sends_the_last_byte_of_a_changed_stdin() {
        let data: Vec<u8> = (0..FRAME_BYTES * 2 + 5).map(|i| (i % 253) as u8).collect();
        let mut changed = data.clone();
        changed[10] ^= 1;
        let (res, sink) = run_pump(&changed, &data).await;
        assert!(matches!(res, Err(PumpError::Changed)));
        assert!(sink.len() < data.len());
        let mut longer = data.clone();
        longer.push(0);
        let (res, sink) = run_pump(&longer, &data).await;
        assert!(matches!(res, Err(PumpError::Changed)), "{res:?}");
        assert!(sink.len() < data.len());
        let (res, sink) = run_pump(&data[..data.len() - 1], &data).await;
        assert!(matches!(res, Err(PumpError::Changed)));
        assert!(sink.len() < data.len());
    }
}
