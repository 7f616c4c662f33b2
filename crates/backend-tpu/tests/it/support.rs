//! Two real sshds on 127.0.0.1 standing in for the workers of a TPU VM (one per worker, each
//! with its own `HOME` and its own metadata server, given through sshd's `SetEnv` as the
//! simulator does), and a fake [`Vm`] whose node lists them. Until the TPU simulator lands, this
//! is how the backend's worker half runs for real; the simulator's workers replace it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use theseus_backend_tpu::backend::{Connector, Progress, Ready, TpuBackend, Vm, VmNode};
use theseus_core::config::ClusterConfig;
use theseus_core::{Error, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Workers of the fake VM.
pub(crate) const WORKERS: usize = 2;

/// The token the workers' metadata servers give.
pub(crate) const TOKEN: &str = "ya29.fake-worker-token";

/// Requests the fake API got from the workers: `METHOD PATH AUTHORIZATION`.
pub(crate) static API_REQUESTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The sshds, their ssh config and the metadata servers' ports.
#[derive(Debug)]
pub(crate) struct Lab {
    pub(crate) dir: PathBuf,
    /// An ssh config naming the workers `tpu-w0`, `tpu-w1`.
    pub(crate) config: PathBuf,
}

static LAB: OnceLock<std::result::Result<Lab, String>> = OnceLock::new();

/// The lab, or `None` after printing why the test does not run (a failure when all tests are
/// required).
pub(crate) fn lab() -> Option<&'static Lab> {
    match LAB.get_or_init(start) {
        Ok(lab) => Some(lab),
        Err(why) => {
            eprintln!("NOT RUN: no sshd for the TPU worker tests: {why}");
            assert!(std::env::var("THESEUSTEST_REQUIRE_ALL").as_deref() != Ok("1"), "THESEUSTEST_REQUIRE_ALL=1: {why}");
            None
        }
    }
}

/// Returns from the test when there is no lab.
#[macro_export]
macro_rules! require_lab {
    () => {
        match $crate::support::lab() {
            Some(lab) => lab,
            None => return,
        }
    };
}

fn free_port() -> std::result::Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).map_err(|e| e.to_string())
}

fn run(cmd: &mut Command) -> std::result::Result<(), String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr))) }
}

fn start() -> std::result::Result<Lab, String> {
    if !Path::new("/usr/sbin/sshd").exists() {
        return Err("/usr/sbin/sshd is missing (apt-get install -y openssh-server)".into());
    }
    let dir = std::env::temp_dir().join(format!("theseus-tpu-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for name in ["host_ed25519", "client_key"] {
        run(Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", ""]).arg("-f").arg(dir.join(name)))?;
    }
    std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all("/run/sshd").map_err(|e| e.to_string())?;
    let user = String::from_utf8_lossy(&Command::new("id").arg("-un").output().map_err(|e| e.to_string())?.stdout)
        .trim()
        .to_owned();
    let host_key = std::fs::read_to_string(dir.join("host_ed25519.pub")).map_err(|e| e.to_string())?;
    let host_key = host_key.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    let d = dir.display();
    let (mut client, mut known) = (String::new(), String::new());
    let mut pids = Vec::new();
    let api = start_api()?;
    for w in 0..WORKERS {
        let port = free_port()?;
        let md = start_metadata(w)?;
        let home = dir.join(format!("w{w}"));
        std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
        let config = dir.join(format!("sshd_config.{w}"));
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_ed25519\nPidFile {d}/sshd.{w}.pid\n\
                 AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\nPubkeyAuthentication yes\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
                 X11Forwarding no\nPrintMotd no\nMaxStartups 100:30:200\nMaxSessions 64\nLogLevel INFO\n\
                 SetEnv HOME={} GCE_METADATA_HOST={md} CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU=http://{api}/\n",
                home.display()
            ),
        )
        .map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.join(format!("sshd.{w}.log"))).map_err(|e| e.to_string())?;
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start sshd: {e}"))?;
        pids.push(child.id().to_string());
        client.push_str(&format!(
            "Host tpu-w{w}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {d}/client_key\n  \
             IdentitiesOnly yes\n  UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n"
        ));
        known.push_str(&format!("[127.0.0.1]:{port} {host_key}\n"));
    }
    // The sshds outlive a test process that never drops statics: a watchdog stops these PIDs
    // (and only them) once the test process is gone.
    Command::new("sh")
        .arg("-c")
        .arg(r#"p=$1; shift; d=$1; shift; while kill -0 "$p" 2>/dev/null; do sleep 0.5; done; kill "$@" 2>/dev/null; sleep 1; rm -rf -- "$d""#)
        .arg("sh")
        .arg(std::process::id().to_string())
        .arg(&dir)
        .args(&pids)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start the sshd watchdog: {e}"))?;
    std::fs::write(dir.join("known_hosts"), known).map_err(|e| e.to_string())?;
    client.push_str(&format!(
        "Host tpu-unreachable\n  HostName 127.0.0.1\n  Port {}\n  ConnectionAttempts 1\n",
        free_port()?
    ));
    let config = dir.join("ssh_config");
    std::fs::write(&config, client).map_err(|e| e.to_string())?;
    let lab = Lab { dir, config };
    for w in 0..WORKERS {
        wait_for_login(&lab, &format!("tpu-w{w}"))?;
    }
    Ok(lab)
}

