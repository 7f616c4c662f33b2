//! An in-process Kubernetes API server for theseus tests: discovery, an object store with label
//! selectors and resumable watches, `pods/exec`, `pods/portforward` and `pods/log` over the real
//! wire protocols, and a
//! Volcano controller that gang-admits jobs and runs their pods as local processes.
//!
//! Not part of the shipped binary. kube-rs and kubectl talk to it over HTTPS on 127.0.0.1, as to
//! kind's API server: it makes a CA at start (`tls`), serves a certificate for `127.0.0.1` and
//! `localhost`, and authenticates client certificates it signed (CN the user, O the groups) as
//! well as bearer tokens. [`Sim::kubeconfig`] writes what kind's kubeconfig holds.
//!
//! ```no_run
//! # async fn demo() {
//! let sim = theseus_kube_sim::Sim::start(theseus_kube_sim::SimConfig::default()).await.unwrap();
//! // let mut config = kube::Config::new(sim.url().parse().unwrap());
//! // config.root_cert = Some(vec![sim.ca_der()]);
//! # }
//! ```
//!
//! Like a real API server it refuses what it should: custom resources are pruned, defaulted and
//! validated against the vendored Volcano v1.15.1 CRDs (`schema`: `422 Invalid` with field
//! paths, `Warning` headers for unknown fields, `?fieldValidation=Strict`), and Volcano's job
//! admission webhooks run on create and update (`admission`: defaults, and denials such as a
//! queue that does not exist or is not `Open`). Kubernetes' own admission plugins refuse what a
//! dispatcher can get wrong (`api_admission`: an object in a namespace that does not exist, a pod whose
//! ServiceAccount does not exist; every namespace has its `default` ServiceAccount; a pod whose
//! PriorityClass does not exist, and `spec.priority` from the class).
//! Every rule names its upstream origin.
//!
//! Divergences from a real cluster are listed on [`SimConfig`] and in the module docs of
//! `runtime` (where pod files live), `hosts` (name resolution in pods), `procs` (signals and restarts), `controller` (what the
//! Volcano job controller does), `scheduler` (what a Volcano scheduler session does, with
//! `schedconf`, `order`, `share`, `preempt`, `reclaim` and `evict`),
//! `predicates` (which node labels and taints a pod may land on), `gc` (`ttlSecondsAfterFinished`),
//! `schema` and `admission`. With `SimConfig::authz` it authenticates bearer tokens and authorises by RBAC
//! (`rbac`); client certificates authenticate with or without it. `dryRun=All` runs every check and stores nothing; a custom resource's `status` is
//! dropped on create. Queues open and close through `bus.volcano.sh` Commands, as with
//! `vcctl queue operate` (`queues`). The core objects theseus writes (Secrets, Leases, ConfigMaps) are decoded
//! and validated as their types are (`core_objects`); Pods and Services are not. `/openapi/v3` (`openapi`) tells clients that
//! the server validates fields, so `kubectl --validate=strict` leaves it to the simulator.

mod admission;
mod api_admission;
mod controller;
mod core_objects;
mod discovery;
mod enqueue;
mod events;
mod evict;
pub mod exec;
mod faults;
mod gc;
mod hosts;
mod jobpods;
mod logs;
mod openapi;
mod order;
mod portforward;
mod predicates;
mod preempt;
mod procs;
mod pty;
mod quantity;
mod queues;
mod rbac;
mod reclaim;
mod response;
mod runtime;
mod sched;
mod schedconf;
mod scheduler;
mod schema;
mod selector;
mod server;
mod share;
mod spdy;
mod status;
mod store;
mod tinyproxy;
mod tls;
mod tunnel;
mod util;
mod watch;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use faults::{Faults, Outage, RequestFault};
pub use quantity::{QuantityError, format_milli, parse_milli};
pub use rbac::Authz;
pub use schedconf::{DEFAULT_CONF as DEFAULT_SCHEDULER_CONF, PluginOption, SchedulerConf};
pub use server::ExecContext;
pub use status::{ApiError, Cause, InvalidDetails};
pub use tinyproxy::Tinyproxy;
pub use tls::{CertPair, TlsError, subject_identity};

