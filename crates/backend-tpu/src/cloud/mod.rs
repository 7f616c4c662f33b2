//! The TPU VM of one host over the API ([`Cloud`]): whether it exists and in what state, what
//! creating it would make (the line `plan` shows), making it `READY` (create after
//! confirmation, wait, recreate after a preemption), deleting it, and the VMs theseus created (for
//! `gc`). The host's name is the node id.

mod lifecycle;
pub mod node;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;

pub use node::{Node, WorkerAddr, labels, node_to_create};

use crate::api::transport::Http;
use crate::api::{Client, ErrorKind, GOOGLE_ENDPOINT, Retry, TokenSource, TpuError};
use crate::auth::{Auth, Env};
use crate::config::{TpuSettings, check_endpoint, shape};

/// Where progress lines go (`creating TPU VM t (v4-8, 1 worker, spot) in us-central2-b: CREATING`).
pub type Progress<'a> = dyn Fn(&str) + Send + Sync + 'a;

/// What [`Cloud::ensure_ready`] found or made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// The `READY` VM.
    pub node: Node,
    /// Whether this call created it (theseus deletes it when the job ends, unless `--keep`).
    pub created: bool,
}

/// How often and how long the lifecycle waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// Between two polls of an operation, a queued resource or a node.
    pub poll: Duration,
    /// Longest wait for a VM to become `READY` (or a queued resource to be served).
    pub ready: Duration,
    /// Longest wait for a deletion.
    pub delete: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Waits { poll: Duration::from_secs(5), ready: Duration::from_secs(1800), delete: Duration::from_secs(600) }
    }
}

/// The TPU VM of one host. Credentials and the project are found at the first request.
#[derive(Debug)]
pub struct Cloud {
    name: String,
    settings: TpuSettings,
    endpoint: String,
    http: Http,
    tokens: Arc<dyn TokenSource>,
    auth: Option<Arc<Auth>>,
    client: OnceCell<Client>,
    waits: Waits,
    retry: Retry,
}

impl Cloud {
    /// The VM of host `name` with `settings`, reading the process's environment for the
    /// endpoint override, the extra CA and the credentials.
    ///
    /// # Errors
    /// A bad endpoint or CA file (see [`Cloud::with_env`]).
    pub fn new(name: &str, settings: &TpuSettings) -> Result<Cloud, TpuError> {
        Cloud::with_env(name, settings, Env::from_process())
    }

    /// As [`Cloud::new`], with the environment given (tests).
    ///
    /// # Errors
    /// The endpoint (host `api_endpoint`, else `CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU`) is not an
    /// https URL, or the CA file (`CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE`, else `SSL_CERT_FILE`)
    /// cannot be read.
    pub fn with_env(name: &str, settings: &TpuSettings, env: Env) -> Result<Cloud, TpuError> {
        let http = Http::new(env.extra_ca().as_deref(), Some(hyper_util::client::proxy::matcher::Matcher::from_env()))?;
        let auth = Arc::new(Auth::new(env.clone(), http.clone()));
        let mut cloud = Cloud::with_tokens(name, settings, &env, http, auth.clone())?;
        cloud.auth = Some(auth);
        Ok(cloud)
    }

    /// As [`Cloud::with_env`], with a token source of the caller's (tests) and no project lookup:
    /// the host must name its `project`.
    ///
    /// # Errors
    /// See [`Cloud::with_env`].
    pub fn with_tokens(
        name: &str,
        settings: &TpuSettings,
        env: &Env,
        http: Http,
        tokens: Arc<dyn TokenSource>,
    ) -> Result<Cloud, TpuError> {
        let (endpoint, origin) = match (&settings.api_endpoint, env.get("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU")) {
            (Some(e), _) => (e.clone(), format!("hosts.{name}.api_endpoint")),
            (None, Some(e)) => (e.to_owned(), "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU".to_owned()),
            (None, None) => (GOOGLE_ENDPOINT.to_owned(), String::new()),
        };
        check_endpoint(&endpoint).map_err(|e| TpuError::new(ErrorKind::Invalid, format!("{origin}: {e}")))?;
        Ok(Cloud {
            name: name.to_owned(),
            settings: settings.clone(),
            endpoint,
            http,
            tokens,
            auth: None,
            client: OnceCell::new(),
            waits: Waits::default(),
            retry: Retry::default(),
        })
    }

