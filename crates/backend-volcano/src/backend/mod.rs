//! [`VolcanoBackend`]: the `Backend` of a `type: volcano` host. The connection to the cluster is
//! made on first use, so rendering (`--dry-run`) and layout need no cluster and no kubeconfig.
//! [`submit`] is the submit's flow (claim, ship through the helper, create the gang).

mod gone;
pub(crate) mod submit;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use theseus_core::availability::Availability;
use theseus_core::backend::{
    Backend, DryRunDocument, JobHandle, JobState, JobStatus, LogOptions, LogStream, PreparedJob, RunLayout,
    SubmitOptions,
};
use theseus_core::bootstrap::{DataDirs, Launch, Wiring};
use theseus_core::config::{ClusterConfig, join};
use theseus_core::plan::HostKind;

use crate::config::{KIND, VolcanoHost};
use theseus_core::job::JobIdentity;
use theseus_core::solver::{Plan, Request};
use tokio::sync::OnceCell;

use crate::api::{Cluster, JOB_NAME_LABEL, Page};
use crate::error::VolcanoError;
use crate::handle::HandleData;
use crate::helper::render_helper;
use crate::render::{JobInputs, RenderOptions, redacted, render_job};
use crate::status::{GroupCondition, Observed, summarize};
use crate::types::Job;

/// How the pods of a Volcano job find their rank: the coordinator and the process count from the
/// variables theseus renders (`render::ENV_COORDINATOR`, `render::ENV_NODES`), the rank from
/// `VC_TASK_INDEX`.
pub const WIRING: Wiring = Wiring { scheme: "volcano", shell: include_str!("../wiring.sh") };

/// Timeouts and knobs of the backend (defaults suit real clusters; tests shorten them).
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long the helper pod may take to start (image pull, scheduling).
    pub helper_start_timeout: Duration,
    /// How long shipping may take once the helper runs.
    pub ship_timeout: Duration,
    /// How long shipping may go without progress (no byte accepted, no answer from the exec)
    /// before it is given up.
    pub ship_idle_timeout: Duration,
    /// How long deletions (`--replace`, `cancel`) may take to be confirmed.
    pub delete_timeout: Duration,
    /// How often `logs -f` and `cancel` look at the job and its pods when they cannot watch
    /// them (no right to watch vcjobs, a watch that failed); they watch otherwise.
    pub poll_interval: Duration,
    /// How often a submit renews its name claim while it ships (the claim lapses after
    /// `claim::LEASE_DURATION` without renewal).
    pub claim_renew_interval: Duration,
    /// How long `logs -f` keeps reconnecting to an API server that does not answer.
    pub log_reconnect_for: Duration,
    /// Gang job knobs (`maxRetry`, `ttlSecondsAfterFinished`).
    pub render: RenderOptions,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            helper_start_timeout: Duration::from_secs(300),
            ship_timeout: Duration::from_secs(3600),
            ship_idle_timeout: Duration::from_secs(300),
            delete_timeout: Duration::from_secs(180),
            poll_interval: Duration::from_secs(2),
            claim_renew_interval: Duration::from_secs(15),
            log_reconnect_for: Duration::from_secs(600),
            render: RenderOptions::default(),
        }
    }
}

/// The backend of one `type: volcano` host.
pub struct VolcanoBackend {
    pub(crate) name: String,
    pub(crate) host: VolcanoHost,
    pub(crate) cluster_config: ClusterConfig,
    pub(crate) settings: Settings,
    connection: OnceCell<Cluster>,
}

impl fmt::Debug for VolcanoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VolcanoBackend").field("name", &self.name).field("namespace", &self.host.namespace).finish()
    }
}

impl fmt::Display for VolcanoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "volcano({})", self.name)
    }
}

impl VolcanoBackend {
    /// A backend for host `name`; connects to the cluster on first use.
    pub fn new(name: &str, mut host: VolcanoHost, cluster: ClusterConfig) -> Self {
        // A host without `namespace` uses its kubeconfig context's (else `default`), as kubectl
        // does; decided once, so that dry runs, handles and calls agree.
        host.namespace = crate::client::effective_namespace(&host, &crate::client::ClientEnv::from_process());
        let mut settings = Settings::default();
        settings.render.max_retry = i32::try_from(host.max_retry).unwrap_or(i32::MAX);
        // Checked by `validate` when the host was loaded (render refuses a bad one again).
        settings.render.ttl_seconds_after_finished =
            host.ttl_seconds().ok().flatten().map(|t| i32::try_from(t).unwrap_or(i32::MAX));
        settings.render.restart_on_failure = host.restart_on_failure;
        VolcanoBackend { name: name.to_owned(), host, cluster_config: cluster, settings, connection: OnceCell::new() }
    }

    /// A backend that uses an existing connection (tests, embedding).
    pub fn with_cluster(name: &str, mut host: VolcanoHost, cluster: ClusterConfig, connection: Cluster) -> Self {
        if host.namespace.is_empty() {
            connection.namespace().clone_into(&mut host.namespace);
        }
        let backend = VolcanoBackend::new(name, host, cluster);
        let _ = backend.connection.set(connection);
        backend
    }

    /// Replaces the timeouts (the gang job knobs stay the host's).
    #[must_use]
    pub fn with_settings(mut self, settings: Settings) -> Self {
        let render = std::mem::take(&mut self.settings.render);
        self.settings = Settings { render, ..settings };
        self
    }

