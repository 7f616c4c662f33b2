//! [`Unframe`]: a reader that drops everything up to and including a marker line, so that what
//! the login shell's rc files print never reaches the user's pipe of a `theseus shell CMD`
//! without a terminal ([`super::SshHost::attach`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

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
