//! Real workers for READY nodes (contract §3), made the way the Slurm lab makes its nodes
//! (ci/lab/slurm-lab.sh): network namespaces and `nsenter --net=`, never `ip netns exec`.
//!
//! - One "vpc" namespace per simulator (`{prefix}-vpc`) holds a bridge `br0` at `10.X.0.1/16`;
//!   nothing routes out of it. Clients reach workers through [`Net::ssh_proxy`], a ProxyCommand
//!   that runs socat inside it.
//! - Each worker is a namespace `{prefix}-{node}-w{N}` with a veth into the bridge
//!   (`10.X.Y.Z/16`, never reused in the simulator's life), `169.254.169.254` on its loopback with the worker's metadata server (a
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
//! - Each worker has its own /tmp (a bind mount of `ROOT/workers/NODE/wN/tmp`, wiped with
//!   its disk); when the simulator's root is itself under /tmp (tests), sessions get `TMPDIR`
//!   pointing there instead, since hiding /tmp would hide sshd's own files.
//! - Each worker has its own host name (a UTS namespace): the instance name
//!   `t1v-n-XXXXXXXX-w-N` that the metadata's `instance/name` gives; its /etc/hostname and
//!   /etc/hosts are bind mounts in its mount namespace, and the hosts file resolves every
//!   worker of the node by name to its internal address (as GCE's internal DNS does, so that
//!   Gloo and JAX's coordinator publish a reachable address) and `metadata.google.internal`.
//! - Every process of a worker lives in its network namespace, so `ip netns pids` finds them
//!   all (sshd, sessions, what they started); preempt and delete send them SIGTERM, and SIGKILL
//!   after a grace, then remove the namespace.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::address::gateway;
use crate::metadata::{Context, Instance};
pub(crate) use crate::netns::pids_in;
use crate::netns::{WorkerError, in_netns, io_err, kill_all, run};
use crate::sshd::{BANNER, MOTD, passwd_entry, sshd_config};

/// The simulator's private network.
pub(crate) struct Net {
    pub(crate) prefix: String,
    pub(crate) vpc: String,
    /// The network is `10.{net_octet}.0.0/16`.
    pub(crate) net_octet: u8,
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
    /// Its address number (see `address::worker_address`).
    pub(crate) ip: u32,
    /// `(user, public key lines)` from `ssh-keys`.
    pub(crate) users: Vec<(String, Vec<String>)>,
    pub(crate) instance: Instance,
    /// The worker's /etc/hosts: every worker of the node by name, as GCE's internal DNS
    /// resolves a VM's name to its internal address.
    pub(crate) hosts: String,
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
    pub(crate) fn create(root: &Path, prefix: &str, net_octet: u8, ca: &Path) -> Result<Net, WorkerError> {
        // What a simulator killed with SIGKILL left behind goes first.
        crate::netns::reap_stale();
        let vpc = format!("{prefix}-vpc");
        run(&["ip", "netns", "add", &vpc])?;
        crate::netns::record_owner(prefix);
        // What a site's TPU VM image sets for gcloud and Google's client libraries: the
        // metadata server (GCE_METADATA_IP is the one JAX's and google-auth's Python read), and
        // the simulator's API on the bridge with its CA.
        let session_env = format!(
            "GCE_METADATA_HOST=169.254.169.254 GCE_METADATA_IP=169.254.169.254 GCE_METADATA_ROOT=169.254.169.254 \
             CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU=https://{gw}/ CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE={ca}",
            gw = gateway(net_octet),
            ca = ca.display()
        );
        let net = Net {
            prefix: prefix.to_owned(),
            vpc: vpc.clone(),
            net_octet,
            root: root.to_owned(),
            session_env,
            closing: Mutex::new(false),
        };
        let gateway = format!("{}/16", gateway(net_octet));
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

    /// A socket on the bridge's gateway address (`10.X.0.1:port`), for the API workers call.
    pub(crate) fn listen_gateway(&self, port: u16) -> std::io::Result<std::net::TcpListener> {
        let addr = gateway(self.net_octet);
        in_netns(&self.vpc, move || {
            let l = std::net::TcpListener::bind((addr.as_str(), port))?;
            l.set_nonblocking(true)?;
            Ok(l)
        })
    }

    /// An ssh_config `Host` pattern matching every worker address.
    pub(crate) fn host_pattern(&self) -> String {
        format!("10.{}.*", self.net_octet)
    }

    /// The ProxyCommand that reaches `%h:%p` on the bridge.
    pub(crate) fn ssh_proxy(&self) -> String {
        format!("nsenter --net=/run/netns/{} socat STDIO TCP:%h:%p", self.vpc)
    }

    fn address(&self, n: u32) -> String {
        crate::address::worker_address(self.net_octet, n)
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
                // Its directory stays: the error may name its sshd log (the next create of
                // the node wipes it).
                self.down_one(&worker, Duration::ZERO);
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
        let cidr = format!("{}/16", worker.ip);
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
        for sub in ["ssh", "authorized_keys", "home", "tmp"] {
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
        // The worker's own name: /etc/hostname and /etc/hosts (with every worker of the node)
        // in its mount namespace, the kernel's host name in its UTS namespace (set below).
        std::fs::write(dir.join("ssh/hosts"), &spec.hosts).map_err(io_err("cannot write the worker's hosts file"))?;
        std::fs::write(dir.join("ssh/hostname"), format!("{}\n", spec.instance.name))
            .map_err(io_err("cannot write the worker's hostname file"))?;
        for (file, target) in [("motd", "/etc/motd"), ("hosts", "/etc/hosts"), ("hostname", "/etc/hostname")] {
            if Path::new(target).is_file() {
                binds.push(dir.join("ssh").join(file).to_string_lossy().into_owned());
                binds.push(target.into());
            }
        }
        let config = dir.join("ssh/sshd_config");
        // A private /tmp, as a VM has (mode 1777); when the simulator's own files are under
        // /tmp, hiding it would hide them from sshd: then TMPDIR points at it instead.
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = dir.join("tmp");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))
            .map_err(io_err(format!("cannot set the mode of {}", tmp.display())))?;
        let mut session_env = self.session_env.clone();
        if self.root.starts_with("/tmp") {
            session_env.push_str(&format!(" TMPDIR={}", tmp.display()));
        } else {
            binds.push(tmp.to_string_lossy().into_owned());
            binds.push("/tmp".into());
        }
        std::fs::write(&config, sshd_config(&worker.ip, dir, &allowed, &session_env))
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
        let script = r#"set -e; cfg=$1; name=$2; shift 2; printf '%s' "$name" > /proc/sys/kernel/hostname; while [ $# -gt 1 ]; do mount --bind "$1" "$2"; shift 2; done; exec /usr/sbin/sshd -D -e -f "$cfg""#;
        let mut child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{ns}"))
            .args(["unshare", "--mount", "--uts", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"])
            .arg(&config)
            .arg(&spec.instance.name)
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
        crate::netns::sweep_prefix(&self.prefix);
        crate::netns::forget_owner(&self.prefix);
        drop(closing);
    }
}

fn down_worker(vpc: &str, worker: &Worker, grace: Duration) {
    worker.metadata.abort();
    kill_all(&worker.netns, grace);
    let _ = run(&["ip", "-n", vpc, "link", "del", &worker.veth]);
    let _ = run(&["ip", "netns", "del", &worker.netns]);
}
