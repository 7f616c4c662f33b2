//! An HTTP CONNECT proxy on loopback for the proxy pass of `cargo xtask e2e --sim`: Debian's
//! tinyproxy, installed with apt-get when missing and root (as kubectl is), run in the
//! foreground as our child with a log of every request, and stopped by its PID.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use super::wait_for;

/// The apt-get commands tried in order until tinyproxy is there.
const INSTALL: [&[&str]; 3] =
    [&["apt-get", "install", "-y", "tinyproxy"], &["apt-get", "update"], &["apt-get", "install", "-y", "tinyproxy"]];

/// Where the proxy listens: loopback, but not the simulator's address.
const PROXY_IP: &str = "127.0.0.2";

/// A running tinyproxy, stopped on drop.
pub(crate) struct Tinyproxy {
    child: Option<Child>,
    /// `http://127.0.0.2:PORT`.
    pub(crate) url: String,
    log: PathBuf,
}

impl Tinyproxy {
    /// Starts tinyproxy on a free port of 127.0.0.2 (so that a `NO_PROXY` covering the
    /// simulator does not also cover the proxy) with its config and log in `dir`. CONNECT is
    /// allowed to every port (no `ConnectPort` line), from loopback only.
    pub(crate) fn start(dir: &Path) -> Result<Tinyproxy> {
        ensure_installed()?;
        let port = std::net::TcpListener::bind((PROXY_IP, 0))?.local_addr()?.port();
        let (conf, log) = (dir.join("tinyproxy.conf"), dir.join("tinyproxy.log"));
        std::fs::write(&log, "")?;
        std::fs::write(&conf, config(port, &log))?;
        let stderr = std::fs::File::create(dir.join("tinyproxy.stderr"))?;
        let child = Command::new("tinyproxy")
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .context("cannot start tinyproxy")?;
        let mut proxy = Tinyproxy { child: Some(child), url: format!("http://{PROXY_IP}:{port}"), log };
        let up = wait_for("tinyproxy to listen", Duration::from_secs(10), Duration::from_millis(100), || {
            if let Some(child) = proxy.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("tinyproxy exited ({status}); see {}", dir.join("tinyproxy.stderr").display());
            }
            Ok(std::net::TcpStream::connect((PROXY_IP, port)).ok().map(drop))
        });
        if let Err(e) = up {
            proxy.stop();
            return Err(e);
        }
        Ok(proxy)
    }

    /// The `CONNECT host:port` requests logged so far, in order.
    pub(crate) fn connects(&self) -> Result<Vec<String>> {
        let log = std::fs::read_to_string(&self.log).with_context(|| format!("cannot read {}", self.log.display()))?;
        Ok(connect_targets(&log))
    }

    /// SIGTERM to our child, then wait.
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let termed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().is_ok_and(|s| s.success());
        if !termed {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A name for the simulator that clients do not take for loopback, so that they send it
/// through a proxy (Go's, hence kubectl's, never proxies `localhost` or a loopback IP): the
/// machine's host name, with the loopback address it resolves to (the simulator listens
/// there). `None` when the host name resolves to no loopback IPv4 address.
pub(crate) fn proxied_server_name() -> Option<(String, std::net::IpAddr)> {
    use std::net::ToSocketAddrs as _;
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?.trim().to_owned();
    if name.is_empty() || name == "localhost" {
        return None;
    }
    let ip = (name.as_str(), 0).to_socket_addrs().ok()?.map(|a| a.ip()).find(|ip| ip.is_ipv4() && ip.is_loopback())?;
    Some((name, ip))
}

fn config(port: u16, log: &Path) -> String {
    format!(
        "# Written by `cargo xtask e2e --sim` (the proxy pass).\nPort {port}\nListen {PROXY_IP}\nTimeout 600\n\
         MaxClients 200\nAllow 127.0.0.0/8\nLogFile \"{}\"\nLogLevel Connect\nDisableViaHeader Yes\n",
        log.display()
    )
}

/// `host:port` of every `Request (file descriptor N): CONNECT host:port HTTP/1.1` line.
fn connect_targets(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.split_once("): CONNECT ").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn works() -> bool {
    Command::new("tinyproxy").arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn ensure_installed() -> Result<()> {
    if works() {
        return Ok(());
    }
    if !crate::apt::is_root() {
        bail!(
            "the proxy pass of `cargo xtask e2e --sim` needs tinyproxy, which is not installed; \
             install it (`sudo apt-get install tinyproxy`)"
        );
    }
    for argv in INSTALL {
        eprintln!("e2e: tinyproxy is missing; running `{}`", argv.join(" "));
        let _ = Command::new(argv[0])
            .args(&argv[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
        if works() {
            return Ok(());
        }
    }
    bail!("tinyproxy could not be installed with apt-get; install it by hand (`apt-get install tinyproxy`)")
}

#[cfg(test)]
mod tests {
    #[test]
    fn connect_lines_are_read_from_the_log() {
        let log = "CONNECT   Nov 27 06:00:01.123 [42]: Connect (file descriptor 5): 127.0.0.1\n\
                   CONNECT   Nov 27 06:00:01.124 [42]: Request (file descriptor 5): CONNECT 127.0.0.1:40123 HTTP/1.1\n\
                   INFO      Nov 27 06:00:01.200 [42]: Closed connection\n";
        assert_eq!(super::connect_targets(log), ["127.0.0.1:40123"]);
        assert!(super::config(8888, std::path::Path::new("/s/log")).contains("LogFile \"/s/log\""));
    }
}
