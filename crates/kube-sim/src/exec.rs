//! The Kubernetes exec protocol (websocket channels, `v4.channel.k8s.io` and `v5.channel.k8s.io`)
//! served by running the command as a local process.
//!
//! Wire format, as kube-rs and the apiserver speak it: every binary frame starts with a channel
//! byte (0 stdin, 1 stdout, 2 stderr, 3 status, 4 resize). On v5 the client may send `[255, 0]`
//! to close stdin; on v4 the only way to end stdin is to close the websocket, which ends the
//! session. When the process exits the server sends the rest of its output, a `metav1.Status` on
//! channel 3 and a close frame.
//!
//! Backpressure holds: a stdin frame is written to the child before the next frame is read, so a
//! large upload is never buffered here. The process runs in its own process group; if the
//! websocket goes away before it exits, that group (and nothing else) is killed.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

const STDIN_CHANNEL: u8 = 0;
const STDOUT_CHANNEL: u8 = 1;
const STDERR_CHANNEL: u8 = 2;
const STATUS_CHANNEL: u8 = 3;
const RESIZE_CHANNEL: u8 = 4;
const CLOSE_CHANNEL: u8 = 255;

/// Where stdin frames go: a pipe to the process, or a terminal's master side.
type StdinSink = Box<dyn AsyncWrite + Unpin + Send>;
/// Where output frames come from.
type OutputSource = Box<dyn AsyncRead + Unpin + Send>;
const V4: &str = "v4.channel.k8s.io";
const V5: &str = "v5.channel.k8s.io";
/// Output is forwarded in frames of at most this many bytes.
const OUTPUT_CHUNK: usize = 32 * 1024;
/// After the status is sent, how long the client may keep sending before it is cut off.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Which subprotocols the server accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocols {
    /// `v5.channel.k8s.io` when offered, else `v4.channel.k8s.io` (Kubernetes ≥ 1.30).
    #[default]
    V5AndV4,
    /// `v4.channel.k8s.io` only (older clusters): stdin can only end by closing the websocket.
    V4Only,
}

/// Where and how an exec'd command runs.
#[derive(Debug, Clone)]
pub struct ExecTarget {
    /// Working directory of the process.
    pub cwd: PathBuf,
    /// Variables added to the environment of the process.
    pub env: Vec<(String, String)>,
    /// Accepted subprotocols.
    pub protocols: Protocols,
    /// Failure injection: drop the connection (and kill the process) once this many stdin bytes
    /// have arrived; the first `n` bytes still reach the process.
    pub drop_after_stdin_bytes: Option<u64>,
}

impl ExecTarget {
    /// Runs commands in `cwd`, both protocols, no extra environment, no failure injection.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        ExecTarget { cwd: cwd.into(), env: Vec::new(), protocols: Protocols::default(), drop_after_stdin_bytes: None }
    }
}

/// Answers a `pods/{name}/exec` request: validates it, upgrades to a websocket and runs the
/// command in the background. Errors before the upgrade are `metav1.Status` JSON bodies, as the
/// apiserver sends them.
pub async fn serve(mut req: Request<Incoming>, target: ExecTarget) -> Response<Full<Bytes>> {
    let params = match ExecParams::parse(req.uri().query().unwrap_or("")) {
        Ok(params) => params,
        Err(message) => return status_response(StatusCode::BAD_REQUEST, "BadRequest", &message),
    };
    let Some(key) = websocket_key(req.headers()) else {
        let message = "exec needs a websocket upgrade (Upgrade: websocket, Sec-WebSocket-Key)";
        return status_response(StatusCode::BAD_REQUEST, "BadRequest", message);
    };
    let Some(protocol) = choose_protocol(req.headers(), target.protocols) else {
        let message = "none of the requested websocket subprotocols is supported";
        return status_response(StatusCode::BAD_REQUEST, "BadRequest", message);
    };
    let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) else {
        return status_response(StatusCode::BAD_REQUEST, "BadRequest", "invalid Sec-WebSocket-Key");
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
                run_session(ws, protocol, params, target).await;
            }
            Err(e) => tracing::debug!("exec: websocket upgrade failed: {e}"),
        }
    });
    let mut res = Response::new(Full::default());
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = res.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    headers.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol.as_str()));
    res
}

/// Options of a standalone [`ExecServer`].
#[derive(Debug, Clone, Default)]
pub struct ExecServerOptions {
    /// Accepted subprotocols.
    pub protocols: Protocols,
    /// See [`ExecTarget::drop_after_stdin_bytes`]; applies to every connection.
    pub drop_after_stdin_bytes: Option<u64>,
    /// Variables added to the environment of every command.
    pub env: Vec<(String, String)>,
}

