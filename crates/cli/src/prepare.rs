//! What `plan`, `submit` and `repl` share: turning their arguments into a
//! [`JobSpec`] for core's [`Dispatcher`], showing the dispatcher's [`Event`]s on stderr, and
//! preparing and submitting a job with the CLI's checks and messages ([`prepare_job`],
//! [`submit_recorded`]). The flow itself (solve, prepare, submit with its ledger record) is
//! core's ([`theseus_core::dispatch`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Result, anyhow, bail};
use serde_json::Value;
use theseus_core::backend::{DynBackend, JobHandle, PreparedJob, RunLayout, SubmitOptions};
use theseus_core::config::{DispatchConfig, GivenFlag, LoadedConfig};
use theseus_core::dispatch::{BackendFactory, DispatchError, Dispatcher, Event, JobSpec, Solved};
use theseus_core::job::Experiment;
use theseus_core::ledger::{Ledger, RunKind};
use theseus_core::snapshot::SnapshotMode;
use theseus_core::snapshot::size::SizeLimits;
use theseus_core::solver::render;
use theseus_core::store::ShipReport;

use crate::args::JobArgs;
use crate::context::Context;
use crate::signals::Interrupted;

/// Which local code a job ships.
pub(crate) struct Code {
    /// The dir (default: the current one).
    pub(crate) dir: Option<PathBuf>,
    /// HEAD's files only.
    pub(crate) clean: bool,
}

/// Makes backends with the CLI's factory ([`crate::backends`]).
struct Factory {
    home: PathBuf,
}

impl BackendFactory for Factory {
    fn backend(
        &self,
        config: &DispatchConfig,
        name: &str,
    ) -> theseus_core::Result<Arc<theseus_core::backend::DynBackend>> {
        crate::backends::for_host(config, name, &self.home)
            .map_err(|e| theseus_core::Error::InvalidConfig(format!("{e:#}")))
    }
}

/// Shows the dispatcher's events on stderr (unless `--quiet`) and keeps the ship report for
/// JSON output.
pub(crate) struct Reporter {
    /// The last ship's report.
    pub(crate) shipped: Arc<Mutex<Option<ShipReport>>>,
}

/// A dispatcher that shows its events on stderr.
pub(crate) fn dispatcher(ctx: &Context) -> (Dispatcher, Reporter) {
    let quiet = ctx.quiet;
    let shipped: Arc<Mutex<Option<ShipReport>>> = Arc::default();
    let progress = crate::progress::bytes("theseus: shipped", quiet);
    let keep = shipped.clone();
    let events = Arc::new(move |event: &Event<'_>| {
        match event {
            Event::Progress { done, total } => return progress(*done, *total),
            Event::Shipped(report) => *keep.lock().expect("not poisoned") = Some((*report).clone()),
            _ => {}
        }
        if quiet {
            return;
        }
        match event {
            Event::Considered(table) => eprint!("{}", render::render_table(table)),
            Event::Chosen(plan) => {
                eprintln!("theseus: chose {}", render::describe_plan(plan));
                for note in &plan.notes {
                    eprintln!("theseus: note: {note}");
                }
            }
            Event::SkippedUnanswered { host, reason, chosen } => {
                eprintln!("theseus: host {host} did not answer ({reason}); chose {chosen} without it")
            }
            Event::Unsolved { considered, unanswered } => {
                if !considered.is_empty() {
                    eprint!("{}", render::render_table(considered));
                }
                eprint!("{}", render_unanswered(unanswered));
            }
            Event::Step(note) => eprintln!("theseus: {note}"),
            Event::Shipped(report) => eprintln!("theseus: {}", describe_ship(report)),
            Event::Progress { .. } => {}
        }
    });
    let factory = Arc::new(Factory { home: ctx.home.clone() });
    (Dispatcher::new(factory, events), Reporter { shipped })
}

