//! `theseus status|logs|cancel|list`: jobs found in the ledger by name or run id.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, Result};
use futures::StreamExt;
use serde_json::json;
use theseus_core::backend::{DynBackend, JobHandle, JobState, JobStatus, LogOptions};
use theseus_core::config::HostKind;
use theseus_core::ledger::{Ledger, Record};

use crate::args::{ListArgs, LogsArgs, OutputFormat, TargetArgs};
use crate::context::Context;

use super::start::{StartProgress, StartStep};

fn find(ctx: &Context, ledger: &Ledger, job: &str) -> Result<(Record, Arc<DynBackend>)> {
    let record = ledger
        .find(job)?
        .ok_or_else(|| anyhow!("no job or run `{job}` in the ledger (`theseus list` shows what is there)"))?;
    let loaded = ctx.config()?;
    let backend = if loaded.config.hosts.contains_key(&record.host) {
        ctx.backend(&loaded, &record.host)?
    } else if record.handle.kind == HostKind::Local {
        // The host left the config; a local handle carries every path it needs.
        Arc::new(theseus_core::local::LocalBackend::new(
            &record.host,
            Default::default(),
            Default::default(),
            &ctx.home,
        ))
    } else {
        return Err(anyhow!("host `{}` of run `{}` is no longer in the config", record.host, record.identity.run_id));
    };
    Ok((record, backend))
}

fn save(ledger: &Ledger, run_id: &str, status: &JobStatus) -> Result<()> {
    ledger.update_state(run_id, status.state, status.exit_code, status.message.as_deref())?;
    Ok(())
}

fn print_status(ctx: &Context, record: &Record, status: &JobStatus) -> Result<()> {
    if ctx.output == OutputFormat::Json {
        return super::print_json(&json!({"name": record.identity.name, "run_id": record.identity.run_id, "host": record.host, "status": status}));
    }
    let code = status.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
    println!("{} {} on {}: {}{}", record.identity.name, record.identity.run_id, record.host, status.state, code);
    if let Some(m) = &status.message {
        println!("  {m}");
    }
    if status.ranks.len() > 1 {
        for r in &status.ranks {
            let code = r.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
            println!("  rank {}: {}{}", r.rank, r.state, code);
        }
    }
    Ok(())
}

