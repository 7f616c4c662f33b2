//! The `Backend` of `tpu` hosts: a job runs on every worker of the host's TPU VM.
//!
//! `submit` makes the VM ready through [`Vm`] (reused when `READY`; created only when the
//! caller confirmed it; a preempted VM theseus created is recreated), connects to each worker
//! over SSH (the user's ssh config; user from `ssh_user` or the node's `ssh-keys`), and starts
//! one run per worker as the plain backend does (its claim, its ship through the store, its
//! detached supervisor: see [`workers`]), all workers at once. The bootstrap is wired by
//! `wiring.sh` from each worker's metadata server. A failed submit leaves nothing: the workers'
//! runs that started are cancelled, and a VM this submit created is deleted. One live run per
//! name: each worker's claim decides (the plain backend's); two submits of one name at once
//! leave at most one live run, none when each won a worker (both are refused, naming the other).
//!
//! `status` reads the VM first, then every worker. A preempted VM theseus created is created
//! anew by `status`, and the run starts again on it from what the client kept ([`spool`]:
//! code, bootstrap; not for a job with secrets), as the next attempt (`THESEUS_RESTART_COUNT`,
//! so the bootstrap resumes from the run's latest checkpoint); any other preempted, stopped or
//! recreated VM ends the run as preempted. Once a VM is deleted, `status` answers the last
//! final status it saw; `logs` merges the workers' logs, each line's source
//! `worker-N`; `cancel` stops the run on every worker, then deletes a VM theseus created unless
//! the run keeps it; `shell` and `connect_port` enter worker `rank`; `sync` pushes to every
//! worker; `gc` reclaims on every worker of a READY VM as the plain backend does, and lists as
//! leftovers a VM theseus created whose run is over. Worker 0's wrapper deletes a VM theseus
//! created once the job ends (`worker.sh`).

pub mod cloud_vm;
mod combine;
mod spool;
pub mod vm;
pub mod workers;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Accelerator, run_label};
use crate::fit::VmSeen;
use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use theseus_backend_ssh::plain::PlainHandleData;
use theseus_core::availability::Availability;
use theseus_core::backend::{
    Backend, JobHandle, JobState, JobStatus, LogLine, LogOptions, LogStream, PortStream, PreparedJob, ReclaimOptions,
    ReclaimReport, RunLayout, StoreUsage, SubmitOptions, SyncOptions, SyncReport,
};
use theseus_core::bootstrap::{Launch, Wiring};
use theseus_core::config::ClusterConfig;
use theseus_core::job::JobIdentity;
use theseus_core::plan::HostKind;
use theseus_core::session::{ShellRequest, ShellSession};
use theseus_core::snapshot::Snapshot;
use theseus_core::solver::{Plan, Request};
use theseus_core::{Error, Result};

pub use vm::{Progress, Ready, Vm, VmNode};
pub use workers::Connector;
use workers::{Pool, SelfDelete, Worker};

pub use crate::config::KIND;

/// How the workers find their rank: the metadata server (see `wiring.sh`).
pub const WIRING: Wiring = Wiring { scheme: "tpu", shell: include_str!("wiring.sh") };

/// What a TPU [`JobHandle`] carries in `data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TpuHandleData {
    /// The node id.
    pub node: String,
    /// The node's incarnation the run started on ([`VmNode::id`]).
    pub node_id: String,
    /// Whether this run's submit created the VM.
    pub created: bool,
    /// `--keep`: the VM stays when the run ends or is cancelled.
    pub keep: bool,
    /// The run on each worker, worker 0 first.
    pub workers: Vec<WorkerRun>,
}

/// The run on one worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRun {
    /// How the worker was reached.
    pub address: String,
    /// As whom.
    pub user: Option<String>,
    /// The worker's run, as the plain backend keeps it.
    pub run: PlainHandleData,
}

/// Runs jobs on the workers of one TPU VM.
#[derive(Debug)]
pub struct TpuBackend {
    name: String,
    cluster_name: String,
    cluster: ClusterConfig,
    vm: Arc<dyn Vm>,
    connector: Connector,
    self_delete_after: Option<Duration>,
    accelerator: Option<Accelerator>,
    spool_root: Option<PathBuf>,
    zone: Option<String>,
    pool: Pool,
}

/// Whether the run of a handle still stands on the VM, and where.
enum Standing {
    /// On `node`, as `runs` (one per worker), started for the `attempt`-th time.
    Live { node: VmNode, runs: Vec<WorkerRun>, attempt: u32 },
    /// Not on any worker now: what `status` answers.
    Report(JobStatus),
}

