//! kubectl's port-forward session: SPDY/3.1 inside a websocket ([`crate::spdy`]). Each local
//! connection of kubectl opens an `error` and a `data` stream naming the port and a request
//! id; every stream gets a SYN_REPLY at once. Once both streams of a request are open, the
//! pod's port (127.0.0.1 here: pods are local processes) is connected: bytes of the data
//! stream go to it, its bytes come back as DATA frames, and when it closes both streams end
//! with FIN (kubectl waits for the error stream's end before it closes the local
//! connection). A port nobody listens on is reported on the error stream, in the kubelet's
//! words. PINGs are echoed.

use std::collections::HashMap;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::spdy::{self, Codec, FLAG_FIN, Frame, Pending};

/// Serves one tunnel until the client goes away.
pub(crate) async fn serve<S>(ws: WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        while let Some(frame) = out_rx.recv().await {
            if sink.send(Message::binary(frame)).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    });
    let mut codec = Codec::new();
    let mut pending = Pending::default();
    let mut to_pod: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
    'session: while let Some(message) = stream.next().await {
        let bytes = match message {
            Ok(Message::Binary(bytes)) => bytes,
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => continue,
        };
        let frames = match codec.push(&bytes) {
            Ok(frames) => frames,
            Err(e) => {
                tracing::debug!("portforward tunnel: {e}");
                break;
            }
        };
        for frame in frames {
            match frame {
                Frame::SynStream { stream, headers, .. } => {
                    if out_tx.send(codec.syn_reply(stream)).await.is_err() {
                        break 'session;
                    }
                    if let Some((data, error, port)) = pending.open(stream, &headers) {
                        let (tx, rx) = mpsc::channel::<Bytes>(64);
                        to_pod.insert(data, tx);
                        tokio::spawn(connect(data, error, port, rx, out_tx.clone()));
                    }
                }
                Frame::Data { stream, flags, data } => {
                    if let Some(tx) = to_pod.get(&stream)
                        && !data.is_empty()
                        && tx.send(Bytes::from(data)).await.is_err()
                    {
                        to_pod.remove(&stream);
                    }
                    if flags & FLAG_FIN != 0 {
                        // The local side is done sending: the pod's port gets EOF.
                        to_pod.remove(&stream);
                    }
                }
                Frame::RstStream { stream, .. } => {
                    to_pod.remove(&stream);
                }
                Frame::Ping { id } => {
                    if out_tx.send(spdy::ping(id)).await.is_err() {
                        break 'session;
                    }
                }
                Frame::GoAway => break 'session,
                Frame::Other { .. } => {}
            }
        }
    }
    drop(to_pod);
    drop(out_tx);
    let _ = writer.await;
}

/// Connects the pod's `port` and pumps bytes between it and the `data` stream.
async fn connect(data: u32, error: u32, port: u16, mut from_client: mpsc::Receiver<Bytes>, out: mpsc::Sender<Vec<u8>>) {
    let tcp = match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(tcp) => tcp,
        Err(e) => {
            let message = format!("error forwarding port {port} to pod: failed to connect to localhost:{port}: {e}");
            let _ = out.send(spdy::data(error, 0, message.as_bytes())).await;
            let _ = out.send(spdy::data(error, FLAG_FIN, &[])).await;
            let _ = out.send(spdy::data(data, FLAG_FIN, &[])).await;
            return;
        }
    };
    let (mut read, mut write) = tcp.into_split();
    tokio::spawn(async move {
        while let Some(bytes) = from_client.recv().await {
            if write.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    });
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send(spdy::data(data, 0, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = out.send(spdy::data(data, FLAG_FIN, &[])).await;
    let _ = out.send(spdy::data(error, FLAG_FIN, &[])).await;
}
