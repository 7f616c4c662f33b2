//! `pods/{name}/portforward` over a websocket, as the API server proxies it to the kubelet
//! (`pkg/kubelet/cri/streaming/portforward/websocket.go`): the `ports` query names the ports;
//! port `i` gets data channel `2i` and error channel `2i+1`; the server's first frame on each
//! channel is the port as two little-endian bytes, then every binary frame is a channel byte
//! and data. Pods are local processes here, so a port of the pod is that port on 127.0.0.1;
//! a port nobody listens on is reported on its error channel, as the kubelet does.
//!
//! kubectl (1.30 and later) offers `SPDY/3.1+portforward.k8s.io` instead: SPDY inside the
//! websocket, one pair of streams per local connection ([`crate::tunnel`]).
//!
//! Still different: on the websocket protocol, one TCP connection per port per websocket, as
//! that protocol has; kubectl older than 1.30 (plain SPDY over an HTTP upgrade) is not served.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::response::Body;
use crate::status::ApiError;

/// The subprotocols a kubelet accepts for port forwarding, best first.
const PROTOCOLS: &[&str] = &["v4.channel.k8s.io", "portforward.k8s.io"];

/// kubectl's subprotocol since Kubernetes 1.30: SPDY tunnelled in the websocket
/// ([`crate::tunnel`]); the ports travel in the streams' headers, not in the query.
pub(crate) const SPDY_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";

/// The subprotocols the client offers.
fn offered(req: &Request<Incoming>) -> Vec<String> {
    req.headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_owned()))
        .collect()
}

/// Whether the client asks for kubectl's SPDY tunnel.
pub(crate) fn wants_spdy_tunnel(req: &Request<Incoming>) -> bool {
    offered(req).iter().any(|p| p == SPDY_TUNNEL)
}

/// The `ports` of the query (`ports=80,8888` or repeated), each a valid port.
///
/// # Errors
/// `400` without a port or with one that is not a port number.
pub(crate) fn ports(query: &[(String, String)]) -> Result<Vec<u16>, ApiError> {
    let mut ports = Vec::new();
    for value in query.iter().filter(|(k, _)| k == "ports").map(|(_, v)| v) {
        for p in value.split(',').filter(|p| !p.is_empty()) {
            match p.trim().parse::<u16>() {
                Ok(port) if port > 0 => ports.push(port),
                _ => return Err(ApiError::bad_request(format!("invalid port {p:?}: must be a number in 1..65535"))),
            }
        }
    }
    if ports.is_empty() {
        return Err(ApiError::bad_request("at least one port must be specified (`ports=`)"));
    }
    Ok(ports)
}

/// Upgrades the request and forwards `ports` of the pod (on 127.0.0.1) until either side
/// closes; without `ports`, kubectl's SPDY tunnel, which names ports per stream.
pub(crate) fn serve(mut req: Request<Incoming>, ports: Option<Vec<u16>>) -> Response<Body> {
    let key = req.headers().get(header::SEC_WEBSOCKET_KEY).and_then(|k| k.to_str().ok()).map(str::to_owned);
    let offered = offered(&req);
    let protocol = match &ports {
        Some(_) => PROTOCOLS.iter().find(|p| offered.iter().any(|o| o == *p)),
        None => Some(&SPDY_TUNNEL),
    };
    let (Some(key), Some(protocol)) = (key, protocol) else {
        return crate::response::error_response(&ApiError::bad_request(
            "port forwarding needs a websocket upgrade with the v4.channel.k8s.io or portforward.k8s.io subprotocol",
        ));
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
                match ports {
                    Some(ports) => forward(ws, ports).await,
                    None => crate::tunnel::serve(ws).await,
                }
            }
            Err(e) => tracing::debug!("portforward: websocket upgrade failed: {e}"),
        }
    });
    let mut res = Response::new(Full::<Bytes>::default().map_err(|never| match never {}).boxed());
    *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = res.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    headers.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol));
    res
}

/// One session: a TCP connection per port, bytes between it and its channels.
async fn forward<S>(ws: WebSocketStream<S>, ports: Vec<u16>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(64);
    let mut to_pod: Vec<Option<mpsc::Sender<Bytes>>> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let (data, error) = ((2 * i) as u8, (2 * i + 1) as u8);
        for channel in [data, error] {
            let mut frame = vec![channel];
            frame.extend_from_slice(&port.to_le_bytes());
            if sink.send(Message::binary(frame)).await.is_err() {
                return;
            }
        }
        match TcpStream::connect(("127.0.0.1", *port)).await {
            Ok(tcp) => {
                let (mut read, mut write) = tcp.into_split();
                let (tx, mut rx) = mpsc::channel::<Bytes>(64);
                to_pod.push(Some(tx));
                tokio::spawn(async move {
                    while let Some(bytes) = rx.recv().await {
                        if write.write_all(&bytes).await.is_err() {
                            break;
                        }
                    }
                    let _ = write.shutdown().await;
                });
                let out = out_tx.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 32 * 1024];
                    loop {
                        match read.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                let mut frame = Vec::with_capacity(n + 1);
                                frame.push(data);
                                frame.extend_from_slice(&buf[..n]);
                                if out.send(frame).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
            Err(e) => {
                // What the kubelet reports when nothing listens on the port.
                let mut frame = vec![error];
                frame.extend_from_slice(
                    format!("error forwarding port {port} to pod: failed to connect to localhost:{port}: {e}")
                        .as_bytes(),
                );
                let _ = out_tx.send(frame).await;
                to_pod.push(None);
            }
        }
    }
    drop(out_tx);
    loop {
        tokio::select! {
            frame = out_rx.recv() => match frame {
                Some(frame) => if sink.send(Message::binary(frame)).await.is_err() { break },
                // Every pod side closed: end the session.
                None => break,
            },
            message = stream.next() => match message {
                Some(Ok(Message::Binary(bytes))) if !bytes.is_empty() => {
                    let channel = bytes[0] as usize;
                    // Data for port i arrives on channel 2i; anything on an error channel is ignored.
                    if channel.is_multiple_of(2)
                        && let Some(Some(tx)) = to_pod.get(channel / 2)
                        && tx.send(bytes.slice(1..)).await.is_err()
                    {
                        to_pod[channel / 2] = None;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = sink.close().await;
}