    /// The host's settings.
    pub fn host(&self) -> &VolcanoHost {
        &self.host
    }

    /// The connection, made on first use.
    pub async fn cluster(&self) -> Result<&Cluster, VolcanoError> {
        self.connection.get_or_try_init(|| Cluster::connect(&self.host)).await
    }

    /// [`Self::err`] of a failure before the submit created anything, marked with
    /// [`theseus_core::NothingCreated`].
    fn err_nothing_created(&self, e: VolcanoError) -> theseus_core::Error {
        match self.err(e) {
            theseus_core::Error::Backend { backend, message, source: None } => {
                theseus_core::Error::Backend { backend, message, source: Some(Box::new(theseus_core::NothingCreated)) }
            }
            other => other,
        }
    }

    pub(crate) fn err(&self, e: VolcanoError) -> theseus_core::Error {
        match e {
            // core's message adds " already exists" itself.
            VolcanoError::AlreadyExists { kind, name, namespace } => theseus_core::Error::AlreadyExists {
                what: format!(
                    "{kind} {name:?}{}",
                    namespace.map(|n| format!(" in namespace {n:?}")).unwrap_or_default()
                ),
            },
            // Worded like the other backends' (core adds " already exists", the CLI how to
            // replace it), and typed so that the CLI forgets the refused run: nothing was created.
            VolcanoError::AlreadyRunning { name, namespace, what } => theseus_core::Error::AlreadyExists {
                what: format!("live run of job `{name}` in namespace {namespace:?}: {what}"),
            },
            // The store's errors are typed and worded already (e.g. a run dir that exists).
            VolcanoError::Store(e) => e,
            other => {
                theseus_core::Error::Backend { backend: self.to_string(), message: other.to_string(), source: None }
            }
        }
    }

    /// Paths of a run on the PVC, each checked to lie under its cluster dir (`work`, `status`,
    /// `log`).
    ///
    /// # Errors
    /// When a path would leave its dir (a name that slipped past the name rule).
    pub fn run_layout(&self, identity: &JobIdentity) -> theseus_core::Result<RunLayout> {
        let rel = identity.run_path();
        let cluster = &self.cluster_config;
        let under = |base: &str, rel: &str| -> theseus_core::Result<String> {
            let path = join(base, rel);
            theseus_core::paths::check_under(base, &path)
                .map_err(|m| theseus_core::Error::backend(self, format!("refusing a run path: {m}")))?;
            Ok(path)
        };
        Ok(RunLayout {
            work_dir: under(&cluster.work, &rel)?,
            run_dir: under(&cluster.status_dir(), &rel)?,
            log_file: under(&cluster.log_dir(), &format!("{rel}.log"))?,
            root_dir: cluster.root.clone(),
            uv_cache_dir: cluster.uv_dir.clone(),
            data_dirs: DataDirs {
                data: cluster.data_dir(),
                checkpoints: cluster.checkpoints_dir(),
                results: cluster.results_dir(),
            },
            launch: Launch::Wired { coordinator_port: self.host.coordinator_port, wiring: WIRING },
        })
    }

    /// The gang job (and Secret) of a prepared job, rendered without the cluster.
    pub fn render(&self, job: &PreparedJob) -> theseus_core::Result<crate::render::RenderedJob> {
        let layout = self.run_layout(&job.identity)?;
        let inputs = JobInputs {
            identity: &job.identity,
            plan: &job.plan,
            env: &job.env,
            layout: &layout,
            bootstrap_entry: &job.bootstrap.entry,
            options: &self.settings.render,
        };
        Ok(render_job(&self.host, &inputs)?)
    }

    /// The handle data of `job`'s run before anything exists (no uid): what `submit` returns
    /// but the uid, and what [`Backend::planned_handle`] records. Pure.
    pub(crate) fn planned_data(&self, job: &PreparedJob, rendered: &crate::render::RenderedJob) -> HandleData {
        HandleData {
            namespace: self.host.namespace.clone(),
            job: rendered.job.metadata.name.clone().unwrap_or_default(),
            run_id: Some(job.identity.run_id.clone()),
            uid: None,
            secret: rendered.secret.as_ref().and_then(|s| s.metadata.name.clone()),
            service: rendered.service.metadata.name.clone(),
            files: rendered.job.metadata.name.as_deref().map(crate::prebuilt::run_files_name),
            log_file: self.run_layout(&job.identity).ok().map(|l| l.log_file),
            claim: Some(crate::claim::claim_name(&job.identity)),
            helper: Some(crate::helper::helper_name(&job.identity)),
            work_dir: self.run_layout(&job.identity).ok().map(|l| l.work_dir),
            run_dir: self.run_layout(&job.identity).ok().map(|l| l.run_dir),
            ttl_seconds_after_finished: rendered
                .job
                .spec
                .ttl_seconds_after_finished
                .and_then(|t| u32::try_from(t).ok()),
        }
    }

