//! SPDY/3.1 as `kubectl port-forward` speaks it to an API server since Kubernetes 1.30: the
//! SPDY byte stream tunnelled inside a websocket whose subprotocol is
//! `SPDY/3.1+portforward.k8s.io` (client-go `transport/websocket` + `portforward`'s
//! `tunneling_dialer.go`: each websocket binary message carries the next bytes of the stream).
//!
//! Only what the port-forward protocol uses: SYN_STREAM (the client opens, per connection, an
//! `error` and a `data` stream, with the headers `streamType`, `port` and `requestID`),
//! SYN_REPLY, DATA with FIN, RST_STREAM, PING (echoed), GOAWAY; SETTINGS and WINDOW_UPDATE are
//! read and ignored (the Go client, moby/spdystream, does not enforce flow-control windows).
//! Header blocks are zlib streams with the SPDY/3 preset dictionary, one stream per direction
//! for the life of the connection, flushed per frame. The kubelet side this stands in for is
//! `pkg/kubelet/cri/streaming/portforward/httpstream.go` (`httpStreamHandler`).

use std::collections::HashMap;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

/// The SPDY/3 header-compression dictionary (draft-mbelshe-httpbis-spdy-00, 2.6.10.1): header
/// names and common values, each as a 4-byte big-endian length and the bytes, then a run of
/// common text.
pub(crate) fn dictionary() -> Vec<u8> {
    const WORDS: &[&str] = &[
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
        "200 OK",
        "version",
        "HTTP/1.1",
        "url",
        "public",
        "set-cookie",
        "keep-alive",
        "origin",
    ];
    const TAIL: &[&str] = &[
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
        "203 Non-Authoritative Information",
        "204 No Content",
        "301 Moved Permanently",
        "400 Bad Request",
        "401 Unauthorized",
        "403 Forbidden",
        "404 Not Found",
        "500 Internal Server Error",
        "501 Not Implemented",
        "503 Service Unavailable",
        "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
        "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
        "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
    ];
    let mut dict = Vec::with_capacity(1423);
    for word in WORDS {
        dict.extend_from_slice(&(word.len() as u32).to_be_bytes());
        dict.extend_from_slice(word.as_bytes());
    }
    for text in TAIL {
        dict.extend_from_slice(text.as_bytes());
    }
    dict
}

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
/// FIN on a data or control frame.
pub(crate) const FLAG_FIN: u8 = 0x01;

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A stream opened by the peer, with its headers.
    SynStream { stream: u32, flags: u8, headers: Vec<(String, String)> },
    /// Reset of a stream.
    RstStream { stream: u32, status: u32 },
    /// A ping to echo.
    Ping { id: u32 },
    /// The peer is going away.
    GoAway,
    /// Bytes on a stream.
    Data { stream: u32, flags: u8, data: Vec<u8> },
    /// Any other control frame (SETTINGS, WINDOW_UPDATE, HEADERS, ...): ignored.
    Other { kind: u16 },
}

/// Why a byte stream is not SPDY/3.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpdyError {
    /// Not version 3, or a frame too short for its type.
    #[error("malformed SPDY frame: {0}")]
    Malformed(String),
    /// The header block did not inflate.
    #[error("SPDY header block: {0}")]
    Headers(String),
}

/// The two zlib streams of a connection and the frame reader's buffer.
pub(crate) struct Codec {
    buffer: Vec<u8>,
    inflate: Decompress,
    deflate: Compress,
}

impl Codec {
    pub(crate) fn new() -> Codec {
        let mut deflate = Compress::new(Compression::default(), true);
        deflate.set_dictionary(&dictionary()).expect("a fresh compressor takes a dictionary");
        Codec { buffer: Vec::new(), inflate: Decompress::new(true), deflate }
    }

