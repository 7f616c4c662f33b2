//! `theseus submit`: solve, snapshot the code, render the bootstrap, record the run in the
//! ledger (`submitting`), start the job, settle the record, and with `--follow` stream its output
//! to the end.

use std::process::ExitCode;

use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, bail};
use serde_json::json;
use theseus_core::backend::{DryRunDocument, DynBackend, JobHandle, JobState, PreparedJob, RunLayout, SubmitOptions};
use theseus_core::bootstrap::{self, BootstrapInput};
use theseus_core::interrupt;
use theseus_core::job::JobIdentity;
use theseus_core::ledger::{Ledger, Record, RunKind, now_rfc3339, placeholder_handle};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::solver::render;
use theseus_core::store::ShipReport;

use crate::args::{OutputFormat, SubmitArgs};
use crate::context::Context;
use crate::progress;
use crate::signals::{self, Interrupted};

use super::prepare::Solved;

pub(crate) async fn run(ctx: &Context, args: SubmitArgs) -> Result<ExitCode> {
    // Nothing is created before the backend's `submit`: a signal until then just stops.
    let (solved, job, layout) = signals::or_interrupted(prepare(ctx, &args)).await?;
    let plan = &solved.plan;
    let identity = job.identity.clone();
    if args.dry_run {
        let documents = solved.backend.dry_run(&job)?;
        return dry_run(ctx, &job, &layout, &documents);
    }
    ctx.info(format!(
        "theseus: submitting {} files ({}) to {}",
        job.snapshot.file_count(),
        progress::human(job.snapshot.total_bytes()),
        solved.backend
    ));
    let quiet = ctx.quiet;
    let shipped: Arc<Mutex<Option<ShipReport>>> = Arc::default();
    let options = SubmitOptions {
        replace: args.replace,
        progress: Some(progress::bytes("theseus: shipped", quiet)),
        status: Some(std::sync::Arc::new(move |note: &str| {
            if !quiet {
                eprintln!("theseus: {note}");
            }
        })),
        shipped: Some(Arc::new({
            let shipped = shipped.clone();
            move |report: &ShipReport| {
                if !quiet {
                    eprintln!("theseus: {}", describe_ship(report));
                }
                *shipped.lock().expect("not poisoned") = Some(report.clone());
            }
        })),
    };
    let ledger = ctx.ledger()?;
    let handle = submit_recorded(&ledger, &solved.backend, &job, &options, RunKind::Job).await?;
    if args.replace {
        mark_replaced(ctx, &ledger, &solved.backend, &identity, &plan.host).await?;
    }
    ctx.info(format!(
        "theseus: submitted {} (run {}) to {}; log: {}",
        identity.name, identity.run_id, plan.host, layout.log_file
    ));
    for line in solved.backend.locate(&handle) {
        ctx.info(format!("theseus: {line}"));
    }
    if ctx.output == OutputFormat::Json && !args.follow {
        let ship = shipped.lock().expect("not poisoned").clone();
        super::print_json(
            &json!({"name": identity.name, "run_id": identity.run_id, "host": plan.host, "handle": handle, "log_file": layout.log_file, "ship": ship}),
        )?;
    } else if !args.follow {
        println!("{}", identity.run_id);
    }
    if !args.follow {
        ctx.info(format!("theseus: follow with `theseus logs -f {}`", identity.run_id));
        return Ok(ExitCode::SUCCESS);
    }
    super::jobs::follow_to_end(ctx, &solved.backend, &ledger, &handle, &identity.run_id, None).await
}

/// One line about a finished ship: "sent 1 object (15.8 KiB); 9999 of 10000 files were already
/// there".
fn describe_ship(report: &ShipReport) -> String {
    let objects = if report.objects_sent == 1 { "object" } else { "objects" };
    format!(
        "sent {} {objects} ({}); {} of {} files were already there",
        report.objects_sent,
        progress::human(report.bytes_sent),
        report.files_present,
        report.files
    )
}