    /// The name of rank `rank`'s running pod.
    async fn running_pod(
        &self,
        cluster: &Cluster,
        data: &HandleData,
        handle: &JobHandle,
        rank: u32,
    ) -> theseus_core::Result<String> {
        let selector = format!("volcano.sh/job-name={},volcano.sh/task-index={rank}", data.job);
        let pods = cluster.list_pods(&selector).await.map_err(|e| self.err(e))?;
        let running = pods.iter().find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        running.and_then(|p| p.metadata.name.clone()).ok_or_else(|| {
            theseus_core::Error::backend(
                self,
                format!("rank {rank} of vcjob `{}` has no running pod (see `theseus status {}`)", data.job, handle.id),
            )
        })
    }

    /// Handle data of a handle of this backend.
    pub(crate) fn handle_data(&self, handle: &JobHandle) -> theseus_core::Result<HandleData> {
        if handle.kind != KIND {
            return Err(theseus_core::Error::backend(
                self,
                format!("handle of a {} job, not a volcano one", handle.kind),
            ));
        }
        serde_json::from_value(handle.data.clone()).map_err(|e| {
            theseus_core::Error::backend(self, format!("job handle of `{}` is not a volcano handle: {e}", handle.id))
        })
    }

    /// Everything observed about a job: the vcjob, its pods, and when pending, its PodGroup and events.
    pub(crate) async fn observe(
        &self,
        data: &HandleData,
    ) -> Result<Option<(Job, Vec<Pod>, Observation)>, VolcanoError> {
        let cluster = self.cluster().await?;
        let Some(job) = cluster.get_job(&data.job).await? else { return Ok(None) };
        if let (Some(want), Some(have)) = (&data.uid, &job.metadata.uid)
            && want != have
        {
            return Ok(None);
        }
        // Page by page, each pod cut to what the status reads: a gang of thousands of pods never
        // sits in memory whole.
        let mut pods = Vec::new();
        cluster
            .visit_pod_statuses(&format!("{JOB_NAME_LABEL}={}", data.job), |page| match page {
                Page::Items(items) => pods.extend(items),
                Page::Restart => pods.clear(),
            })
            .await?;
        let pending = job
            .status
            .as_ref()
            .and_then(|s| s.state.as_ref())
            .and_then(|s| s.phase.as_deref())
            .is_none_or(|p| p == "Pending" || p == "Inqueue");
        let mut observation = Observation::default();
        if pending {
            let group = podgroup_of(cluster, &job).await;
            let group_name = group.as_ref().map(|(name, _, _)| name.clone());
            if let Some((_, phase, conditions)) = group {
                observation.group_phase = phase;
                observation.conditions = conditions;
            }
            observation.events = events_about(cluster, &job, group_name.as_deref(), &pods).await;
        }
        Ok(Some((job, pods, observation)))
    }
}

/// The name, phase and conditions of a job's PodGroup, when it can be read. Volcano's job
/// controller names it `<job>-<uid>` (`generateRelatedPodGroupName` in
/// pkg/controllers/job/job_controller_actions.go); before Volcano 1.5 it had the job's name.
pub(crate) async fn podgroup_of(cluster: &Cluster, job: &Job) -> Option<(String, Option<String>, Vec<GroupCondition>)> {
    let name = job.metadata.name.as_deref()?;
    let mut candidates: Vec<String> = job.metadata.uid.iter().map(|uid| format!("{name}-{uid}")).collect();
    candidates.push(name.to_owned());
    for candidate in candidates {
        match cluster.get_podgroup(&candidate).await {
            Ok(Some(group)) => {
                let found = group.metadata.name.clone().unwrap_or(candidate);
                let status = group.status.unwrap_or_default();
                return Some((found, status.phase, status.conditions));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!("cannot read the PodGroup of {name}: {e}");
                return None;
            }
        }
    }
    None
}

/// Up to this many pods, their events are asked for one pod at a time.
const EVENTS_ONE_BY_ONE: usize = 8;

/// Events about a job, its PodGroup (`group`) and its pods (best effort: events are advisory,
/// RBAC may hide them).
pub(crate) async fn events_about(
    cluster: &Cluster,
    job: &Job,
    group: Option<&str>,
    pods: &[Pod],
) -> Vec<k8s_openapi::api::core::v1::Event> {
    let mut targets: Vec<(&str, String)> = Vec::new();
    if let Some(name) = &job.metadata.name {
        targets.push(("Job", name.clone()));
    }
    if let Some(group) = group {
        targets.push(("PodGroup", group.to_owned()));
    }
    // A few pods are asked about one by one; a gang's pods with one LIST of the namespace's pod
    // events (a pending 1,024-pod job would otherwise cost 1,024 requests per look).
    let names: std::collections::HashSet<&str> = pods.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
    if names.len() <= EVENTS_ONE_BY_ONE {
        targets.extend(names.iter().map(|name| ("Pod", (*name).to_owned())));
    }
    let mut events = Vec::new();
    for (kind, name) in targets {
        match cluster.events_for(kind, &name).await {
            Ok(found) => events.extend(found),
            Err(e) => tracing::debug!("cannot read events of {kind} {name}: {e}"),
        }
    }
    if names.len() > EVENTS_ONE_BY_ONE {
        match cluster.events_for_each("Pod", |name| names.contains(name)).await {
            Ok(found) => events.extend(found),
            Err(e) => tracing::debug!("cannot read the events of the pods: {e}"),
        }
    }
    events
}