/// What [`TpuBackend::resume`] did.
enum Resume {
    /// The run runs again.
    Started,
    /// Another client is at it.
    Busy,
    /// Nothing was kept to start it from.
    NotKept,
}

/// How long a client's resume lock holds off others (a recreation takes minutes).
const RESUME_LOCK: Duration = Duration::from_secs(1800);

impl fmt::Display for TpuBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tpu({})", self.name)
    }
}

impl TpuBackend {
    /// The backend of host `name` (cluster `cluster_name`) over `vm`, reaching workers by
    /// `connector`. Worker 0 deletes nothing until [`TpuBackend::with_self_delete`].
    pub fn new(name: &str, cluster_name: &str, cluster: ClusterConfig, vm: Arc<dyn Vm>, connector: Connector) -> Self {
        TpuBackend {
            name: name.to_owned(),
            cluster_name: cluster_name.to_owned(),
            cluster,
            vm,
            connector,
            self_delete_after: None,
            accelerator: None,
            spool_root: None,
            zone: None,
            pool: Pool::default(),
        }
    }

    /// Worker 0 deletes a VM theseus created for the run `after` the run's end (unless kept),
    /// through the API as the VM's own gcloud would reach it (see `worker.sh`).
    pub fn with_self_delete(mut self, after: Duration) -> Self {
        self.self_delete_after = Some(after);
        self
    }

    /// Keeps runs on VMs theseus created under `root` (see [`spool`]), so that `status` starts
    /// them again on the VM it creates anew after a preemption.
    pub fn with_spool(mut self, root: PathBuf) -> Self {
        self.spool_root = Some(root);
        self
    }

    /// The VM's zone, for the lines [`Backend::locate`] prints.
    pub fn with_zone(mut self, zone: &str) -> Self {
        self.zone = Some(zone.to_owned());
        self
    }

    fn spool(&self, run: &str) -> Option<spool::Spool> {
        self.spool_root.as_deref().map(|root| spool::Spool::new(root, &self.name, run))
    }

    /// The host's accelerator, for availability.
    pub fn with_accelerator(mut self, accelerator: Accelerator) -> Self {
        self.accelerator = Some(accelerator);
        self
    }

    /// Labels of a VM this run creates.
    fn labels(&self, identity: &JobIdentity) -> BTreeMap<String, String> {
        let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_default();
        BTreeMap::from([
            ("theseus-created".to_owned(), "true".to_owned()),
            ("theseus-run".to_owned(), run_label(&identity.run_id)),
            ("theseus-user".to_owned(), run_label(&user)),
        ])
    }

    fn data(&self, handle: &JobHandle) -> Result<TpuHandleData> {
        if handle.kind != KIND {
            return Err(Error::backend(self, format!("handle of a {} job given to the tpu backend", handle.kind)));
        }
        let data: TpuHandleData = serde_json::from_value(handle.data.clone())
            .map_err(|e| Error::backend(self, format!("malformed tpu job handle: {e}")))?;
        // Each worker's run dir is the run's own: a handle whose id is not the runs' is unknown.
        for w in &data.workers {
            if !w.run.run_dir.ends_with(&format!("/{}", handle.id)) {
                return Err(Error::NotFound {
                    what: format!("run `{}` on `{}` (the handle's run dirs are another run's)", handle.id, self.name),
                });
            }
        }
        Ok(data)
    }

    /// The plain handle of `run` of this run.
    fn plain_handle(&self, handle: &JobHandle, run: &PlainHandleData) -> JobHandle {
        JobHandle {
            kind: theseus_backend_ssh::plain::KIND,
            host: self.name.clone(),
            id: handle.id.clone(),
            data: serde_json::to_value(run).expect("handle data serializes"),
        }
    }

    /// The plain handles of every worker's run.
    fn plain_handles(&self, handle: &JobHandle, runs: &[WorkerRun]) -> Vec<JobHandle> {
        runs.iter().map(|r| self.plain_handle(handle, &r.run)).collect()
    }

    /// Worker `index` of `node`, connected.
    async fn worker(&self, node_id: &str, index: u32, address: &str, user: Option<&str>) -> Result<Arc<Worker>> {
        self.pool
            .get(&self.connector, &self.name, &self.cluster_name, &self.cluster, node_id, index, address, user)
            .await
    }