    /// The same VM with other waits (tests poll every few milliseconds).
    pub fn with_waits(mut self, waits: Waits) -> Cloud {
        self.waits = waits;
        self
    }

    /// The same VM with another retry policy of API requests (and of token requests).
    pub fn with_retry(mut self, retry: Retry) -> Cloud {
        self.retry = retry;
        if let Some(auth) = &self.auth {
            auth.set_retry(retry);
        }
        self
    }

    /// The node id (the host's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host's settings.
    pub fn settings(&self) -> &TpuSettings {
        &self.settings
    }

    /// The API client, made at the first call: the project is the host's `project`, else the
    /// one the credentials or gcloud name.
    ///
    /// # Errors
    /// No project anywhere, or the credentials cannot be found.
    pub async fn client(&self) -> Result<&Client, TpuError> {
        self.client
            .get_or_try_init(|| async {
                let project = match (&self.settings.project, &self.auth) {
                    (Some(p), _) => p.clone(),
                    (None, Some(auth)) => auth.project().await?.ok_or_else(|| {
                        TpuError::new(
                            ErrorKind::Invalid,
                            format!(
                                "hosts.{}.project is not set and neither the credentials nor gcloud name a project; set `project:` on the host (or `gcloud config set project ID`)",
                                self.name
                            ),
                        )
                    })?,
                    (None, None) => {
                        return Err(TpuError::new(
                            ErrorKind::Invalid,
                            format!("hosts.{}.project is not set; set `project:` on the host", self.name),
                        ));
                    }
                };
                let client = Client::new(
                    self.http.clone(),
                    &self.endpoint,
                    &project,
                    &self.settings.zone,
                    self.tokens.clone(),
                    self.settings.api_timeout(),
                )
                .with_retry(self.retry);
                Ok(client)
            })
            .await
    }

    /// The VM, when it exists.
    ///
    /// # Errors
    /// The API failed or refused.
    pub async fn node(&self) -> Result<Option<Node>, TpuError> {
        Ok(self.client().await?.get_node(&self.name).await?.map(Node::from))
    }

    /// The line `plan` and `--dry-run` show when the VM does not exist and `submit` would
    /// create it: `TPU VM t (v4-32: 16 chips on 4 workers, spot) in us-central2-b of project p`;
    /// `None` when it exists (whatever its state: a preempted VM theseus recreates is named by
    /// [`Cloud::ensure_ready`]'s progress).
    ///
    /// # Errors
    /// The API failed, or the host cannot create a VM (no `version`).
    pub async fn plan_creation(&self) -> Result<Option<String>, TpuError> {
        match self.node().await? {
            Some(node) if !node.is_lost() => Ok(None),
            _ => {
                self.check_creatable()?;
                let project = self.client().await?.project().to_owned();
                Ok(Some(self.creation_text(&project)))
            }
        }
    }

    /// What a creation makes, in words (see [`Cloud::plan_creation`]).
    fn creation_text(&self, project: &str) -> String {
        let s = &self.settings;
        let size = match shape(&s.accelerator_type) {
            Ok(shape) => format!(
                "{}: {} chip{} on {} worker{}",
                s.accelerator_type,
                shape.chips,
                if shape.chips == 1 { "" } else { "s" },
                shape.workers,
                if shape.workers == 1 { "" } else { "s" }
            ),
            Err(_) => s.accelerator_type.clone(),
        };
        format!(
            "TPU VM {} ({size}, {}, runtime {}) in {} of project {project}",
            self.name,
            s.pricing(),
            s.version,
            s.zone
        )
    }