    /// Adds received bytes; returns the frames they complete.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<Frame>, SpdyError> {
        self.buffer.extend_from_slice(bytes);
        let mut frames = Vec::new();
        while self.buffer.len() >= 8 {
            let length = u32::from_be_bytes([0, self.buffer[5], self.buffer[6], self.buffer[7]]) as usize;
            if self.buffer.len() < 8 + length {
                break;
            }
            let frame: Vec<u8> = self.buffer.drain(..8 + length).collect();
            frames.push(self.parse(&frame)?);
        }
        Ok(frames)
    }

    fn parse(&mut self, frame: &[u8]) -> Result<Frame, SpdyError> {
        let word = |at: usize| u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]);
        let flags = frame[4];
        let payload = &frame[8..];
        if frame[0] & 0x80 == 0 {
            return Ok(Frame::Data { stream: word(0) & 0x7fff_ffff, flags, data: payload.to_vec() });
        }
        let version = u16::from_be_bytes([frame[0] & 0x7f, frame[1]]);
        if version != VERSION {
            return Err(SpdyError::Malformed(format!("version {version}, not {VERSION}")));
        }
        let kind = u16::from_be_bytes([frame[2], frame[3]]);
        let need = |n: usize| {
            if payload.len() < n {
                Err(SpdyError::Malformed(format!("control frame {kind} of {} bytes", payload.len())))
            } else {
                Ok(())
            }
        };
        Ok(match kind {
            SYN_STREAM => {
                need(10)?;
                let headers = self.inflate_headers(&payload[10..])?;
                Frame::SynStream { stream: word(8) & 0x7fff_ffff, flags, headers }
            }
            RST_STREAM => {
                need(8)?;
                Frame::RstStream { stream: word(8) & 0x7fff_ffff, status: word(12) }
            }
            PING => {
                need(4)?;
                Frame::Ping { id: word(8) }
            }
            GOAWAY => Frame::GoAway,
            kind => {
                if kind == SYN_REPLY || kind == 8 {
                    // Keep the header stream in step even though the frame is ignored.
                    need(4)?;
                    self.inflate_headers(&payload[4..])?;
                }
                Frame::Other { kind }
            }
        })
    }

    /// Inflates one header block (continuing this connection's zlib stream) and parses it.
    fn inflate_headers(&mut self, block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
        let mut out = Vec::with_capacity(block.len() * 4 + 64);
        let mut at = 0;
        loop {
            let before = self.inflate.total_in();
            let result = self.inflate.decompress_vec(&block[at..], &mut out, FlushDecompress::Sync);
            at += (self.inflate.total_in() - before) as usize;
            match result {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate.set_dictionary(&dictionary()).map_err(|e| SpdyError::Headers(e.to_string()))?;
                    continue;
                }
                Err(e) => return Err(SpdyError::Headers(e.to_string())),
            }
            if at >= block.len() && out.len() < out.capacity() {
                break;
            }
            out.reserve(out.capacity().max(256));
        }
        parse_block(&out)
    }

    /// A SYN_REPLY for `stream` with no headers.
    pub(crate) fn syn_reply(&mut self, stream: u32) -> Vec<u8> {
        let block = self.deflate_headers(&[]);
        let mut payload = stream.to_be_bytes().to_vec();
        payload.extend_from_slice(&block);
        control(SYN_REPLY, 0, &payload)
    }

    fn deflate_headers(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut plain = (headers.len() as u32).to_be_bytes().to_vec();
        for (name, value) in headers {
            for s in [name, value] {
                plain.extend_from_slice(&(s.len() as u32).to_be_bytes());
                plain.extend_from_slice(s.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let mut at = 0;
        loop {
            let before = self.deflate.total_in();
            self.deflate.compress_vec(&plain[at..], &mut out, FlushCompress::Sync).expect("deflate into a Vec");
            at += (self.deflate.total_in() - before) as usize;
            if at >= plain.len() && out.len() < out.capacity() {
                break;
            }
            out.reserve(out.capacity().max(64));
        }
        out
    }
}

/// A name/value block: a 4-byte count, then length-prefixed names and values.
fn parse_block(block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    struct Reader<'a> {
        block: &'a [u8],
        at: usize,
    }
    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8], SpdyError> {
            let s = self.block.get(self.at..self.at + n).ok_or_else(|| SpdyError::Headers("truncated block".into()))?;
            self.at += n;
            Ok(s)
        }
        fn word(&mut self) -> Result<usize, SpdyError> {
            let b = self.take(4)?;
            Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        }
        fn text(&mut self) -> Result<String, SpdyError> {
            let n = self.word()?;
            Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
        }
    }
    let mut r = Reader { block, at: 0 };
    let count = r.word()?;
    let mut headers = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        headers.push((r.text()?, r.text()?));
    }
    Ok(headers)
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + payload.len());
    frame.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(flags);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(payload);
    frame
}