    /// The workers of `runs` on node incarnation `node_id`, connected.
    async fn run_workers(&self, node_id: &str, runs: &[WorkerRun]) -> Result<Vec<Arc<Worker>>> {
        let all = runs.iter().enumerate().map(|(i, w)| self.worker(node_id, i as u32, &w.address, w.user.as_deref()));
        futures::future::try_join_all(all).await
    }

    /// Where the run of `data` stands: on the node it started on, or on the node created anew
    /// after a preemption where it was started again; else what `status` answers. With
    /// `may_resume`, a run interrupted by a preemption of a VM theseus created is started again
    /// first (the VM created anew, see [`TpuBackend::resume`]).
    async fn standing(&self, handle: &JobHandle, data: &TpuHandleData, may_resume: bool) -> Result<Standing> {
        let report = |state: JobState, message: String| {
            Ok(Standing::Report(JobStatus {
                state,
                exit_code: None,
                message: Some(message),
                ranks: vec![],
                attempt: None,
            }))
        };
        let spool = self.spool(&handle.id);
        let mut node = self.vm.node().await?;
        // Created anew for this run by a resume whose client stopped before it started the run
        // again (its status was given up on): READY, labelled with this run, not started on.
        let unstarted = |n: &VmNode, spool: &spool::Spool| {
            n.state == "READY"
                && n.id != data.node_id
                && n.labels.get("theseus-run").is_some_and(|r| *r == run_label(&handle.id))
                && spool.incarnation(&n.id).is_none()
        };
        if may_resume
            && let Some(n) = &node
            && let Some(spool) = &spool
            && n.created_by_theseus
            && (n.is_interrupted() || unstarted(n, spool))
        {
            // What the run is if the restart fails, even after the VM is gone.
            let interrupted = |why: String| JobStatus {
                state: JobState::Preempted,
                exit_code: None,
                message: Some(why),
                ranks: vec![],
                attempt: Some(spool.restarts() + 1),
            };
            if n.is_interrupted() {
                spool.save_final(&interrupted(format!(
                    "VM `{}` was {} and the run stopped; submit it again to resume from its latest checkpoint",
                    n.name, n.state
                )));
            }
            let resumed = match self.resume(data, spool).await {
                Ok(r) => r,
                Err(e) => {
                    let why = format!(
                        "VM `{}` was {}; starting the run again failed: {e}; submit it again to resume from its \
                         latest checkpoint",
                        n.name, n.state
                    );
                    spool.save_final(&interrupted(why.clone()));
                    spool.forget_job();
                    return Ok(Standing::Report(interrupted(why)));
                }
            };
            match resumed {
                Resume::Started => {
                    // Running again: the interrupted status above is not its end.
                    spool.clear_final();
                    node = self.vm.node().await?;
                }
                Resume::Busy => {
                    return report(
                        JobState::Running,
                        format!("VM `{}` was {}; it is being created again to restart the run", n.name, n.state),
                    );
                }
                Resume::NotKept => {}
            }
        }
        match node {
            None => match spool.as_ref().and_then(spool::Spool::final_status) {
                Some(mut last) => {
                    let was = last.message.take().map(|m| format!("; {m}")).unwrap_or_default();
                    last.message = Some(format!("VM `{}` is deleted since the run ended{was}", data.node));
                    Ok(Standing::Report(last))
                }
                None => report(
                    JobState::Unknown,
                    format!(
                        "VM `{}` no longer exists (deleted when run `{}` ended, by cancel, or by hand): its workers' \
                         files went with it",
                        data.node, handle.id
                    ),
                ),
            },
            Some(n) if n.is_interrupted() => {
                let again = if n.created_by_theseus && spool.as_ref().is_some_and(|s| s.load().is_some()) {
                    ""
                } else {
                    "; submit it again to resume from its latest checkpoint"
                };
                report(
                    JobState::Preempted,
                    format!("VM `{}` is {}: the run was interrupted on every worker{again}", n.name, n.state),
                )
            }
            Some(n) if n.state != "READY" => {
                let health = n.health.as_deref().map(|h| format!(" ({h})")).unwrap_or_default();
                let why = if n.state == "DELETING" && data.created && !data.keep {
                    " (worker 0 deletes the VM the run created once the run has ended)"
                } else {
                    ""
                };
                report(
                    JobState::Unknown,
                    format!("VM `{}` is {}{health}: its workers cannot be asked now{why}", n.name, n.state),
                )
            }
            Some(n) if n.id == data.node_id => Ok(Standing::Live { node: n, runs: data.workers.clone(), attempt: 1 }),
            Some(n) => match spool.as_ref().and_then(|s| s.incarnation(&n.id).map(|runs| (runs, s.restarts()))) {
                Some((runs, restarts)) => Ok(Standing::Live { node: n, runs, attempt: restarts + 1 }),
                None => report(
                    JobState::Preempted,
                    format!(
                        "VM `{}` was created again since run `{}` started: the run's processes are gone",
                        n.name, handle.id
                    ),
                ),
            },
        }
    }

