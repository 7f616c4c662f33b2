//! Real workers for READY nodes (contract §3), made the way the Slurm lab makes its nodes
//! (ci/lab/slurm-lab.sh): network namespaces and `nsenter --net=`, never `ip netns exec`.
//!
//! - One "vpc" namespace per simulator (`{prefix}-vpc`) holds a bridge `br0` at `10.X.Y.1/24`;
//!   nothing routes out of it. Clients reach workers through [`Net::ssh_proxy`], a ProxyCommand
//!   that runs socat inside it.
//! - Each worker is a namespace `{prefix}-{node}-w{N}` with a veth into the bridge
//!   (`10.X.Y.K/24`), `169.254.169.254` on its loopback with the worker's metadata server (a
//!   socket the simulator binds from a thread that entered the namespace), and one sshd on
//!   port 22 of its address.
//! - Accounts: as GCE's guest agent, the node's `metadata.ssh-keys` lines (`user:KEY`) decide
//!   who may log in; only users that exist on this machine are accepted (a divergence: the
//!   guest agent would create them), and their keys go to a per-worker authorized-keys file.
//! - Each worker's home directories are its own without relying on sshd's `SetEnv` or shell
//!   start-up files: sshd runs in a private mount namespace (`unshare --mount`) in which each
//!   accepted user's home directory (from /etc/passwd) is a bind mount of
//!   `ROOT/workers/NODE/wN/home/USER`, made fresh from /etc/skel as the guest agent would. The
//!   rest of the file system is this machine's, as with the lab's nodes.
//! - Every process of a worker lives in its network namespace, so `ip netns pids` finds them
//!   all (sshd, sessions, what they started); preempt and delete send them SIGTERM, and SIGKILL
//!   after a grace, then remove the namespace.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::metadata::{Context, Instance};

/// Making or tearing down workers failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A command (ip, nsenter, ssh-keygen) failed.
    #[error(
        "`{command}` failed: {detail} (the simulator's workers need root, iproute2, util-linux and OpenSSH's sshd)"
    )]
    Command { command: String, detail: String },
    /// A file or socket could not be made.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    /// sshd did not answer in time.
    #[error("sshd of worker {0} did not answer on port 22 within 10 s; see {1}")]
    SshdTimeout(String, PathBuf),
    /// The simulator is stopping.
    #[error("the simulator is stopping")]
    Closing,
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> WorkerError {
    let what = what.into();
    move |source| WorkerError::Io { what, source }
}

fn run(args: &[&str]) -> Result<String, WorkerError> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| WorkerError::Command { command: args.join(" "), detail: e.to_string() })?;
    if !out.status.success() {
        return Err(WorkerError::Command {
            command: args.join(" "),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `f` on a new thread that entered the network namespace `ns` (`setns` moves only the
/// calling thread; sockets keep the namespace they were made in).
fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path)?;
        rustix::thread::move_into_link_name_space(file.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))?;
        f()
    })
    .join()
    .map_err(|_| std::io::Error::other("a namespace thread panicked"))?
}

/// The simulator's private network.
pub(crate) struct Net {
    pub(crate) prefix: String,
    pub(crate) vpc: String,
    pub(crate) subnet: [u8; 2],
    root: PathBuf,
    /// `SetEnv` of every worker's sshd: `NAME=VALUE` words.
    session_env: String,
    /// Held while workers are made; `true` once the simulator stops (no more are made).
    closing: Mutex<bool>,
}

/// What a worker is made from.
pub(crate) struct WorkerSpec {
    pub(crate) node_id: String,
    pub(crate) index: u32,
    pub(crate) ip: u8,
    /// `(user, public key lines)` from `ssh-keys`.
    pub(crate) users: Vec<(String, Vec<String>)>,
    pub(crate) instance: Instance,
}

/// A running worker.
pub(crate) struct Worker {
    pub(crate) netns: String,
    pub(crate) ip: String,
    pub(crate) dir: PathBuf,
    pub(crate) host_key: String,
    veth: String,
    metadata: tokio::task::AbortHandle,
}

/// A READY node's workers.
#[derive(Default)]
pub(crate) struct Running {
    pub(crate) workers: Vec<Worker>,
}