/// The phase and conditions of a job's PodGroup ([`podgroup_of`]).
pub(crate) async fn group_info(cluster: &Cluster, job: &Job) -> Option<(Option<String>, Vec<GroupCondition>)> {
    podgroup_of(cluster, job).await.map(|(_, phase, conditions)| (phase, conditions))
}

/// Events about a job, its PodGroup and its pods ([`events_about`]).
pub(crate) async fn events_of(cluster: &Cluster, job: &Job, pods: &[Pod]) -> Vec<k8s_openapi::api::core::v1::Event> {
    let group = podgroup_of(cluster, job).await.map(|(name, _, _)| name);
    events_about(cluster, job, group.as_deref(), pods).await
}

/// The PodGroup and events part of an observation.
#[derive(Debug, Default)]
pub(crate) struct Observation {
    pub(crate) group_phase: Option<String>,
    pub(crate) conditions: Vec<GroupCondition>,
    pub(crate) events: Vec<k8s_openapi::api::core::v1::Event>,
}

#[async_trait]
impl Backend for VolcanoBackend {
    fn kind(&self) -> HostKind {
        KIND
    }

    fn layout(&self, identity: &JobIdentity, _plan: &Plan) -> theseus_core::Result<RunLayout> {
        self.run_layout(identity)
    }

    async fn availability(&self, request: &Request) -> theseus_core::Result<Availability> {
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        crate::availability::probe(cluster, &self.host, request).await.map_err(|e| self.err(e))
    }

    async fn shares(
        &self,
        request: &Request,
        plan: &Plan,
    ) -> theseus_core::Result<Option<theseus_core::shares::QueueShares>> {
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        crate::availability::shares_read::read(cluster, &self.host, request, plan.total_chips)
            .await
            .map_err(|e| self.err(e))
    }

    async fn submit(&self, job: &PreparedJob, options: &SubmitOptions) -> theseus_core::Result<JobHandle> {
        // Render everything before touching the cluster: a bad config writes nothing.
        let rendered = self.render(job)?;
        let layout = self.run_layout(&job.identity)?;
        let helper = render_helper(&self.host, &job.identity, &layout.work_dir)?;
        let cluster = self.cluster().await.map_err(|e| self.err_nothing_created(e))?;
        crate::availability::require_queue(cluster, &self.host).await.map_err(|e| self.err_nothing_created(e))?;
        let unchecked =
            crate::preflight::require_objects(cluster, &self.host).await.map_err(|e| self.err_nothing_created(e))?;
        for note in &unchecked {
            options.note(note);
        }
        submit::submit(self, cluster, job, &layout, helper, rendered, options).await.map_err(|e| self.err(e))
    }

    fn planned_handle(&self, job: &PreparedJob) -> Option<JobHandle> {
        let rendered = self.render(job).ok()?;
        let data = self.planned_data(job, &rendered);
        Some(JobHandle {
            kind: KIND,
            host: self.name.clone(),
            id: data.job.clone(),
            data: serde_json::to_value(data).ok()?,
        })
    }

    async fn status(&self, handle: &JobHandle) -> theseus_core::Result<JobStatus> {
        let data = self.handle_data(handle)?;
        match self.observe(&data).await.map_err(|e| self.err(e))? {
            None if self.submitting(&data).await.map_err(|e| self.err(e))? => Ok(JobStatus {
                state: JobState::Submitting,
                exit_code: None,
                message: Some(format!(
                    "run {} is being submitted (its code is being shipped)",
                    data.run_id.clone().unwrap_or_default()
                )),
                ranks: vec![],
                attempt: None,
            }),
            None => Err(theseus_core::Error::NotFound { what: crate::gone::gone_what(&data) }),
            Some((job, pods, o)) => {
                let mut status = summarize(&Observed {
                    job: &job,
                    pods: &pods,
                    group_phase: o.group_phase.as_deref(),
                    group_conditions: &o.conditions,
                    events: &o.events,
                });
                // An interrupted run says why and what happens next, in one line.
                let cluster = self.cluster().await.map_err(|e| self.err(e))?;
                if let Some(line) = crate::interrupted::interruption_line(cluster, &job).await {
                    status.message = Some(line);
                }
                Ok(status)
            }
        }
    }

    async fn logs(&self, handle: &JobHandle, options: &LogOptions) -> theseus_core::Result<LogStream> {
        let data = self.handle_data(handle)?;
        let cluster = self.cluster().await.map_err(|e| self.err(e))?.clone();
        if cluster.get_job(&data.job).await.map_err(|e| self.err(e))?.is_none() {
            if self.submitting(&data).await.map_err(|e| self.err(e))? {
                return Err(theseus_core::Error::NotFound {
                    what: format!(
                        "vcjob `{}` in namespace `{}` (its run is being submitted)",
                        data.job, data.namespace
                    ),
                });
            }
            // Collected (or deleted) with its pods and their logs: the run's log file on the PVC.
            return self.logs_on_pvc(&data, options.rank).await;
        }
        let follow = crate::logs::FollowSettings {
            poll: self.settings.poll_interval,
            reconnect_for: self.settings.log_reconnect_for,
            drain_for: self.settings.delete_timeout,
        };
        Ok(crate::logs::stream(cluster, data, options.clone(), follow, self.to_string()))
    }

