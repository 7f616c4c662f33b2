//! [`SshHost::attach`]: a remote command on the caller's streams, for `theseus shell CMD` without
//! a terminal, and [`Unframe`], the reader that drops everything up to and including its marker
//! line, so that what the login shell's rc files print never reaches the user's pipe.

use std::pin::Pin;
use std::task::{Context, Poll};

use openssh::Stdio;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};

use super::{RemoteCommand, SshError, SshHost, child_parts, frame, remote};

impl SshHost {
    /// Runs `line` (one shell command line, quoted for a POSIX shell) attached: its stdin,
    /// stdout and stderr are the caller's streams, without what the login shell's rc files
    /// print; the exit code resolves once it ended. For `theseus shell CMD` without a terminal,
    /// whose output may go to a pipe.
    pub async fn attach(&self, line: &str) -> Result<theseus_core::session::AttachedShell, SshError> {
        let session = self.session().await?;
        let cmd = RemoteCommand::new("sh").label("a shell");
        let prelude = self.login_env(&cmd, &session).await?;
        let marker = frame::new_marker();
        let mut child = remote(&session, &frame::line(line, frame::Env::Stdin(prelude.len()), Some(&marker)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .await
            .map_err(|e| self.run_error(&cmd, e))?;
        let mut stdin = child.stdin().take().expect("stdin is piped");
        stdin.write_all(prelude.as_bytes()).await.map_err(|e| self.run_error(&cmd, e))?;
        let (stdout, stderr) = child_parts(&mut child);
        let host = self.to_string();
        let exit = async move {
            match child.wait().await {
                Ok(status) => Ok(status.code().unwrap_or(255)),
                Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(127),
                Err(e) => Err(theseus_core::Error::from(SshError::Run {
                    host,
                    command: "a shell".into(),
                    source: Box::new(e),
                })),
            }
        };
        Ok(theseus_core::session::AttachedShell {
            stdin: Box::pin(stdin),
            stdout: Box::pin(Unframe::new(stdout, &marker)),
            stderr: Some(Box::pin(Unframe::new(stderr, &marker))),
            resize: None,
            exit: Box::pin(exit),
        })
    }
}

/// Reads `inner` from the line after `marker\n` on; everything before it is dropped (at the
/// end of input without the marker, nothing is yielded).
pub(crate) struct Unframe<R> {
    inner: R,
    needle: Vec<u8>,
    /// Bytes read before the marker was found (at most the marker's length is kept).
    seen: Vec<u8>,
    /// Bytes after the marker not handed out yet.
    rest: Vec<u8>,
    found: bool,
}

impl<R> Unframe<R> {
    /// A reader of `inner` after `marker`.
    pub(crate) fn new(inner: R, marker: &str) -> Self {
        Unframe { inner, needle: format!("{marker}\n").into_bytes(), seen: Vec::new(), rest: Vec::new(), found: false }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Unframe<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.found {
                if !this.rest.is_empty() {
                    let n = this.rest.len().min(buf.remaining());
                    buf.put_slice(&this.rest[..n]);
                    this.rest.drain(..n);
                    return Poll::Ready(Ok(()));
                }
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {
                    this.seen.extend_from_slice(read.filled());
                    if let Some(at) = this.seen.windows(this.needle.len()).position(|w| w == this.needle.as_slice()) {
                        this.rest = this.seen.split_off(at + this.needle.len());
                        this.seen = Vec::new();
                        this.found = true;
                    } else {
                        let keep = this.seen.len().saturating_sub(this.needle.len());
                        this.seen.drain(..keep);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn drops_all_before_the_marker_line() {
        let mut out = String::new();
        let input: &[u8] = b"banner\nmore bannerM\nreal\noutput";
        Unframe::new(input, "M").read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "real\noutput");
        let mut none = String::new();
        Unframe::new(&b"only banner\n"[..], "M").read_to_string(&mut none).await.unwrap();
        assert_eq!(none, "");
    }
}