impl Net {
    /// Makes the vpc namespace and its bridge; fails loudly without root or iproute2.
    pub(crate) fn create(root: &Path, prefix: &str, subnet: [u8; 2], ca: &Path) -> Result<Net, WorkerError> {
        let vpc = format!("{prefix}-vpc");
        run(&["ip", "netns", "add", &vpc])?;
        // What a site's TPU VM image sets for gcloud and Google's client libraries: the
        // metadata server (GCE_METADATA_IP is the one JAX's and google-auth's Python read), and
        // the simulator's API on the bridge with its CA.
        let session_env = format!(
            "GCE_METADATA_HOST=169.254.169.254 GCE_METADATA_IP=169.254.169.254 GCE_METADATA_ROOT=169.254.169.254 \
             CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU=https://{gw}/ CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE={ca}",
            gw = gateway(subnet),
            ca = ca.display()
        );
        let net = Net {
            prefix: prefix.to_owned(),
            vpc: vpc.clone(),
            subnet,
            root: root.to_owned(),
            session_env,
            closing: Mutex::new(false),
        };
        let gateway = format!("10.{}.{}.1/24", subnet[0], subnet[1]);
        for args in [
            &["ip", "-n", &vpc, "link", "set", "lo", "up"][..],
            &["ip", "-n", &vpc, "link", "add", "br0", "type", "bridge"],
            &["ip", "-n", &vpc, "addr", "add", &gateway, "dev", "br0"],
            &["ip", "-n", &vpc, "link", "set", "br0", "up"],
        ] {
            if let Err(e) = run(args) {
                net.sweep();
                return Err(e);
            }
        }
        Ok(net)
    }

    /// A socket on the bridge's gateway address (`10.X.Y.1:port`), for the API workers call.
    pub(crate) fn listen_gateway(&self, port: u16) -> std::io::Result<std::net::TcpListener> {
        let addr = gateway(self.subnet);
        in_netns(&self.vpc, move || {
            let l = std::net::TcpListener::bind((addr.as_str(), port))?;
            l.set_nonblocking(true)?;
            Ok(l)
        })
    }

    /// An ssh_config `Host` pattern matching every worker address.
    pub(crate) fn host_pattern(&self) -> String {
        format!("10.{}.{}.*", self.subnet[0], self.subnet[1])
    }

    /// The ProxyCommand that reaches `%h:%p` on the bridge.
    pub(crate) fn ssh_proxy(&self) -> String {
        format!("nsenter --net=/run/netns/{} socat STDIO TCP:%h:%p", self.vpc)
    }

    fn address(&self, ip: u8) -> String {
        format!("10.{}.{}.{ip}", self.subnet[0], self.subnet[1])
    }

    /// Makes the workers of a node (all or none: a failure removes those already made).
    pub(crate) fn up(
        &self,
        specs: Vec<WorkerSpec>,
        project: &str,
        auth: &Arc<crate::auth::Auth>,
        rt: &tokio::runtime::Handle,
    ) -> Result<Running, WorkerError> {
        let closing = self.closing.lock().unwrap_or_else(|e| e.into_inner());
        if *closing {
            return Err(WorkerError::Closing);
        }
        let mut running = Running::default();
        for spec in specs {
            match self.up_one(spec, project, auth, rt) {
                Ok(worker) => running.workers.push(worker),
                Err(e) => {
                    drop(closing);
                    self.down(running, Duration::ZERO, true);
                    return Err(e);
                }
            }
        }
        Ok(running)
    }

    fn up_one(
        &self,
        spec: WorkerSpec,
        project: &str,
        auth: &Arc<crate::auth::Auth>,
        rt: &tokio::runtime::Handle,
    ) -> Result<Worker, WorkerError> {
        let ns = format!("{}-{}-w{}", self.prefix, spec.node_id, spec.index);
        let veth = format!("v{}", spec.ip);
        let ip = self.address(spec.ip);
        let dir = self.root.join("workers").join(&spec.node_id).join(format!("w{}", spec.index));
        // A node made again under its name starts from empty homes, as a new VM does.
        let _ = std::fs::remove_dir_all(&dir);
        run(&["ip", "netns", "add", &ns])?;
        // From here on the worker exists; a failure tears it down.
        let metadata = rt.spawn(async {}).abort_handle();
        let mut worker = Worker {
            netns: ns.clone(),
            ip: ip.clone(),
            dir: dir.clone(),
            host_key: String::new(),
            veth: veth.clone(),
            metadata,
        };
        match self.fill(&mut worker, &spec, project, auth, rt) {
            Ok(()) => Ok(worker),
            Err(e) => {
                self.down_one(&worker, Duration::ZERO);
                let _ = std::fs::remove_dir_all(&worker.dir);
                Err(e)
            }
        }
    }

