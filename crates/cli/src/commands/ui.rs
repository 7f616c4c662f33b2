//! `theseus ui`: serves the dashboard (crate `theseus-ui`) over the ledger and the backends
//! (`crate::ui_source`) until SIGINT or SIGTERM, then exits 0. Prints one line on stdout, the
//! URL to open with its token (`--output json`: `{"url", "bind", "port", "token"}`); warnings go
//! to stderr.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use theseus_ui::ServeOptions;

use crate::args::{OutputFormat, UiArgs};
use crate::context::Context;
use crate::ui_source::LedgerSource;

/// The shortest `--refresh`: below it the refresher would keep every host busy.
const MIN_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) async fn run(ctx: &Context, args: UiArgs) -> Result<ExitCode> {
    if args.refresh < MIN_REFRESH {
        return Err(anyhow!("--refresh {}s: give at least 1 second (e.g. --refresh 10)", args.refresh.as_secs_f64()));
    }
    // A broken config still shows the ledger: what needs a host says why it cannot ask.
    let loaded = ctx.config().map_err(|e| {
        let e = format!("{e:#}");
        eprintln!("theseus: warning: {e}; runs are shown as last recorded");
        e
    });
    let source = Arc::new(LedgerSource::start(ctx.clone(), loaded, args.refresh)?);
    let token = theseus_ui::new_token();
    let bind = SocketAddr::new(args.bind, args.port);
    let server = theseus_ui::bind(Arc::clone(&source) as _, ServeOptions { bind, token: token.clone() })
        .await
        .map_err(|e| bind_error(e, &args))?;
    let port = server.local_addr.port();
    let url = format!("http://{}/?token={token}", url_host(args.bind, port));
    if ctx.output == OutputFormat::Json {
        // One line: tests and scripts read the first line of stdout.
        println!("{}", serde_json::json!({"url": url, "bind": args.bind.to_string(), "port": port, "token": token}));
    } else {
        println!("{url}");
    }
    if let Some(warning) = exposure(args.bind, port) {
        eprintln!("theseus: warning: {warning}");
    }
    ctx.info("theseus: serving the dashboard until Ctrl-C");
    crate::signals::end_on_signal();
    server
        .run(async {
            theseus_core::interrupt::wait().await;
        })
        .await?;
    // A helper pod reading an ended run's files deletes itself on the interrupt: let it.
    source.settle(std::time::Duration::from_secs(60)).await;
    ctx.info("theseus: stopped serving the dashboard");
    Ok(ExitCode::SUCCESS)
}

/// The `host:port` of the printed URL: the bound address, or its loopback form for an address
/// that listens on every interface (`0.0.0.0`, `::`).
fn url_host(bind: IpAddr, port: u16) -> SocketAddr {
    let ip = match bind {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, port)
}

/// What to say when the server is reachable from other machines: `None` for a loopback address.
fn exposure(bind: IpAddr, port: u16) -> Option<String> {
    if bind.is_loopback() {
        return None;
    }
    let which = if bind.is_unspecified() {
        format!("on all addresses of this machine (port {port})")
    } else {
        format!("on {}", SocketAddr::new(bind, port))
    };
    Some(format!(
        "listening {which}: anyone who can reach it can try the token, the only guard, and traffic is not \
         encrypted (no TLS); to reach it from another machine prefer the default --bind 127.0.0.1 with an \
         SSH tunnel (`ssh -L {port}:127.0.0.1:{port} THIS_HOST`)"
    ))
}

/// The bind error, naming the flag to change.
fn bind_error(error: theseus_ui::Error, args: &UiArgs) -> anyhow::Error {
    let kind = std::error::Error::source(&error).and_then(|e| e.downcast_ref::<std::io::Error>()).map(|e| e.kind());
    let fix = match kind {
        Some(std::io::ErrorKind::AddrInUse) => format!(
            "port {} is in use (another `theseus ui`?): choose another with --port N, or --port 0 for any free port",
            args.port
        ),
        Some(std::io::ErrorKind::AddrNotAvailable) => format!(
            "{} is not an address of this machine: give one of its addresses with --bind (default 127.0.0.1)",
            args.bind
        ),
        Some(std::io::ErrorKind::PermissionDenied) => format!(
            "port {} needs privileges: choose one above 1023 with --port N, or --port 0 for any free port",
            args.port
        ),
        _ => "check --bind and --port".to_owned(),
    };
    anyhow!("theseus ui {error}; {fix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_loopback_for_an_any_address_and_only_loopback_is_quiet() {
        let any4: IpAddr = "0.0.0.0".parse().unwrap();
        let any6: IpAddr = "::".parse().unwrap();
        assert_eq!(url_host(any4, 8765).to_string(), "127.0.0.1:8765");
        assert_eq!(url_host(any6, 8765).to_string(), "[::1]:8765");
        assert_eq!(url_host("10.1.2.3".parse().unwrap(), 80).to_string(), "10.1.2.3:80");
        assert!(exposure("127.0.0.1".parse().unwrap(), 1).is_none());
        assert!(exposure("::1".parse().unwrap(), 1).is_none());
        assert!(exposure(any4, 9).unwrap().contains("all addresses"));
        assert!(exposure("10.1.2.3".parse().unwrap(), 9).unwrap().contains("10.1.2.3:9"));
    }
}