/// One line about a finished ship: "sent 1 object (15.8 KiB); 9999 of 10000 files were already
/// there".
fn describe_ship(report: &ShipReport) -> String {
    let objects = if report.objects_sent == 1 { "object" } else { "objects" };
    format!(
        "sent {} {objects} ({}); {} of {} files were already there",
        report.objects_sent,
        crate::progress::human(report.bytes_sent),
        report.files_present,
        report.files
    )
}

/// The CLI's error for a dispatch error: the solver's (with its hints), the signal's (exit
/// 130/143), or the core error.
pub(crate) fn lift(e: DispatchError) -> anyhow::Error {
    match e {
        DispatchError::Unsolvable(e) => e.into(),
        DispatchError::Interrupted { signal, what } => Interrupted { signal, what }.into(),
        DispatchError::Failed(e) => e.into(),
    }
}

/// Loads the config (flags applied) and the experiment (`experiment` given, e.g. by `repl`,
/// else `args.experiment` with `args.overrides`), and solves.
pub(crate) async fn solve(
    ctx: &Context,
    dispatcher: &Dispatcher,
    args: &JobArgs,
    experiment: Option<Experiment>,
    code: &Code,
    probe: bool,
) -> Result<Solved> {
    let mut loaded = ctx.config()?;
    apply_resource_flags(ctx, &mut loaded, args)?;
    apply_host_flags(ctx, &mut loaded, &args.host_flags)?;
    if args.oversubscribe {
        ctx.host_types()
            .apply_override(&mut loaded.config, "oversubscribe", &Value::Bool(true))
            .map_err(|e| anyhow!("{}: {} (after --oversubscribe was applied)", e.path, e.message))?;
    }
    theseus_core::job::validate_name("job name", &args.name)?;
    let experiment = load_experiment(args, experiment)?;
    let spec = JobSpec {
        name: args.name.clone(),
        project: args.project.clone(),
        group: args.group.clone(),
        experiment,
        experiment_source: args.experiment.display().to_string(),
        chip: args.place.chip.clone(),
        n_chips: args.place.n_chips,
        clusters: args.place.cluster.clone(),
        exclude_clusters: args.place.exclude_cluster.clone(),
        host: args.place.host.clone(),
        env: code_subdir_env(ctx, code).into_iter().chain(args.env.iter().cloned()).collect(),
        secret_env: args.secret_env.clone(),
        probe: probe && !args.no_check,
        probe_timeout: args.probe_timeout,
        code: code.dir.clone(),
        snapshot_mode: if code.clean { SnapshotMode::Clean } else { SnapshotMode::Dirty },
        hash_cache: Some(ctx.hash_cache_dir()),
        restore: args.restore.clone(),
        fresh: args.fresh,
    };
    dispatcher.solve(loaded, spec).await.map_err(lift)
}

/// The experiment of `args` (`given`, e.g. by `repl`, else loaded from `args.experiment`): its
/// file, then each `-s/--stage FILE` as a further stage, the overrides applied to every one, and
/// the `--target` groups: what `submit`, `plan`, `repl` and `bootstrap` run. Each file is an
/// experiment or a job config of the original ([`theseus_core::original`]): `-j` is the main
/// file's key, `--n_shards` and `--load` apply to every job config.
pub(crate) fn load_experiment(args: &JobArgs, given: Option<Experiment>) -> Result<Experiment> {
    let options = theseus_core::original::Options {
        job: args.original.job.clone(),
        n_shards: args.original.n_shards,
        load: args.original.load.clone(),
        stage: false,
    };
    let mut experiment = match given {
        Some(mut experiment) => {
            experiment.apply_overrides(&args.overrides)?;
            experiment
        }
        None => theseus_core::original::load(&args.experiment, &options, &args.overrides)?,
    };
    let stage_options = theseus_core::original::Options { job: None, stage: true, ..options };
    let mut stages = Vec::new();
    for path in &args.stages {
        let stage = theseus_core::original::load(path, &stage_options, &args.overrides)
            .map_err(|e| anyhow!("-s/--stage {}: {e}", path.display()))?;
        stages.push((path.display().to_string(), stage));
    }
    // An override no job config of the submit has a path for reaches nothing (the original
    // dropped it silently; a typo shows here). Experiments add the path to their `config`.
    if experiment.job_key.is_some() && stages.iter().all(|(_, s)| s.job_key.is_some()) {
        for item in &args.overrides {
            let found = std::iter::once(&experiment.config)
                .chain(stages.iter().map(|(_, s)| &s.config))
                .any(|c| theseus_core::job::override_path_exists(c, item));
            if !found {
                let key = item.split_once('=').map_or(item.as_str(), |(k, _)| k);
                let files: Vec<String> = std::iter::once(args.experiment.display().to_string())
                    .chain(stages.iter().map(|(name, _)| name.clone()))
                    .collect();
                bail!(
                    "override {key}: no job config of this submit has that key ({}); job configs take overrides of \
                     keys they have, as the original did: check its spelling",
                    files.join(", ")
                );
            }
        }
    }
    let hardware_from_flags = args.place.chip.is_some() || args.place.n_chips.is_some();
    theseus_core::job::stages::attach(
        &mut experiment,
        &args.experiment.display().to_string(),
        stages,
        hardware_from_flags,
    )?;
    // `--target GROUP`: after the experiment's own groups (the host's come first).
    experiment.uv_groups.extend(args.target.iter().cloned());
    Ok(experiment)
}

