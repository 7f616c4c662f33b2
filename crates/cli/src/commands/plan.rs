//! `theseus plan`: where a job would go and why, without submitting, and which hosts did not
//! answer their availability probe (`unknown: HOST: REASON` lines; `unanswered` in JSON), and
//! what the job would resume from (`resumes:`; `resume` in JSON), and whether theseus initialises
//! JAX distributed for it (`jax:`; `jax_distributed` in JSON). On a host with shared queues
//! (Volcano) also how the request stands among them: the verdict and a row per queue (`queues`
//! in JSON), and what RBAC hid.

use std::process::ExitCode;

use anyhow::Result;
use theseus_core::job::JobIdentity;
use theseus_core::solver::render;

use crate::args::{JobArgs, OutputFormat};
use crate::context::Context;

/// How long the queue report may take.
const SHARES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

pub(crate) async fn run(ctx: &Context, args: JobArgs) -> Result<ExitCode> {
    let (dispatcher, _) = crate::prepare::dispatcher(ctx);
    let code = crate::prepare::Code { dir: None, clean: false };
    let solved = crate::prepare::solve(ctx, &dispatcher, &args, None, &code, true).await?;
    // Where the job would keep its checkpoints and what it would resume from (a `--restore`
    // that cannot be used fails here, as it would at submit).
    let identity = JobIdentity::new(&args.name, args.project.as_deref(), args.group.as_deref());
    let layout = solved.backend.layout(&identity, &solved.plan)?;
    let resume = dispatcher.resume(&solved, &layout).map_err(crate::prepare::lift)?;
    let checkpoint_dir = theseus_core::bootstrap::checkpoint_dir(&layout.data_dirs.checkpoints, &identity);
    let from = resume.describe(&checkpoint_dir);
    let jax = theseus_core::bootstrap::describe_distributed(&solved.spec.experiment, solved.plan.processes());
    let shares = match tokio::time::timeout(SHARES_TIMEOUT, solved.backend.shares(&solved.request, &solved.plan)).await
    {
        Ok(Ok(shares)) => Ok(shares),
        Ok(Err(e)) => Err(format!("{e}")),
        Err(_) => Err(format!("no answer within {}s", SHARES_TIMEOUT.as_secs())),
    };
    let creates = crate::creates::bounded(dispatcher.creates(&solved)).await;
    let stages = theseus_core::job::stages::list(&solved.spec.experiment, &solved.spec.experiment_source);
    if ctx.output == OutputFormat::Json {
        let unanswered: Vec<_> = solved
            .unanswered
            .iter()
            .map(|(host, reason)| serde_json::json!({"host": host, "reason": reason}))
            .collect();
        crate::output::print_json(&serde_json::json!({
            "request": solved.request,
            "job_key": solved.spec.experiment.job_key,
            "plan": solved.plan,
            "unanswered": unanswered,
            "resume": {"checkpoint_dir": checkpoint_dir, "restore": resume.restore, "fresh": resume.fresh, "from": from},
            "stages": stages,
            "jax_distributed": jax,
            "queues": shares.as_ref().ok(),
            "queues_error": shares.as_ref().err(),
            "creates": creates.as_ref().ok(),
            "creates_error": creates.as_ref().err(),
            "uv_groups": solved.uv_groups(),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", render::render_table(&solved.plan.considered));
    println!();
    if let Some(key) = &solved.spec.experiment.job_key {
        println!("job:     {key} (a job config of the original, run by .theseus/job.py)");
    }
    println!("request: {}", solved.request);
    println!("chosen:  {}", render::describe_plan(&solved.plan));
    println!("resumes: {from}");
    for stage in &stages {
        println!(
            "stage {}: {}: {}",
            stage.stage,
            stage.file.replace(char::is_control, "?"),
            stage.runs.replace(char::is_control, "?")
        );
    }
    println!("uv groups: {}", crate::output::uv_groups(&solved.uv_groups()));
    println!("jax:     {jax}");
    for note in &solved.plan.notes {
        println!("note:    {note}");
    }
    print!("{}", crate::creates::render(&creates, ""));
    match &shares {
        Ok(Some(shares)) => {
            println!();
            println!("queues of {} ({}; {}):", solved.plan.host, shares.resource, shares.model);
            if !shares.queues.is_empty() {
                print!("{}", theseus_core::shares::render_table(shares));
            }
            println!("queue:   {}", shares.verdict.describe());
            for unknown in &shares.unknown {
                println!("unknown: {unknown}");
            }
        }
        Ok(None) => {}
        Err(e) => println!("queue:   the queues could not be read: {e}"),
    }
    print!("{}", crate::prepare::render_unanswered(&solved.unanswered));
    Ok(ExitCode::SUCCESS)
}