/// A metadata server of worker `w` on a thread of its own: `agent-worker-number` and
/// `worker-network-endpoints` as a TPU VM's (every worker at 127.0.0.1), only with the header
/// `Metadata-Flavor: Google`.
fn start_metadata(w: usize) -> std::result::Result<String, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((mut s, _)) = listener.accept().await else { continue };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]).to_string();
                    let path = req.split_whitespace().nth(1).unwrap_or("").to_owned();
                    let flavor = req.lines().any(|l| l.to_ascii_lowercase().starts_with("metadata-flavor: google"));
                    let endpoints: Vec<String> = (0..WORKERS).map(|i| format!("fake:{i}:127.0.0.1")).collect();
                    let body = match path.rsplit('/').next().unwrap_or("") {
                        _ if !flavor => None,
                        "agent-worker-number" => Some(w.to_string()),
                        "worker-network-endpoints" => Some(endpoints.join(",")),
                        "token" if path.ends_with("/service-accounts/default/token") => {
                            Some(format!(r#"{{"access_token":"{TOKEN}","expires_in":3599,"token_type":"Bearer"}}"#))
                        }
                        _ => None,
                    };
                    let reply = match body {
                        Some(b) => {
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}", b.len())
                        }
                        None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned(),
                    };
                    let _ = s.write_all(reply.as_bytes()).await;
                });
            }
        });
    });
    Ok(addr)
}

/// A fake Cloud TPU API for the workers' self-delete: records each request in [`API_REQUESTS`]
/// and answers an Operation.
fn start_api() -> std::result::Result<String, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            use std::io::{Read, Write};
            let mut buf = vec![0u8; 8192];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            let mut words = req.split_whitespace();
            let (method, path) = (words.next().unwrap_or("").to_owned(), words.next().unwrap_or("").to_owned());
            let auth = req
                .lines()
                .find_map(|l| l.strip_prefix("Authorization: ").or_else(|| l.strip_prefix("authorization: ")))
                .unwrap_or("")
                .trim()
                .to_owned();
            API_REQUESTS.lock().unwrap().push(format!("{method} {path} {auth}"));
            let body = r#"{"name":"projects/p/locations/us-central2-b/operations/op-1","done":false}"#;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(addr)
}

