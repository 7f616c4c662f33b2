//! `theseus ui`: a dashboard served from the binary itself. [`bind`] binds an HTTP/1.1 server
//! that refuses every request without the token, serves the embedded pages (`assets/`), the JSON
//! API under `/api/` and the live streams (server-sent events); what it shows comes from a
//! [`Source`], which the CLI implements over the ledger and the backends.

mod api;
mod assets;
mod auth;
mod handlers;
mod query;
mod respond;
mod routes;
mod server;
mod source;
mod sse;
mod streams;

pub use api::{Commands, LogEvent, LogEvents, MAX_PAGE, RunDetail, RunPage, RunQuery, RunRow};
pub use source::{Source, SourceError};

use std::net::SocketAddr;
use std::sync::Arc;

/// How [`bind`] listens.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address and port to bind (port 0: any free port).
    pub bind: SocketAddr,
    /// The token every request must carry.
    pub token: String,
}

/// Errors of the server itself (what a [`Source`] fails with is answered per request).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running server: where it listens; dropping it does not stop it (see [`Server::run`]).
pub struct Server {
    /// The bound address (the real port when 0 was asked).
    pub local_addr: SocketAddr,
    listener: tokio::net::TcpListener,
    source: Arc<dyn Source>,
    token: String,
}

/// A fresh random token: 24 bytes as 48 hex digits.
pub fn new_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Binds the server (it does not answer until [`Server::run`]).
pub async fn bind(source: Arc<dyn Source>, options: ServeOptions) -> Result<Server, Error> {
    let listener = tokio::net::TcpListener::bind(options.bind)
        .await
        .map_err(|source| Error::Bind { addr: options.bind, source })?;
    let local_addr = listener.local_addr().map_err(|source| Error::Bind { addr: options.bind, source })?;
    Ok(Server { local_addr, listener, source, token: options.token })
}

impl Server {
    /// Answers requests until `shutdown` resolves; then stops accepting, ends the open event
    /// streams, lets answers in flight finish (for at most a few seconds) and returns.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send) -> Result<(), Error> {
        server::run(self.listener, self.local_addr.port(), self.source, self.token, shutdown).await;
        Ok(())
    }
}