    fn fill(
        &self,
        worker: &mut Worker,
        spec: &WorkerSpec,
        project: &str,
        auth: &Arc<crate::auth::Auth>,
        rt: &tokio::runtime::Handle,
    ) -> Result<(), WorkerError> {
        let (ns, vpc, veth) = (worker.netns.as_str(), self.vpc.as_str(), worker.veth.as_str());
        let cidr = format!("{}/24", worker.ip);
        for args in [
            &["ip", "-n", vpc, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns][..],
            &["ip", "-n", vpc, "link", "set", veth, "master", "br0", "up"],
            &["ip", "-n", ns, "link", "set", "lo", "up"],
            &["ip", "-n", ns, "addr", "add", &cidr, "dev", "eth0"],
            &["ip", "-n", ns, "link", "set", "eth0", "up"],
            &["ip", "-n", ns, "addr", "add", "169.254.169.254/32", "dev", "lo"],
        ] {
            run(args)?;
        }
        let dir = &worker.dir;
        for sub in ["ssh", "authorized_keys", "home"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(io_err(format!("cannot make {}", dir.join(sub).display())))?;
        }
        let host_key = dir.join("ssh/host_ed25519");
        run(&[
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "theseus-tpu-sim",
            "-f",
            &host_key.to_string_lossy(),
        ])?;
        worker.host_key = std::fs::read_to_string(dir.join("ssh/host_ed25519.pub"))
            .map_err(io_err("cannot read the worker's host key"))?
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        let passwd = std::fs::read_to_string("/etc/passwd").map_err(io_err("cannot read /etc/passwd"))?;
        let mut allowed = Vec::new();
        let mut binds: Vec<String> = Vec::new();
        for (user, keys) in &spec.users {
            let Some((uid, gid, home)) = passwd_entry(&passwd, user) else {
                tracing::warn!(user, "ssh-keys names a user this machine does not have; the simulator skips it");
                continue;
            };
            allowed.push(user.clone());
            let file = dir.join("authorized_keys").join(user);
            std::fs::write(&file, keys.join("\n") + "\n")
                .map_err(io_err(format!("cannot write {}", file.display())))?;
            let own = dir.join("home").join(user);
            std::fs::create_dir_all(&own).map_err(io_err(format!("cannot make {}", own.display())))?;
            if Path::new("/etc/skel").is_dir() {
                run(&["cp", "-a", "/etc/skel/.", &own.to_string_lossy()])?;
            }
            run(&["chown", "-R", &format!("{uid}:{gid}"), &own.to_string_lossy()])?;
            // A home that holds the simulator's own files (its root) is left as it is: hiding it
            // would hide sshd's configuration.
            if Path::new(&home).is_dir() && !self.root.starts_with(&home) && home != "/" {
                binds.push(own.to_string_lossy().into_owned());
                binds.push(home);
            }
        }
        // What a TPU VM image greets with: a pre-authentication banner on every connection
        // (ssh prints it on stderr) and a message of the day on interactive logins.
        std::fs::write(dir.join("ssh/banner"), BANNER).map_err(io_err("cannot write the worker's banner"))?;
        std::fs::write(dir.join("ssh/motd"), MOTD).map_err(io_err("cannot write the worker's motd"))?;
        if Path::new("/etc/motd").is_file() {
            binds.push(dir.join("ssh/motd").to_string_lossy().into_owned());
            binds.push("/etc/motd".into());
        }
        let config = dir.join("ssh/sshd_config");
        std::fs::write(&config, sshd_config(&worker.ip, dir, &allowed, &self.session_env))
            .map_err(io_err(format!("cannot write {}", config.display())))?;
        run(&["/usr/sbin/sshd", "-t", "-f", &config.to_string_lossy()])?;
        std::fs::create_dir_all("/run/sshd").map_err(io_err("cannot make /run/sshd"))?;

        let listener = in_netns(ns, || {
            let l = std::net::TcpListener::bind(("169.254.169.254", 80))?;
            l.set_nonblocking(true)?;
            Ok(l)
        })
        .map_err(io_err(format!("cannot listen on 169.254.169.254:80 in {ns}")))?;
        let ctx = Arc::new(Context {
            project: project.to_owned(),
            auth: auth.clone(),
            instance: Some(spec.instance.clone()),
        });
        worker.metadata = rt
            .spawn(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => crate::metadata::serve(listener, ctx).await,
                    Err(err) => tracing::error!(%err, "a worker's metadata server cannot start"),
                }
            })
            .abort_handle();

        let log_path = dir.join("sshd.log");
        let log = std::fs::File::create(&log_path).map_err(io_err(format!("cannot write {}", log_path.display())))?;
        let log2 = log.try_clone().map_err(io_err("cannot dup the sshd log"))?;
        let script = r#"set -e; cfg=$1; shift; while [ $# -gt 1 ]; do mount --bind "$1" "$2"; shift 2; done; exec /usr/sbin/sshd -D -e -f "$cfg""#;
        let mut child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{ns}"))
            .args(["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"])
            .arg(&config)
            .args(&binds)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(io_err("cannot start sshd with nsenter"))?;
        // Reap it whenever it ends (killed by preempt or delete).
        std::thread::spawn(move || child.wait());
        self.wait_sshd(&worker.ip, &log_path, &spec.instance.name)
    }

    fn wait_sshd(&self, ip: &str, log: &Path, name: &str) -> Result<(), WorkerError> {
        let addr: std::net::SocketAddr = format!("{ip}:22").parse().map_err(|_| WorkerError::Closing)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let answered = in_netns(&self.vpc, move || {
                let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
                stream.set_read_timeout(Some(Duration::from_secs(2)))?;
                let mut banner = [0u8; 4];
                stream.read_exact(&mut banner)?;
                let _ = stream.write_all(b"SSH-2.0-probe\r\n");
                Ok(&banner == b"SSH-")
            });
            if matches!(answered, Ok(true)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(WorkerError::SshdTimeout(name.to_owned(), log.to_owned()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops a node's workers: SIGTERM to every process in their namespaces, SIGKILL after
    /// `grace`, then the namespaces and veths go.
    /// With `wipe` their directories (homes, host keys, logs) go too.
    pub(crate) fn down(&self, running: Running, grace: Duration, wipe: bool) {
        let threads: Vec<_> = running
            .workers
            .into_iter()
            .map(|w| {
                let vpc = self.vpc.clone();
                std::thread::spawn(move || {
                    down_worker(&vpc, &w, grace);
                    if wipe {
                        let _ = std::fs::remove_dir_all(&w.dir);
                    }
                })
            })
            .collect();
        for t in threads {
            let _ = t.join();
        }
    }

    fn down_one(&self, worker: &Worker, grace: Duration) {
        down_worker(&self.vpc, worker, grace);
    }

    /// Wipes a deleted node's worker directories (what a preempted node kept).
    pub(crate) fn wipe(&self, node_id: &str) {
        if !node_id.is_empty() {
            let _ = std::fs::remove_dir_all(self.root.join("workers").join(node_id));
        }
    }

    /// Stops making workers and removes every namespace of this simulator, whatever the state
    /// says (what SIGTERM of the simulator runs last).
    pub(crate) fn sweep(&self) {
        let mut closing = self.closing.lock().unwrap_or_else(|e| e.into_inner());
        *closing = true;
        let list = run(&["ip", "netns", "list"]).unwrap_or_default();
        let mine: Vec<String> = list
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&format!("{}-", self.prefix)))
            .map(str::to_owned)
            .collect();
        for ns in mine.iter().filter(|n| **n != self.vpc) {
            kill_all(ns, Duration::ZERO);
            let _ = run(&["ip", "netns", "del", ns]);
        }
        kill_all(&self.vpc, Duration::ZERO);
        let _ = run(&["ip", "netns", "del", &self.vpc]);
        drop(closing);
    }
}

fn down_worker(vpc: &str, worker: &Worker, grace: Duration) {
    worker.metadata.abort();
    kill_all(&worker.netns, grace);
    let _ = run(&["ip", "-n", vpc, "link", "del", &worker.veth]);
    let _ = run(&["ip", "netns", "del", &worker.netns]);
}

/// The processes in a network namespace.
pub(crate) fn pids_in(ns: &str) -> Vec<i32> {
    run(&["ip", "netns", "pids", ns]).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

fn signal(pids: &[i32], sig: rustix::process::Signal) {
    for pid in pids {
        if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }
}

/// SIGTERM, up to `grace` for them to end, SIGKILL, and up to 5 s for them to be gone.
fn kill_all(ns: &str, grace: Duration) {
    signal(&pids_in(ns), rustix::process::Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && !pids_in(ns).is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = pids_in(ns);
        if left.is_empty() || Instant::now() > deadline {
            break;
        }
        signal(&left, rustix::process::Signal::KILL);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `(uid, gid, home)` of `user` in /etc/passwd's text.
fn passwd_entry(passwd: &str, user: &str) -> Option<(String, String, String)> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 7 && fields[0] == user)
            .then(|| (fields[2].to_owned(), fields[3].to_owned(), fields[5].to_owned()))
    })
}

