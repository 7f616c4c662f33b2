//! Preparing a solved job (environment, snapshot, bootstrap) and submitting it with its ledger
//! record: `submitting` before the backend creates anything, settled with what it returned.

use std::sync::Arc;

use crate::backend::{DynBackend, JobHandle, JobState, PreparedJob, RunLayout, SubmitOptions};
use crate::bootstrap::{self, BootstrapInput, Resume};
use crate::job::{Experiment, JobIdentity};
use crate::ledger::{Ledger, Record, RunKind, now_rfc3339, placeholder_handle};
use crate::snapshot::Snapshot;
use crate::{Error, Result};

use super::{DispatchError, Dispatcher, Event, Solved};

/// How long a job that started despite a signal may take to be cancelled.
const CANCEL_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// The environment, the snapshot and the rendered bootstrap of `solved`.
pub(super) fn prepare(solved: &Solved) -> Result<(PreparedJob, RunLayout)> {
    let (spec, plan) = (&solved.spec, &solved.plan);
    let env = super::request::environment(solved)?;
    let identity = JobIdentity::new(&spec.name, spec.project.as_deref(), spec.group.as_deref());
    let code_dir = match &spec.code {
        Some(d) => d.clone(),
        None => std::env::current_dir().map_err(|e| Error::io("read", std::path::Path::new("."), e))?,
    };
    let mut snapshot = Snapshot::collect(&code_dir, spec.snapshot_mode)?;
    snapshot.hash_cache = spec.hash_cache.clone();
    let layout = solved.backend.layout(&identity, plan)?;
    let bootstrap = render_bootstrap(&Bootstrap {
        identity: &identity,
        layout: &layout,
        env: env.clone(),
        experiment: &spec.experiment,
        experiment_source: &spec.experiment_source,
        uv_groups: solved.uv_groups(),
        resume: resume(solved, &layout)?,
        batch_search: &|experiment| Ok(crate::batch_search::decide(experiment, &env, plan)?.is_some()),
        cluster: solved.loaded.config.hosts.get(&plan.host).map(|h| h.cluster().to_owned()).unwrap_or_default(),
        hardware: bootstrap::Hardware {
            chip: plan.chip.map(|c| c.name.to_owned()),
            count: plan.total_chips,
            nodes: plan.nodes,
            host: plan.host.clone(),
        },
    })?;
    let job =
        PreparedJob { identity, experiment: spec.experiment.clone(), env, plan: plan.clone(), snapshot, bootstrap };
    Ok((job, layout))
}

/// What a job's bootstrap is rendered from: for a submit, and for `theseus bootstrap`'s
/// standalone script ([`crate::standalone`]), which renders it the same way.
pub(crate) struct Bootstrap<'a> {
    /// Who the job is.
    pub(crate) identity: &'a JobIdentity,
    /// Where it runs.
    pub(crate) layout: &'a RunLayout,
    /// Its environment.
    pub(crate) env: Vec<crate::backend::EnvVar>,
    /// What it runs.
    pub(crate) experiment: &'a crate::job::Experiment,
    /// Where the experiment came from, for messages.
    pub(crate) experiment_source: &'a str,
    /// `uv sync --group` names.
    pub(crate) uv_groups: Vec<String>,
    /// What it resumes from.
    pub(crate) resume: Resume,
    /// Whether the bootstrap runs the batch-size search for an experiment (the job's, then
    /// each stage's): [`crate::batch_search::decide`] for a submit.
    pub(crate) batch_search: &'a dyn Fn(&crate::job::Experiment) -> Result<bool>,
    /// What it was given.
    pub(crate) hardware: bootstrap::Hardware,
    /// The name of the cluster it runs on (the original's `Cluster.name`, for a job config).
    pub(crate) cluster: String,
}