/// Solves, snapshots the code and renders the bootstrap: the job as the backend gets it.
async fn prepare(ctx: &Context, args: &SubmitArgs) -> Result<(Solved, PreparedJob, RunLayout)> {
    // A dry run asks no host for capacity: it must work without any cluster or credentials.
    let code = Code { dir: args.code.clone(), clean: args.clean };
    prepare_job(ctx, &args.job, &code, None, !args.dry_run).await
}

/// Which local code a job ships.
pub(crate) struct Code {
    /// The dir (default: the current one).
    pub(crate) dir: Option<std::path::PathBuf>,
    /// HEAD's files only.
    pub(crate) clean: bool,
}

/// [`prepare`] for any job: `experiment` given (`theseus repl`) or loaded from `job`.
pub(crate) async fn prepare_job(
    ctx: &Context,
    job_args: &crate::args::JobArgs,
    code: &Code,
    experiment: Option<theseus_core::job::Experiment>,
    probe: bool,
) -> Result<(Solved, PreparedJob, RunLayout)> {
    let args = SubmitLike { job: job_args, code: code.dir.clone(), clean: code.clean };
    let solved = super::prepare::solve_with(ctx, args.job, experiment, probe).await?;
    let plan = &solved.plan;
    if !ctx.quiet {
        eprint!("{}", render::render_table(&plan.considered));
    }
    ctx.info(format!("theseus: chose {}", render::describe_plan(plan)));
    for note in &plan.notes {
        ctx.info(format!("theseus: note: {note}"));
    }
    for (host, reason) in super::prepare::unanswered_before_chosen(&solved) {
        ctx.info(format!("theseus: host {host} did not answer ({reason}); chose {} without it", plan.host));
    }

    let env = super::prepare::environment(&solved, args.job)?;
    let identity = JobIdentity::new(&args.job.name, args.job.project.as_deref(), args.job.group.as_deref());
    let code_dir = match &args.code {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let mode = if args.clean { SnapshotMode::Clean } else { SnapshotMode::Dirty };
    let mut snapshot = Snapshot::collect(&code_dir, mode)?;
    snapshot.hash_cache = Some(ctx.hash_cache_dir());
    let layout = solved.backend.layout(&identity, plan)?;
    let host = &solved.loaded.config.hosts[&plan.host];
    let mut uv_groups: Vec<String> = host.uv_groups().to_vec();
    uv_groups.extend(solved.experiment.uv_groups.iter().cloned());
    let mut input = BootstrapInput::for_layout(
        identity.clone(),
        &layout,
        env.clone(),
        solved.experiment.entrypoint_words()?,
        solved.experiment.distributed,
        solved.experiment.config.clone(),
    );
    input.uv_groups = uv_groups;
    input.hardware = Some(bootstrap::Hardware {
        chip: plan.chip.map(|c| c.name.to_owned()),
        count: plan.total_chips,
        nodes: plan.nodes,
        host: plan.host.clone(),
    });
    let bootstrap = bootstrap::render(&input)
        .with_context(|| format!("cannot render the bootstrap for {}", args.job.experiment.display()))?;
    let job =
        PreparedJob { identity, experiment: solved.experiment.clone(), env, plan: plan.clone(), snapshot, bootstrap };
    Ok((solved, job, layout))
}

/// What [`prepare_job`] reads of a submit's arguments.
struct SubmitLike<'a> {
    job: &'a crate::args::JobArgs,
    code: Option<std::path::PathBuf>,
    clean: bool,
}

