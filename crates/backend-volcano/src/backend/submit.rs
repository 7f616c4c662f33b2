//! The submit flow: claim the job's name (`claim.rs`; refused while another run of it is live,
//! unless `--replace`), hash the code; when the store's index names its tree (`prebuilt.rs`),
//! start no helper and let the gang job's pods build the run dir from the store; otherwise start
//! the helper, wait for its pod (watched), ship the code while renewing the claim, delete the
//! helper on every path and record the tree. Then create the Secret and the gang job (taking
//! both back if either fails) and bind the claim to the job.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::KIND;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt as _, watcher};
use theseus_core::backend::{JobHandle, PreparedJob, ProgressFn, RunLayout, SubmitOptions};
use theseus_core::store::{self, Materialize, Shell, ShipReport, ShipRequest, StoreError, StorePlan, Tree};

use super::VolcanoBackend;
use crate::api::Cluster;
use crate::claim::{self, Claim};
use crate::delete::delete_helper;
use crate::error::VolcanoError;
use crate::handle::HandleData;
use crate::helper::HELPER_TASK;
use crate::prebuilt;
use crate::render::{RenderedJob, owner_reference};
use crate::ship::{ExtraFile, ShipTarget, ship_snapshot};
use crate::status::{Observed, pending_reason, stuck_container};
use crate::store_shell::{ActivityFn, ExecShell};
use crate::types::Job;

pub(crate) async fn submit(
    backend: &VolcanoBackend,
    cluster: &Cluster,
    job: &PreparedJob,
    layout: &RunLayout,
    helper: Job,
    rendered: RenderedJob,
    options: &SubmitOptions,
) -> Result<JobHandle, VolcanoError> {
    let settings = &backend.settings;
    let job_name = rendered.job.metadata.name.clone().unwrap_or_default();
    // The name is claimed before anything of the run is created: a refused submit ships nothing.
    let claim =
        claim::acquire(cluster, &job.identity, &job_name, options, settings.delete_timeout, settings.poll_interval)
            .await?;
    let mut claim = ClaimGuard { cluster: cluster.clone(), claim: Some(claim) };
    let result = submit_claimed(backend, cluster, job, layout, helper, rendered, options, claim.held()).await;
    match &result {
        Ok(_) => claim.disarm(),
        Err(VolcanoError::Replaced { .. }) => claim.disarm(),
        Err(_) => claim.release().await,
    }
    result
}