    /// Whether the host's settings can create a VM.
    fn check_creatable(&self) -> Result<(), TpuError> {
        if self.settings.version.trim().is_empty() {
            return Err(TpuError::new(
                ErrorKind::Invalid,
                format!(
                    "hosts.{}.version is not set: theseus needs the TPU runtime version to create the VM (e.g. `version: tpu-ubuntu2204-base`, or `--tpu-version`)",
                    self.name
                ),
            ));
        }
        Ok(())
    }

    /// The VMs of this host's project and zone labelled `theseus-created=true` (for `gc`),
    /// with the spot VMs still queued (a queued resource whose VM is not made yet, e.g. when
    /// the client was killed while it waited): those are listed as their node would be, in
    /// state `QUEUED` (and [`Cloud::delete`] of a spot host deletes them).
    ///
    /// # Errors
    /// The API failed or refused.
    pub async fn created_nodes(&self) -> Result<Vec<Node>, TpuError> {
        let client = self.client().await?;
        let mut nodes: Vec<Node> =
            client.list_nodes().await?.into_iter().map(Node::from).filter(|n| n.created_by_theseus).collect();
        // An API without queued resources (or a project that may not list them) has none queued.
        let queued = match client.list_queued_resources().await {
            Ok(queued) => queued,
            Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::Invalid | ErrorKind::PermissionDenied) => {
                Vec::new()
            }
            Err(e) => return Err(e),
        };
        for resource in queued {
            let Some(node) = node::queued_node(&resource) else { continue };
            if node.created_by_theseus && !nodes.iter().any(|n| n.name == node.name) {
                nodes.push(node);
            }
        }
        Ok(nodes)
    }

    /// Makes the VM `READY`: absent → create it (refused unless `create_confirmed`), with
    /// `labels` (plus `theseus-created=true`) and `ssh_keys` (`user:ssh-ed25519 AAAA...`
    /// lines) in its `ssh-keys` metadata; `CREATING`, `STARTING`, `RESTARTING`, `REPAIRING` →
    /// wait, telling `progress` the API's state and health words; `PREEMPTED`/`TERMINATED`/`UNKNOWN` →
    /// delete and create again when theseus created it (and `create_confirmed`), else refused;
    /// `READY` → used as it is. A spot VM is created through a queued resource. A creation that
    /// fails (quota, no capacity, timeout) leaves nothing behind: what it made is deleted.
    ///
    /// # Errors
    /// One line: not confirmed, quota, no capacity, permission, a VM in a state theseus does not
    /// touch (`STOPPED`, a preempted VM it did not create), the API failed.
    pub async fn ensure_ready(
        &self,
        create_confirmed: bool,
        labels: &BTreeMap<String, String>,
        ssh_keys: &[String],
        progress: &Progress<'_>,
    ) -> Result<Ensured, TpuError> {
        lifecycle::ensure_ready(self, create_confirmed, labels, ssh_keys, progress).await
    }

    /// Deletes the VM (through its queued resource when one made it) and waits until it is
    /// gone; `Ok(false)` when there was none. It does not ask whether theseus created it: the
    /// caller does ([`Node::created_by_theseus`]).
    ///
    /// # Errors
    /// The API failed or refused, or the deletion did not end within the wait.
    pub async fn delete(&self, progress: &Progress<'_>) -> Result<bool, TpuError> {
        lifecycle::delete(self, progress).await
    }
}

/// The login line of `user` for the VM's `ssh-keys` metadata (`user:ssh-ed25519 AAAA... c`),
/// from the first public key found in `home/.ssh`: `google_compute_engine.pub` (gcloud's own),
/// `id_ed25519.pub`, `id_ecdsa.pub`, `id_rsa.pub`.
pub fn ssh_key_line(user: &str, home: &Path) -> Option<String> {
    ["google_compute_engine.pub", "id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub"].iter().find_map(|file| {
        let text = std::fs::read_to_string(home.join(".ssh").join(file)).ok()?;
        let key = text.lines().map(str::trim).find(|l| l.starts_with("ssh-") || l.starts_with("ecdsa-"))?;
        Some(format!("{user}:{key}"))
    })
}
