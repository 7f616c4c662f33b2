//! A Cloud TPU API v2 simulator for theseus tests, served over HTTPS with its own CA, whose
//! workers are real: one sshd per TPU worker in its own network namespace.
//!
//! Not part of the shipped binary. Start it with [`Sim::start`] or the `theseus-tpu-sim`
//! binary, which prints one JSON line ([`SimInfo`]) when ready and serves until SIGTERM, then
//! removes every namespace and process it made.
//!
//! # What it follows
//! Google's published definitions (googleapis/googleapis; read, not run against Google):
//! - `google/cloud/tpu/v2/cloud_tpu.proto`: the `Node` resource (fields and `State` values:
//!   CREATING, READY, DELETING, PREEMPTED; `Health`; `NetworkConfig`, `NetworkEndpoint` with
//!   `AccessConfig`, `ServiceAccount`, `SchedulingConfig`), `QueuedResource` with `Tpu.NodeSpec`,
//!   `Spot`, and `QueuedResourceState` (ACCEPTED, WAITING_FOR_RESOURCES, PROVISIONING, ACTIVE,
//!   FAILED, SUSPENDED, DELETING), `AcceleratorType`, `RuntimeVersion`, `OperationMetadata`,
//!   and the HTTP bindings of the `Tpu` service (the `api` module's docs list the calls served).
//! - `google/longrunning/operations.proto`: create and delete answer an `Operation`
//!   (`name`, `metadata`, `done`, then `response` or `error`) that `GET .../operations/X` polls.
//! - `google/rpc/status.proto`, `code.proto`, `error_details.proto`: error bodies
//!   `{"error": {code, message, status, details}}` with `BadRequest` (field names),
//!   `QuotaFailure`/`ErrorInfo` (quota: HTTP 429 RESOURCE_EXHAUSTED at create), `ErrorInfo`
//!   (401 UNAUTHENTICATED reasons); operation errors as `google.rpc.Status` (stockout: code 8,
//!   "There is no more capacity in the zone ...").
//! - OAuth2 (RFC 7523 JWT bearer, refresh tokens) as Google's token endpoint answers, and the
//!   GCE metadata server (`Metadata-Flavor: Google`) on the host and in every worker.
//!
//! # Where it diverges (on purpose)
//! - Every configured zone offers every accelerator type and runtime version; any project is
//!   accepted; an unknown zone is 404 NOT_FOUND.
//! - Spot TPUs are made through queued resources only (`nodes.create` with `spot` is
//!   INVALID_ARGUMENT); one node spec per queued resource; `acceleratorConfig`, multislice,
//!   `nodes:stop`/`:start` are not modelled.
//! - Names use the project id where Google's answers sometimes carry the project number.
//! - With real workers a node id is unique per simulator, not per project and zone (409).
//! - A node's "external" IP is its internal one; both are reached only through
//!   [`SimInfo::ssh_proxy`]. Worker accounts are the machine's existing users (the guest agent
//!   would create them); each worker has its own home directories (a private mount namespace),
//!   the rest of the file system is this machine's. See the `workers` module.
//! - Timings are short and fixed (`SimConfig`): CREATING lasts `create_seconds`, DELETING
//!   `delete_seconds`; a preemption gives `preempt_grace` between SIGTERM and SIGKILL (GCE: 30 s).
//!
//! # Dirt (on by default: a lab as rough as a real site)
//! - Every API and token call takes `latency` (30 ms); with `flaky_seed` (`--flaky SEED`) about
//!   one API read in twenty answers 503 UNAVAILABLE, as Google's front ends sometimes do.
//! - Tokens expire: `expires_in` 3599 as Google's; `--token-seconds` or the admin API shortens
//!   it, and the admin API expires every token at once.
//! - Every worker's sshd shows a pre-authentication banner on every connection (on the client's
//!   stderr) and a message of the day on interactive logins, as TPU VM images do.
//! - A worker's local disk (its homes under `ROOT/workers/NODE/wN`) is wiped when the node is
//!   deleted or made again (a recreated VM is a new VM); a preempted node keeps it until it is
//!   deleted. Only absolute paths outside the workers' directories survive (a shared mount, as
//!   gcsfuse or Filestore on a real site).
//! - Worker sessions get the environment a site's TPU VM image gives gcloud and Google's client
//!   libraries: `GCE_METADATA_HOST`/`GCE_METADATA_IP`/`GCE_METADATA_ROOT` (the metadata server at
//!   169.254.169.254), `CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU` (this API on the bridge's gateway,
//!   [`SimInfo::worker_endpoint`]) and `CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE` (the CA file).
//!
//! # Its own parts
//! - The admin API (`/sim/v1/`, module `admin`): preempt, quota, capacity, tokens, key files,
//!   the request log, faults, each worker's address and processes.
//! - Workers' host keys are published as the guest agent does: `nodes:getGuestAttributes`
//!   with `queryPath: "hostkeys/"`.
//! - A simulator killed with SIGKILL cannot clean up; the next one to start removes its
//!   namespaces and processes (owners are recorded in `/run/theseus-tpu-sim`).