    /// From the run's metadata files on the PVC, read through a short-lived helper pod
    /// (`gone.rs`).
    async fn remains(&self, handle: &JobHandle) -> theseus_core::Result<Option<JobStatus>> {
        let data = self.handle_data(handle)?;
        self.ended_on_pvc(&data).await
    }

    async fn reclaim(
        &self,
        options: &theseus_core::backend::ReclaimOptions,
    ) -> theseus_core::Result<theseus_core::backend::ReclaimReport> {
        self.reclaim_store(options).await
    }

    async fn usage(&self) -> theseus_core::Result<theseus_core::backend::StoreUsage> {
        self.store_usage().await
    }

    /// Helper vcjobs and pods of crashed clients, and stale claims ([`VolcanoBackend::gc`]).
    async fn leftovers(&self, older_than: Duration, dry_run: bool) -> theseus_core::Result<Option<Vec<String>>> {
        self.gc(older_than, dry_run).await.map(Some).map_err(|e| self.err(e))
    }

    /// Through the API server's `pods/portforward` to the rank's pod (one websocket per
    /// connection, as `kubectl port-forward` opens one stream per connection).
    /// A file of the run dir, read in rank 0's running pod (`head -c`, bounded); `None` when the
    /// run has no running pod: an ended run's files stay on the PVC, where a helper pod reads
    /// them ([`Backend::ended_run_files`], asked once per ended run), since one per look would
    /// be too dear.
    async fn run_file(&self, handle: &JobHandle, name: &str) -> theseus_core::Result<Option<Vec<u8>>> {
        if !theseus_core::backend::is_run_file_name(name) {
            return Ok(None);
        }
        let data = self.handle_data(handle)?;
        let Some(dir) = self.run_dir_of(&data) else { return Ok(None) };
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        let Ok(pod) = self.running_pod(cluster, &data, handle, 0).await else { return Ok(None) };
        let pods = cluster.pods();
        let target = crate::exec::ExecTarget {
            pods: &pods,
            pod: &pod,
            container: None,
            open_timeout: crate::exec::OPEN_TIMEOUT,
        };
        let limit = theseus_core::backend::RUN_FILE_LIMIT;
        // Exit 3: no such file (a run that has not written it yet).
        let script = r#"[ -f "$1/$2" ] || exit 3; exec head -c "$3" -- "$1/$2""#;
        let command = ["sh", "-c", script, "sh", &dir, name, &limit.to_string()].map(str::to_owned).to_vec();
        let finished = crate::exec::run(&target, command, None::<(tokio::io::Empty, _)>, limit as usize, &|_| {})
            .await
            .map_err(|e| {
                let why = match e {
                    crate::exec::ExecFailure::Refused(e) => {
                        format!("exec refused: {}", crate::exec::refused_words(&e))
                    }
                    crate::exec::ExecFailure::NoAnswer => "the API server did not answer the exec".to_owned(),
                    other => format!("{other:?}"),
                };
                theseus_core::Error::backend(self, format!("cannot read {name} in pod `{pod}`: {why}"))
            })?;
        // The API server's status: `Success` (no exit code), or a failure naming the exit code.
        let success = finished.status.as_ref().is_some_and(|s| s.status.as_deref() == Some("Success"));
        match finished.status.as_ref().and_then(crate::exec::exit_code) {
            _ if success && !finished.stdout_truncated => Ok(Some(finished.stdout)),
            Some(0) => Ok(Some(finished.stdout)),
            Some(3) => Ok(None),
            code => Err(theseus_core::Error::backend(
                self,
                format!(
                    "reading {name} in pod `{pod}` failed (exit {}): {}",
                    code.map_or_else(|| "unknown".to_owned(), |c| c.to_string()),
                    String::from_utf8_lossy(&finished.stderr).trim()
                ),
            )),
        }
    }

    /// Read on the PVC through a short-lived helper pod ([`VolcanoBackend::files_on_pvc`]).
    async fn ended_run_files(
        &self,
        handle: &JobHandle,
        names: &[&str],
    ) -> theseus_core::Result<Option<Vec<Option<Vec<u8>>>>> {
        let data = self.handle_data(handle)?;
        self.files_on_pvc(&data, names).await
    }

    async fn connect_port(
        &self,
        handle: &JobHandle,
        rank: u32,
        port: u16,
    ) -> theseus_core::Result<theseus_core::backend::PortStream> {
        let data = self.handle_data(handle)?;
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        let pod = self.running_pod(cluster, &data, handle, rank).await?;
        let mut forwarder = cluster.pods().portforward(&pod, &[port]).await.map_err(|e| {
            theseus_core::Error::backend(self, format!("cannot forward port {port} of pod `{pod}`: {e}"))
        })?;
        let stream = forwarder.take_stream(port).ok_or_else(|| {
            theseus_core::Error::backend(
                self,
                format!("the port forward to pod `{pod}` gave no stream for port {port}"),
            )
        })?;
        // The forwarder's task runs on by itself; errors of the pod side show as a closed stream.
        if let Some(errors) = forwarder.take_error(port) {
            tokio::spawn(async move {
                if let Some(message) = errors.await {
                    tracing::warn!(%message, "port forward");
                }
            });
        }
        Ok(Box::pin(stream))
    }