/// The submit once the name is claimed: ship through the helper (renewing the claim), then
/// create the gang job and bind the claim to it.
#[allow(clippy::too_many_arguments)]
async fn submit_claimed(
    backend: &VolcanoBackend,
    cluster: &Cluster,
    job: &PreparedJob,
    layout: &RunLayout,
    helper: Job,
    mut rendered: RenderedJob,
    options: &SubmitOptions,
    claim: &mut Claim,
) -> Result<JobHandle, VolcanoError> {
    let settings = &backend.settings;
    // What the cluster would refuse (a queue this user cannot read but that does not exist, a
    // webhook's rule, RBAC) is learned before a helper starts and the code ships.
    cluster.check_create_job(&rendered.job).await?;
    let plan = store::plan_of(&job.snapshot).await.map_err(VolcanoError::Store)?;
    let tree = match backend.cluster_config.materialize.unwrap_or_default() {
        Materialize::Link => Some(Tree::of(&plan).map_err(|e| {
            VolcanoError::Store(theseus_core::Error::backend("store", format!("cannot write the tree archive: {e}")))
        })?),
        Materialize::Copy => None,
    };
    // The run's own files, for pods that build the run dir from the store; too big for one
    // environment string, they are shipped through the helper as the code is.
    let mtime = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let run_files = store::tree::run_files_env(&store::ExtraFile::bootstrap(&job.bootstrap), mtime)
        .map_err(|e| VolcanoError::Store(theseus_core::Error::backend("store", e.to_string())))?;
    let small = run_files.len() <= prebuilt::RUN_FILES_MAX;
    match &tree {
        Some(tree) if small && prebuilt::holds(cluster, &tree.key).await => {
            // No helper: the job's pods build the run dir from the store.
            options.note(&format!(
                "the code store already holds this code (tree {}): no helper; each pod builds {} from the store",
                tree.key, layout.work_dir
            ));
            let root = backend.cluster_config.work.trim_end_matches('/');
            prebuilt::add_build_step(&mut rendered.job, root, &layout.work_dir, &layout.log_file, &tree.key);
            rendered.files = Some(prebuilt::run_files_map(&rendered.job, run_files));
            let files = plan.regular_files();
            options.report_shipped(&ShipReport { files, files_present: files, objects_sent: 0, bytes_sent: 0 });
        }
        _ => {
            let helper_name = helper.metadata.name.clone().unwrap_or_default();
            options.note(&format!("starting helper {helper_name} in namespace {}", cluster.namespace()));
            cluster.create_job(&helper).await?;
            let mut guard = HelperGuard { cluster: cluster.clone(), name: helper_name.clone(), armed: true };
            let shipping = Shipping { plan, tree: tree.is_some() };
            let shipped = tokio::select! {
                result = ship_through_helper(backend, cluster, &helper, job, layout, options, shipping) => result,
                lost = claim.keep(cluster, settings.claim_renew_interval) => Err(lost),
                _ = theseus_core::interrupt::wait() => Err(VolcanoError::Interrupted),
            };
            // The helper goes on every path; a failure to delete it is reported, never hidden.
            delete_helper(cluster, &helper_name).await;
            guard.armed = false;
            if shipped? == Shipped::Store
                && let Some(tree) = &tree
            {
                prebuilt::record(cluster, &backend.host, &tree.key).await;
            }
        }
    }

    // A concurrent `--replace` may have taken the name while we shipped: create nothing then.
    claim.renew(cluster).await?;
    let planned = backend.planned_data(job, &rendered);
    let handle = create_gang(&backend.name, cluster, rendered, planned.clone()).await?;
    let data = HandleData {
        uid: serde_json::from_value::<HandleData>(handle.data.clone()).ok().and_then(|d| d.uid),
        ..planned
    };
    if let Err(e) = claim.bind(cluster, &data.job, data.uid.as_deref().unwrap_or_default()).await {
        // Lost the name after all (or cannot tell): take back what this run created.
        let _ = cluster.delete_job(&data.job).await;
        if let Some(s) = &data.secret {
            let _ = cluster.delete_secret(s).await;
        }
        if let Some(s) = &data.service {
            let _ = cluster.delete_service(s).await;
        }
        if let Some(f) = &data.files {
            let _ = cluster.delete_config_map(f).await;
        }
        return Err(e);
    }
    options.note(&format!("created vcjob {} in namespace {}", data.job, cluster.namespace()));
    Ok(handle)
}

/// Gives the claim back when the submit fails or its future is dropped (Ctrl-C, a caller
/// that gave up), unless disarmed.
struct ClaimGuard {
    cluster: Cluster,
    claim: Option<Claim>,
}

impl ClaimGuard {
    fn held(&mut self) -> &mut Claim {
        self.claim.as_mut().expect("the claim is held until disarmed")
    }

    fn disarm(&mut self) {
        self.claim = None;
    }

    async fn release(&mut self) {
        if let Some(claim) = self.claim.take() {
            claim::release(&self.cluster, &claim).await;
        }
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else { return };
        let cluster = self.cluster.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { claim::release(&cluster, &claim).await });
        }
    }
}

/// What to ship through the helper: the snapshot's plan, and whether its tree archive goes
/// into the store too (link mode).
struct Shipping {
    plan: Arc<StorePlan>,
    tree: bool,
}

/// How the code went: through the store, or the whole snapshot (no tree in the store then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shipped {
    Store,
    Whole,
}