    /// Starts the run again on its VM created anew after a preemption, from what the spool
    /// kept: the same code and bootstrap, `THESEUS_RESTART_COUNT` counting the restarts, so that
    /// the bootstrap resumes from the run's latest checkpoint (issue 26's resume).
    async fn resume(&self, data: &TpuHandleData, spool: &spool::Spool) -> Result<Resume> {
        let Some(kept) = spool.load() else { return Ok(Resume::NotKept) };
        let Some(_lock) = spool.lock(RESUME_LOCK) else { return Ok(Resume::Busy) };
        async {
            let labels = self.labels(&kept.identity);
            let ready = self.vm.ensure_ready_as(kept.creation.as_ref(), true, &labels, &|_| {}).await?;
            let snapshot = Snapshot::collect(&spool.code(), theseus_core::snapshot::SnapshotMode::Dirty)?;
            let plan = Plan {
                host: self.name.clone(),
                kind: KIND,
                cluster: self.cluster_name.clone(),
                chip: self.accelerator.map(|a| a.chip),
                nodes: kept.processes,
                chips_per_node: self.accelerator.map_or(0, |a| a.chips_per_worker),
                processes_per_node: 1,
                total_chips: self.accelerator.map_or(0, |a| a.chips),
                placement: Default::default(),
                placement_text: String::new(),
                queued: false,
                notes: vec![],
                considered: vec![],
            };
            let job = PreparedJob {
                identity: kept.identity.clone(),
                experiment: Default::default(),
                env: vec![],
                plan,
                snapshot,
                bootstrap: kept.bootstrap(),
            };
            let restarts = spool.restarts() + 1;
            // The run's dirs on a worker that kept its disk are this run's leftovers: they go first.
            let created = data.created || ready.created;
            let options = SubmitOptions::default();
            let started = self.start_on_workers(&job, &options, &ready, created, data.keep, restarts, true).await?;
            let runs: TpuHandleData = serde_json::from_value(started.data).expect("own handle data");
            spool.save_incarnation(&ready.node.id, &runs.workers)?;
            Ok(Resume::Started)
        }
        .await
    }

    /// Submits `job`: see the module docs. `create_confirmed`: a missing VM may be created;
    /// `keep`: a VM this submit creates stays when the run ends.
    async fn submit_with(
        &self,
        job: &PreparedJob,
        options: &SubmitOptions,
        create_confirmed: bool,
        keep: bool,
    ) -> Result<JobHandle> {
        let note = |s: &str| options.note(s);
        let labels = self.labels(&job.identity);
        let ready = tokio::select! {
            ready = self.vm.ensure_ready(create_confirmed, &labels, &note) => ready?,
            signal = theseus_core::interrupt::wait() => {
                return Err(self.take_back_interrupted_create(&labels, signal.name(), &note).await);
            }
        };
        match self.start_on_workers(job, options, &ready, ready.created, keep, 0, false).await {
            Ok(handle) => {
                // Kept for a restart after a preemption (a VM theseus created is created anew).
                if (ready.created || ready.node.created_by_theseus)
                    && let Some(spool) = self.spool(&handle.id)
                {
                    match spool.save(job, self.vm.creation()) {
                        Ok(true) => {}
                        Ok(false) => options.note(
                            "the job has secrets, which theseus never writes to a file: after a preemption, submit it \
                             again to resume",
                        ),
                        Err(e) => options.note(&format!("cannot keep the job for a restart after a preemption: {e}")),
                    }
                }
                Ok(handle)
            }
            Err(e) => {
                if ready.created && !keep {
                    options.note(&format!("deleting VM `{}`, which this submit created", ready.node.name));
                    if let Err(d) = self.vm.delete(&note).await {
                        return Err(Error::backend(
                            self,
                            format!(
                                "{e}; and deleting the VM this submit created failed too ({d}): `theseus gc` lists it"
                            ),
                        ));
                    }
                }
                Err(e)
            }
        }
    }

