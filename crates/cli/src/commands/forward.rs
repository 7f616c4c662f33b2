//! `theseus forward NAME|RUN_ID [LOCAL:]REMOTE [--rank N]`: a local port that reaches a port of
//! a running job, through the job's backend (`Backend::connect_port`: loopback on the local
//! host, the API server's `pods/portforward` on Volcano), one backend connection per local
//! connection, until Ctrl-C or SIGTERM.

use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};
use theseus_core::interrupt;

use crate::args::ForwardArgs;
use crate::context::Context;
use crate::signals::Interrupted;
use crate::tunnel::{listen, serve};

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
    let (record, backend) = crate::runs::find(ctx, &ledger, &args.job)?;
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