fn wait_for_login(lab: &Lab, alias: &str) -> std::result::Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = Command::new("ssh")
            .arg("-F")
            .arg(&lab.config)
            .args(["-o", "BatchMode=yes", alias, "true"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run ssh: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("login to {alias} failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A node as the fake API shows it, and what was asked of it.
#[derive(Debug, Default)]
pub(crate) struct FakeState {
    /// The node; `None`: absent.
    pub(crate) node: Option<VmNode>,
    /// Deletes asked.
    pub(crate) deletes: usize,
    /// Creates done.
    pub(crate) creates: usize,
    /// A worker whose address a created node lists wrong (nobody answers there).
    pub(crate) unreachable_worker: Option<usize>,
    /// Recreating a preempted node deletes it, then fails (as a create the API refuses).
    pub(crate) recreate_fails: bool,
}

/// A fake VM over the lab's sshds.
#[derive(Debug, Clone)]
pub(crate) struct FakeVm(pub(crate) Arc<Mutex<FakeState>>);

/// A READY node of the lab's workers, incarnation `id`.
pub(crate) fn ready_node(id: &str, created: bool) -> VmNode {
    let mut labels = BTreeMap::new();
    if created {
        labels.insert("theseus-created".to_owned(), "true".to_owned());
    }
    VmNode {
        name: "tpu".into(),
        resource: "projects/p/locations/us-central2-b/nodes/tpu".into(),
        id: id.into(),
        state: "READY".into(),
        health: None,
        workers: (0..WORKERS).map(|w| format!("tpu-w{w}")).collect(),
        ssh_user: None,
        labels,
        created_by_theseus: created,
    }
}

#[async_trait]
impl Vm for FakeVm {
    async fn node(&self) -> Result<Option<VmNode>> {
        Ok(self.0.lock().unwrap().node.clone())
    }

    async fn plan_creation(&self) -> Result<Option<String>> {
        let absent = self.0.lock().unwrap().node.is_none();
        Ok(absent.then(|| "TPU VM `tpu` (fake, 2 workers)".to_owned()))
    }

    async fn ensure_ready(
        &self,
        create_confirmed: bool,
        labels: &BTreeMap<String, String>,
        progress: Progress<'_>,
    ) -> Result<Ready> {
        let mut s = self.0.lock().unwrap();
        match &s.node {
            // As Cloud::ensure_ready: a preempted VM theseus created is created anew.
            Some(n) if n.is_interrupted() && !(n.created_by_theseus && create_confirmed) => {
                return Err(Error::backend("tpu(tpu)", format!("VM `tpu` is {}", n.state)));
            }
            Some(n) if !n.is_interrupted() => return Ok(Ready { node: n.clone(), created: false }),
            Some(_) if s.recreate_fails => {
                s.node = None;
                return Err(Error::backend("tpu", "hosts.tpu.version is not set"));
            }
            _ => {}
        }
        if !create_confirmed {
            return Err(Error::backend(
                "tpu(tpu)",
                "VM `tpu` does not exist and creating it was not confirmed (--yes)",
            ));
        }
        progress("creating VM `tpu`");
        s.creates += 1;
        let mut node = ready_node(&format!("created-{}", s.creates), true);
        if let Some(w) = s.unreachable_worker {
            node.workers[w] = "tpu-unreachable".into();
        }
        node.labels.extend(labels.clone());
        s.node = Some(node.clone());
        Ok(Ready { node, created: true })
    }

    async fn delete(&self, _progress: Progress<'_>) -> Result<()> {
        let mut s = self.0.lock().unwrap();
        s.deletes += 1;
        s.node = None;
        Ok(())
    }
}

/// A backend over a fake VM of the lab's workers (`node` as the API shows it first), its
/// cluster under each worker's `~`.
pub(crate) fn backend(lab: &Lab, name: &str, node: Option<VmNode>) -> (Arc<TpuBackend>, FakeVm) {
    let vm = FakeVm(Arc::new(Mutex::new(FakeState { node, ..FakeState::default() })));
    let cluster =
        ClusterConfig { root: format!("~/{name}/root"), work: format!("~/{name}/work"), ..ClusterConfig::default() };
    let control = lab.dir.join("ctl").join(name);
    let _ = std::fs::remove_dir_all(&control);
    std::fs::create_dir_all(&control).unwrap();
    let connector = Connector {
        config_file: Some(lab.config.clone()),
        control_dir: Some(control),
        connect_timeout: Some(Duration::from_secs(5)),
        settings: theseus_backend_ssh::plain::Settings {
            cancel_grace: Duration::from_secs(3),
            ..theseus_backend_ssh::plain::Settings::default()
        },
        ..Connector::default()
    };
    let spool = lab.dir.join("spool");
    let backend = TpuBackend::new("tpu", "lab", cluster, Arc::new(vm.clone()), connector).with_spool(spool);
    (Arc::new(backend), vm)
}
