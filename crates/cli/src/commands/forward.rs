//! `theseus forward NAME|RUN_ID [LOCAL:]REMOTE [--rank N]`: a local port that reaches a port of
//! a running job, through the job's backend (`Backend::connect_port`: loopback on the local
//! host, the API server's `pods/portforward` on Volcano), one backend connection per local
//! connection, until Ctrl-C or SIGTERM.

use std::process::ExitCode;

use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow, bail};
use theseus_core::backend::{DynBackend, JobHandle};
use theseus_core::interrupt;
use tokio::net::TcpListener;

use crate::args::ForwardArgs;
use crate::context::Context;
use crate::signals::Interrupted;

/// `[LOCAL:]REMOTE` as (local port, remote port, whether the local port was asked for).
pub(crate) fn parse_ports(spec: &str) -> Result<(u16, u16, bool)> {
    let port = |p: &str, what: &str| -> Result<u16> {
        p.trim().parse::<u16>().map_err(|_| anyhow!("{what} port `{p}` in `{spec}` is not a port number (0-65535)"))
    };
    match spec.split_once(':') {
        Some((local, remote)) => {
            let remote = port(remote, "remote")?;
            if remote == 0 {
                bail!("remote port 0 in `{spec}`: name the port the job listens on");
            }
            Ok((port(local, "local")?, remote, true))
        }
        None => {
            let remote = port(spec, "remote")?;
            if remote == 0 {
                bail!("remote port 0 in `{spec}`: name the port the job listens on");
            }
            Ok((remote, remote, false))
        }
    }
}

pub(crate) async fn run(ctx: &Context, args: ForwardArgs) -> Result<ExitCode> {
    let (local, remote, explicit) = parse_ports(&args.ports)?;
    let ledger = ctx.ledger()?;
    let (record, backend) = super::jobs::find(ctx, &ledger, &args.job)?;
    let run_id = record.identity.run_id.clone();
    // One connection first, so that a job that does not listen (or a backend without tunnels)
    // fails here, with its reason, and not at the first local connection.
    drop(backend.connect_port(&record.handle, args.rank, remote).await?);
    let listener = listen(ctx, local, explicit).await?;
    let addr = listener.local_addr()?;
    println!("{addr}");
    ctx.info(format!(
        "theseus: forwarding {addr} to port {remote} of rank {} of run {run_id} on {}; Ctrl-C stops",
        args.rank, record.host
    ));
    tokio::select! {
        signal = interrupt::wait() => {
            Err(Interrupted { signal, what: format!("the forward of {addr} is closed; the job keeps running") }.into())
        }
        never = serve(ctx, listener, backend, record.handle.clone(), args.rank, remote) => match never {},
    }
}

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

#[cfg(test)]
mod tests {
    use super::parse_ports;

    #[test]
    fn port_specs() {
        assert_eq!(parse_ports("8888").unwrap(), (8888, 8888, false));
        assert_eq!(parse_ports("9000:8888").unwrap(), (9000, 8888, true));
        assert_eq!(parse_ports("0:6006").unwrap(), (0, 6006, true));
        for bad in ["", "x", "1:0", "0", "70000", "a:1"] {
            assert!(parse_ports(bad).is_err(), "{bad}");
        }
    }
}