/// One simulated node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// Node name.
    pub name: String,
    /// GPUs, reported under [`SimConfig::gpu_resource`].
    pub gpus: u32,
    /// CPU quantity, e.g. `"16"`.
    pub cpu: String,
    /// Memory quantity, e.g. `"64Gi"`.
    pub memory: String,
    /// Labels besides `kubernetes.io/hostname` and `kubernetes.io/os` (which every node has),
    /// e.g. `gpu=a100`: what a pod's `nodeSelector` and node affinity match.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The node's `spec.taints`, in order.
    pub taints: Vec<NodeTaint>,
}

/// A node taint, as `kubectl taint nodes NODE key=value:effect` sets one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTaint {
    /// The taint's key.
    pub key: String,
    /// Its value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl NodeTaint {
    /// Parses `key=value:effect` or `key:effect`, as `kubectl taint` takes a taint.
    ///
    /// # Errors
    /// A message naming the part that is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (kv, effect) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("taint `{text}` needs `:EFFECT` (e.g. `gpu=a100:NoSchedule`)"))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!(
                "taint `{text}`: the effect is NoSchedule, PreferNoSchedule or NoExecute, not `{effect}`"
            ));
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        if key.is_empty() {
            return Err(format!("taint `{text}` needs a key"));
        }
        Ok(Self { key: key.to_owned(), value: value.to_owned(), effect: effect.to_owned() })
    }
}

impl NodeConfig {
    /// A node with `gpus` GPUs, 16 CPUs and 64Gi of memory, no extra labels and no taints.
    pub fn new(name: &str, gpus: u32) -> Self {
        Self {
            name: name.to_owned(),
            gpus,
            cpu: "16".into(),
            memory: "64Gi".into(),
            labels: Default::default(),
            taints: Vec::new(),
        }
    }

    /// The node with the label `key=value` too.
    #[must_use]
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The node with one more taint.
    #[must_use]
    pub fn with_taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints.push(NodeTaint { key: key.to_owned(), value: value.to_owned(), effect: effect.to_owned() });
        self
    }
}

/// How the simulator behaves.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Port to listen on; 0 (the default) picks a free one.
    pub port: u16,
    /// Address to listen on, 127.0.0.1 by default (another loopback address, e.g. the one the
    /// host name resolves to, for clients that must not treat the server as loopback).
    pub listen: std::net::IpAddr,
    /// Names the serving certificate holds besides `127.0.0.1`, `localhost` and the
    /// in-cluster names (DNS names or IP addresses), e.g. a host name to reach it by.
    pub tls_names: Vec<String>,
    /// Nodes the scheduler places pods on (also served as `/api/v1/nodes`).
    pub nodes: Vec<NodeConfig>,
    /// Extended resource name of GPUs.
    pub gpu_resource: String,
    /// Directory for pod sandboxes and logs; `None` makes (and on drop removes) a temp dir.
    pub root: Option<PathBuf>,
    /// Cap on `terminationGracePeriodSeconds` when stopping pods.
    pub max_grace_period: Duration,
    /// Changes kept for watch resumption; older `resourceVersion`s get 410 Gone.
    pub watch_history: usize,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Host environment variables passed to pod processes (containers get no other host env).
    pub host_env_passthrough: Vec<String>,
    /// Images whose pull fails from the start (`ImagePullBackOff`).
    pub unpullable_images: HashSet<String>,
    /// Initial admission delay for every job (see [`Faults::delay_scheduling`]).
    pub scheduling_delay: Option<Duration>,
    /// PersistentVolumeClaims that do not exist: pods mounting one stay Pending, unschedulable
    /// with `persistentvolumeclaim "<name>" not found`. Every other claim exists (as a host dir).
    pub missing_pvcs: HashSet<String>,
    /// Bearer tokens and RBAC (`--token-auth-file` and `--authorization-mode=RBAC`); `None`:
    /// every request is allowed, as with an admin kubeconfig.
    pub authz: Option<Authz>,
    /// Namespaces that exist from the start, besides `default`, `kube-system`, `kube-public` and
    /// `kube-node-lease` (which a real cluster has). Creating an object in any other namespace
    /// is refused (`404`) until the namespace is created through the API.
    pub namespaces: Vec<String>,
    /// The Volcano scheduler's `volcano-scheduler.conf`: the actions a session runs and the
    /// plugin tiers; by default the v1.15.1 chart's (`enqueue, allocate, backfill`). Shared
    /// clusters add `preempt` and `reclaim` ([`SchedulerConf::parse`]).
    pub scheduler: SchedulerConf,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            port: 0,
            listen: std::net::IpAddr::from([127, 0, 0, 1]),
            tls_names: Vec::new(),
            nodes: vec![NodeConfig::new("sim-node-0", 8)],
            gpu_resource: "nvidia.com/gpu".into(),
            root: None,
            max_grace_period: Duration::from_secs(5),
            watch_history: 1000,
            bookmark_interval: Duration::from_secs(5),
            host_env_passthrough: vec!["PATH".into(), "LANG".into()],
            unpullable_images: HashSet::new(),
            scheduling_delay: None,
            missing_pvcs: HashSet::new(),
            authz: None,
            namespaces: Vec::new(),
            scheduler: SchedulerConf::default(),
        }
    }
}

