//! `theseus sync NAME|RUN_ID [--code DIR] [--clean] [--watch]`: pushes the local code into a
//! running job's code dir (`Backend::sync`, through the cluster's content-addressed store:
//! only changed files move; files the local tree deleted are deleted; files the job made stay)
//! and prints what changed, one `A`/`M`/`D` line per path (`--output json`: the report).
//! `--watch` syncs again whenever the local tree changes (polled once a second, one sync per
//! burst of edits), until Ctrl-C.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use theseus_core::snapshot::SnapshotMode;

use crate::args::SyncArgs;
use crate::code_sync::{once, print, watch_changes};
use crate::context::Context;
use crate::signals::Interrupted;

pub(crate) async fn run(ctx: &Context, args: SyncArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger()?;
    let (record, backend) = crate::runs::find(ctx, &ledger, &args.job)?;
    let code_dir = match &args.code {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let mode = if args.clean { SnapshotMode::Clean } else { SnapshotMode::Dirty };
    let report = tokio::select! {
        report = once(ctx, &backend, &record.handle, &code_dir, mode) => report?,
        signal = theseus_core::interrupt::wait() => {
            return Err(Interrupted {
                signal,
                what: "the sync stopped; each file of the run is its old or its new version".into(),
            }
            .into());
        }
    };
    print(ctx, &report)?;
    if !args.watch {
        return Ok(ExitCode::SUCCESS);
    }
    ctx.info(format!("theseus: watching {} for changes; Ctrl-C stops", code_dir.display()));
    tokio::select! {
        signal = theseus_core::interrupt::wait() => {
            Err(Interrupted { signal, what: "stopped watching; the job keeps running".into() }.into())
        }
        () = watch_changes(ctx, &backend, &record.handle, &code_dir, mode) => unreachable!("the watch never ends"),
    }
}