    /// After an interrupt during [`Vm::ensure_ready`]: deletes the VM when this submit's create
    /// made it (labelled with its run), within two minutes; the error says what is left.
    async fn take_back_interrupted_create(
        &self,
        labels: &BTreeMap<String, String>,
        signal: &str,
        note: Progress<'_>,
    ) -> Error {
        let ours = |n: &VmNode| n.created_by_theseus && n.labels.get("theseus-run") == labels.get("theseus-run");
        let left = match tokio::time::timeout(Duration::from_secs(120), async {
            match self.vm.node().await? {
                Some(n) if ours(&n) => {
                    note(&format!("{signal}: deleting VM `{}`, which this submit was creating", n.name));
                    self.vm.delete(note).await.map(|()| "the VM it was creating is deleted".to_owned())
                }
                _ => Ok("nothing was created".to_owned()),
            }
        })
        .await
        {
            Ok(Ok(what)) => what,
            Ok(Err(e)) => format!("deleting the VM it was creating failed ({e}): `theseus gc` lists it"),
            Err(_) => "the VM it was creating is still being deleted or created: `theseus gc` lists it".to_owned(),
        };
        Error::backend(self, format!("{signal} while the VM was being made ready: {left}"))
    }

    /// Starts `job` on the workers of `ready`'s node (see the module docs): `created`, the run's
    /// VM was created by theseus for it; `restarts`, how many times the run started before;
    /// `clear`, the run's dirs on the workers go first (a restart's leftovers).
    #[allow(clippy::too_many_arguments)]
    async fn start_on_workers(
        &self,
        job: &PreparedJob,
        options: &SubmitOptions,
        ready: &Ready,
        created: bool,
        keep: bool,
        restarts: u32,
        clear: bool,
    ) -> Result<JobHandle> {
        let node = &ready.node;
        if node.workers.is_empty() {
            return Err(Error::backend(
                self,
                format!("VM `{}` is READY but the API lists no worker address", node.name),
            ));
        }
        // One process per worker, on as many workers as the plan has processes (the fit rule
        // plans the whole slice).
        let processes = job.plan.processes().max(1) as usize;
        if processes > node.workers.len() {
            return Err(Error::backend(
                self,
                format!(
                    "the plan has {processes} processes but VM `{}` has {} worker(s) (one process each)",
                    node.name,
                    node.workers.len()
                ),
            ));
        }
        let addresses = &node.workers[..processes];
        let user = self.connector.user.clone().or_else(|| node.ssh_user.clone());
        options.note(&format!("connecting to {} worker(s) of VM `{}`", addresses.len(), node.name));
        let workers = futures::future::try_join_all(
            addresses.iter().enumerate().map(|(i, a)| self.worker(&node.id, i as u32, a, user.as_deref())),
        )
        .await?;
        let template = self.layout(&job.identity, &job.plan)?;
        let delete = self
            .self_delete_after
            .filter(|_| created && !keep)
            .map(|after| SelfDelete { resource: node.resource.clone(), after: after.as_secs() });
        let mut jobs = Vec::new();
        for w in &workers {
            let dirs = workers::dirs(&self.name, &self.cluster_name, &self.cluster, &w.home);
            let layout = dirs.layout(&job.identity, template.launch.clone())?;
            if clear {
                w.plain.remove(&layout.work_dir, &[&layout.run_dir]).await;
            }
            let delete = if w.index == 0 { delete.as_ref() } else { None };
            jobs.push(workers::worker_job(job, &template, &layout, delete, restarts));
        }
        let quiet = SubmitOptions { replace: options.replace, ..SubmitOptions::default() };
        let results = futures::future::join_all(workers.iter().zip(&jobs).map(|(w, j)| {
            let o = if w.index == 0 { options } else { &quiet };
            w.plain.submit(j, o)
        }))
        .await;
        let mut runs = Vec::new();
        let mut first_error = None;
        for (w, r) in workers.iter().zip(results) {
            match r {
                Ok(h) => runs.push((w, h)),
                Err(e) => {
                    first_error.get_or_insert(Error::Backend {
                        backend: self.to_string(),
                        message: format!("failed to start the run on worker {} of VM `{}`", w.index, node.name),
                        source: Some(Box::new(e)),
                    });
                }
            }
        }
        if let Some(e) = first_error {
            // Nothing half-started: the workers where it started stop again.
            for (w, h) in &runs {
                let _ = w.plain.cancel(h).await;
            }
            return Err(e);
        }
        let mut worker_runs = Vec::new();
        for ((w, h), address) in runs.iter().zip(&node.workers) {
            let run: PlainHandleData = serde_json::from_value(h.data.clone())
                .map_err(|e| Error::backend(self, format!("worker {}'s handle: {e}", w.index)))?;
            worker_runs.push(WorkerRun { address: address.clone(), user: user.clone(), run });
        }
        let data =
            TpuHandleData { node: node.name.clone(), node_id: node.id.clone(), created, keep, workers: worker_runs };
        Ok(JobHandle {
            kind: KIND,
            host: self.name.clone(),
            id: job.identity.run_id.clone(),
            data: serde_json::to_value(&data).expect("handle data serializes"),
        })
    }