mod accel;
mod address;
mod admin;
mod api;
mod auth;
mod error;
mod faults;
mod lifecycle;
mod metadata;
mod model;
mod netns;
mod server;
mod sshd;
mod tls;
mod workers;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use faults::Logged;
pub use netns::WorkerError;
pub use tls::TlsError;

/// How a simulator runs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Where it writes `ca.pem` and the workers' files.
    pub root: PathBuf,
    /// HTTPS port on 127.0.0.1 (0: any free one).
    pub port: u16,
    /// Zones it serves.
    pub zones: Vec<String>,
    /// How long a node is CREATING.
    pub create_seconds: Duration,
    /// How long a node is DELETING.
    pub delete_seconds: Duration,
    /// Between SIGTERM and SIGKILL when a node is preempted.
    pub preempt_grace: Duration,
    /// Real workers (network namespaces and sshd; needs root). Without them nodes still go
    /// READY and list their endpoints, but nothing answers there.
    pub workers: bool,
    /// At most this many workers per node (`None`: as many as the accelerator type has).
    pub max_workers: Option<u32>,
    /// The project the host's metadata server names.
    pub project: String,
    /// Added to every API and token call (Google's answer in a few tens of ms).
    pub latency: Duration,
    /// With a seed, about one API read in twenty answers 503 UNAVAILABLE.
    pub flaky_seed: Option<u64>,
    /// `expires_in` of the tokens it issues (Google's: 3599 s).
    pub token_lifetime: Duration,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            root: std::env::temp_dir().join("theseus-tpu-sim"),
            port: 0,
            zones: [
                "us-central1-a",
                "us-central1-b",
                "us-central2-b",
                "us-east1-d",
                "us-east5-a",
                "us-west4-a",
                "europe-west4-a",
            ]
            .map(str::to_owned)
            .to_vec(),
            create_seconds: Duration::from_secs(3),
            delete_seconds: Duration::from_millis(500),
            preempt_grace: Duration::from_secs(2),
            workers: true,
            max_workers: None,
            project: "sim-project".into(),
            latency: Duration::from_millis(30),
            flaky_seed: None,
            token_lifetime: Duration::from_secs(3599),
        }
    }
}

/// What clients need to reach a running simulator (the JSON line the binary prints).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SimInfo {
    /// `https://127.0.0.1:PORT/` (the value for `CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU`).
    pub endpoint: String,
    /// The CA's PEM file.
    pub ca: PathBuf,
    /// The OAuth2 token endpoint (`https://127.0.0.1:PORT/token`).
    pub token_uri: String,
    /// `127.0.0.1:PORT2`: the host's metadata server (for `GCE_METADATA_HOST`).
    pub metadata_host: String,
    /// A ProxyCommand reaching worker addresses (`%h:%p`); absent without workers.
    pub ssh_proxy: Option<String>,
    /// An ssh_config `Host` pattern matching every worker address (`10.X.*`); absent
    /// without workers.
    pub ssh_host_pattern: Option<String>,
    /// The same API as workers reach it (`https://10.X.0.1/`, the bridge's gateway; the CA
    /// names that address); absent without workers.
    pub worker_endpoint: Option<String>,
    /// The short id that prefixes this simulator's network namespaces.
    pub prefix: String,
}

/// Starting the simulator failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A listening socket could not be opened.
    #[error("cannot listen on 127.0.0.1:{port}")]
    Bind { port: u16, source: std::io::Error },
    /// The root directory or the CA file could not be written.
    #[error("cannot write {path}")]
    Write { path: PathBuf, source: std::io::Error },
    /// Certificates.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The private network for workers could not be made.
    #[error("cannot make the simulator's worker network")]
    Workers(#[from] WorkerError),
}

pub(crate) struct Shared {
    pub(crate) config: SimConfig,
    state: Mutex<model::State>,
    pub(crate) auth: Arc<auth::Auth>,
    pub(crate) faults: faults::Faults,
    pub(crate) net: Option<workers::Net>,
    /// The simulator's network is `10.{net_octet}.0.0/16`.
    pub(crate) net_octet: u8,
    pub(crate) token_uri: String,
}