/// A loopback HTTPS server (its own CA, as the simulator's) that answers only
/// `/api/v1/namespaces/{ns}/pods/{pod}/exec`, for any namespace and pod, running every command
/// in one root dir. Stops when dropped.
pub struct ExecServer {
    addr: SocketAddr,
    ca_der: Vec<u8>,
    accept: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ExecServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl ExecServer {
    /// Binds 127.0.0.1 on a free port and starts serving.
    pub async fn start(root: impl Into<PathBuf>, options: ExecServerOptions) -> io::Result<ExecServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let pki = crate::tls::Pki::generate(&[]).map_err(io::Error::other)?;
        let ca_der = crate::tls::pem_to_der(pki.ca_pem()).unwrap_or_default();
        let acceptor = pki.acceptor();
        let target = ExecTarget {
            cwd: root.into(),
            env: options.env,
            protocols: options.protocols,
            drop_after_stdin_bytes: options.drop_after_stdin_bytes,
        };
        let accept = tokio::spawn(async move {
            loop {
                let (tcp, _) = match listener.accept().await {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::debug!("exec server: accept failed: {e}");
                        continue;
                    }
                };
                let target = target.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let tls = match acceptor.accept(tcp).await {
                        Ok(tls) => tls,
                        Err(e) => {
                            tracing::debug!("exec server: TLS handshake failed: {e}");
                            return;
                        }
                    };
                    let service = hyper::service::service_fn(move |req| {
                        let target = target.clone();
                        async move { Ok::<_, Infallible>(route(req, target).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .with_upgrades();
                    if let Err(e) = conn.await {
                        tracing::debug!("exec server: connection failed: {e}");
                    }
                });
            }
        });
        Ok(ExecServer { addr, ca_der, accept })
    }

    /// Base URL for a kube client, e.g. `https://127.0.0.1:34567`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Its CA certificate (DER), for `kube::Config::root_cert`.
    pub fn ca_der(&self) -> Vec<u8> {
        self.ca_der.clone()
    }
}

impl Drop for ExecServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The standalone server's router: exec for any pod, 404 for everything else.
async fn route(req: Request<Incoming>, target: ExecTarget) -> Response<Full<Bytes>> {
    let segments: Vec<&str> = req.uri().path().trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api", "v1", "namespaces", _, "pods", _, "exec"] => serve(req, target).await,
        _ => status_response(StatusCode::NOT_FOUND, "NotFound", "the exec server only serves pods/exec"),
    }
}

/// The negotiated subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    V4,
    V5,
}

impl Protocol {
    fn as_str(self) -> &'static str {
        match self {
            Protocol::V4 => V4,
            Protocol::V5 => V5,
        }
    }
}