/// `user:ssh-ed25519 AAAA... comment` lines of GCE's `ssh-keys` metadata, grouped by user
/// (lines without a user or a key are skipped, as the guest agent skips them).
pub(crate) fn parse_ssh_keys(text: &str) -> Vec<(String, Vec<String>)> {
    let mut users: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let Some((user, key)) = line.trim().split_once(':') else { continue };
        if user.is_empty() || key.split_whitespace().count() < 2 {
            continue;
        }
        users.entry(user.to_owned()).or_default().push(key.trim().to_owned());
    }
    users.into_iter().collect()
}

const BANNER: &str = "\
This is a Cloud TPU VM (theseus-tpu-sim). Unauthorized access is prohibited.\n";

const MOTD: &str = "\
Welcome to Ubuntu 22.04.4 LTS (GNU/Linux 6.5.0-1013-gcp x86_64)

 * Documentation:  https://help.ubuntu.com
 * Cloud TPU:      https://cloud.google.com/tpu/docs

  System information as of boot

  Usage of /:   12.3% of 96.73GB
";

/// The bridge's own address, where the API is served to workers.
pub(crate) fn gateway(subnet: [u8; 2]) -> String {
    format!("10.{}.{}.1", subnet[0], subnet[1])
}

fn sshd_config(ip: &str, dir: &Path, allowed: &[String], session_env: &str) -> String {
    let allow = if allowed.is_empty() { "theseus-tpu-sim-nobody".to_owned() } else { allowed.join(" ") };
    format!(
        "# Generated by theseus-tpu-sim for one TPU worker.\n\
         Port 22\nListenAddress {ip}\nHostKey {dir}/ssh/host_ed25519\nPidFile {dir}/ssh/sshd.pid\n\
         AuthorizedKeysFile {dir}/authorized_keys/%u\nAllowUsers {allow}\n\
         PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
         StrictModes no\nX11Forwarding no\nPrintMotd yes\nBanner {dir}/ssh/banner\nPrintLastLog no\nMaxStartups 100:30:200\nMaxSessions 64\n\
         AllowTcpForwarding yes\nAcceptEnv LANG LC_* THESEUS_*\nSubsystem sftp /usr/lib/openssh/sftp-server\n\
         SetEnv {session_env}\nLogLevel INFO\n",
        dir = dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_keys_group_by_user_and_skip_junk() {
        let text = "alice:ssh-ed25519 AAAA a@x\nbob:ssh-rsa BBBB\n\nnouser\n:ssh-ed25519 CCCC\nalice:ssh-ed25519 DDDD second\ncarol:onlyonefield";
        let parsed = parse_ssh_keys(text);
        assert_eq!(parsed.len(), 2);
        assert_eq!(
            parsed[0],
            ("alice".to_owned(), vec!["ssh-ed25519 AAAA a@x".to_owned(), "ssh-ed25519 DDDD second".to_owned()])
        );
        assert_eq!(
            passwd_entry("root:x:0:0:root:/root:/bin/bash\n", "root"),
            Some(("0".into(), "0".into(), "/root".into()))
        );
        assert_eq!(passwd_entry("root:x:0:0:root:/root:/bin/bash\n", "ro"), None);
    }
}