/// A DATA frame.
pub(crate) fn data(stream: u32, flags: u8, bytes: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + bytes.len());
    frame.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    frame.push(flags);
    frame.extend_from_slice(&(bytes.len() as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(bytes);
    frame
}

/// The PING frame that answers `id`.
pub(crate) fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

/// A header's value (names are lowercase in SPDY/3).
pub(crate) fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// The streams of one port-forward request (a local connection of kubectl): its `data` and
/// `error` streams, which arrive in either order.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    by_request: HashMap<String, (Option<u32>, Option<u32>, u16)>,
}

impl Pending {
    /// Notes a stream; returns `(data, error, port)` once both of its request are open.
    pub(crate) fn open(&mut self, stream: u32, headers: &[(String, String)]) -> Option<(u32, u32, u16)> {
        let request = header(headers, "requestID").unwrap_or("").to_owned();
        let port = header(headers, "port").and_then(|p| p.parse().ok()).unwrap_or(0);
        let entry = self.by_request.entry(request.clone()).or_insert((None, None, port));
        match header(headers, "streamType") {
            Some("data") => entry.0 = Some(stream),
            Some("error") => entry.1 = Some(stream),
            _ => return None,
        }
        if let (Some(d), Some(e), port) = *entry {
            self.by_request.remove(&request);
            return Some((d, e, port));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_the_specs() {
        let dict = dictionary();
        assert_eq!(dict.len(), 1423);
        assert_eq!(&dict[..16], b"\0\0\0\x07options\0\0\0\x04h");
        assert!(dict.ends_with(b"utf-,*,enq=0."));
    }

    /// A client's side, as moby/spdystream frames it: a header compressor of its own (with
    /// the dictionary) whose blocks this codec must read, frames split across pushes.
    #[test]
    fn frames_and_header_blocks_read_back_across_pushes() {
        let mut client = Codec::new();
        let mut server = Codec::new();
        let mut bytes = Vec::new();
        for (stream, kind) in [(1u32, "error"), (3, "data")] {
            let block = client.deflate_headers(&[("streamtype", kind), ("port", "8888"), ("requestid", "0")]);
            let mut payload = stream.to_be_bytes().to_vec();
            payload.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
            payload.extend_from_slice(&block);
            bytes.extend(control(SYN_STREAM, 0, &payload));
        }
        bytes.extend(data(3, FLAG_FIN, b"GET / HTTP/1.0\r\n\r\n"));
        bytes.extend(ping(7));
        let mut frames = Vec::new();
        for chunk in bytes.chunks(5) {
            frames.extend(server.push(chunk).unwrap());
        }
        assert_eq!(frames.len(), 4, "{frames:?}");
        let mut pending = Pending::default();
        let Frame::SynStream { stream, headers, .. } = &frames[0] else { panic!("{frames:?}") };
        assert_eq!(pending.open(*stream, headers), None);
        let Frame::SynStream { stream, headers, .. } = &frames[1] else { panic!("{frames:?}") };
        assert_eq!(pending.open(*stream, headers), Some((3, 1, 8888)));
        assert_eq!(frames[2], Frame::Data { stream: 3, flags: FLAG_FIN, data: b"GET / HTTP/1.0\r\n\r\n".to_vec() });
        assert_eq!(frames[3], Frame::Ping { id: 7 });
        // A reply's header block is readable by the peer's inflater.
        let reply = server.syn_reply(3);
        let read = client.push(&reply).unwrap();
        assert_eq!(read, [Frame::Other { kind: SYN_REPLY }]);
    }
}