/// Starting the simulator failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding the listen address failed.
    #[error("failed to bind the simulator's listener")]
    Bind(#[source] std::io::Error),
    /// The CA or the serving certificate could not be made.
    #[error("failed to set up the simulator's TLS")]
    Tls(#[from] TlsError),
    /// The sandbox root could not be created.
    #[error("failed to create the simulator root `{}`", path.display())]
    Root {
        /// The root dir.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A node quantity in the config is invalid.
    #[error("invalid node `{node}` in the simulator config")]
    Node {
        /// The node name.
        node: String,
        /// The cause.
        #[source]
        source: QuantityError,
    },
}

/// State shared by the server, the controller and the runtime.
pub(crate) struct Shared {
    pub(crate) config: SimConfig,
    pub(crate) store: store::Store,
    pub(crate) faults: Faults,
    pub(crate) runtime: runtime::Runtime,
    pub(crate) addr: SocketAddr,
    /// Every `Warning` header sent (unknown fields pruned from a client's object).
    pub(crate) warnings: std::sync::Mutex<Vec<String>>,
    /// The CA, the serving certificate and the client verifier.
    pub(crate) pki: tls::Pki,
}

/// Who a verified client certificate names: CN the user, each O a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) user: String,
    pub(crate) groups: Vec<String>,
}

/// A running simulator. Dropping it stops the server and the controller and kills every pod
/// process it started.
pub struct Sim {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    owned_root: Option<PathBuf>,
}

impl Sim {
    /// Binds [`SimConfig::listen`] (127.0.0.1) on [`SimConfig::port`] (a free port by default)
    /// and starts serving HTTPS.
    /// Creates the namespaces (`default`, the system ones and [`SimConfig::namespaces`]), the `default` queue (no capability) and one Node object
    /// per [`NodeConfig`].
    pub async fn start(config: SimConfig) -> Result<Sim, Error> {
        let listener = TcpListener::bind((config.listen, config.port)).await.map_err(Error::Bind)?;
        let addr = listener.local_addr().map_err(Error::Bind)?;
        let (root, owned_root) = match &config.root {
            Some(root) => (root.clone(), None),
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "theseus-kube-sim-{}-{}",
                    std::process::id(),
                    util::name_suffix()
                ));
                (dir.clone(), Some(dir))
            }
        };
        std::fs::create_dir_all(&root).map_err(|source| Error::Root { path: root.clone(), source })?;
        let store = store::Store::new(config.watch_history);
        seed(&store, &config)?;
        let faults = Faults::new(config.unpullable_images.clone(), config.scheduling_delay);
        let mut names = config.tls_names.clone();
        names.push(addr.ip().to_string());
        let pki = tls::Pki::generate(&names)?;
        let shared = Arc::new(Shared {
            pki,
            runtime: runtime::Runtime::new(root),
            store,
            faults,
            addr,
            config,
            warnings: Default::default(),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        let controller = tokio::spawn(controller::run(shared.clone()));
        Ok(Sim { shared, tasks: vec![accept, controller], owned_root })
    }

    /// `https://127.0.0.1:PORT`, for `kube::Config::new(url.parse()?)` (with [`Sim::ca_der`] as
    /// its `root_cert`) or a kubeconfig's `server` (see [`Sim::kubeconfig`]).
    pub fn url(&self) -> String {
        format!("https://{}", self.shared.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The CA certificate (PEM): a kubeconfig's `certificate-authority-data` is its base64.
    pub fn ca_pem(&self) -> String {
        self.shared.pki.ca_pem().to_owned()
    }

    /// The CA certificate (DER), for `kube::Config::root_cert`.
    pub fn ca_der(&self) -> Vec<u8> {
        tls::pem_to_der(self.shared.pki.ca_pem()).unwrap_or_default()
    }

    /// A client certificate and key for `user` (the CN) in `group` (the O), signed by the CA,
    /// which the simulator authenticates as that user; `system:masters` may do everything.
    ///
    /// # Errors
    /// The key or certificate could not be made.
    pub fn issue_client_cert(&self, user: &str, group: Option<&str>) -> Result<CertPair, TlsError> {
        self.shared.pki.issue_client(user, group)
    }

    /// A kubeconfig as kind writes one: one cluster (`server` and `certificate-authority-data`),
    /// one user whose credentials are the YAML mapping `user` (e.g. `{token: t}`, or
    /// [`kubeconfig_cert_user`]'s), one current context with `namespace`.
    pub fn kubeconfig(&self, user: &str, namespace: &str) -> String {
        kubeconfig_text(&self.url(), &self.ca_pem(), user, namespace)
    }

    /// The fault-injection handle (clones share state).
    pub fn faults(&self) -> Faults {
        self.shared.faults.clone()
    }

    /// Every request served so far: (method, path and query).
    pub fn requests(&self) -> Vec<(String, String)> {
        self.shared.faults.requests()
    }

    /// Every `Warning` the server sent so far, e.g. `unknown field "spec.foo"` for a field the
    /// CRD does not know (pruned, as a real API server does): a client whose objects draw none
    /// sends only what the schema knows.
    pub fn warnings(&self) -> Vec<String> {
        self.shared.warnings.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Creates the queue `name` (weight 1) or updates it, with `status.state` `state` (`Open`,
    /// `Closed`, `Closing`): the end state of `vcctl queue create` or `vcctl queue operate
    /// --action close|open`, which Volcano's queue controller reaches through a Command.
    pub fn put_queue(&self, name: &str, state: &str) {
        let queues = discovery::known::queues();
        let created = self.shared.store.create(
            queues,
            "",
            json!({"metadata": {"name": name}, "spec": {"weight": 1, "reclaimable": true}, "status": {"state": state}}),
        );
        if created.is_err() {
            let _ = self.shared.store.update(queues, "", name, |q| q["status"]["state"] = json!(state));
        }
    }

    /// Every stored object of `kind` in `api_version` (e.g. `batch.volcano.sh/v1alpha1` `Job`,
    /// `v1` `Secret`), in every namespace: what a test checks is left behind.
    pub fn objects(&self, api_version: &str, kind: &str) -> Vec<serde_json::Value> {
        match discovery::find_kind(api_version, kind) {
            Some(res) => self.shared.store.list(res, None, &selector::Selectors::default()).0,
            None => Vec::new(),
        }
    }

    /// Where pod sandboxes and logs live.
    pub fn root(&self) -> PathBuf {
        self.owned_root.clone().or_else(|| self.shared.config.root.clone()).unwrap_or_default()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.shared.runtime.kill_all();
        if let Some(root) = &self.owned_root {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// The kubeconfig `user` mapping with a client certificate, inline as kind's
/// (`client-certificate-data` and `client-key-data`).
pub fn kubeconfig_cert_user(pair: &CertPair) -> String {
    format!(
        "{{client-certificate-data: {}, client-key-data: {}}}",
        util::base64_encode(pair.cert_pem.as_bytes()),
        util::base64_encode(pair.key_pem.as_bytes())
    )
}

/// The text of [`Sim::kubeconfig`] for a server at `url` whose CA is `ca_pem`.
pub fn kubeconfig_text(url: &str, ca_pem: &str, user: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: theseus-sim\n  cluster:\n    server: {url}\n    \
         certificate-authority-data: {}\nusers:\n- name: theseus-sim\n  user: {user}\ncontexts:\n- name: theseus-sim\n  \
         context:\n    cluster: theseus-sim\n    user: theseus-sim\n    namespace: {namespace:?}\n\
         current-context: theseus-sim\n",
        util::base64_encode(ca_pem.as_bytes())
    )
}

fn seed(store: &store::Store, config: &SimConfig) -> Result<(), Error> {
    use discovery::known;
    let system = ["default", "kube-system", "kube-public", "kube-node-lease"];
    for name in system.iter().copied().chain(config.namespaces.iter().map(String::as_str)) {
        let _ =
            store.create(known::namespaces(), "", json!({"metadata": {"name": name}, "status": {"phase": "Active"}}));
        api_admission::namespace_created(store, name);
    }
    api_admission::seed_priority_classes(store);
    let _ = store.create(
        known::queues(),
        "",
        json!({"metadata": {"name": "default"}, "spec": {"weight": 1, "reclaimable": true}, "status": {"state": "Open"}}),
    );
    for node in &config.nodes {
        for q in [&node.cpu, &node.memory] {
            parse_milli(q).map_err(|source| Error::Node { node: node.name.clone(), source })?;
        }
        let resources = json!({
            "cpu": node.cpu, "memory": node.memory, "pods": "110", config.gpu_resource.as_str(): node.gpus.to_string(),
        });
        let mut labels = json!({"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux"});
        for (k, v) in &node.labels {
            labels[k] = json!(v);
        }
        let mut spec = json!({});
        if !node.taints.is_empty() {
            let taints: Vec<_> = node
                .taints
                .iter()
                .map(|t| match t.value.as_str() {
                    "" => json!({"key": t.key, "effect": t.effect}),
                    v => json!({"key": t.key, "value": v, "effect": t.effect}),
                })
                .collect();
            spec["taints"] = json!(taints);
        }
        let _ = store.create(
            known::nodes(),
            "",
            json!({
                "metadata": {"name": node.name, "labels": labels},
                "spec": spec,
                "status": {
                    "capacity": resources, "allocatable": resources,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": node.name}],
                },
            }),
        );
    }
    Ok(())
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let shared = shared.clone();
        // A refused connection is reset at once; during a hang the TLS handshake completes
        // (Go's server does it apart from the handlers) and requests go unanswered
        // (`server::handle`), as with a wedged apiserver whose etcd is gone.
        if shared.faults.current_outage() == Some(Outage::Refuse) {
            // A reset (RST), whether or not the client's TLS hello arrived: what a client sees
            // of a port nobody listens on any more, or of a load balancer without backends.
            // (Deprecated because a non-zero linger blocks the dropping thread; zero never does.)
            #[allow(deprecated)]
            let _ = stream.set_linger(Some(Duration::ZERO));
            drop(stream);
            continue;
        }
        connections.spawn(serve_connection(shared, stream));
        // Reap finished connections so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
    }
}

/// The TLS handshake (the client certificate, if any, names the peer), then HTTP/1.1 with
/// upgrades on the connection.
async fn serve_connection(shared: Arc<Shared>, stream: tokio::net::TcpStream) {
    let stream = match shared.pki.acceptor().accept(stream).await {
        Ok(stream) => stream,
        Err(err) => {
            // A client that does not trust the CA, or a certificate the CA did not sign.
            tracing::debug!(%err, "TLS handshake with a client failed");
            return;
        }
    };
    let peer = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|leaf| tls::subject_identity(leaf))
        .map(|(user, groups)| Arc::new(Identity { user: user.unwrap_or_default(), groups }));
    let service = hyper::service::service_fn(move |req| server::handle(shared.clone(), peer.clone(), req));
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).with_upgrades();
    if let Err(err) = conn.await {
        tracing::debug!(%err, "simulator connection ended with an error");
    }
}

/// A name to reach a simulator (or any loopback server) by that clients do not take for
/// loopback, so that they send it through an environment proxy (Go's rule, hence kubectl's and
/// theseus's, never proxies `localhost` or a loopback IP): the machine's host name, with the
/// loopback IPv4 address it resolves to. `None` when the host name resolves to no loopback
/// address (proxy tests then say so: they never listen beyond loopback).
pub fn loopback_host_name() -> Option<(String, std::net::IpAddr)> {
    use std::net::ToSocketAddrs as _;
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?.trim().to_owned();
    if name.is_empty() || name == "localhost" {
        return None;
    }
    let ip = (name.as_str(), 0).to_socket_addrs().ok()?.map(|a| a.ip()).find(|ip| ip.is_ipv4() && ip.is_loopback())?;
    Some((name, ip))
}
