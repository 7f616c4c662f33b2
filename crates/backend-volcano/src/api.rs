//! [`Cluster`]: the typed calls the Volcano backend makes, each retried (see
//! [`crate::client::retry`]) and each failure mapped to a [`VolcanoError`] that names the verb,
//! the resource and the namespace. Also the minimal Volcano `PodGroup` and `Queue` types.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::config::VolcanoHost;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::client::{self, RetryPolicy, Transient, retry_counted, transport_detail};
use crate::error::VolcanoError;
use crate::render::LABEL_RUN_ID;
use crate::types::Job;
pub use crate::types::{PodGroup, PodGroupCondition, PodGroupSpec, PodGroupStatus, Queue, QueueSpec, QueueStatus};
pub use paging::LIST_PAGE;
pub(crate) use paging::Page;
pub use pod_name::{PodName, PodNameEvents};

mod lookups;
mod paging;
mod pod_name;

/// Pod annotation naming the pod's PodGroup.
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Pod label naming the pod's Volcano job.
pub const JOB_NAME_LABEL: &str = crate::render::JOB_NAME_LABEL;

/// How many pods one page of a pod watch's LIST holds.
pub const WATCH_PAGE: u32 = 100;

/// What to read of a pod's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodLogOptions {
    /// Container (needed when the pod has several).
    pub container: Option<String>,
    /// Keep streaming until the container exits.
    pub follow: bool,
    /// Only the last lines.
    pub tail_lines: Option<i64>,
}

/// A pod log, line by line with `futures::AsyncBufReadExt::lines`.
pub type LogReader = Pin<Box<dyn futures::AsyncBufRead + Send>>;

/// Pod events of a watch, errors mapped.
pub type PodEvents = Pin<Box<dyn Stream<Item = Result<watcher::Event<Pod>, VolcanoError>> + Send>>;

/// The states of one job in a watch (`None`: it does not exist), errors mapped.
pub type JobEvents = Pin<Box<dyn Stream<Item = Result<Option<Job>, VolcanoError>> + Send>>;

/// One namespace of one cluster, with the retry policy of its calls.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
    namespace: String,
    server: String,
    context: Option<String>,
    proxy: Option<String>,
    kubeconfig: String,
    retry: RetryPolicy,
    poll_interval: Duration,
}

impl Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("server", &self.server)
            .field("context", &self.context)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// What a call acts on, for error messages.
#[derive(Debug, Clone)]
struct Target {
    verb: &'static str,
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
}

impl Target {
    fn describe(&self) -> String {
        match &self.name {
            Some(n) => format!("{} {} {n:?}", self.verb, self.resource),
            None => format!("{} {}", self.verb, self.resource),
        }
    }
}

/// A call's failure before mapping: the client's error or our per-attempt timeout.
#[derive(Debug)]
enum CallError {
    Kube(kube::Error),
    TimedOut(Duration),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Kube(e) => std::fmt::Display::fmt(e, f),
            CallError::TimedOut(d) => write!(f, "no response within {}s", d.as_secs_f64()),
        }
    }
}

impl Transient for CallError {
    fn is_transient(&self) -> bool {
        match self {
            CallError::Kube(e) => e.is_transient(),
            CallError::TimedOut(_) => true,
        }
    }
    fn retry_after(&self) -> Option<Duration> {
        match self {
            CallError::Kube(e) => e.retry_after(),
            CallError::TimedOut(_) => None,
        }
    }
}

impl Cluster {
    /// Connects to the cluster of `host` (see [`client::connect`]); calls go to its namespace,
    /// else to its kubeconfig context's, else to `default`.
    ///
    /// # Errors
    /// [`VolcanoError::Config`] when the kubeconfig cannot be used.
    pub async fn connect(host: &VolcanoHost) -> Result<Cluster, VolcanoError> {
        let conn = client::connect(host).await?;
        let retry = RetryPolicy { deadline: client::api_timeout(host)?, ..RetryPolicy::default() };
        let namespace = match &host.namespace {
            ns if !ns.is_empty() => ns.clone(),
            _ => conn.namespace.clone().unwrap_or_else(|| "default".to_owned()),
        };
        let mut cluster = Cluster::from_client(conn.client, namespace)
            .with_server(conn.server)
            .with_context(conn.context)
            .with_retry(retry);
        cluster.proxy = conn.proxy;
        cluster.kubeconfig = conn.source;
        Ok(cluster)
    }

