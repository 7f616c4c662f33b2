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
//! anew by `status`, and the run starts again on it from what the client kept (`spool`:
//! code, bootstrap; not for a job with secrets), as the next attempt (`THESEUS_RESTART_COUNT`,
//! so the bootstrap resumes from the run's latest checkpoint); any other preempted, stopped or
//! recreated VM ends the run as preempted. Once a VM is deleted, `status` answers the last
//! final status it saw; `logs` merges the workers' logs, each line's source
//! `worker-N`; `cancel` stops the run on every worker, then deletes a VM theseus created unless
//! the run keeps it; `shell` and `connect_port` enter worker `rank`; `sync` pushes to every
//! worker; `gc` reclaims on every worker of a READY VM as the plain backend does, and lists as
//! leftovers a VM theseus created whose run is over. Worker 0's wrapper deletes a VM theseus
//! created once the job ends (`worker.sh`).
//!
//! Files: [`vm`] (what the backend needs of the VM) and [`cloud_vm`] (it over the API),
//! [`workers`] (a worker as a plain host), `submit`, `restart` (where a run stands, and its
//! restart), `gc`, `combine` (the run's state from its workers', pure), `spool` (what the
//! client keeps of a run).

pub mod cloud_vm;
mod combine;
mod gc;
mod restart;
mod spool;
mod submit;
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
    Backend, JobHandle, JobStatus, LogLine, LogOptions, LogStream, PortStream, PreparedJob, ReclaimOptions,
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

use restart::Standing;
pub use vm::{Progress, Ready, Vm, VmNode};
pub use workers::Connector;
use workers::{Pool, Worker};

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
    project: Option<String>,
    pool: Pool,
}

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
            project: None,
            pool: Pool::default(),
        }
    }

    /// Worker 0 deletes a VM theseus created for the run `after` the run's end (unless kept),
    /// through the API as the VM's own gcloud would reach it (see `worker.sh`).
    pub fn with_self_delete(mut self, after: Duration) -> Self {
        self.self_delete_after = Some(after);
        self
    }

    /// Keeps runs on VMs theseus created under `root` (see `spool`), so that `status` starts
    /// them again on the VM it creates anew after a preemption.
    pub fn with_spool(mut self, root: PathBuf) -> Self {
        self.spool_root = Some(root);
        self
    }

    /// The VM's zone and project (when the host names one), for the lines [`Backend::locate`]
    /// prints.
    pub fn with_zone(mut self, zone: &str, project: Option<&str>) -> Self {
        self.zone = Some(zone.to_owned());
        self.project = project.map(str::to_owned);
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
        let project = self.project.as_deref().map(|p| format!(" --project {p}")).unwrap_or_default();
        let log = data.workers.first().map(|w| w.run.log_file.clone()).unwrap_or_default();
        vec![
            format!(
                "TPU VM `{}`, {} worker(s){}",
                data.node,
                data.workers.len(),
                if data.created && !data.keep { ", deleted by theseus when the run ends" } else { "" }
            ),
            format!("gcloud compute tpus tpu-vm ssh {}{zone}{project} --worker=0 --command='tail -f {log}'", data.node),
        ]
    }

    async fn availability(&self, _request: &Request) -> Result<Availability> {
        let Some(accel) = &self.accelerator else {
            return Ok(Availability::Unknown { reason: "the host's accelerator_type is not known".into() });
        };
        // The API's refusal (no credentials, no permission, a bad endpoint) is the host's reason
        // for the plan and the solver's error: the user must fix it before the host can serve.
        let node = match self.vm.node().await {
            Ok(node) => node,
            Err(e) => return Ok(Availability::Unusable { reason: e.to_string() }),
        };
        let seen = match node {
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
        if attempt > 1
            && status.message.is_none()
            && let Some(why) = self.spool(&handle.id).and_then(|s| s.restart_reason())
        {
            status.message =
                Some(format!("{why}; theseus created it anew and started the run again: attempt {attempt}"));
        }
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

    async fn reclaim(&self, options: &ReclaimOptions) -> Result<ReclaimReport> {
        self.reclaim_on_workers(options).await
    }

    async fn usage(&self) -> Result<StoreUsage> {
        self.usage_on_workers().await
    }

    async fn leftovers(&self, older_than: Duration, dry_run: bool) -> Result<Option<Vec<String>>> {
        self.leftover_vm(older_than, dry_run).await
    }
}