/// `THESEUS_CODE_SUBDIR=DIR` when this command runs in a subdirectory `DIR` of the repository it
/// ships (no `--code`): the whole repository ships, and the job starts in `DIR` as the
/// original's did (it shipped only that subtree). Before `--env`, so `--env
/// THESEUS_CODE_SUBDIR=` starts it at the top. Said on stderr.
fn code_subdir_env(ctx: &Context, code: &Code) -> Option<String> {
    if code.dir.is_some() {
        return None;
    }
    let cwd = std::env::current_dir().ok()?;
    let subdir = theseus_core::snapshot::subdir_in_snapshot(&cwd)?;
    ctx.info(format!(
        "theseus: the job starts in `{subdir}/` of the shipped repository (where this command runs; the whole \
         repository ships)"
    ));
    Some(format!("THESEUS_CODE_SUBDIR={subdir}"))
}

/// One line per host that did not answer its probe: `unknown: HOST: REASON`.
pub(crate) fn render_unanswered(unanswered: &[(String, String)]) -> String {
    unanswered.iter().map(|(host, reason)| format!("unknown: {host}: {reason}\n")).collect()
}

/// `--volcano-image`, `--volcano-namespace`, `--cpu` and `--mem` applied to every host whose type
/// understands them (the solver has not picked one yet; see `HostType::overrides`), each
/// checked like the config key it replaces.
fn apply_resource_flags(ctx: &Context, loaded: &mut LoadedConfig, args: &JobArgs) -> Result<()> {
    const FLAGS: &str = "--volcano-image/--volcano-namespace/--cpu/--mem";
    let registry = ctx.host_types();
    let mut changed = Vec::new();
    for (name, flag) in
        [("image", &args.volcano_image), ("namespace", &args.volcano_namespace), ("cpu", &args.cpu), ("mem", &args.mem)]
    {
        let Some(value) = flag else { continue };
        let hosts = registry
            .apply_override(&mut loaded.config, name, &Value::String(value.clone()))
            .map_err(|e| anyhow!("{}: {} (after {FLAGS} were applied; fix the flag)", e.path, e.message))?;
        changed.extend(hosts);
    }
    for (name, host) in &loaded.config.hosts {
        if changed.contains(name)
            && let Some(cluster) = loaded.config.clusters.get(host.cluster())
            && let Err(e) = host.check(name, cluster)
        {
            anyhow::bail!("{}: {} (after {FLAGS} were applied; fix the flag)", e.path, e.message);
        }
    }
    Ok(())
}

