//! The accept loop: HTTP/1.1 (hyper) with one task per connection, until shutdown; then it
//! stops accepting, ends the open event streams, lets answers in flight finish (for a while)
//! and returns.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::auth::Key;
use crate::handlers::{self, Shared};
use crate::source::Source;
use crate::streams;

/// How long answers in flight may take to finish after shutdown.
const GRACE: Duration = Duration::from_secs(5);

/// How long a client may take to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `listener` (bound to `port`, which names the cookie) until `shutdown` resolves.
pub(crate) async fn run(
    listener: TcpListener,
    port: u16,
    source: Arc<dyn Source>,
    token: String,
    shutdown: impl Future<Output = ()> + Send,
) {
    let (stop_tx, stop) = watch::channel(false);
    let shared = Arc::new(Shared { source, key: Key::new(token, port), stop });
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve(shared.clone(), stream));
                }
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // pause so that a persistent error does not spin.
                    tracing::warn!("theseus ui: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let finished = tokio::time::timeout(GRACE, async { while connections.join_next().await.is_some() {} }).await;
    if finished.is_err() {
        tracing::warn!("theseus ui: {} connection(s) still answering after {GRACE:?}; closing them", connections.len());
        connections.shutdown().await;
    }
}

/// Answers the requests of one connection; on shutdown, finishes the one in flight and closes.
async fn serve(shared: Arc<Shared>, stream: TcpStream) {
    // Events are small and must not wait for more to fill a packet.
    let _ = stream.set_nodelay(true);
    let mut stop = shared.stop.clone();
    let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let shared = shared.clone();
        async move {
            let response = handlers::handle(&shared, request.method(), request.uri(), request.headers()).await;
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => log_end(result),
        () = streams::stopped(&mut stop) => {
            connection.as_mut().graceful_shutdown();
            log_end(connection.await);
        }
    }
}

fn log_end(result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        // A reader that leaves mid-stream ends here too: not worth more than a debug line.
        tracing::debug!("theseus ui: connection ended: {e}");
    }
}