    /// Wraps an existing client. Build it with `default_retry = false` (as [`client::client_for_url`]
    /// does) or attempts multiply.
    pub fn from_client(client: Client, namespace: impl Into<String>) -> Cluster {
        Cluster {
            client,
            namespace: namespace.into(),
            server: "the API server".to_owned(),
            context: None,
            proxy: None,
            kubeconfig: "(none)".to_owned(),
            retry: RetryPolicy::default(),
            poll_interval: Duration::from_secs(2),
        }
    }

    /// A cluster at a plain-HTTP `url` (tests, the simulator).
    ///
    /// # Errors
    /// [`VolcanoError::Config`] when `url` is not a URL.
    pub fn for_url(url: &str, namespace: impl Into<String>) -> Result<Cluster, VolcanoError> {
        Ok(Cluster::from_client(client::client_for_url(url)?, namespace).with_server(url))
    }

    /// Names the apiserver in messages.
    #[must_use]
    pub fn with_server(mut self, server: impl Into<String>) -> Cluster {
        self.server = server.into();
        self
    }

    /// Names the kubeconfig context in messages.
    #[must_use]
    pub fn with_context(mut self, context: Option<String>) -> Cluster {
        self.context = context;
        self
    }

    /// Sets the retry policy of every call.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Cluster {
        self.retry = retry;
        self
    }

    /// Sets the polling interval of waits whose watch failed.
    #[must_use]
    pub fn with_poll_interval(mut self, interval: Duration) -> Cluster {
        self.poll_interval = interval;
        self
    }

    /// The namespace of jobs, secrets and pods.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The apiserver URL (or `the API server` when unknown).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The retry policy.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Pods of the namespace (for exec, which the shipping code drives itself).
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Volcano jobs of the namespace.
    pub fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Secrets of the namespace.
    pub fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates `job`; a job of that name that carries the same `theseus.dev/run-id` is adopted.
    ///
    /// # Errors
    /// [`VolcanoError::AlreadyExists`] when another job has the name, and the mapped errors.
    pub async fn create_job(&self, job: &Job) -> Result<Job, VolcanoError> {
        self.create_or_adopt(&self.jobs(), job).await
    }

    /// Asks the API server to create `job` with `dryRun=All`: schema validation, Volcano's
    /// admission webhooks (which declare `sideEffects: NoneOnDryRun`, so they answer dry runs:
    /// a queue that does not exist or is not `Open`, a bad task) and RBAC all decide, and
    /// nothing is stored. A job of that name that exists already is not a refusal (the real
    /// create adopts it when it is this run's).
    ///
    /// # Errors
    /// The mapped errors of the refusal.
    pub async fn check_create_job(&self, job: &Job) -> Result<(), VolcanoError> {
        let api = self.jobs();
        let name = job.name_any();
        let params = PostParams { dry_run: true, field_manager: None };
        match self.call(self.target::<Job>("create (dry run)", Some(&name)), || api.create(&params, job)).await {
            Ok(_) | Err(VolcanoError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The job, `None` when it does not exist.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn get_job(&self, name: &str) -> Result<Option<Job>, VolcanoError> {
        let api = self.jobs();
        self.call(self.target::<Job>("get", Some(name)), || api.get_opt(name)).await
    }

    /// Deletes the job with background propagation (its pods and PodGroup are garbage
    /// collected). `false` when it did not exist.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn delete_job(&self, name: &str) -> Result<bool, VolcanoError> {
        self.delete(&self.jobs(), name).await
    }

    /// How long a watch may stay silent before the caller polls instead: a watch is a stream
    /// without the per-request timeout, so an API server that accepted it and never answers
    /// would hold the caller until its overall deadline.
    pub(crate) fn watch_silence(&self) -> Duration {
        self.retry.request_timeout.min(self.retry.deadline)
    }

    /// Waits until the job no longer exists, watching it by name (and polling if the watch
    /// fails).
    ///
    /// # Errors
    /// [`VolcanoError::Timeout`] after `timeout`, and the mapped errors of the polls.
    pub async fn wait_job_gone(&self, name: &str, timeout: Duration) -> Result<(), VolcanoError> {
        // A watch is a stream without the per-request timeout: an event that does not come
        // within it (an API server that accepted the request and never answers) ends the watch,
        // and polling, whose every request is bounded, takes over.
        let silence = self.watch_silence();
        let wait = async {
            let mut changes = watcher::watch_object(self.jobs(), name).boxed();
            loop {
                let Ok(next) = tokio::time::timeout(silence, changes.next()).await else {
                    tracing::debug!(job = name, "no watch event in {silence:?}; polling instead");
                    break;
                };
                let Some(change) = next else { break };
                match change {
                    Ok(None) => return Ok(()),
                    Ok(Some(_)) => {}
                    Err(e) => {
                        tracing::debug!(job = name, error = %e, "watch failed; polling instead");
                        break;
                    }
                }
            }
            loop {
                if self.get_job(name).await?.is_none() {
                    return Ok(());
                }
                tokio::time::sleep(self.poll_interval).await;
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| VolcanoError::Timeout { what: format!("job {name:?} to be deleted"), after: timeout })?
    }

    /// Jobs matching `label_selector` (`""`: all).
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_jobs(&self, label_selector: &str) -> Result<Vec<Job>, VolcanoError> {
        self.list(&self.jobs(), &labels(label_selector)).await
    }

    /// Creates `secret`; one of that name with the same `theseus.dev/run-id` is adopted.
    ///
    /// # Errors
    /// [`VolcanoError::AlreadyExists`] when another secret has the name, and the mapped errors.
    pub async fn create_secret(&self, secret: &Secret) -> Result<Secret, VolcanoError> {
        self.create_or_adopt(&self.secrets(), secret).await
    }

    /// Sets the secret's owner (a merge patch of `metadata.ownerReferences`), so deleting the
    /// owner deletes the secret.
    ///
    /// # Errors
    /// [`VolcanoError::NotFound`] when the secret is gone, and the mapped errors.
    pub async fn set_secret_owner(&self, name: &str, owner: OwnerReference) -> Result<Secret, VolcanoError> {
        self.set_owner(&self.secrets(), name, owner).await
    }

    /// Services of the namespace.
    pub fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates `service`; one of that name with the same `theseus.dev/run-id` is adopted.
    ///
    /// # Errors
    /// [`VolcanoError::AlreadyExists`] when another service has the name, and the mapped errors.
    pub async fn create_service(&self, service: &Service) -> Result<Service, VolcanoError> {
        self.create_or_adopt(&self.services(), service).await
    }

    /// Sets the service's owner, as [`Cluster::set_secret_owner`] does the secret's.
    ///
    /// # Errors
    /// [`VolcanoError::NotFound`] when the service is gone, and the mapped errors.
    pub async fn set_service_owner(&self, name: &str, owner: OwnerReference) -> Result<Service, VolcanoError> {
        self.set_owner(&self.services(), name, owner).await
    }

    /// Deletes the service; `false` when it did not exist.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn delete_service(&self, name: &str) -> Result<bool, VolcanoError> {
        self.delete(&self.services(), name).await
    }

    /// Services matching `label_selector`.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_services(&self, label_selector: &str) -> Result<Vec<Service>, VolcanoError> {
        self.list(&self.services(), &labels(label_selector)).await
    }

    /// A merge patch of `metadata.ownerReferences`.
    async fn set_owner<K>(&self, api: &Api<K>, name: &str, owner: OwnerReference) -> Result<K, VolcanoError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
        let params = PatchParams::default();
        let patch = Patch::Merge(&patch);
        let target = self.target::<K>("patch", Some(name));
        self.call(target, || api.patch(name, &params, &patch)).await
    }

    /// Deletes the secret; `false` when it did not exist.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn delete_secret(&self, name: &str) -> Result<bool, VolcanoError> {
        self.delete(&self.secrets(), name).await
    }

    /// ConfigMaps of the namespace (the code store's index, see `prebuilt.rs`).
    pub fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The ConfigMap, `None` when it does not exist.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn get_config_map(&self, name: &str) -> Result<Option<ConfigMap>, VolcanoError> {
        let api = self.config_maps();
        self.call(self.target::<ConfigMap>("get", Some(name)), || api.get_opt(name)).await
    }

    /// Creates the ConfigMap; 409 is [`VolcanoError::AlreadyExists`].
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn create_config_map(&self, map: &ConfigMap) -> Result<ConfigMap, VolcanoError> {
        let api = self.config_maps();
        let params = PostParams::default();
        self.call(self.target::<ConfigMap>("create", Some(&map.name_any())), || api.create(&params, map)).await
    }

    /// ConfigMaps matching `label_selector`.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_config_maps(&self, label_selector: &str) -> Result<Vec<ConfigMap>, VolcanoError> {
        self.list(&self.config_maps(), &ListParams::default().labels(label_selector)).await
    }

    /// Creates a run's ConfigMap (its own files, see `prebuilt.rs`); one of that name with the
    /// same `theseus.dev/run-id` is adopted, as [`Cluster::create_secret`] does.
    ///
    /// # Errors
    /// [`VolcanoError::AlreadyExists`] when another ConfigMap has the name, and the mapped errors.
    pub async fn create_run_config_map(&self, map: &ConfigMap) -> Result<ConfigMap, VolcanoError> {
        self.create_or_adopt(&self.config_maps(), map).await
    }

    /// Sets the ConfigMap's owner, as [`Cluster::set_secret_owner`] does the secret's.
    ///
    /// # Errors
    /// [`VolcanoError::NotFound`] when the ConfigMap is gone, and the mapped errors.
    pub async fn set_config_map_owner(&self, name: &str, owner: OwnerReference) -> Result<ConfigMap, VolcanoError> {
        self.set_owner(&self.config_maps(), name, owner).await
    }

    /// ConfigMaps matching `label_selector`, e.g. the runs' own files (`theseus.dev/run-id`).
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_run_config_maps(&self, label_selector: &str) -> Result<Vec<ConfigMap>, VolcanoError> {
        self.list(&self.config_maps(), &labels(label_selector)).await
    }

    /// Deletes the ConfigMap; `false` when it did not exist.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn delete_config_map(&self, name: &str) -> Result<bool, VolcanoError> {
        self.delete(&self.config_maps(), name).await
    }

    /// Name claims (`coordination.k8s.io/v1` Leases) of the namespace.
    pub fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates the lease; 409 is [`VolcanoError::AlreadyExists`] (no adoption: a claim is
    /// judged by its holder, see [`crate::claim`]).
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn create_lease(&self, lease: &Lease) -> Result<Lease, VolcanoError> {
        let api = self.leases();
        let params = PostParams::default();
        self.call(self.target::<Lease>("create", Some(&lease.name_any())), || api.create(&params, lease)).await
    }

    /// The lease, `None` when it does not exist.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn get_lease(&self, name: &str) -> Result<Option<Lease>, VolcanoError> {
        let api = self.leases();
        self.call(self.target::<Lease>("get", Some(name)), || api.get_opt(name)).await
    }

    /// Replaces the lease (`PUT`); its `metadata.resourceVersion` is the precondition, so a
    /// lease changed since it was read gives [`VolcanoError::Conflict`].
    ///
    /// # Errors
    /// [`VolcanoError::Conflict`], [`VolcanoError::NotFound`] and the mapped errors.
    pub async fn replace_lease(&self, lease: &Lease) -> Result<Lease, VolcanoError> {
        let api = self.leases();
        let name = lease.name_any();
        let params = PostParams::default();
        self.call(self.target::<Lease>("update", Some(&name)), || api.replace(&name, &params, lease)).await
    }

    /// Deletes the lease only if its `resourceVersion` is still `resource_version`; `false`
    /// when it was gone or had changed (someone else holds it now).
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn delete_lease_if(&self, name: &str, resource_version: &str) -> Result<bool, VolcanoError> {
        let api = self.leases();
        let params = DeleteParams {
            preconditions: Some(Preconditions { resource_version: Some(resource_version.to_owned()), uid: None }),
            ..DeleteParams::background()
        };
        match self.call(self.target::<Lease>("delete", Some(name)), || api.delete(name, &params)).await {
            Ok(_) => Ok(true),
            Err(VolcanoError::NotFound { .. } | VolcanoError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Leases matching `label_selector`.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_leases(&self, label_selector: &str) -> Result<Vec<Lease>, VolcanoError> {
        self.list(&self.leases(), &labels(label_selector)).await
    }

    /// Deletes a pod; `false` when it was already gone.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn delete_pod(&self, name: &str) -> Result<bool, VolcanoError> {
        self.delete(&self.pods(), name).await
    }

    /// Secrets matching `label_selector`.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_secrets(&self, label_selector: &str) -> Result<Vec<Secret>, VolcanoError> {
        self.list(&self.secrets(), &labels(label_selector)).await
    }

    /// The pod, `None` when it does not exist.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn get_pod(&self, name: &str) -> Result<Option<Pod>, VolcanoError> {
        let api = self.pods();
        self.call(self.target::<Pod>("get", Some(name)), || api.get_opt(name)).await
    }

    /// Pods of the namespace matching `label_selector`.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn list_pods(&self, label_selector: &str) -> Result<Vec<Pod>, VolcanoError> {
        self.list(&self.pods(), &labels(label_selector)).await
    }

    /// Pods of every namespace matching `field_selector` (e.g. `spec.nodeName=n1`).
    ///
    /// # Errors
    /// The mapped errors (listing pods cluster-wide needs a ClusterRole).
    pub async fn list_all_pods(&self, field_selector: &str) -> Result<Vec<Pod>, VolcanoError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        self.list(&api, &fields(field_selector)).await
    }

    /// Watches the pods matching `label_selector`: a LIST (in pages of [`WATCH_PAGE`] pods, so
    /// that a big gang's pods are never all held at once, where the API server pages), then
    /// WATCH events, re-listing with backoff after errors (which are still reported as items).
    pub fn watch_pods(&self, label_selector: &str) -> PodEvents {
        let config = watcher::Config::default().labels(label_selector).page_size(WATCH_PAGE);
        let this = self.clone();
        let target = self.target::<Pod>("watch", None);
        watcher(self.pods(), config).default_backoff().map_err(move |e| this.map_watch_error(e, &target)).boxed()
    }

    /// Watches the job `name`: its state on every change (`None` once it does not exist), the
    /// watch resumed from its `resourceVersion` after a cut and re-listed after `410 Gone`, with
    /// backoff after errors (which are still reported as items).
    pub fn watch_job(&self, name: &str) -> JobEvents {
        let this = self.clone();
        let target = self.target::<Job>("watch", Some(name));
        watcher::watch_object(self.jobs(), name)
            .default_backoff()
            .map_err(move |e| this.map_watch_error(e, &target))
            .boxed()
    }

    /// Events about the object `kind`/`name` in the namespace, as the apiserver orders them.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn events_for(&self, kind: &str, name: &str) -> Result<Vec<Event>, VolcanoError> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = format!("involvedObject.name={name},involvedObject.kind={kind}");
        self.list(&api, &fields(&selector)).await
    }

    /// Events about objects of `kind` in the namespace whose name `wanted` accepts, from one
    /// paged LIST (rather than a request per object).
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn events_for_each(&self, kind: &str, wanted: impl Fn(&str) -> bool) -> Result<Vec<Event>, VolcanoError> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut events = Vec::new();
        self.list_paged(&api, &fields(&format!("involvedObject.kind={kind}")), |page| match page {
            Page::Restart => events.clear(),
            Page::Items(items) => {
                events.extend(items.into_iter().filter(|e| e.involved_object.name.as_deref().is_some_and(&wanted)));
            }
        })
        .await?;
        Ok(events)
    }

    /// The PodGroup of the job `job`: named after the job (older Volcano), else the group named
    /// by its pods' `scheduling.k8s.io/group-name` annotation, else the group the job owns
    /// (newer Volcano names it `<job>-<uid>`).
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn get_podgroup(&self, job: &str) -> Result<Option<PodGroup>, VolcanoError> {
        let api: Api<PodGroup> = Api::namespaced(self.client.clone(), &self.namespace);
        if let Some(group) = self.call(self.target::<PodGroup>("get", Some(job)), || api.get_opt(job)).await? {
            return Ok(Some(group));
        }
        let pods = self.list_pods(&format!("{JOB_NAME_LABEL}={job}")).await?;
        let annotated = pods.iter().find_map(|p| p.annotations().get(GROUP_NAME_ANNOTATION).cloned());
        if let Some(name) = annotated.filter(|n| n != job) {
            return self.call(self.target::<PodGroup>("get", Some(&name)), || api.get_opt(&name)).await;
        }
        let groups = self.list(&api, &ListParams::default()).await?;
        Ok(groups.into_iter().find(|g| g.owner_references().iter().any(|o| o.kind == "Job" && o.name == job)))
    }

    /// The queue, `None` when it does not exist.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn get_queue(&self, name: &str) -> Result<Option<Queue>, VolcanoError> {
        let api: Api<Queue> = Api::all(self.client.clone());
        let target = Target { namespace: None, ..self.target::<Queue>("get", Some(name)) };
        self.call(target, || api.get_opt(name)).await
    }

    /// Nodes matching `label_selector`.
    ///
    /// # Errors
    /// The mapped errors (listing nodes needs a ClusterRole).
    pub async fn list_nodes(&self, label_selector: &str) -> Result<Vec<Node>, VolcanoError> {
        let api: Api<Node> = Api::all(self.client.clone());
        self.list(&api, &labels(label_selector)).await
    }

    /// Opens the log of `pod`. Opening is retried; a broken stream is the caller's to reopen.
    ///
    /// # Errors
    /// The mapped errors.
    pub async fn log_stream(&self, pod: &str, options: &PodLogOptions) -> Result<LogReader, VolcanoError> {
        let api = self.pods();
        let params = LogParams {
            container: options.container.clone(),
            follow: options.follow,
            tail_lines: options.tail_lines,
            ..LogParams::default()
        };
        let target = Target { resource: "pods/log".into(), ..self.target::<Pod>("get", Some(pod)) };
        let reader = self.call(target, || api.log_stream(pod, &params)).await?;
        Ok(Box::pin(reader))
    }

    /// Creates `obj` in the namespace. On 409 the existing object is read: when it carries the
    /// same non-empty `theseus.dev/run-id` label it is ours (an earlier attempt of this run
    /// created it) and is returned.
    ///
    /// # Errors
    /// [`VolcanoError::AlreadyExists`] when the existing object is not ours, and the mapped errors.
    pub async fn create_or_adopt<K>(&self, api: &Api<K>, obj: &K) -> Result<K, VolcanoError>
    where
        K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug,
    {
        let name = obj.name_any();
        let params = PostParams::default();
        let created = self.call(self.target::<K>("create", Some(&name)), || api.create(&params, obj)).await;
        let Err(exists @ VolcanoError::AlreadyExists { .. }) = created else {
            return created;
        };
        let Some(run_id) = obj.labels().get(LABEL_RUN_ID).filter(|r| !r.is_empty()) else {
            return Err(exists);
        };
        let existing = self.call(self.target::<K>("get", Some(&name)), || api.get_opt(&name)).await?;
        match existing {
            Some(found) if found.labels().get(LABEL_RUN_ID) == Some(run_id) => {
                tracing::debug!(name, run_id, "adopted an object created by an earlier attempt");
                Ok(found)
            }
            _ => Err(exists),
        }
    }

    async fn delete<K>(&self, api: &Api<K>, name: &str) -> Result<bool, VolcanoError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let params = DeleteParams::background();
        // A delete without preconditions is idempotent: a 409 (the server's own update of the
        // object raced with it, e.g. a controller writing status) is tried again, a few times.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.call(self.target::<K>("delete", Some(name)), || api.delete(name, &params)).await {
                Ok(_) => return Ok(true),
                Err(VolcanoError::NotFound { .. }) => return Ok(false),
                Err(VolcanoError::Conflict { .. }) if attempt < 4 => {
                    tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn target<K: Resource<DynamicType = ()>>(&self, verb: &'static str, name: Option<&str>) -> Target {
        let plural = K::plural(&());
        let group = K::group(&());
        let resource = if group.is_empty() { plural.into_owned() } else { format!("{plural}.{group}") };
        Target { verb, resource, namespace: Some(self.namespace.clone()), name: name.map(str::to_owned) }
    }

    /// Runs `op` with the per-attempt timeout and the retry policy, mapping the final error.
    async fn call<T, F, Fut>(&self, target: Target, mut op: F) -> Result<T, VolcanoError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let deadline = self.retry.deadline;
        let timeout = self.retry.request_timeout.min(deadline);
        let described = target.describe();
        let attempts = retry_counted(&self.retry, &described, || {
            let attempt = op();
            async move {
                match tokio::time::timeout(timeout, attempt).await {
                    Ok(res) => res.map_err(CallError::Kube),
                    Err(_) => Err(CallError::TimedOut(timeout)),
                }
            }
        });
        // The whole call, retries included, ends at the deadline.
        let Ok((res, attempts)) = tokio::time::timeout(deadline, attempts).await else {
            return Err(self.no_answer(&target, deadline));
        };
        res.map_err(|e| self.map_error(e, &target, attempts))
    }

    fn map_error(&self, err: CallError, target: &Target, attempts: u32) -> VolcanoError {
        let err = match err {
            CallError::Kube(e) => e,
            CallError::TimedOut(after) => {
                let _ = attempts;
                return self.no_answer(target, after);
            }
        };
        let status = match err {
            kube::Error::Api(status) => status,
            other => {
                if let Some(failed) = crate::diagnose::find_cause::<crate::credential::CredentialFailed>(&other) {
                    return VolcanoError::Credential {
                        source_name: self.kubeconfig.clone(),
                        context: self.context.clone(),
                        message: failed.0.clone(),
                    };
                }
                let chain = crate::diagnose::chain_text(&other);
                if let Some(d) = crate::diagnose::diagnose(&chain, &self.server, self.proxy.as_deref()) {
                    return VolcanoError::Connect(Box::new(crate::error::ConnectFailure {
                        verb: target.verb.into(),
                        resource: target.resource.clone(),
                        server: self.server.clone(),
                        via: self.proxy.clone(),
                        problem: d.problem,
                        fix: d.fix,
                    }));
                }
                return match transport_detail(&other) {
                    Some(detail) => self.transport(target, attempts, detail, Some(Box::new(other))),
                    None => VolcanoError::Client {
                        verb: target.verb.into(),
                        resource: target.resource.clone(),
                        namespace: target.namespace.clone(),
                        source: Box::new(other),
                    },
                };
            }
        };
        let name = target.name.clone().unwrap_or_default();
        match status.code {
            401 => VolcanoError::Unauthorized {
                context: self.context.clone(),
                server: self.server.clone(),
                message: status.message,
            },
            403 => VolcanoError::Forbidden {
                verb: target.verb.into(),
                resource: target.resource.clone(),
                namespace: target.namespace.clone(),
                message: status.message,
            },
            404 if target.name.is_some() => {
                VolcanoError::NotFound { resource: target.resource.clone(), name, namespace: target.namespace.clone() }
            }
            409 if status.reason == "AlreadyExists" || target.verb == "create" => {
                VolcanoError::AlreadyExists { kind: target.resource.clone(), name, namespace: target.namespace.clone() }
            }
            409 => VolcanoError::Conflict {
                verb: target.verb.into(),
                resource: target.resource.clone(),
                name,
                namespace: target.namespace.clone(),
            },
            code => VolcanoError::Api {
                verb: target.verb.into(),
                resource: target.resource.clone(),
                namespace: target.namespace.clone(),
                code,
                message: status.message,
            },
        }
    }

    fn no_answer(&self, target: &Target, after: Duration) -> VolcanoError {
        VolcanoError::NoAnswer {
            verb: target.verb.into(),
            resource: target.resource.clone(),
            server: self.server.clone(),
            after,
        }
    }

    fn map_watch_error(&self, err: watcher::Error, target: &Target) -> VolcanoError {
        match err {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => self.map_error(CallError::Kube(e), target, 1),
            watcher::Error::WatchError(status) => self.map_error(CallError::Kube(kube::Error::Api(status)), target, 1),
            watcher::Error::NoResourceVersion => VolcanoError::Api {
                verb: target.verb.into(),
                resource: target.resource.clone(),
                namespace: target.namespace.clone(),
                code: 0,
                message: "no metadata.resourceVersion in the list".into(),
            },
        }
    }

    fn transport(
        &self,
        target: &Target,
        attempts: u32,
        detail: String,
        source: Option<Box<kube::Error>>,
    ) -> VolcanoError {
        VolcanoError::Transport {
            verb: target.verb.into(),
            resource: target.resource.clone(),
            server: self.server.clone(),
            attempts,
            detail,
            source,
        }
    }
}