/// The host types' own flags (`--tpu-spot`) applied to the hosts of their type, each value
/// checked like the key it sets, then the hosts changed checked against their cluster. A flag
/// of a type without hosts in the config changes nothing: a warning says so.
fn apply_host_flags(ctx: &Context, loaded: &mut LoadedConfig, given: &[GivenFlag]) -> Result<()> {
    let changed = ctx.host_types().apply_flags(&mut loaded.config, given).map_err(|e| anyhow!("{e}"))?;
    for flag in given {
        if !loaded.config.hosts.values().any(|h| h.kind() == flag.kind) {
            ctx.info(format!(
                "theseus: warning: {}: the config has no `{}` host; the flag changes nothing",
                flag.shown(),
                flag.kind
            ));
        }
    }
    for (name, host) in &loaded.config.hosts {
        if changed.contains(name)
            && let Some(cluster) = loaded.config.clusters.get(host.cluster())
            && let Err(e) = host.check(name, cluster)
        {
            let flags: Vec<String> = given.iter().filter(|f| f.kind == host.kind()).map(GivenFlag::shown).collect();
            bail!(
                "{}: {}: {} (after {} were applied; fix the flag)",
                flags.join(" "),
                e.path,
                e.message,
                flags.join(", ")
            );
        }
    }
    Ok(())
}

/// Solves (`experiment` given, e.g. by `repl`, else loaded from `job_args`), reports the plan
/// and prepares the job: what the backend gets, and its layout.
pub(crate) async fn prepare_job(
    ctx: &Context,
    dispatcher: &Dispatcher,
    job_args: &JobArgs,
    code: &Code,
    experiment: Option<theseus_core::job::Experiment>,
    probe: bool,
) -> Result<(Solved, PreparedJob, RunLayout)> {
    let solved = solve(ctx, dispatcher, job_args, experiment, code, probe).await?;
    dispatcher.report_plan(&solved);
    let (job, layout) = dispatcher.prepare(&solved).map_err(lift)?;
    check_sizes(ctx, &job.snapshot)?;
    Ok((solved, job, layout))
}

/// Warns about large files in the code, or refuses ones over the limit (see
/// [`theseus_core::snapshot::size`]), before anything is created.
pub(crate) fn check_sizes(ctx: &Context, snapshot: &theseus_core::snapshot::Snapshot) -> Result<()> {
    let limits = SizeLimits::from_env(|name| std::env::var(name).ok())?;
    for warning in snapshot.check_sizes(&limits)? {
        ctx.info(format!("theseus: warning: {warning}"));
    }
    Ok(())
}

/// Core's submit with its ledger record; a name held by a live run says how to replace it.
pub(crate) async fn submit_recorded(
    dispatcher: &Dispatcher,
    ledger: &Ledger,
    config: &DispatchConfig,
    backend: &Arc<DynBackend>,
    job: &PreparedJob,
    kind: RunKind,
    choices: SubmitOptions,
) -> Result<JobHandle> {
    let replace = choices.replace;
    let submitted = dispatcher.submit(ledger, backend, job, kind, choices).await;
    // The run's host as configured now, for `status`, `logs` and `cancel` without `-d FILE`.
    if let Some(snapshot) = crate::runs::host_snapshot(config, &job.plan.host)
        && let Err(e) = ledger.set_host_config(&job.identity.run_id, &snapshot)
    {
        tracing::warn!("cannot keep the host config of run {}: {e}", job.identity.run_id);
    }
    match submitted {
        Ok(handle) => Ok(handle),
        Err(DispatchError::Failed(e @ theseus_core::Error::AlreadyExists { .. })) if replace => {
            // Only a run still being submitted refuses a `--replace`: it is stopped once started.
            bail!("{e}; nothing of this run was created: submit again with --replace once that run has started")
        }
        Err(DispatchError::Failed(e @ theseus_core::Error::AlreadyExists { .. })) => {
            bail!("{e}; pass --replace to stop it and submit, or pick another name")
        }
        // The host refused before anything of the run existed (its kubeconfig, connection,
        // credentials or queue): not a run that failed, so it leaves no ledger row.
        Err(DispatchError::Failed(e)) if e.nothing_created() => {
            ledger.delete(&job.identity.run_id)?;
            bail!("{e}")
        }
        Err(e) => Err(lift(e)),
    }
}