    /// The worker `rank` of a running run, with its plain handle.
    async fn running_worker(&self, handle: &JobHandle, rank: u32) -> Result<(Arc<Worker>, JobHandle)> {
        let data = self.data(handle)?;
        let (node, runs) = self.live(handle, &data).await?;
        let Some(run) = runs.get(rank as usize) else {
            return Err(Error::backend(
                self,
                format!("run `{}` has {} worker(s); there is no rank {rank}", handle.id, runs.len()),
            ));
        };
        let worker = self.worker(&node.id, rank, &run.address, run.user.as_deref()).await?;
        let plain = self.plain_handle(handle, &run.run);
        Ok((worker, plain))
    }

    /// The node and workers' runs of a run that stands; an error saying why when it does not.
    async fn live(&self, handle: &JobHandle, data: &TpuHandleData) -> Result<(VmNode, Vec<WorkerRun>)> {
        match self.standing(handle, data, false).await? {
            Standing::Live { node, runs, .. } => Ok((node, runs)),
            Standing::Report(status) => Err(Error::backend(self, status.message.unwrap_or_default())),
        }
    }
}

#[async_trait]
impl Backend for TpuBackend {
    fn kind(&self) -> HostKind {
        KIND
    }

    /// More than one worker: wired by the metadata server (`wiring.sh`).
    fn layout(&self, identity: &JobIdentity, plan: &Plan) -> Result<RunLayout> {
        let launch = if plan.processes() > 1 {
            Launch::Wired {
                coordinator_port: theseus_backend_ssh::paths::coordinator_port(&identity.run_id),
                wiring: WIRING,
            }
        } else {
            Launch::Single
        };
        workers::template_layout(&self.name, &self.cluster_name, &self.cluster, identity, launch)
    }

    fn locate(&self, handle: &JobHandle) -> Vec<String> {
        let Ok(data) = self.data(handle) else { return Vec::new() };
        let zone = self.zone.as_deref().map(|z| format!(" --zone {z}")).unwrap_or_default();
        let log = data.workers.first().map(|w| w.run.log_file.clone()).unwrap_or_default();
        vec![
            format!(
                "TPU VM `{}`, {} worker(s){}",
                data.node,
                data.workers.len(),
                if data.created && !data.keep { ", deleted by theseus when the run ends" } else { "" }
            ),
            format!("gcloud compute tpus tpu-vm ssh {}{zone} --worker=0 --command='tail -f {log}'", data.node),
        ]
    }

    async fn availability(&self, _request: &Request) -> Result<Availability> {
        let Some(accel) = &self.accelerator else {
            return Ok(Availability::Unknown { reason: "the host's accelerator_type is not known".into() });
        };
        let seen = match self.vm.node().await? {
            None => VmSeen::Absent,
            Some(n) if n.state == "READY" => VmSeen::Ready,
            Some(n) => VmSeen::Other(n.state),
        };
        Ok(crate::fit::availability(&self.name, accel, &seen))
    }

    /// The VM a submit would create now (absent, or preempted and theseus created it).
    async fn creates(&self, _job: &PreparedJob) -> Result<Vec<String>> {
        Ok(self.vm.plan_creation().await?.into_iter().collect())
    }

    async fn submit(&self, job: &PreparedJob, options: &SubmitOptions) -> Result<JobHandle> {
        self.submit_with(job, options, options.create_confirmed, options.keep).await
    }

    async fn status(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        let (node, runs, attempt) = match self.standing(handle, &data, true).await? {
            Standing::Live { node, runs, attempt } => (node, runs, attempt),
            Standing::Report(status) => return Ok(status),
        };
        let workers = self.run_workers(&node.id, &runs).await?;
        let all = futures::future::join_all(
            workers.iter().zip(&self.plain_handles(handle, &runs)).map(|(w, h)| w.plain.status(h)),
        )
        .await;
        let mut statuses = Vec::new();
        for (i, s) in all.into_iter().enumerate() {
            statuses.push((i as u32, runs[i].address.clone(), s?));
        }
        let mut status = combine::combine(&statuses);
        status.attempt = Some(attempt);
        if status.state.is_terminal()
            && let Some(spool) = self.spool(&handle.id)
        {
            spool.save_final(&status);
            // The logs outlive a VM deleted after the run (worker 0's self-delete, cancel).
            if !spool.has_logs()
                && let Ok(stream) = self.logs(handle, &LogOptions::default()).await
            {
                let lines: Vec<LogLine> = stream.filter_map(|l| async move { l.ok() }).collect().await;
                spool.save_logs(&lines);
            }
        }
        Ok(status)
    }