/// Waits for the helper's pod and ships the code and bootstrap into it: through the store on
/// the PVC ([`theseus_core::store::ship_planned`] over [`ExecShell`]), or the whole snapshot
/// when the helper image lacks a tool the store needs.
async fn ship_through_helper(
    backend: &VolcanoBackend,
    cluster: &Cluster,
    helper: &Job,
    job: &PreparedJob,
    layout: &RunLayout,
    options: &SubmitOptions,
    shipping: Shipping,
) -> Result<Shipped, VolcanoError> {
    let name = helper.metadata.name.as_deref().unwrap_or_default();
    options.note(&format!("waiting for helper pod of {name} (image {})", backend.host.helper_image));
    let pod = wait_running(cluster, helper, backend.settings.helper_start_timeout).await?;
    options.note(&format!("shipping code to {} through pod {pod}", layout.work_dir));
    // Two deadlines: the whole shipping, and a watchdog on progress (a call starting or ending,
    // bytes accepted by the exec stream), so a stalled exec fails in minutes rather than after
    // the whole budget.
    let started = tokio::time::Instant::now();
    let last_progress = Arc::new(AtomicU64::new(0));
    let activity: ActivityFn = {
        let last = last_progress.clone();
        Arc::new(move || {
            last.store(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed)
        })
    };
    let progress: ProgressFn = {
        let (activity, forward) = (activity.clone(), options.progress.clone());
        Arc::new(move |sent, total| {
            activity();
            if let Some(forward) = &forward {
                forward(sent, total);
            }
        })
    };
    let idle = backend.settings.ship_idle_timeout;
    let watchdog = async {
        loop {
            tokio::time::sleep(idle.min(Duration::from_secs(1))).await;
            let since = started.elapsed().saturating_sub(Duration::from_millis(last_progress.load(Ordering::Relaxed)));
            if since >= idle {
                return VolcanoError::Timeout {
                    what: format!("shipping the code through pod {pod}: no progress (the exec stream stalled)"),
                    after: idle,
                };
            }
        }
    };
    let shell = ExecShell::new(cluster.pods(), &pod, Some(HELPER_TASK), &backend.cluster_config.work)
        .with_activity(activity)
        .with_open_timeout(cluster.watch_silence());
    let request = ShipRequest {
        snapshot: job.snapshot.clone(),
        root: backend.cluster_config.work.clone(),
        dest: layout.work_dir.clone(),
        mode: backend.cluster_config.materialize.unwrap_or_default(),
        extra: store::ExtraFile::bootstrap(&job.bootstrap),
        progress: Some(progress.clone()),
        status: options.status.clone(),
    };
    let full = || async {
        let extra: Vec<ExtraFile> = job.bootstrap.files.iter().map(ExtraFile::from).collect();
        let target = ShipTarget {
            pods: cluster.pods(),
            pod: pod.clone(),
            container: Some(HELPER_TASK.to_owned()),
            dest: layout.work_dir.clone(),
        };
        let report = ship_snapshot(&target, &job.snapshot, &extra, Some(progress.clone())).await?;
        tracing::info!("shipped {} bytes (sha256 {})", report.bytes, report.sha256);
        Ok(())
    };
    let shipping =
        tokio::time::timeout(backend.settings.ship_timeout, ship_code(&shell, request, shipping, options, full));
    tokio::select! {
        result = shipping => result
            .map_err(|_| VolcanoError::Timeout { what: "shipping the code".into(), after: backend.settings.ship_timeout })?,
        stalled = watchdog => Err(stalled),
    }
}

/// Ships through the store and reports it; when the machine lacks a tool the store needs,
/// says so once and runs `full` (the whole snapshot) instead.
async fn ship_code<F, Fut>(
    shell: &dyn Shell,
    request: ShipRequest,
    shipping: Shipping,
    options: &SubmitOptions,
    full: F,
) -> Result<Shipped, VolcanoError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(), VolcanoError>>,
{
    match store::ship_planned(shell, request, shipping.plan, shipping.tree).await {
        Ok(report) => {
            options.report_shipped(&report);
            Ok(Shipped::Store)
        }
        Err(StoreError::NoTool { tool, machine }) => {
            options.note(&format!("{machine} lacks `{tool}` for the code store: shipping the whole snapshot instead"));
            full().await.map(|()| Shipped::Whole)
        }
        Err(StoreError::Failed(e)) => Err(VolcanoError::Store(e)),
    }
}

/// Watches the helper's pod until it runs. Fails early on a container that cannot start, and
/// on timeout quotes why the pod is pending.
pub(crate) async fn wait_running(cluster: &Cluster, helper: &Job, timeout: Duration) -> Result<String, VolcanoError> {
    let name = helper.metadata.name.clone().unwrap_or_default();
    let selector = format!("volcano.sh/job-name={name}");
    let mut last: Option<Pod> = None;
    let silence = cluster.watch_silence();
    let watch = async {
        loop {
            // A watch that stays silent for `silence` (an API server that took the request and
            // never answers) is replaced: the pods are listed once (a bounded request), then
            // watched anew.
            let config = watcher::Config::default().labels(&selector);
            let mut pods = watcher(cluster.pods(), config).default_backoff().applied_objects().boxed();
            loop {
                let event = match tokio::time::timeout(silence, pods.next()).await {
                    Ok(Some(event)) => event,
                    Ok(None) => {
                        return Err(VolcanoError::Pod {
                            pod: name.clone(),
                            message: "the watch of the helper's pods ended".into(),
                        });
                    }
                    Err(_) => break,
                };
                let pod = match event {
                    Ok(pod) => pod,
                    Err(e) => {
                        // RBAC does not heal by retrying: say which permission is missing now.
                        if let Some(code @ (401 | 403)) = watch_status_code(&e) {
                            return Err(VolcanoError::Forbidden {
                                verb: "watch".into(),
                                resource: "pods".into(),
                                namespace: Some(cluster.namespace().to_owned()),
                                message: format!("{code}: {e}"),
                            });
                        }
                        tracing::debug!("watch of helper pods: {e}");
                        continue;
                    }
                };
                if let Some(outcome) = judge_helper_pod(&pod) {
                    return outcome;
                }
                last = Some(pod);
            }
            tracing::debug!("no event from the watch of the helper's pods in {silence:?}; listing them");
            for pod in cluster.list_pods(&selector).await? {
                if let Some(outcome) = judge_helper_pod(&pod) {
                    return outcome;
                }
                last = Some(pod);
            }
        }
    };
    match tokio::time::timeout(timeout, watch).await {
        Ok(outcome) => outcome,
        Err(_) => {
            let pods: Vec<Pod> = last.into_iter().collect();
            let conditions = super::group_info(cluster, helper).await.map(|g| g.1).unwrap_or_default();
            let events = super::events_of(cluster, helper, &pods).await;
            let why = pending_reason(&Observed {
                job: helper,
                pods: &pods,
                group_phase: None,
                group_conditions: &conditions,
                events: &events,
            });
            Err(VolcanoError::Timeout { what: format!("the helper pod of {name} to start ({why})"), after: timeout })
        }
    }
}