/// The rendered bootstrap of `job`.
pub(crate) fn render_bootstrap(job: &Bootstrap<'_>) -> Result<bootstrap::RenderedBootstrap> {
    let experiment = job.experiment;
    let mut input = BootstrapInput::for_layout(
        job.identity.clone(),
        job.layout,
        job.env.clone(),
        experiment.entrypoint_words()?,
        experiment.distributed,
        experiment.config.clone(),
    );
    input.uv_groups = job.uv_groups.clone();
    input.source = job.experiment_source.to_owned();
    input.resume = job.resume.clone();
    input.batch_search = (job.batch_search)(experiment)?;
    input.stages = experiment.stages.clone();
    for stage in &mut input.stages {
        // Each stage asks (or not) for the search on its own.
        let asks =
            Experiment { batch_search: stage.batch_search, config: stage.config.clone(), ..Experiment::default() };
        stage.batch_search =
            (job.batch_search)(&asks).map_err(|e| Error::InvalidConfig(format!("{}: {e}", stage.source)))?;
    }
    // A job config of the original (the main file's, else the first stage's): its key, and what
    // its runner builds the original's hardware from.
    let stage_key = || {
        let runner = |s: &&crate::job::stages::Stage| s.entrypoint.get(1).is_some_and(|w| w == crate::original::RUNNER);
        input.stages.iter().find(runner).and_then(|s| s.config["job"].as_str().map(str::to_owned))
    };
    let key = experiment.job_key.clone().or_else(stage_key);
    input.job_config = key.map(|key| bootstrap::JobConfigRun { key, cluster: job.cluster.clone() });
    input.hardware = Some(job.hardware.clone());
    bootstrap::render(&input).map_err(|e| match e {
        Error::InvalidConfig(m) => {
            Error::InvalidConfig(format!("cannot render the bootstrap for {}: {m}", job.experiment_source))
        }
        e => e,
    })
}

/// The job of `solved` without its code: identity, experiment, environment and plan, with an
/// empty snapshot and bootstrap (what `plan` asks [`crate::backend::Backend::creates`] with).
/// An environment that cannot be made (a `--secret-env` not set) is left empty: it is the
/// submit's to refuse, and what a host creates does not depend on it.
pub(super) fn outline(solved: &Solved) -> PreparedJob {
    let spec = &solved.spec;
    let snapshot = Snapshot {
        root: spec.code.clone().unwrap_or_default(),
        source: crate::snapshot::SnapshotSource::Directory,
        files: Vec::new(),
        hash_cache: None,
    };
    PreparedJob {
        identity: JobIdentity::new(&spec.name, spec.project.as_deref(), spec.group.as_deref()),
        experiment: spec.experiment.clone(),
        env: super::request::environment(solved).unwrap_or_default(),
        plan: solved.plan.clone(),
        snapshot,
        bootstrap: bootstrap::RenderedBootstrap { files: Vec::new(), entry: String::new() },
    }
}

/// `--restore` and `--fresh` of `solved` for a run laid out as `layout`: a relative PATH is
/// joined to the cluster's checkpoints dir on the target (it may not lead out of it with `..`),
/// an absolute one is taken as it is. On this machine's own host type the dir must exist now:
/// a missing one fails here, before anything starts (on other hosts the bootstrap checks it).
pub(super) fn resume(solved: &Solved, layout: &RunLayout) -> Result<Resume> {
    let spec = &solved.spec;
    let Some(given) = spec.restore.as_deref() else {
        return Ok(Resume { restore: None, fresh: spec.fresh });
    };
    if spec.fresh {
        return Err(Error::InvalidConfig("--restore and --fresh cannot be used together".into()));
    }
    let bad = |why: &str| Error::InvalidConfig(format!("--restore {given:?}: {why}"));
    if given.trim().is_empty() {
        return Err(bad("the path is empty"));
    }
    if given.chars().any(char::is_control) {
        return Err(bad("the path holds control characters"));
    }
    let checkpoints = layout.data_dirs.checkpoints.trim_end_matches('/');
    let path = if given.starts_with('/') {
        given.trim_end_matches('/').to_owned()
    } else {
        if given.split('/').any(|part| part == "..") {
            return Err(bad(&format!(
                "a relative path is under the checkpoints dir {checkpoints} and may not leave it with `..`; give an \
                 absolute path instead"
            )));
        }
        let rel = given.trim_start_matches("./").trim_end_matches('/');
        format!("{checkpoints}/{rel}")
    };
    if solved.plan.kind == crate::plan::HostKind::LOCAL && !std::path::Path::new(&path).is_dir() {
        return Err(bad(&format!(
            "{path} is not a directory on this machine (a relative path is under the checkpoints dir {checkpoints})"
        )));
    }
    Ok(Resume { restore: Some(path), fresh: false })
}

