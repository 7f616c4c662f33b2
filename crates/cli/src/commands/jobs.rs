//! `theseus status|logs|cancel`: jobs found in the ledger by name or run id (`list` is in
//! `list.rs`); what a backend's answer means for the run is core's
//! ([`theseus_core::lifecycle`]).

use std::process::ExitCode;

use anyhow::Result;
use futures::StreamExt;
use theseus_core::backend::LogOptions;
use theseus_core::lifecycle::{self, FollowOptions};

use crate::args::{LogsArgs, TargetArgs};
use crate::context::Context;
use crate::follow::follow;
use crate::output::{print_line, print_status};
use crate::runs::{answer_within, find};

pub(crate) async fn status(ctx: &Context, args: TargetArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger_for_reading()?;
    let (record, backend) = find(ctx, &ledger, &args.job)?;
    let within = answer_within(ctx.config().ok().as_ref(), &record.host);
    let status = lifecycle::refresh(&ledger, &record, &backend, within).await?;
    let resume = ledger.resume(&record.identity.run_id).unwrap_or_default();
    // The batch-size search's probes, where the backend reads the run's files: best effort,
    // within the same bound as the status itself.
    let search = tokio::time::timeout(within, backend.run_file(&record.handle, "batch-search.json")).await;
    let search: Option<serde_json::Value> =
        search.ok().and_then(Result::ok).flatten().and_then(|bytes| serde_json::from_slice(&bytes).ok());
    print_status(ctx, &record, &status, resume.as_ref(), search.as_ref())?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn logs(ctx: &Context, args: LogsArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger_for_reading()?;
    let (record, backend) = find(ctx, &ledger, &args.job)?;
    if args.follow {
        // Following an existing run says why it has not started but never cancels it.
        let run = (&record.handle, record.identity.run_id.as_str());
        return follow(ctx, &backend, &ledger, run, FollowOptions::watch(args.rank)).await;
    }
    let mut stream = backend.logs(&record.handle, &LogOptions { follow: false, rank: args.rank }).await?;
    while let Some(line) = stream.next().await {
        print_line(&line?);
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn cancel(ctx: &Context, args: TargetArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger()?;
    let (record, backend) = find(ctx, &ledger, &args.job)?;
    let within = || answer_within(ctx.config().ok().as_ref(), &record.host);
    let status = lifecycle::cancel(&ledger, &record, &backend, within).await?;
    print_status(ctx, &record, &status, None, None)?;
    Ok(ExitCode::SUCCESS)
}