/// The HTTP status of a failed watch, when the apiserver answered one.
fn watch_status_code(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(status.code),
        watcher::Error::WatchError(status) => Some(status.code),
        _ => None,
    }
}

/// `Some(Ok(pod name))` when the helper runs, `Some(Err)` when it never will, `None` to wait.
fn judge_helper_pod(pod: &Pod) -> Option<Result<String, VolcanoError>> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    if let Some((reason, message)) = stuck_container(pod) {
        let message = message.map(|m| format!(": {m}")).unwrap_or_default();
        return Some(Err(VolcanoError::Pod { pod: name, message: format!("cannot start: {reason}{message}") }));
    }
    let status = pod.status.as_ref()?;
    match status.phase.as_deref() {
        Some("Running") => {
            let running = status
                .container_statuses
                .iter()
                .flatten()
                .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
            running.then_some(Ok(name))
        }
        Some(phase @ ("Succeeded" | "Failed")) => Some(Err(VolcanoError::Pod {
            pod: name,
            message: format!(
                "ended ({phase}) before the code was shipped: {}",
                status.message.clone().unwrap_or_default()
            ),
        })),
        _ => None,
    }
}

/// Creates the Secret (when there is one), the run's own files (when its pods build the run dir
/// from the store) and the coordinator Service, then the gang job, then makes the job own them. Both exist before any pod does, so rank 0's name resolves from the
/// start. On any failure, whatever was created is deleted again. `planned` is the run's handle
/// data (see `VolcanoBackend::planned_data`); the job's uid is added.
async fn create_gang(
    host: &str,
    cluster: &Cluster,
    rendered: RenderedJob,
    mut planned: HandleData,
) -> Result<JobHandle, VolcanoError> {
    let RenderedJob { job, secret, service, files } = rendered;
    let name = job.metadata.name.clone().unwrap_or_default();
    let secret_name = secret.as_ref().and_then(|s| s.metadata.name.clone());
    let service_name = service.metadata.name.clone().unwrap_or_default();
    let files_name = files.as_ref().and_then(|f| f.metadata.name.clone());
    let undo = async |job: bool| {
        if job {
            let _ = cluster.delete_job(&name).await;
        }
        if let Some(s) = &secret_name {
            let _ = cluster.delete_secret(s).await;
        }
        let _ = cluster.delete_service(&service_name).await;
        if let Some(f) = &files_name {
            let _ = cluster.delete_config_map(f).await;
        }
    };
    if let Some(secret) = &secret {
        cluster.create_secret(secret).await?;
    }
    if let Some(files) = &files
        && let Err(e) = cluster.create_run_config_map(files).await
    {
        undo(false).await;
        return Err(e);
    }
    if let Err(e) = cluster.create_service(&service).await {
        undo(false).await;
        return Err(e);
    }
    let created = match cluster.create_job(&job).await {
        Ok(created) => created,
        Err(e) => {
            undo(false).await;
            return Err(e);
        }
    };
    let uid = created.metadata.uid.clone();
    if let Some(uid) = &uid {
        let owner = owner_reference(&name, uid);
        let owned = match &secret_name {
            Some(s) => cluster.set_secret_owner(s, owner.clone()).await.map(|_| ()),
            None => Ok(()),
        };
        let owned = match owned {
            Ok(()) => cluster.set_service_owner(&service_name, owner.clone()).await.map(|_| ()),
            Err(e) => Err(e),
        };
        let owned = match (owned, &files_name) {
            (Ok(()), Some(f)) => cluster.set_config_map_owner(f, owner).await.map(|_| ()),
            (owned, _) => owned,
        };
        if let Err(e) = owned {
            undo(true).await;
            return Err(e);
        }
    }
    planned.uid = uid;
    Ok(JobHandle {
        kind: KIND,
        host: host.to_owned(),
        id: name,
        data: serde_json::to_value(planned).unwrap_or_default(),
    })
}

