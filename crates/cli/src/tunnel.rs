//! A local port that reaches a port of a running job (`forward`, `repl`): a listener on
//! loopback ([`listen`]) whose connections are each joined to a new backend connection
//! (`Backend::connect_port`) to the job's port ([`serve`]).

use std::sync::Arc;

use anyhow::{Context as _, Result};
use theseus_core::backend::{DynBackend, JobHandle};
use tokio::net::TcpListener;

use crate::context::Context;

/// Listens on `127.0.0.1:local`; when that port is taken and was not asked for explicitly,
/// on a free one instead, said on stderr.
pub(crate) async fn listen(ctx: &Context, local: u16, explicit: bool) -> Result<TcpListener> {
    match TcpListener::bind(("127.0.0.1", local)).await {
        Ok(listener) => Ok(listener),
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::AddrInUse => {
            let listener = TcpListener::bind(("127.0.0.1", 0)).await.context("cannot listen on 127.0.0.1")?;
            let port = listener.local_addr()?.port();
            ctx.info(format!("theseus: local port {local} is taken; using {port}"));
            Ok(listener)
        }
        Err(e) => Err(e).with_context(|| format!("cannot listen on 127.0.0.1:{local}")),
    }
}

/// Accepts local connections forever, each joined to a new backend connection to `remote` of
/// rank `rank` of the job.
pub(crate) async fn serve(
    ctx: &Context,
    listener: TcpListener,
    backend: Arc<DynBackend>,
    handle: JobHandle,
    rank: u32,
    remote: u16,
) -> std::convert::Infallible {
    let quiet = ctx.quiet;
    loop {
        let mut socket = match listener.accept().await {
            Ok((socket, _)) => socket,
            Err(e) => {
                if !quiet {
                    eprintln!("theseus: cannot accept a local connection: {e}");
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (backend, handle) = (backend.clone(), handle.clone());
        tokio::spawn(async move {
            match backend.connect_port(&handle, rank, remote).await {
                Ok(mut stream) => {
                    let _ = tokio::io::copy_bidirectional(&mut socket, &mut stream).await;
                }
                Err(e) if !quiet => eprintln!("theseus: a connection was refused: {e}"),
                Err(_) => {}
            }
        });
    }
}