    async fn logs(&self, handle: &JobHandle, options: &LogOptions) -> Result<LogStream> {
        let data = self.data(handle)?;
        let (node, runs) = match self.standing(handle, &data, false).await? {
            Standing::Live { node, runs, .. } => (node, runs),
            Standing::Report(status) => {
                // Gone with the VM: the logs kept when the run ended, if any.
                let kept = self.spool(&handle.id).and_then(|s| s.logs());
                let Some(lines) = kept else {
                    return Err(Error::backend(self, status.message.unwrap_or_default()));
                };
                let lines = lines.into_iter().filter(move |l| options.rank.is_none_or(|r| l.rank == Some(r)));
                let lines: Vec<Result<LogLine>> = lines.map(Ok).collect();
                return Ok(Box::pin(futures::stream::iter(lines)));
            }
        };
        let workers = self.run_workers(&node.id, &runs).await?;
        let mut streams = Vec::new();
        for (w, r) in workers.iter().zip(&runs) {
            if options.rank.is_some_and(|rank| rank != w.index) {
                continue;
            }
            let plain = LogOptions { follow: options.follow, rank: None };
            let stream = w.plain.logs(&self.plain_handle(handle, &r.run), &plain).await?;
            let index = w.index;
            streams.push(
                stream
                    .map(move |line| {
                        line.map(|l| LogLine {
                            rank: Some(index),
                            text: l.text,
                            source: Some(format!("worker-{index}")),
                        })
                    })
                    .boxed(),
            );
        }
        Ok(Box::pin(futures::stream::select_all(streams)))
    }

    async fn cancel(&self, handle: &JobHandle) -> Result<JobStatus> {
        let data = self.data(handle)?;
        let (mut status, node_id) = match self.standing(handle, &data, false).await? {
            Standing::Report(status) => (status, data.node_id.clone()),
            Standing::Live { node, runs, .. } => {
                let workers = self.run_workers(&node.id, &runs).await?;
                let all = futures::future::join_all(
                    workers.iter().zip(&self.plain_handles(handle, &runs)).map(|(w, h)| w.plain.cancel(h)),
                )
                .await;
                let mut statuses = Vec::new();
                for (i, s) in all.into_iter().enumerate() {
                    statuses.push((i as u32, runs[i].address.clone(), s?));
                }
                (combine::combine(&statuses), node.id)
            }
        };
        if let Some(spool) = self.spool(&handle.id) {
            // A cancelled run is not started again after a preemption.
            spool.save_final(&status);
            spool.forget_job();
        }
        if data.created && !data.keep && self.vm.node().await?.is_some_and(|n| n.id == node_id) {
            self.vm.delete(&|_| {}).await?;
            let was = status.message.take().map(|m| format!(" ({m})")).unwrap_or_default();
            status.message = Some(format!("VM `{}`, which the run created, is deleted{was}", data.node));
        }
        Ok(status)
    }

    async fn shell(&self, handle: &JobHandle, request: &ShellRequest) -> Result<ShellSession> {
        let (worker, plain) = self.running_worker(handle, request.rank).await?;
        let one = ShellRequest { rank: 0, command: request.command.clone(), tty: request.tty };
        worker.plain.shell(&plain, &one).await
    }

    async fn connect_port(&self, handle: &JobHandle, rank: u32, port: u16) -> Result<PortStream> {
        let (worker, plain) = self.running_worker(handle, rank).await?;
        worker.plain.connect_port(&plain, 0, port).await
    }

    async fn sync(&self, handle: &JobHandle, snapshot: &Snapshot, options: &SyncOptions) -> Result<SyncReport> {
        let data = self.data(handle)?;
        let (node, runs) = self.live(handle, &data).await?;
        let workers = self.run_workers(&node.id, &runs).await?;
        let quiet = SyncOptions::default();
        let handles = self.plain_handles(handle, &runs);
        let all = futures::future::join_all(workers.iter().zip(&handles).map(|(w, h)| {
            let o = if w.index == 0 { options } else { &quiet };
            w.plain.sync(h, snapshot, o)
        }))
        .await;
        let mut first = None;
        for r in all {
            let r = r?;
            first.get_or_insert(r);
        }
        first.ok_or_else(|| Error::backend(self, "the run has no worker"))
    }