/// Records the run as `submitting` (with the backend's planned handle, else a placeholder),
/// calls the backend's `submit` and settles the record with what it returned. A signal during
/// `submit` leaves nothing: the backend takes back its partial work, and a job it started anyway
/// is cancelled.
pub(crate) async fn submit_recorded(
    ledger: &Ledger,
    backend: &Arc<DynBackend>,
    job: &PreparedJob,
    options: &SubmitOptions,
    kind: RunKind,
) -> Result<JobHandle> {
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
    let result = backend.submit(job, options).await;
    let run_id = &identity.run_id;
    if let Some(signal) = interrupt::triggered() {
        let (handle, what) = match result {
            Ok(handle) => {
                // Started before the backend saw the signal: the user never got the run id.
                let cancelled = tokio::time::timeout(signals::CLEANUP_BOUND, backend.cancel(&handle)).await;
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
        return Err(Interrupted { signal, what }.into());
    }
    let handle = match result {
        Ok(handle) => handle,
        Err(e @ theseus_core::Error::AlreadyExists { .. }) => {
            // Nothing was created and the name belongs to the live run: this run never was.
            ledger.delete(run_id)?;
            drop(guard);
            bail!("{e}; pass --replace to stop it and submit, or pick another name");
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

/// After a `--replace`: older runs of the name on this host that the ledger still shows as live
/// and that the backend now reports gone or cancelled are marked as replaced.
async fn mark_replaced(
    ctx: &Context,
    ledger: &Ledger,
    backend: &Arc<DynBackend>,
    identity: &JobIdentity,
    host: &str,
) -> Result<()> {
    for old in ledger.live_of_name(identity, host)? {
        if old.state == JobState::Submitting && ledger.submit_in_progress(&old.identity.run_id) {
            continue;
        }
        let replaced = format!("replaced by run {}", identity.run_id);
        let status = tokio::time::timeout(super::jobs::STATUS_TIMEOUT, backend.status(&old.handle)).await;
        match status {
            Ok(Err(theseus_core::Error::NotFound { .. })) => {
                ledger.update_state(&old.identity.run_id, JobState::Cancelled, None, Some(&replaced))?;
            }
            Ok(Ok(status)) if matches!(status.state, JobState::Cancelled | JobState::Unknown) => {
                ledger.update_state(&old.identity.run_id, JobState::Cancelled, status.exit_code, Some(&replaced))?;
            }
            Ok(Ok(status)) => {
                ledger.update_state(&old.identity.run_id, status.state, status.exit_code, status.message.as_deref())?;
            }
            Ok(Err(e)) => {
                ctx.info(format!("theseus: warning: cannot tell whether run {} was replaced: {e}", old.identity.run_id))
            }
            Err(_) => {
                ctx.info(format!("theseus: warning: status of run {} did not answer in time", old.identity.run_id))
            }
        }
    }
    Ok(())
}

fn dry_run(
    ctx: &Context,
    job: &PreparedJob,
    layout: &theseus_core::backend::RunLayout,
    documents: &[DryRunDocument],
) -> Result<ExitCode> {
    let (identity, plan, snapshot, bootstrap) = (&job.identity, &job.plan, &job.snapshot, &job.bootstrap);
    let env_shown: Vec<_> =
        job.env.iter().map(|v| json!({"name": v.name, "value": v.display_value(), "secret": v.secret})).collect();
    if ctx.output == OutputFormat::Json {
        super::print_json(&json!({
            "dry_run": true,
            "identity": identity,
            "plan": plan,
            "layout": layout,
            "ship": {"root": snapshot.root, "files": snapshot.file_count(), "bytes": snapshot.total_bytes()},
            "env": env_shown,
            "bootstrap": bootstrap,
            "documents": documents,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("# dry run: nothing was shipped or started, and no host was contacted");
    println!("# job: {} project={} group={} run={}", identity.name, identity.project, identity.group, identity.run_id);
    println!("# host: {}", render::describe_plan(plan));
    println!("# work dir: {}", layout.work_dir);
    println!(
        "# would ship {} files, {} from {}",
        snapshot.file_count(),
        progress::human(snapshot.total_bytes()),
        snapshot.root.display()
    );
    for v in &job.env {
        println!("# env {}={}", v.name, v.display_value());
    }
    // The bootstrap files as comments, so that for a Volcano host stdout is one YAML stream:
    // `theseus submit ... --dry-run | kubectl apply --dry-run=server -f -` checks the manifests.
    for file in &bootstrap.files {
        println!("#\n# ---- {} ----", file.path);
        for line in file.contents.lines() {
            println!("#{}{line}", if line.is_empty() { "" } else { " " });
        }
    }
    for doc in documents {
        println!("---\n# {}", doc.title);
        print!("{}", doc.text);
        if !doc.text.ends_with('\n') {
            println!();
        }
    }
    Ok(ExitCode::SUCCESS)
}
