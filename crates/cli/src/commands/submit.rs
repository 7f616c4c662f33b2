//! `theseus submit`: solve, snapshot the code, render the bootstrap, start the job, record it in
//! the ledger, and with `--follow` stream its output to the end.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use serde_json::json;
use theseus_core::backend::{DryRunDocument, JobState, PreparedJob, SubmitOptions};
use theseus_core::bootstrap::{self, BootstrapInput};
use theseus_core::job::JobIdentity;
use theseus_core::ledger::{now_rfc3339, Record};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::solver::render;

use crate::args::{OutputFormat, SubmitArgs};
use crate::context::Context;
use crate::progress;

pub(crate) async fn run(ctx: &Context, args: SubmitArgs) -> Result<ExitCode> {
    // A dry run asks no host for capacity: it must work without any cluster or credentials.
    let solved = super::prepare::solve(ctx, &args.job, !args.dry_run).await?;
    let plan = &solved.plan;
    if !ctx.quiet {
        eprint!("{}", render::render_table(&plan.considered));
    }
    ctx.info(format!("theseus: chose {}", render::describe_plan(plan)));
    for note in &plan.notes {
        ctx.info(format!("theseus: note: {note}"));
    }

    let env = super::prepare::environment(&solved, &args.job)?;
    let identity = JobIdentity::new(&args.job.name, args.job.project.as_deref(), args.job.group.as_deref());
    let code_dir = match &args.code {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let mode = if args.clean { SnapshotMode::Clean } else { SnapshotMode::Dirty };
    let snapshot = Snapshot::collect(&code_dir, mode)?;
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
    let bootstrap = bootstrap::render(&input)
    .with_context(|| format!("cannot render the bootstrap for {}", args.job.experiment.display()))?;

    let job = PreparedJob {
        identity: identity.clone(),
        experiment: solved.experiment.clone(),
        env,
        plan: plan.clone(),
        snapshot,
        bootstrap,
    };
    if args.dry_run {
        let documents = solved.backend.dry_run(&job)?;
        return dry_run(ctx, &job, &layout, &documents);
    }
    ctx.info(format!(
        "theseus: shipping {} files ({}) to {}",
        job.snapshot.file_count(),
        progress::human(job.snapshot.total_bytes()),
        solved.backend
    ));
    let quiet = ctx.quiet;
    let options = SubmitOptions {
        replace: args.replace,
        progress: Some(progress::bytes("theseus: shipped", quiet)),
        status: Some(std::sync::Arc::new(move |note: &str| {
            if !quiet {
                eprintln!("theseus: {note}");
            }
        })),
    };
    let handle = solved.backend.submit(&job, &options).await?;
    let ledger = ctx.ledger()?;
    let now = now_rfc3339();
    ledger.insert(&Record {
        identity: identity.clone(),
        host: plan.host.clone(),
        handle: handle.clone(),
        submitted_at: now.clone(),
        updated_at: now,
        state: JobState::Pending,
        exit_code: None,
        message: None,
    })?;
    ctx.info(format!(
        "theseus: submitted {} (run {}) to {}; log: {}",
        identity.name, identity.run_id, plan.host, layout.log_file
    ));
    if ctx.output == OutputFormat::Json && !args.follow {
        super::print_json(&json!({"name": identity.name, "run_id": identity.run_id, "host": plan.host, "handle": handle, "log_file": layout.log_file}))?;
    } else if !args.follow {
        println!("{}", identity.run_id);
    }
    if !args.follow {
        ctx.info(format!("theseus: follow with `theseus logs -f {}`", identity.run_id));
        return Ok(ExitCode::SUCCESS);
    }
    super::jobs::follow_to_end(ctx, &solved.backend, &ledger, &handle, &identity.run_id, None).await
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
    for file in &bootstrap.files {
        println!("\n# ---- {} ----", file.path);
        print!("{}", file.contents);
        if !file.contents.ends_with('\n') {
            println!();
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