/// Query parameters of an exec request.
#[derive(Debug)]
struct ExecParams {
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

impl ExecParams {
    fn parse(query: &str) -> Result<ExecParams, String> {
        let mut params = ExecParams { command: Vec::new(), stdin: false, stdout: false, stderr: false, tty: false };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode_component(value);
            let flag = value == "true" || value == "1";
            match decode_component(key).as_str() {
                "command" => params.command.push(value),
                "stdin" | "input" => params.stdin = flag,
                "stdout" | "output" => params.stdout = flag,
                "stderr" | "error" => params.stderr = flag,
                "tty" => params.tty = flag,
                _ => {}
            }
        }
        // A terminal merges stderr into stdout: the kubelet drops the stderr stream
        // (`pkg/kubelet/cri/streaming/remotecommand/httpstream.go`, `createStreams`: "Access to
        // exec with tty and stderr is not supported, bypassing stderr").
        if params.tty {
            params.stderr = false;
        }
        if params.command.is_empty() {
            return Err("you must specify at least 1 command".into());
        }
        Ok(params)
    }
}

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a space).
fn decode_component(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut idx = 0;
    while idx < bytes.len() {
        match bytes[idx] {
            b'+' => out.push(b' '),
            b'%' if idx + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[idx + 1..idx + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        idx += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        idx += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn websocket_key(headers: &HeaderMap) -> Option<String> {
    let upgrade = headers.get(header::UPGRADE)?.to_str().ok()?;
    if !upgrade.eq_ignore_ascii_case("websocket") {
        return None;
    }
    Some(headers.get(header::SEC_WEBSOCKET_KEY)?.to_str().ok()?.to_owned())
}

/// Picks the best subprotocol the client offers and the server accepts.
fn choose_protocol(headers: &HeaderMap, accepted: Protocols) -> Option<Protocol> {
    let offered: Vec<&str> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    if accepted == Protocols::V5AndV4 && offered.contains(&V5) {
        Some(Protocol::V5)
    } else if offered.contains(&V4) {
        Some(Protocol::V4)
    } else {
        None
    }
}

/// A non-101 answer with a `metav1.Status` body.
fn status_response(code: StatusCode, reason: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    let mut res = Response::new(Full::new(Bytes::from(body.to_string())));
    *res.status_mut() = code;
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

/// How the client side of a session ended.
enum ClientEnd {
    /// Closed or dropped the websocket.
    Gone,
    /// Cut off by [`ExecTarget::drop_after_stdin_bytes`].
    Dropped,
}

/// Runs one exec session on an upgraded connection.
async fn run_session<S>(ws: WebSocketStream<S>, protocol: Protocol, params: ExecParams, target: ExecTarget)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, stream) = ws.split();
    let (out_tx, out_rx) = mpsc::channel::<Message>(8);
    let mut writer = tokio::spawn(write_frames(sink, out_rx));
    let piped = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
    // With a TTY the process runs on a new terminal (80x24 until the client's first resize).
    let terminal = if params.tty { Some(crate::pty::Pty::open(80, 24)) } else { None };
    let spawned = match terminal {
        Some(Ok((pty, slave))) => {
            crate::pty::command(&params.command[0], &params.command[1..], &slave).and_then(|mut cmd| {
                cmd.current_dir(&target.cwd).envs(target.env.iter().map(|(k, v)| (k, v)));
                // The command (holding the slave's copies) goes with this scope: the master then
                // reads EOF once the process and its children closed the terminal.
                let child = cmd.spawn()?;
                Ok((child, Some(pty)))
            })
        }
        Some(Err(e)) => Err(e),
        None => {
            let mut cmd = Command::new(&params.command[0]);
            cmd.args(&params.command[1..])
                .current_dir(&target.cwd)
                .envs(target.env.iter().map(|(k, v)| (k, v)))
                .stdin(piped(params.stdin))
                .stdout(piped(params.stdout))
                .stderr(piped(params.stderr))
                .process_group(0);
            cmd.spawn().map(|child| (child, None))
        }
    };
    let (mut child, pty) = match spawned {
        Ok(spawned) => spawned,
        Err(e) => {
            let status = serde_json::json!({
                "metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
                "message": format!("failed to start `{}`: {e}", params.command[0]),
            });
            let _ = out_tx.send(status_frame(&status)).await;
            drop(out_tx);
            let _ = writer.await;
            let reader = tokio::spawn(read_frames(stream, None, protocol, None, None));
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, reader).await;
            return;
        }
    };
    let (stdin, stdout, stderr): (Option<StdinSink>, Option<OutputSource>, Option<OutputSource>) = match &pty {
        Some(pty) => match pty.streams() {
            Ok((reader, writer)) => {
                (params.stdin.then(|| Box::new(writer) as StdinSink), Some(Box::new(reader) as OutputSource), None)
            }
            Err(e) => {
                tracing::warn!("exec: cannot read the terminal: {e}");
                (None, None, None)
            }
        },
        None => (
            child.stdin.take().map(|s| Box::new(s) as StdinSink),
            child.stdout.take().map(|s| Box::new(s) as OutputSource),
            child.stderr.take().map(|s| Box::new(s) as OutputSource),
        ),
    };
    let pty = pty.map(std::sync::Arc::new);
    let mut reader = tokio::spawn(read_frames(stream, stdin, protocol, target.drop_after_stdin_bytes, pty.clone()));

    let exit = {
        let out_tx = out_tx.clone();
        let child = &mut child;
        let outputs = async move {
            tokio::join!(
                pump_output(stdout, STDOUT_CHANNEL, out_tx.clone()),
                pump_output(stderr, STDERR_CHANNEL, out_tx)
            );
            child.wait().await
        };
        tokio::select! {
            biased;
            exit = outputs => Some(exit),
            end = &mut reader => {
                if let Ok(ClientEnd::Dropped) = end {
                    tracing::debug!("exec: dropping the connection as configured");
                }
                None
            }
        }
    };

    let Some(exit) = exit else {
        // The client is gone while the process runs: its output has nowhere to go.
        kill_group(&mut child);
        let _ = child.wait().await;
        writer.abort();
        return;
    };
    let status = match exit {
        Ok(exit) => exit_status_json(exit, &params.command),
        Err(e) => serde_json::json!({
            "metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
            "message": format!("failed to wait for the process: {e}"),
        }),
    };
    let _ = out_tx.send(status_frame(&status)).await;
    drop(out_tx);
    if tokio::time::timeout(DRAIN_TIMEOUT, &mut writer).await.is_err() {
        writer.abort();
    }
    // Keep reading so a client still blocked on a stdin frame sees the status.
    if tokio::time::timeout(DRAIN_TIMEOUT, &mut reader).await.is_err() {
        reader.abort();
    }
}

/// Kills the process group of a child that has not been reaped yet (its PID cannot have been
/// reused, so the group is still ours).
fn kill_group(child: &mut tokio::process::Child) {
    let Some(pid) = child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32)) else {
        return;
    };
    if let Err(e) = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL) {
        tracing::debug!("exec: failed to kill process group {}: {e}", pid.as_raw_nonzero());
    }
}

