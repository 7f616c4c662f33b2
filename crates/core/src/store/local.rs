//! [`LocalShell`]: the store's scripts run by `sh` on this machine (the local backend, and
//! tests of the protocol with real tools).

use std::process::Stdio;

use async_trait::async_trait;
use tokio::io::AsyncReadExt;

use super::{ScriptCall, Shell, ShellError};

/// Stderr kept for messages.
const STDERR_CAP: usize = 16 * 1024;

/// Runs store scripts with the local `sh`.
#[derive(Debug, Clone, Default)]
pub struct LocalShell;

#[async_trait]
impl Shell for LocalShell {
    async fn run(&self, call: ScriptCall) -> Result<Vec<u8>, ShellError> {
        let transport = |e: std::io::Error| ShellError::Transport(Box::new(e));
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(call.script)
            .arg("theseus-store")
            .args(&call.args)
            .stdin(if call.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(transport)?;
        let writer = match (call.stdin, child.stdin.take()) {
            (Some(produce), Some(stdin)) => {
                let file = std::fs::File::from(stdin.into_owned_fd().map_err(transport)?);
                let progress = call.progress;
                Some(tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                    let mut out = Counting {
                        inner: std::io::BufWriter::with_capacity(256 * 1024, file),
                        sent: 0,
                        reported: 0,
                        progress,
                    };
                    produce(&mut out)?;
                    std::io::Write::flush(&mut out)?;
                    if let Some(p) = &out.progress {
                        p(out.sent, None);
                    }
                    Ok(())
                }))
            }
            _ => None,
        };
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let read_out = async {
            let mut buf = Vec::new();
            stdout.read_to_end(&mut buf).await.map(|_| buf)
        };
        let read_err = async {
            let mut buf = Vec::new();
            stderr.read_to_end(&mut buf).await.map(|_| buf)
        };
        let (out, err) = tokio::join!(read_out, read_err);
        let status = child.wait().await.map_err(transport)?;
        let written = match writer {
            Some(task) => task.await.map_err(|e| ShellError::Transport(e.to_string().into()))?,
            None => Ok(()),
        };
        let out = out.map_err(transport)?;
        let mut err = err.map_err(transport)?;
        err.truncate(STDERR_CAP);
        // A failure to produce the input (a file changed while shipping) says more than the
        // script's complaint about a cut archive.
        if let Err(e) = &written
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            return Err(ShellError::Transport(e.to_string().into()));
        }
        if !status.success() {
            return Err(ShellError::Exit {
                code: status.code().unwrap_or(128),
                stderr: String::from_utf8_lossy(&err).into_owned(),
            });
        }
        // The script succeeded but its input failed to be written: a local read error.
        written.map_err(|e| ShellError::Transport(Box::new(e)))?;
        Ok(out)
    }

    fn describe(&self) -> String {
        "this machine".into()
    }
}

/// Counts bytes written and reports them every MiB.
struct Counting<W> {
    inner: W,
    sent: u64,
    reported: u64,
    progress: Option<super::ProgressFn>,
}

impl<W: std::io::Write> std::io::Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sent += n as u64;
        if self.sent - self.reported >= 1 << 20 {
            self.reported = self.sent;
            if let Some(p) = &self.progress {
                p(self.sent, None);
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