    /// On every worker of a READY VM (a kept one holds old runs): what the plain backend frees
    /// there, paths prefixed with the worker. A VM that is absent or not READY holds nothing to
    /// reach.
    async fn reclaim(&self, options: &ReclaimOptions) -> Result<ReclaimReport> {
        let mut report = ReclaimReport { dry_run: options.dry_run, ..ReclaimReport::default() };
        let Some(node) = self.vm.node().await?.filter(|n| n.state == "READY") else { return Ok(report) };
        let user = self.connector.user.clone().or_else(|| node.ssh_user.clone());
        let workers = futures::future::try_join_all(
            node.workers.iter().enumerate().map(|(i, a)| self.worker(&node.id, i as u32, a, user.as_deref())),
        )
        .await?;
        let all = futures::future::join_all(workers.iter().map(|w| w.plain.reclaim(options))).await;
        for (w, r) in workers.iter().zip(all) {
            let r = r?;
            report.freed_bytes += r.freed_bytes;
            report.items.extend(r.items.into_iter().map(|mut i| {
                i.path = format!("worker-{}:{}", w.index, i.path);
                i
            }));
            report.failed.extend(r.failed.into_iter().map(|f| format!("worker-{}:{f}", w.index)));
        }
        Ok(report)
    }

    /// The stores of every worker of a READY VM, summed (nothing when it is absent or not READY).
    async fn usage(&self) -> Result<StoreUsage> {
        let mut total = StoreUsage::default();
        let Some(node) = self.vm.node().await?.filter(|n| n.state == "READY") else { return Ok(total) };
        let user = self.connector.user.clone().or_else(|| node.ssh_user.clone());
        let workers = futures::future::try_join_all(
            node.workers.iter().enumerate().map(|(i, a)| self.worker(&node.id, i as u32, a, user.as_deref())),
        )
        .await?;
        for u in futures::future::join_all(workers.iter().map(|w| w.plain.usage())).await {
            let u = u?;
            total.objects += u.objects;
            total.object_bytes += u.object_bytes;
            total.unused_objects += u.unused_objects;
            total.unused_object_bytes += u.unused_object_bytes;
            total.run_dirs += u.run_dirs;
            total.run_dir_bytes += u.run_dir_bytes;
            total.leftovers += u.leftovers;
            total.leftover_bytes += u.leftover_bytes;
        }
        Ok(total)
    }

    async fn leftovers(&self, older_than: Duration, dry_run: bool) -> Result<Option<Vec<String>>> {
        let Some(node) = self.vm.node().await? else { return Ok(Some(vec![])) };
        if !node.created_by_theseus {
            return Ok(Some(vec![]));
        }
        let run = node.labels.get("theseus-run").cloned().unwrap_or_default();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if !combine::started_before(&run, older_than, now) {
            return Ok(Some(vec![]));
        }
        let over = node.is_interrupted() || node.state == "READY" && !self.run_alive(&node, &run).await?;
        if !over {
            return Ok(Some(vec![]));
        }
        let line =
            format!("TPU VM `{}` ({}; created by theseus for run `{run}`, which is over)", node.name, node.state);
        if !dry_run {
            self.vm.delete(&|_| {}).await?;
        }
        Ok(Some(vec![line]))
    }
}

impl TpuBackend {
    /// Whether any process of run `run` lives on worker 0 of `node`.
    async fn run_alive(&self, node: &VmNode, run: &str) -> Result<bool> {
        let Some(address) = node.workers.first() else { return Ok(false) };
        let user = self.connector.user.clone().or_else(|| node.ssh_user.clone());
        let worker = self.worker(&node.id, 0, address, user.as_deref()).await?;
        let script = r#"grep -lzxF -- "THESEUS_LOCAL_RUN=$1" /proc/[0-9]*/environ 2>/dev/null | head -n1"#;
        let cmd = theseus_backend_ssh::ssh::RemoteCommand::script(script, [run.to_owned()]).retry_safe();
        let out = worker
            .plain
            .ssh()
            .run(&cmd)
            .await
            .map_err(|e| worker.plain.ssh_error(&format!("look for processes of run `{run}`"), e))?;
        Ok(!out.stdout_text().trim().is_empty())
    }
}