/// The `metav1.Status` the apiserver sends for a finished exec.
fn exit_status_json(exit: ExitStatus, command: &[String]) -> serde_json::Value {
    use std::os::unix::process::ExitStatusExt;
    if exit.success() {
        return serde_json::json!({"metadata": {}, "status": "Success"});
    }
    let code = exit.code().unwrap_or_else(|| 128 + exit.signal().unwrap_or(0));
    serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            command.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

fn status_frame(status: &serde_json::Value) -> Message {
    let mut frame = vec![STATUS_CHANNEL];
    frame.extend_from_slice(status.to_string().as_bytes());
    Message::binary(frame)
}

/// Sends queued frames, then a close frame once the queue is closed.
async fn write_frames<S>(mut sink: SplitSink<WebSocketStream<S>, Message>, mut frames: mpsc::Receiver<Message>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(frame) = frames.recv().await {
        if sink.send(frame).await.is_err() {
            return;
        }
    }
    let close = CloseFrame { code: CloseCode::Normal, reason: "".into() };
    let _ = sink.send(Message::Close(Some(close))).await;
}

/// Forwards one output pipe of the process as frames on `channel`.
async fn pump_output(pipe: Option<impl AsyncRead + Unpin>, channel: u8, frames: mpsc::Sender<Message>) {
    let Some(mut pipe) = pipe else { return };
    loop {
        let mut frame = vec![0u8; OUTPUT_CHUNK + 1];
        frame[0] = channel;
        let n = match pipe.read(&mut frame[1..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        frame.truncate(n + 1);
        if frames.send(Message::binary(frame)).await.is_err() {
            return;
        }
    }
}

/// Reads client frames until the client goes away, writing stdin frames to the process one at a
/// time (that wait is the backpressure).
async fn read_frames<S>(
    mut stream: SplitStream<WebSocketStream<S>>,
    mut stdin: Option<StdinSink>,
    protocol: Protocol,
    drop_after: Option<u64>,
    pty: Option<std::sync::Arc<crate::pty::Pty>>,
) -> ClientEnd
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut received = 0u64;
    while let Some(message) = stream.next().await {
        let data = match message {
            Ok(Message::Binary(data)) => data,
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => continue,
        };
        match data.first() {
            Some(&STDIN_CHANNEL) => {
                let mut payload = &data[1..];
                let cut = drop_after.filter(|limit| received + payload.len() as u64 >= *limit && !payload.is_empty());
                if let Some(limit) = cut {
                    payload = &payload[..usize::try_from(limit - received).unwrap_or(payload.len())];
                }
                received += payload.len() as u64;
                if let Some(pipe) = stdin.as_mut() {
                    // The process stopped reading (or exited): drop the rest of stdin.
                    if pipe.write_all(payload).await.is_err() {
                        stdin = None;
                    }
                }
                if cut.is_some() {
                    if let Some(mut pipe) = stdin.take() {
                        let _ = pipe.flush().await;
                    }
                    return ClientEnd::Dropped;
                }
            }
            Some(&CLOSE_CHANNEL) if protocol == Protocol::V5 && data.get(1) == Some(&STDIN_CHANNEL) => {
                if let Some(mut pipe) = stdin.take() {
                    let _ = pipe.shutdown().await;
                }
            }
            Some(&RESIZE_CHANNEL) => {
                if let (Some(pty), Some((cols, rows))) = (&pty, crate::pty::parse_resize(&data[1..])) {
                    let _ = pty.resize(cols, rows);
                }
            }
            // Anything else (a resize without a terminal): ignored.
            _ => {}
        }
    }
    ClientEnd::Gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_form_components() {
        assert_eq!(decode_component("a+b%20c%2Fd"), "a b c/d");
        assert_eq!(decode_component("%E2%9C%93"), "✓");
        assert_eq!(decode_component("100%"), "100%");
        assert_eq!(decode_component("%zz"), "%zz");
    }

    #[test]
    fn parses_exec_query() {
        let params = ExecParams::parse("stdin=true&stdout=true&command=sh&command=-c&command=echo+%27hi%27").unwrap();
        assert_eq!(params.command, ["sh", "-c", "echo 'hi'"]);
        assert!(params.stdin && params.stdout && !params.stderr);
        assert!(ExecParams::parse("stdout=true").is_err());
        let tty = ExecParams::parse("command=ls&tty=true&stderr=true").unwrap();
        assert!(tty.tty && !tty.stderr, "a terminal has no separate stderr");
    }
}