pub(crate) async fn status(ctx: &Context, args: TargetArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger()?;
    let (record, backend) = find(ctx, &ledger, &args.job)?;
    let status = match backend.status(&record.handle).await {
        Ok(status) => status,
        // Backends that delete finished or cancelled jobs (Volcano) cannot report them any more:
        // the ledger's last known state is the answer, and says so.
        Err(theseus_core::Error::NotFound { what }) if record.state.is_terminal() => {
            let status = JobStatus {
                state: record.state,
                exit_code: record.exit_code,
                message: Some(format!("last known state; {what} no longer exists")),
                ranks: Vec::new(),
            };
            print_status(ctx, &record, &status)?;
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    save(&ledger, &record.identity.run_id, &status)?;
    print_status(ctx, &record, &status)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn logs(ctx: &Context, args: LogsArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger()?;
    let (record, backend) = find(ctx, &ledger, &args.job)?;
    if args.follow {
        // Following an existing run says why it has not started but never cancels it.
        let run = (&record.handle, record.identity.run_id.as_str());
        return follow(ctx, &backend, &ledger, run, args.rank, None).await;
    }
    let mut stream = backend.logs(&record.handle, &LogOptions { follow: false, rank: args.rank }).await?;
    while let Some(line) = stream.next().await {
        print_line(&line?);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_line(line: &theseus_core::backend::LogLine) {
    match (&line.source, line.rank) {
        (Some(source), _) => println!("[{source}] {}", line.text),
        (None, Some(r)) => println!("[rank-{r}] {}", line.text),
        (None, None) => println!("{}", line.text),
    }
}

/// Streams a job's output until it ends (or Ctrl-C), stores the final state and returns the
/// exit code: 0 when completed, the job's exit code (else 1) otherwise. A job that does not
/// start within its backend's start timeout is cancelled (`submit --follow`).
pub(crate) async fn follow_to_end(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    ledger: &Ledger,
    handle: &JobHandle,
    run_id: &str,
    rank: Option<u32>,
) -> Result<ExitCode> {
    follow(ctx, backend, ledger, (handle, run_id), rank, backend.start_timeout()).await
}

/// [`follow_to_end`], cancelling the job when it has not started after `start_timeout`.
async fn follow(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    ledger: &Ledger,
    (handle, run_id): (&JobHandle, &str),
    rank: Option<u32>,
    start_timeout: Option<std::time::Duration>,
) -> Result<ExitCode> {
    let mut stream = backend.logs(handle, &LogOptions { follow: true, rank }).await?;
    // Until the job starts, its status says why it waits (see `start.rs`).
    let mut start = StartProgress::new(start_timeout);
    let began = std::time::Instant::now();
    let mut look = tokio::time::interval(std::time::Duration::from_secs(2));
    let interrupted = loop {
        tokio::select! {
            line = stream.next() => match line {
                Some(line) => {
                    start.mark_started();
                    print_line(&line?);
                }
                None => break false,
            },
            _ = look.tick(), if !start.started() => {
                let status = match backend.status(handle).await {
                    Ok(status) => status,
                    Err(e) => {
                        tracing::debug!("status while waiting for {run_id} to start: {e}");
                        continue;
                    }
                };
                match start.observe(&status, began.elapsed()) {
                    StartStep::Say(reason) => ctx.info(format!("theseus: not started yet: {reason}")),
                    StartStep::TimedOut(reason) => return give_up_start(ctx, backend, ledger, handle, run_id, &start, &reason).await,
                    StartStep::Nothing | StartStep::Started => {}
                }
            }
            _ = tokio::signal::ctrl_c() => break true,
        }
    };
    if interrupted {
        ctx.info(format!("theseus: stopped following; the job keeps running (`theseus cancel {run_id}` stops it)"));
        return Ok(ExitCode::from(130));
    }
    let status = backend.status(handle).await?;
    save(ledger, run_id, &status)?;
    let code = status.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
    ctx.info(format!("theseus: run {run_id} {}{code}", status.state));
    if let Some(m) = &status.message {
        ctx.info(format!("theseus: {m}"));
    }
    Ok(match status.state {
        JobState::Completed => ExitCode::SUCCESS,
        _ => ExitCode::from(status.exit_code.filter(|c| (1..=255).contains(c)).unwrap_or(1) as u8),
    })
}

/// A followed job that did not start within its backend's start timeout: cancelled (nothing of
/// it is left), recorded with the reason, exit 1.
async fn give_up_start(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    ledger: &Ledger,
    handle: &JobHandle,
    run_id: &str,
    start: &StartProgress,
    reason: &str,
) -> Result<ExitCode> {
    let secs = start.timeout().map(|t| t.as_secs()).unwrap_or_default();
    ctx.info(format!("theseus: run {run_id} did not start within {secs} s: {reason}"));
    ctx.info(format!("theseus: cancelling run {run_id}"));
    let cancelled = backend.cancel(handle).await?;
    let status = JobStatus {
        state: JobState::Cancelled,
        exit_code: None,
        message: Some(format!("did not start within {secs} s: {reason}")),
        ranks: cancelled.ranks,
    };
    save(ledger, run_id, &status)?;
    Ok(ExitCode::from(1))
}

pub(crate) async fn cancel(ctx: &Context, args: TargetArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger()?;
    let (record, backend) = find(ctx, &ledger, &args.job)?;
    let status = backend.cancel(&record.handle).await?;
    save(&ledger, &record.identity.run_id, &status)?;
    print_status(ctx, &record, &status)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn list(ctx: &Context, args: ListArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger()?;
    let mut records = ledger.list(args.limit)?;
    if !args.no_refresh {
        let loaded = ctx.config().ok();
        for record in records.iter_mut().filter(|r| !r.state.is_terminal()) {
            let Some(loaded) = &loaded else { break };
            if !loaded.config.hosts.contains_key(&record.host) {
                continue;
            }
            let Ok(backend) = ctx.backend(loaded, &record.host) else { continue };
            if let Ok(status) = backend.status(&record.handle).await {
                save(&ledger, &record.identity.run_id, &status)?;
                record.state = status.state;
                record.exit_code = status.exit_code;
            }
        }
    }
    if ctx.output == OutputFormat::Json {
        super::print_json(&records)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<24} {:<20} {:<12} {:<10} {:<10} SUBMITTED", "RUN ID", "NAME", "HOST", "STATE", "EXIT");
    for r in &records {
        let exit = r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
        println!(
            "{:<24} {:<20} {:<12} {:<10} {:<10} {}",
            r.identity.run_id, r.identity.name, r.host, r.state, exit, r.submitted_at
        );
    }
    Ok(ExitCode::SUCCESS)
}
