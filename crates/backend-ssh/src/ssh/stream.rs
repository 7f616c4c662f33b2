//! [`RemoteLines`]: the stdout of a running remote command as a stream of lines, from the line
//! after its marker on (what the login shell's rc files printed before it is dropped).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use openssh::{Child, ChildStderr, ChildStdout, Session};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::OwnedSemaphorePermit;

use super::{SshError, frame, read_all};

/// Lines of a remote command's stdout. Ends after the last line when the command exits 0;
/// yields one [`SshError`] and ends otherwise. Dropping it closes the channel.
pub struct RemoteLines {
    inner: Pin<Box<dyn Stream<Item = Result<String, SshError>> + Send>>,
}

struct State {
    reader: BufReader<ChildStdout>,
    stderr: Option<tokio::task::JoinHandle<Vec<u8>>>,
    child: Option<Child<Arc<Session>>>,
    host: String,
    command: String,
    /// The marker that starts the command's output, and whether it was seen.
    marker: String,
    seen: bool,
    _permit: OwnedSemaphorePermit,
}

impl RemoteLines {
    pub(super) fn new(
        (stdout, stderr): (ChildStdout, ChildStderr),
        child: Child<Arc<Session>>,
        permit: OwnedSemaphorePermit,
        host: String,
        command: String,
        marker: String,
    ) -> Self {
        let state = State {
            reader: BufReader::new(stdout),
            stderr: Some(tokio::spawn(read_all(stderr))),
            child: Some(child),
            host,
            command,
            marker,
            seen: false,
            _permit: permit,
        };
        let inner = futures::stream::unfold(state, |mut st| async move {
            st.child.as_ref()?;
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match st.reader.read_until(b'\n', &mut buf).await {
                    Ok(n) if n > 0 => {
                        if buf.last() == Some(&b'\n') {
                            buf.pop();
                        }
                        if !st.seen {
                            // A banner without a final newline leaves the marker at a line's end.
                            st.seen = buf.ends_with(st.marker.as_bytes());
                            continue;
                        }
                        return Some((Ok(String::from_utf8_lossy(&buf).into_owned()), st));
                    }
                    Ok(_) => break,
                    Err(e) => {
                        st.child = None;
                        let err =
                            SshError::Run { host: st.host.clone(), command: st.command.clone(), source: Box::new(e) };
                        return Some((Err(err), st));
                    }
                }
            }
            // End of output: the command's exit decides whether that was a success.
            let child = st.child.take()?;
            let session = child.session();
            let status = child.wait().await;
            let stderr = match st.stderr.take() {
                Some(task) => task.await.unwrap_or_default(),
                None => Vec::new(),
            };
            let code = match &status {
                Ok(s) => s.code(),
                Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(127),
                Err(_) => None,
            };
            if !st.seen && code.is_some() {
                let err = super::login::no_marker(st.host.clone(), st.command.clone(), code, &stderr);
                return Some((Err(err), st));
            }
            let stderr = frame::after_marker(&stderr, &st.marker).map_or(stderr.clone(), <[u8]>::to_vec);
            let err = match status {
                Ok(s) if s.success() => return None,
                Ok(s) => SshError::Failed {
                    host: st.host.clone(),
                    command: st.command.clone(),
                    code: s.code(),
                    stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
                },
                Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => SshError::Failed {
                    host: st.host.clone(),
                    command: st.command.clone(),
                    code: Some(127),
                    stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
                },
                Err(e) if session.check().await.is_err() => {
                    SshError::Disconnected { host: st.host.clone(), command: st.command.clone(), source: Some(e) }
                }
                Err(_) => SshError::Failed {
                    host: st.host.clone(),
                    command: st.command.clone(),
                    code: None,
                    stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
                },
            };
            Some((Err(err), st))
        });
        RemoteLines { inner: inner.boxed() }
    }
}

impl Stream for RemoteLines {
    type Item = Result<String, SshError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}