impl Shared {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, model::State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn workers_of(&self, accel: &accel::AcceleratorType) -> u32 {
        self.config.max_workers.map_or(accel.workers, |max| accel.workers.min(max.max(1)))
    }
}

/// A running simulator; dropping it (or [`Sim::shutdown`]) stops every worker it made.
pub struct Sim {
    shared: Arc<Shared>,
    info: SimInfo,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Sim {
    /// Starts serving (inside a tokio runtime).
    pub async fn start(config: SimConfig) -> Result<Sim, Error> {
        std::fs::create_dir_all(&config.root).map_err(|source| Error::Write { path: config.root.clone(), source })?;
        let random: u32 = rand::random();
        let prefix = format!("tps{:05x}", random & 0xfffff);
        let net_octet = 64 + ((random >> 20) % 64) as u8;
        let pki = tls::Pki::generate(&[address::gateway(net_octet)])?;
        let ca = config.root.join("ca.pem");
        std::fs::write(&ca, &pki.ca_pem).map_err(|source| Error::Write { path: ca.clone(), source })?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port))
            .await
            .map_err(|source| Error::Bind { port: config.port, source })?;
        let port = listener.local_addr().map_err(|source| Error::Bind { port: config.port, source })?.port();
        let meta_listener =
            tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.map_err(|source| Error::Bind { port: 0, source })?;
        let meta_port = meta_listener.local_addr().map_err(|source| Error::Bind { port: 0, source })?.port();
        let net =
            if config.workers { Some(workers::Net::create(&config.root, &prefix, net_octet, &ca)?) } else { None };
        // The same API for workers, on the bridge's gateway (port 443, as Google's).
        let gateway_listener = match &net {
            Some(net) => Some(net.listen_gateway(443).map_err(|source| {
                net.sweep();
                Error::Bind { port: 443, source }
            })?),
            None => None,
        };
        let endpoint = format!("https://127.0.0.1:{port}/");
        let token_uri = format!("https://127.0.0.1:{port}/token");
        let info = SimInfo {
            endpoint,
            ca,
            token_uri: token_uri.clone(),
            metadata_host: format!("127.0.0.1:{meta_port}"),
            ssh_proxy: net.as_ref().map(workers::Net::ssh_proxy),
            ssh_host_pattern: net.as_ref().map(workers::Net::host_pattern),
            worker_endpoint: net.as_ref().map(|_| format!("https://{}/", address::gateway(net_octet))),
            prefix,
        };
        let auth = Arc::new(auth::Auth::default());
        auth.set_lifetime(config.token_lifetime.as_secs().max(1));
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(model::State::default()),
            auth: auth.clone(),
            faults: faults::Faults::default(),
            net,
            net_octet,
            token_uri,
        });
        if let Some(seed) = shared.config.flaky_seed {
            shared.faults.set_flaky(seed);
        }
        let meta_ctx = Arc::new(metadata::Context { project: shared.config.project.clone(), auth, instance: None });
        let mut tasks = vec![
            tokio::spawn(server::accept_loop(listener, shared.clone(), pki.acceptor.clone())),
            tokio::spawn(metadata::serve(meta_listener, meta_ctx)),
        ];
        if let Some(std_listener) = gateway_listener {
            let listener =
                tokio::net::TcpListener::from_std(std_listener).map_err(|source| Error::Bind { port: 443, source })?;
            tasks.push(tokio::spawn(server::accept_loop(listener, shared.clone(), pki.acceptor)));
        }
        Ok(Sim { shared, info, tasks })
    }

    /// How to reach it.
    pub fn info(&self) -> &SimInfo {
        &self.info
    }

    /// The requests served so far (what `GET /sim/v1/requests` answers).
    pub fn requests(&self) -> Vec<Logged> {
        self.shared.faults.log()
    }

    /// Stops serving, stops every worker and removes the simulator's namespaces.
    pub async fn shutdown(mut self) {
        self.stop_serving();
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || teardown(&shared)).await;
    }

    fn stop_serving(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

fn teardown(shared: &Shared) {
    let Some(net) = &shared.net else { return };
    let running: Vec<workers::Running> = shared.lock().nodes.values_mut().filter_map(|n| n.workers.take()).collect();
    for r in running {
        net.down(r, Duration::ZERO, false);
    }
    net.sweep();
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop_serving();
        teardown(&self.shared);
    }
}