    /// Through the store on the PVC, its scripts run by an exec into rank 0's running pod
    /// (which mounts the PVC); when the job's image lacks a tool they need, in a helper pod
    /// (said once).
    async fn sync(
        &self,
        handle: &JobHandle,
        snapshot: &theseus_core::snapshot::Snapshot,
        options: &theseus_core::backend::SyncOptions,
    ) -> theseus_core::Result<theseus_core::backend::SyncReport> {
        use theseus_core::store::StoreError;
        use theseus_core::store::sync::{SyncRequest, sync};
        let data = self.handle_data(handle)?;
        let Some(work_dir) = data.work_dir.clone() else {
            return Err(theseus_core::Error::backend(
                self,
                format!("the handle of `{}` does not say where its code is (submitted by an older theseus)", handle.id),
            ));
        };
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        let pod = self.running_pod(cluster, &data, handle, 0).await?;
        let request = SyncRequest {
            snapshot: snapshot.clone(),
            root: self.cluster_config.work.clone(),
            dest: work_dir,
            mode: self.cluster_config.materialize.unwrap_or_default(),
            progress: options.progress.clone(),
            status: options.status.clone(),
        };
        let shell = crate::store_shell::ExecShell::new(cluster.pods(), &pod, None, &self.cluster_config.work)
            .with_open_timeout(cluster.watch_silence());
        match sync(&shell, request.clone()).await {
            Ok(report) => Ok(report),
            Err(StoreError::NoTool { tool, machine }) => {
                if let Some(status) = &options.status {
                    status(&format!("{machine} has no `{tool}`: syncing through a helper pod instead"));
                }
                self.with_store_helper("sync", move |shell| async move {
                    sync(&shell, request).await.map_err(|e| match e {
                        StoreError::Failed(e) => e,
                        e => theseus_core::Error::InvalidConfig(e.to_string()),
                    })
                })
                .await
            }
            Err(StoreError::Failed(e)) => Err(e),
        }
    }

    /// An exec into the rank's running pod through the API server (`pods/exec`), with a TTY
    /// whose size follows the user's terminal when asked.
    async fn shell(
        &self,
        handle: &JobHandle,
        request: &theseus_core::session::ShellRequest,
    ) -> theseus_core::Result<theseus_core::session::ShellSession> {
        let data = self.handle_data(handle)?;
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        let pod = self.running_pod(cluster, &data, handle, request.rank).await?;
        let script = theseus_core::bootstrap::enter::script(data.work_dir.as_deref(), request.rank, &request.command);
        crate::exec::attach(&cluster.pods(), &pod, vec!["sh".into(), "-c".into(), script], request.tty)
            .await
            .map_err(|e| theseus_core::Error::backend(self, format!("cannot exec into pod `{pod}`: {e}")))
    }

    async fn cancel(&self, handle: &JobHandle) -> theseus_core::Result<JobStatus> {
        let data = self.handle_data(handle)?;
        let before = self.observe(&data).await.map_err(|e| self.err(e))?;
        let Some((job, pods, _)) = before else {
            // A run recorded before its submit finished: take back what that submit made.
            if self.cancel_unfinished(&data).await.map_err(|e| self.err(e))? {
                return Ok(JobStatus {
                    state: JobState::Cancelled,
                    exit_code: None,
                    message: Some(format!("the submit of vcjob `{}` was stopped before the job was created", data.job)),
                    ranks: vec![],
                    attempt: None,
                });
            }
            return Err(theseus_core::Error::NotFound {
                what: format!("vcjob `{}` in namespace `{}`", data.job, data.namespace),
            });
        };
        let prior =
            summarize(&Observed { job: &job, pods: &pods, group_phase: None, group_conditions: &[], events: &[] });
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        let gone = crate::delete::delete_and_confirm(
            cluster,
            &data.job,
            self.settings.delete_timeout,
            self.settings.poll_interval,
        )
        .await
        .map_err(|e| self.err(e))?;
        if let Some(secret) = &data.secret {
            cluster.delete_secret(secret).await.map_err(|e| self.err(e))?;
        }
        if let Some(service) = &data.service {
            cluster.delete_service(service).await.map_err(|e| self.err(e))?;
        }
        if let Some(files) = &data.files {
            cluster.delete_config_map(files).await.map_err(|e| self.err(e))?;
        }
        if let (Some(claim), Some(run)) = (&data.claim, &data.run_id) {
            crate::claim::release_if_held(cluster, claim, run, &data.job).await.map_err(|e| self.err(e))?;
        }
        if prior.state.is_terminal() {
            return Ok(prior);
        }
        Ok(JobStatus {
            state: JobState::Cancelled,
            exit_code: None,
            message: Some(match gone {
                0 => format!("vcjob `{}` deleted; it had no pods", data.job),
                1 => format!("vcjob `{}` deleted; its pod is gone", data.job),
                n => format!("vcjob `{}` deleted; its {n} pods are gone", data.job),
            }),
            ranks: prior
                .ranks
                .into_iter()
                .map(|mut r| {
                    if !r.state.is_terminal() {
                        r.state = JobState::Cancelled;
                    }
                    r
                })
                .collect(),
            attempt: None,
        })
    }

