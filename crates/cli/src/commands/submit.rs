//! `theseus submit`: core's dispatch flow ([`theseus_core::dispatch`]: solve, snapshot the
//! code, render the bootstrap, record the run in the ledger as `submitting`, start the job,
//! settle the record), its events on stderr, the run id (or JSON) on stdout, and with
//! `--follow` its output to the end.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Result, bail};
use serde_json::json;
use theseus_core::backend::{DryRunDocument, DynBackend, JobHandle, JobState, PreparedJob, RunLayout};
use theseus_core::config::DispatchConfig;
use theseus_core::dispatch::{DispatchError, Dispatcher, Solved};
use theseus_core::job::JobIdentity;
use theseus_core::ledger::{Ledger, RunKind};
use theseus_core::snapshot::size::SizeLimits;
use theseus_core::solver::render;

use crate::args::{JobArgs, OutputFormat, SubmitArgs};
use crate::context::Context;
use crate::progress;
use crate::signals;

pub(crate) use super::prepare::Code;

pub(crate) async fn run(ctx: &Context, args: SubmitArgs) -> Result<ExitCode> {
    let (dispatcher, reporter) = super::prepare::dispatcher(ctx);
    // Nothing is created before the backend's `submit`: a signal until then just stops.
    let code = Code { dir: args.code.clone(), clean: args.clean };
    // A dry run asks no host for capacity: it must work without any cluster or credentials.
    let prepared = prepare_job(ctx, &dispatcher, &args.job, &code, None, !args.dry_run);
    let (solved, job, layout) = signals::or_interrupted(prepared).await?;
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
    let ledger = ctx.ledger()?;
    let handle =
        submit_recorded(&dispatcher, &ledger, &solved.loaded.config, &solved.backend, &job, RunKind::Job, args.replace)
            .await?;
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
        let ship = reporter.shipped.lock().expect("not poisoned").clone();
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
    let solved = super::prepare::solve(ctx, dispatcher, job_args, experiment, code, probe).await?;
    dispatcher.report_plan(&solved);
    let (job, layout) = dispatcher.prepare(&solved).map_err(super::prepare::lift)?;
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
    replace: bool,
) -> Result<JobHandle> {
    let submitted = dispatcher.submit(ledger, backend, job, kind, replace).await;
    // The run's host as configured now, for `status`, `logs` and `cancel` without `-d FILE`.
    if let Some(snapshot) = super::jobs::host_snapshot(config, &job.plan.host)
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
        Err(e) => Err(super::prepare::lift(e)),
    }
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
