//! `theseus submit`: core's dispatch flow ([`theseus_core::dispatch`]: solve, snapshot the
//! code, render the bootstrap, record the run in the ledger as `submitting`, start the job,
//! settle the record), its events on stderr, the run id (or JSON) on stdout, and with
//! `--follow` its output to the end.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use theseus_core::backend::{DryRunDocument, PreparedJob, RunLayout, SubmitOptions};
use theseus_core::bootstrap::Resume;
use theseus_core::ledger::RunKind;
use theseus_core::lifecycle::{self, FollowOptions, Unsettled};
use theseus_core::solver::render;

use crate::args::{OutputFormat, SubmitArgs};
use crate::context::Context;
use crate::follow::follow;
use crate::output::print_json;
use crate::prepare::{Code, prepare_job, submit_recorded};
use crate::progress;
use crate::{creates, signals};

pub(crate) async fn run(ctx: &Context, args: SubmitArgs) -> Result<ExitCode> {
    let (dispatcher, reporter) = crate::prepare::dispatcher(ctx);
    // Nothing is created before the backend's `submit`: a signal until then just stops.
    let code = Code { dir: args.code.clone(), clean: args.clean };
    // A dry run asks no host for capacity: it must work without any cluster or credentials.
    let prepared = prepare_job(ctx, &dispatcher, &args.job, &code, None, !args.dry_run);
    let (solved, job, layout) = signals::or_interrupted(prepared).await?;
    let plan = &solved.plan;
    let identity = job.identity.clone();
    let resume = dispatcher.resume(&solved, &layout).map_err(crate::prepare::lift)?;
    let resume_shown = resume_json(&resume, &layout, &identity);
    if args.dry_run {
        let documents = solved.backend.dry_run(&job)?;
        let creates = signals::or_interrupted(async { Ok(creates::listed(&*solved.backend, &job).await) }).await?;
        return dry_run(ctx, &solved, &job, &layout, &documents, &resume_shown, &creates);
    }
    // What the host would create (a cloud VM) is confirmed before anything is shipped.
    let create_confirmed = creates::confirm(ctx, &*solved.backend, &job, args.create.yes).await?;
    let choices =
        SubmitOptions { replace: args.replace, create_confirmed, keep: args.create.keep, ..SubmitOptions::default() };
    ctx.info(format!(
        "theseus: submitting {} files ({}) to {}",
        job.snapshot.file_count(),
        progress::human(job.snapshot.total_bytes()),
        solved.backend
    ));
    let ledger = ctx.ledger()?;
    let submitted =
        submit_recorded(&dispatcher, &ledger, &solved.loaded.config, &solved.backend, &job, RunKind::Job, choices)
            .await;
    // What the run resumes from, for `status` (a run that was never recorded has no row).
    if (resume.restore.is_some() || resume.fresh)
        && let Err(e) = ledger.set_resume(&identity.run_id, &resume)
    {
        tracing::warn!("cannot record the resume of run {}: {e}", identity.run_id);
    }
    let handle = submitted?;
    if args.replace {
        // Older runs of the name that the ledger still shows as live are recorded as replaced.
        let warn = |u: Unsettled| ctx.info(format!("theseus: warning: {u}"));
        lifecycle::settle_replaced(&ledger, &solved.backend, &identity, &plan.host, warn).await?;
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
        print_json(
            &json!({"name": identity.name, "run_id": identity.run_id, "host": plan.host, "handle": handle, "log_file": layout.log_file, "ship": ship}),
        )?;
    } else if !args.follow {
        println!("{}", identity.run_id);
    }
    if !args.follow {
        ctx.info(format!("theseus: follow with `theseus logs -f {}`", identity.run_id));
        return Ok(ExitCode::SUCCESS);
    }
    // A job that does not start within its backend's start timeout, or can never start, is cancelled.
    let options = FollowOptions::to_end(&*solved.backend, None);
    follow(ctx, &solved.backend, &ledger, (&handle, &identity.run_id), options).await
}

/// `{checkpoint_dir, restore, fresh, from}` for the dry run: the job's `THESEUS_CHECKPOINT_DIR`
/// and what it resumes from (`from`: one line).
fn resume_json(resume: &Resume, layout: &RunLayout, identity: &theseus_core::job::JobIdentity) -> serde_json::Value {
    let dir = theseus_core::bootstrap::checkpoint_dir(&layout.data_dirs.checkpoints, identity);
    json!({"checkpoint_dir": dir, "restore": resume.restore, "fresh": resume.fresh, "from": resume.describe(&dir)})
}

fn dry_run(
    ctx: &Context,
    solved: &theseus_core::dispatch::Solved,
    job: &PreparedJob,
    layout: &RunLayout,
    documents: &[DryRunDocument],
    resume: &serde_json::Value,
    creates: &Result<Vec<String>, String>,
) -> Result<ExitCode> {
    let uv_groups = &solved.uv_groups();
    let stages = &theseus_core::job::stages::list(&solved.spec.experiment, &solved.spec.experiment_source);
    let (identity, plan, snapshot, bootstrap) = (&job.identity, &job.plan, &job.snapshot, &job.bootstrap);
    let env_shown: Vec<_> =
        job.env.iter().map(|v| json!({"name": v.name, "value": v.display_value(), "secret": v.secret})).collect();
    let jax = theseus_core::bootstrap::describe_distributed(&job.experiment, plan.processes());
    if ctx.output == OutputFormat::Json {
        print_json(&json!({
            "dry_run": true,
            "identity": identity,
            "job_key": job.experiment.job_key,
            "plan": plan,
            "layout": layout,
            "ship": {"root": snapshot.root, "files": snapshot.file_count(), "bytes": snapshot.total_bytes()},
            "env": env_shown,
            "resume": resume,
            "jax_distributed": jax,
            "stages": stages,
            "bootstrap": bootstrap,
            "documents": documents,
            "creates": creates.as_ref().ok(),
            "creates_error": creates.as_ref().err(),
            "uv_groups": uv_groups,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("# dry run: nothing was created, shipped or started");
    println!("# job: {} project={} group={} run={}", identity.name, identity.project, identity.group, identity.run_id);
    if let Some(key) = &job.experiment.job_key {
        println!("# job config of the original: {key} (run by .theseus/job.py)");
    }
    println!("# host: {}", render::describe_plan(plan));
    println!("# work dir: {}", layout.work_dir);
    println!(
        "# would ship {} files, {} from {}",
        snapshot.file_count(),
        progress::human(snapshot.total_bytes()),
        snapshot.root.display()
    );
    println!("# resumes {}", resume["from"].as_str().unwrap_or_default());
    println!("# uv groups: {}", crate::output::uv_groups(uv_groups));
    println!("# JAX distributed: {jax}");
    for stage in stages {
        println!(
            "# stage {}: {}: {}",
            stage.stage,
            stage.file.replace(char::is_control, "?"),
            stage.runs.replace(char::is_control, "?")
        );
    }
    print!("{}", creates::render(creates, "# "));
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