fn labels(selector: &str) -> ListParams {
    if selector.is_empty() { ListParams::default() } else { ListParams::default().labels(selector) }
}

fn fields(selector: &str) -> ListParams {
    if selector.is_empty() { ListParams::default() } else { ListParams::default().fields(selector) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_parses_string_and_number_quantities() {
        let queue: Queue = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"capability": {"nvidia.com/gpu": "8", "cpu": 64}, "weight": 1, "reclaimable": true},
            "status": {"state": "Open", "allocated": {"nvidia.com/gpu": "3"}, "running": 1}
        }))
        .unwrap();
        assert_eq!(queue.spec.capability["cpu"], "64");
        assert_eq!(queue.spec.capability["nvidia.com/gpu"], "8");
        let status = queue.status.unwrap();
        assert_eq!(status.allocated["nvidia.com/gpu"], "3");
        assert_eq!(status.state.as_deref(), Some("Open"));
    }

    #[test]
    fn podgroup_parses_an_unschedulable_condition() {
        let group: PodGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "j-1234", "namespace": "ml"},
            "spec": {"minMember": 2, "queue": "research"},
            "status": {"phase": "Pending", "conditions": [{
                "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                "message": "0/3 nodes are unavailable: 3 Insufficient nvidia.com/gpu",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "transitionID": "x"
            }]}
        }))
        .unwrap();
        let status = group.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert_eq!(status.conditions[0].type_, "Unschedulable");
        assert!(status.conditions[0].message.as_deref().unwrap().contains("Insufficient"));
    }
}