/// The backend's [`SubmitOptions`]: the caller's choices, reporting through the dispatcher's
/// events.
fn options(dispatcher: &Dispatcher, choices: SubmitOptions) -> SubmitOptions {
    let (progress, step, shipped) = (dispatcher.events.clone(), dispatcher.events.clone(), dispatcher.events.clone());
    SubmitOptions {
        progress: Some(Arc::new(move |done, total| progress(&Event::Progress { done, total }))),
        status: Some(Arc::new(move |note: &str| step(&Event::Step(note)))),
        shipped: Some(Arc::new(move |report| shipped(&Event::Shipped(report)))),
        ..choices
    }
}

/// Records the run as `submitting` (with the backend's planned handle, else a placeholder),
/// calls the backend's `submit` and settles the record with what it returned. A signal during
/// `submit` leaves nothing: the backend takes back its partial work, and a job it started
/// anyway is cancelled. A name that a live run holds deletes the record (this run never was).
pub(super) async fn submit_recorded(
    dispatcher: &Dispatcher,
    ledger: &Ledger,
    backend: &Arc<DynBackend>,
    job: &PreparedJob,
    kind: RunKind,
    choices: SubmitOptions,
) -> std::result::Result<JobHandle, DispatchError> {
    let identity = &job.identity;
    let host = job.plan.host.clone();
    let planned =
        backend.planned_handle(job).unwrap_or_else(|| placeholder_handle(backend.kind(), &host, &identity.run_id));
    let now = now_rfc3339();
    let guard = ledger.begin_submit(&Record {
        identity: identity.clone(),
        kind,
        host: host.clone(),
        handle: planned.clone(),
        submitted_at: now.clone(),
        updated_at: now,
        state: JobState::Submitting,
        exit_code: None,
        message: None,
    })?;
    // What the dashboard shows; a run without it is still a run (its row shows no chips).
    let _ = ledger.set_chips(&identity.run_id, &job.plan.chips_shown());
    let result = backend.submit(job, &options(dispatcher, choices)).await;
    let run_id = &identity.run_id;
    if let Some(signal) = crate::interrupt::triggered() {
        let (handle, what) = match result {
            Ok(handle) => {
                // Started before the backend saw the signal: the user never got the run id.
                let cancelled = tokio::time::timeout(CANCEL_BOUND, backend.cancel(&handle)).await;
                let what = match cancelled {
                    Ok(Ok(_)) => format!("run {run_id} had started and was cancelled"),
                    Ok(Err(e)) => format!("run {run_id} had started and could not be cancelled: {e}"),
                    Err(_) => format!("run {run_id} had started and its cancel did not finish in time"),
                };
                (handle, what)
            }
            Err(e) => (planned, format!("run {run_id} was not started ({e})")),
        };
        let message = format!("interrupted ({}) during submit; {what}", signal.name());
        ledger.settle(run_id, &handle, JobState::Cancelled, Some(&message))?;
        drop(guard);
        return Err(DispatchError::Interrupted { signal, what });
    }
    let handle = match result {
        Ok(handle) => handle,
        Err(e @ Error::AlreadyExists { .. }) => {
            ledger.delete(run_id)?;
            drop(guard);
            return Err(e.into());
        }
        Err(e @ Error::OutcomeUnknown { .. }) => {
            // Not failed: the job may run. `status` and `cancel` ask the host again.
            ledger.settle(
                run_id,
                &planned,
                JobState::Unknown,
                Some(&format!("the submit's outcome is unknown: {e}")),
            )?;
            drop(guard);
            return Err(e.into());
        }
        Err(e) => {
            ledger.settle(run_id, &planned, JobState::Failed, Some(&format!("submit failed: {e}")))?;
            drop(guard);
            return Err(e.into());
        }
    };
    ledger.settle(run_id, &handle, JobState::Pending, None)?;
    drop(guard);
    Ok(handle)
}