/// Deletes the helper if the submit future is dropped before it could (e.g. the caller gave up).
pub(crate) struct HelperGuard {
    pub(crate) cluster: Cluster,
    pub(crate) name: String,
    pub(crate) armed: bool,
}

impl Drop for HelperGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let cluster = self.cluster.clone();
        let name = std::mem::take(&mut self.name);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { delete_helper(&cluster, &name).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use async_trait::async_trait;
    use theseus_core::snapshot::{Snapshot, SnapshotMode};
    use theseus_core::store::{Materialize, ScriptCall, ShellError};

    use super::*;

    /// Answers every call with the same exit.
    struct Refusing {
        code: i32,
        stderr: &'static str,
    }

    #[async_trait]
    impl Shell for Refusing {
        async fn run(&self, _call: ScriptCall) -> Result<Vec<u8>, ShellError> {
            Err(ShellError::Exit { code: self.code, stderr: self.stderr.into() })
        }

        fn describe(&self) -> String {
            "pod `helper`".into()
        }
    }

    fn request(code: &std::path::Path) -> ShipRequest {
        std::fs::write(code.join("a.py"), "print(1)\n").unwrap();
        ShipRequest {
            snapshot: Snapshot::collect(code, SnapshotMode::Dirty).unwrap(),
            root: "/pvc/work".into(),
            dest: "/pvc/work/p/g/n/r".into(),
            mode: Materialize::Link,
            extra: vec![],
            progress: None,
            status: None,
        }
    }

    fn recording() -> (SubmitOptions, Arc<Mutex<Vec<String>>>, Arc<AtomicUsize>) {
        let notes = Arc::new(Mutex::new(Vec::new()));
        let shipped = Arc::new(AtomicUsize::new(0));
        let options = SubmitOptions {
            status: Some({
                let notes = notes.clone();
                Arc::new(move |n: &str| notes.lock().unwrap().push(n.to_owned()))
            }),
            shipped: Some({
                let shipped = shipped.clone();
                Arc::new(move |_| {
                    shipped.fetch_add(1, Ordering::SeqCst);
                })
            }),
            ..SubmitOptions::default()
        };
        (options, notes, shipped)
    }

    #[tokio::test]
    async fn a_helper_without_a_store_tool_falls_back_to_the_full_ship_and_says_so_once() {
        let code = tempfile::tempdir().unwrap();
        let (options, notes, shipped) = recording();
        let full_runs = AtomicUsize::new(0);
        let shell = Refusing { code: theseus_core::store::EXIT_NO_TOOL, stderr: "theseus-store: sha256sum\n" };
        let req = request(code.path());
        let shipping = Shipping { plan: store::plan_of(&req.snapshot).await.unwrap(), tree: false };
        ship_code(&shell, req, shipping, &options, || async {
            full_runs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(full_runs.load(Ordering::SeqCst), 1);
        let notes = notes.lock().unwrap().clone();
        let said: Vec<_> = notes.iter().filter(|n| n.contains("lacks `sha256sum`")).collect();
        assert_eq!(said.len(), 1, "{notes:?}");
        assert!(said[0].contains("pod `helper`") && said[0].contains("whole snapshot"), "{said:?}");
        assert_eq!(shipped.load(Ordering::SeqCst), 0, "no store report for a full ship");
    }

    #[tokio::test]
    async fn any_other_store_failure_fails_the_submit_without_a_full_ship() {
        let code = tempfile::tempdir().unwrap();
        let (options, _, _) = recording();
        let shell =
            Refusing { code: 20, stderr: "theseus-store: cannot create the object store /pvc/work/.theseus/objects\n" };
        let full_runs = AtomicUsize::new(0);
        let req = request(code.path());
        let shipping = Shipping { plan: store::plan_of(&req.snapshot).await.unwrap(), tree: false };
        let err = ship_code(&shell, req, shipping, &options, || async {
            full_runs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .await
        .unwrap_err();
        assert_eq!(full_runs.load(Ordering::SeqCst), 0);
        assert!(matches!(&err, VolcanoError::Store(_)), "{err:?}");
        assert!(err.to_string().contains("cannot create the object store"), "{err}");
    }
}