    /// Compares the gang's requests with the nodes it may use and its queue's capability
    /// ([`crate::fit::never_fits`]); what cannot be read (RBAC) is not judged.
    async fn never_starts(&self, handle: &JobHandle) -> theseus_core::Result<Option<String>> {
        let data = self.handle_data(handle)?;
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        let Some(job) = cluster.get_job(&data.job).await.map_err(|e| self.err(e))? else { return Ok(None) };
        let selector = self.host.node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
        let nodes = cluster.list_nodes(&selector).await.ok();
        let queue = match self.host.queue.as_str() {
            "" => None,
            name => cluster.get_queue(name).await.ok().flatten(),
        };
        let queue = queue.as_ref().map(|q| (self.host.queue.as_str(), &q.spec.capability));
        Ok(crate::fit::never_fits(&job, nodes.as_deref(), queue))
    }

    fn start_timeout(&self) -> Option<Duration> {
        // Checked by `validate` when the host was loaded; 10 minutes when unset.
        let timeout = match &self.host.start_timeout {
            None => Duration::from_secs(600),
            Some(text) => theseus_core::duration::parse(text).unwrap_or(Duration::from_secs(600)),
        };
        (!timeout.is_zero()).then_some(timeout)
    }

    fn locate(&self, handle: &JobHandle) -> Vec<String> {
        let Ok(data) = serde_json::from_value::<HandleData>(handle.data.clone()) else { return Vec::new() };
        let (ns, job) = (theseus_core::shell::quote(&data.namespace), theseus_core::shell::quote(&data.job));
        vec![format!(
            "vcjob {} in namespace {}; look it up with `kubectl -n {ns} get vcjob {job}`",
            data.job, data.namespace
        )]
    }

    fn dry_run(&self, job: &PreparedJob) -> theseus_core::Result<Vec<DryRunDocument>> {
        let rendered = self.render(job)?;
        let layout = self.run_layout(&job.identity)?;
        let helper = render_helper(&self.host, &job.identity, &layout.work_dir)?;
        let yaml = |title: &str, value: &dyn erased::Yaml| -> theseus_core::Result<DryRunDocument> {
            Ok(DryRunDocument {
                title: title.to_owned(),
                text: value.yaml().map_err(|e| theseus_core::Error::backend(self, e))?,
            })
        };
        let mut docs = vec![yaml(
            &format!(
                "helper job: ships the code to the PVC, deleted after shipping (one left behind is collected \
                 {} s after it ends)",
                crate::helper::HELPER_TTL_SECONDS
            ),
            &helper,
        )?];
        if let Some(secret) = &rendered.secret {
            docs.push(yaml("secret env of the job (values redacted)", &redacted(secret))?);
        }
        docs.push(yaml("headless Service naming rank 0, the coordinator (owned by the gang job)", &rendered.service)?);
        let kept = match self.settings.render.ttl_seconds_after_finished {
            Some(ttl) => format!(
                "Volcano deletes it and its pods {ttl} s after it finishes (ttl_seconds_after_finished); then \
                 `theseus status` and `logs` answer from the ledger and the run's files on the PVC"
            ),
            None => "kept after it finishes (ttl_seconds_after_finished: never)".to_owned(),
        };
        docs.push(yaml(&format!("gang job: {kept}"), &rendered.job)?);
        if let Some((key, job, files)) = self.prebuilt_job(job, &layout, &rendered)? {
            docs.push(yaml(
                "the run's own files, when the code store already holds this code (owned by the gang job)",
                &files,
            )?);
            let title = format!(
                "gang job instead, when the code store already holds this code (tree {key}, as the store's \
                 index says after a ship): no helper job; each pod builds the run dir from the store first"
            );
            docs.push(yaml(&title, &job)?);
        }
        Ok(docs)
    }
}

/// YAML of any serializable manifest.
mod erased {
    pub(super) trait Yaml {
        fn yaml(&self) -> Result<String, String>;
    }
    impl<T: serde::Serialize> Yaml for T {
        fn yaml(&self) -> Result<String, String> {
            serde_saphyr::to_string(self).map_err(|e| format!("cannot render YAML: {e}"))
        }
    }
}

impl VolcanoBackend {
    /// The gang job a store hit would create (link mode only): the rendered job with the pods'
    /// build step, and the code's tree key.
    fn prebuilt_job(
        &self,
        job: &PreparedJob,
        layout: &RunLayout,
        rendered: &crate::render::RenderedJob,
    ) -> theseus_core::Result<Option<(theseus_core::store::ObjectKey, crate::types::Job, ConfigMap)>> {
        use theseus_core::store::{ExtraFile, Materialize, StorePlan, Tree, tree};
        if self.cluster_config.materialize.unwrap_or_default() != Materialize::Link {
            return Ok(None);
        }
        let digests = job.snapshot.digests(job.snapshot.hash_cache.as_deref())?;
        let plan = StorePlan::new(&job.snapshot, &digests);
        let failed =
            |e: std::io::Error| theseus_core::Error::backend(self, format!("cannot write the tree archive: {e}"));
        let key = Tree::of(&plan).map_err(failed)?.key;
        let files = tree::run_files_env(&ExtraFile::bootstrap(&job.bootstrap), 0).map_err(failed)?;
        if files.len() > crate::prebuilt::RUN_FILES_MAX {
            // Too big for one environment string: a store hit ships through the helper too.
            return Ok(None);
        }
        let mut gang = rendered.job.clone();
        let root = self.cluster_config.work.trim_end_matches('/');
        crate::prebuilt::add_build_step(&mut gang, root, &layout.work_dir, &layout.log_file, &key);
        let map = crate::prebuilt::run_files_map(&gang, files);
        Ok(Some((key, gang, map)))
    }

