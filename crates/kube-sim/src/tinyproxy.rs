//! A real HTTP CONNECT proxy on loopback for the proxy tests of the crates that test against
//! the simulator: Debian's tinyproxy (the lab installs it; as root, a missing one is installed
//! with apt-get, waiting for the dpkg lock rather than racing a parallel test), started with a
//! config of its own and logging every request, stopped (by its PID) on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BINARY: &str = "/usr/bin/tinyproxy";

/// A running tinyproxy on 127.0.0.1.
pub struct Tinyproxy {
    url: String,
    log: PathBuf,
    child: Child,
}

impl Tinyproxy {
    /// Starts one with its config, pid file and log in `dir`, on a free port of 127.0.0.1.
    pub fn start(dir: &Path) -> Result<Tinyproxy, String> {
        install()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let log = dir.join("tinyproxy.log");
        let conf = dir.join("tinyproxy.conf");
        std::fs::write(
            &conf,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 60\nLogFile \"{}\"\nLogLevel Info\nMaxClients 20\nPidFile \"{}\"\n",
                log.display(),
                dir.join("tinyproxy.pid").display()
            ),
        )
        .map_err(|e| format!("writing {}: {e}", conf.display()))?;
        let child = Command::new(BINARY)
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {BINARY}: {e}"))?;
        let proxy = Tinyproxy { url: format!("http://127.0.0.1:{port}"), log, child };
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(20) {
                return Err(format!("tinyproxy does not listen on 127.0.0.1:{port}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(proxy)
    }

    /// Its URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// How many tunnels it opened to `target` (`host:port`) so far, from its log.
    pub fn connects_to(&self, target: &str) -> usize {
        std::fs::read_to_string(&self.log).unwrap_or_default().matches(&format!("CONNECT {target}")).count()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Installs tinyproxy with apt-get when it is missing and this runs as root.
fn install() -> Result<(), String> {
    if Path::new(BINARY).exists() {
        return Ok(());
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    if !root {
        return Err("tinyproxy is not installed and this is not root: `apt-get install tinyproxy`".into());
    }
    let out = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300", "tinyproxy"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("apt-get: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("apt-get install tinyproxy: {}", String::from_utf8_lossy(&out.stderr)))
    }
}