    /// Whether the run of `data` (whose vcjob does not exist) is being submitted right now: its
    /// claim is held by the run and renewed.
    async fn submitting(&self, data: &HandleData) -> Result<bool, VolcanoError> {
        let (Some(claim), Some(run)) = (&data.claim, &data.run_id) else { return Ok(false) };
        let cluster = self.cluster().await?;
        crate::claim::submitting(cluster, claim, run, &data.job).await
    }

    /// Cancel of a run whose vcjob does not exist: deletes its helper (confirmed), its Secret and
    /// its claim. `true` when any of them existed.
    async fn cancel_unfinished(&self, data: &HandleData) -> Result<bool, VolcanoError> {
        let cluster = self.cluster().await?;
        let mut found = false;
        if let Some(helper) = &data.helper
            && cluster.get_job(helper).await?.is_some()
        {
            crate::delete::delete_and_confirm(
                cluster,
                helper,
                self.settings.delete_timeout,
                self.settings.poll_interval,
            )
            .await?;
            found = true;
        }
        if let Some(secret) = &data.secret {
            found |= cluster.delete_secret(secret).await?;
        }
        if let Some(service) = &data.service {
            found |= cluster.delete_service(service).await?;
        }
        if let Some(files) = &data.files {
            found |= cluster.delete_config_map(files).await?;
        }
        if let (Some(claim), Some(run)) = (&data.claim, &data.run_id) {
            found |= crate::claim::release_if_held(cluster, claim, run, &data.job).await?;
        }
        Ok(found)
    }

    /// Deletes what crashed clients left behind (see `gc.rs`: helpers, Secrets of runs without a
    /// job, stale name claims) older than `older_than`; with `dry_run`, only lists them. Returns `kind/name` of each.
    ///
    /// # Errors
    /// [`VolcanoError`] when the cluster cannot be reached or refuses a call.
    pub async fn gc(&self, older_than: Duration, dry_run: bool) -> Result<Vec<String>, VolcanoError> {
        let cluster = self.cluster().await?;
        crate::gc::gc(cluster, older_than, dry_run).await
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    /// A pod's rank is `VC_TASK_INDEX`; the coordinator and the count are the rendered
    /// `THESEUS_VOLCANO_COORDINATOR` and `THESEUS_VOLCANO_NODES`; a host list the svc plugin may
    /// still inject (a cluster that enables it for every job) is not read.
    #[test]
    fn the_wiring_finds_the_coordinator_the_count_and_this_pods_rank() {
        use theseus_core::testing::run_wiring;
        let coordinator = ("THESEUS_VOLCANO_COORDINATOR", "job-abc");
        let nodes = ("THESEUS_VOLCANO_NODES", "3");
        let injected = ("VC_WORKER_HOSTS", "other-0.x,other-1.x");
        let wired = run_wiring(&WIRING, &[coordinator, nodes, ("VC_TASK_INDEX", "2"), injected], &[]);
        assert_eq!(
            (wired.rank.as_str(), wired.count.as_str(), wired.local_rank.as_str(), wired.first_host.as_str()),
            ("2", "3", "0", "job-abc"),
            "{wired:?}"
        );
        let wired = run_wiring(&WIRING, &[nodes, ("VC_TASK_INDEX", "0")], &["THESEUS_VOLCANO_COORDINATOR"]);
        assert!(
            wired.died.as_deref().is_some_and(|d| d.contains("THESEUS_VOLCANO_COORDINATOR is not set")),
            "{wired:?}"
        );
        for bad in ["", "0", "x", "-1"] {
            let wired =
                run_wiring(&WIRING, &[coordinator, ("THESEUS_VOLCANO_NODES", bad), ("VC_TASK_INDEX", "0")], &[]);
            assert!(wired.died.as_deref().is_some_and(|d| d.contains("not a positive count")), "{bad}: {wired:?}");
        }
        let wired = run_wiring(&WIRING, &[coordinator, nodes], &["VC_TASK_INDEX"]);
        assert!(wired.died.as_deref().is_some_and(|d| d.contains("VC_TASK_INDEX is not set")), "{wired:?}");
    }

    #[test]
    fn run_paths_stay_under_the_cluster_dirs() {
        let host: VolcanoHost =
            serde_json::from_value(serde_json::json!({"cluster": "k", "image": "i", "pvc_name": "p"})).unwrap();
        let cluster =
            ClusterConfig { root: "/workspace".into(), work: "/workspace/work".into(), ..ClusterConfig::default() };
        let backend = VolcanoBackend::new("k", host, cluster);
        let ok = backend.run_layout(&JobIdentity::new("n", Some("p"), None)).unwrap();
        assert!(ok.work_dir.starts_with("/workspace/work/p/default/n/"), "{}", ok.work_dir);

        let escaping = JobIdentity::new("n", Some("../../../../tmp/x"), Some("y"));
        let err = backend.run_layout(&escaping).unwrap_err().to_string();
        assert!(err.contains("not under `/workspace/work`"), "{err}");
    }
}

#[cfg(test)]
mod events_tests;
