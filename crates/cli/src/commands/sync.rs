//! `theseus sync NAME|RUN_ID [--code DIR] [--clean] [--watch]`: pushes the local code into a
//! running job's code dir (`Backend::sync`, through the cluster's content-addressed store:
//! only changed files move; files the local tree deleted are deleted; files the job made stay)
//! and prints what changed, one `A`/`M`/`D` line per path (`--output json`: the report).
//! `--watch` syncs again whenever the local tree changes (polled once a second, one sync per
//! burst of edits), until Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use theseus_core::backend::{DynBackend, JobHandle, SyncOptions, SyncReport};
use theseus_core::snapshot::{Snapshot, SnapshotMode};

use crate::args::{OutputFormat, SyncArgs};
use crate::context::Context;
use crate::signals::Interrupted;

pub(crate) async fn run(ctx: &Context, args: SyncArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger()?;
    let (record, backend) = super::jobs::find(ctx, &ledger, &args.job)?;
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

/// Syncs `code_dir` into the run once.
pub(crate) async fn once(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    handle: &JobHandle,
    code_dir: &Path,
    mode: SnapshotMode,
) -> Result<SyncReport> {
    let mut snapshot = Snapshot::collect(code_dir, mode)?;
    super::submit::check_sizes(ctx, &snapshot)?;
    snapshot.hash_cache = Some(ctx.hash_cache_dir());
    let quiet = ctx.quiet;
    let options = SyncOptions {
        progress: Some(crate::progress::bytes("theseus: syncing", quiet)),
        status: Some(Arc::new(move |note: &str| {
            if !quiet {
                eprintln!("theseus: {note}");
            }
        })),
    };
    let report = backend.sync(handle, &snapshot, &options).await?;
    // The backend checked that the run was live before it copied; a run cancelled (or ended)
    // while the files moved got them for nothing, and the user must hear it.
    let now = tokio::time::timeout(super::jobs::STATUS_TIMEOUT, backend.status(handle)).await;
    match now {
        Ok(Ok(status)) if status.state.is_terminal() => Err(anyhow::anyhow!(
            "run `{}` ended ({}) while its code was synced: the new files reached a run that no longer runs",
            handle.id,
            status.state.as_str()
        )),
        Ok(Err(theseus_core::Error::NotFound { what })) => {
            Err(anyhow::anyhow!("run `{}` ended while its code was synced ({what} no longer exists)", handle.id))
        }
        _ => Ok(report),
    }
}

/// Prints a sync's change: JSON, or one line per path.
pub(crate) fn print(ctx: &Context, report: &SyncReport) -> Result<()> {
    if ctx.output == OutputFormat::Json {
        return super::print_json(report);
    }
    let d = &report.diff;
    for (mark, paths) in [("A", &d.added), ("M", &d.changed), ("D", &d.deleted)] {
        for path in paths {
            println!("{mark} {}", path.escape_debug());
        }
    }
    ctx.info(format!(
        "theseus: synced {} added, {} changed, {} deleted ({} sent)",
        d.added.len(),
        d.changed.len(),
        d.deleted.len(),
        crate::progress::human(report.bytes_sent)
    ));
    Ok(())
}

/// A cheap fingerprint of the tree: every file's path, size, mtime and inode.
fn fingerprint(dir: &Path) -> Vec<(PathBuf, u64, i64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name() == ".git" {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if meta.is_dir() {
                stack.push(path.clone());
            }
            out.push((path, meta.len(), meta.mtime_nsec() + meta.mtime() * 1_000_000_000, meta.ino()));
        }
    }
    out.sort();
    out
}

/// Syncs again after each burst of changes (quiet for a second), for ever; failures are said
/// and the watch goes on.
pub(crate) async fn watch_changes(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    handle: &JobHandle,
    code_dir: &Path,
    mode: SnapshotMode,
) {
    let tick = Duration::from_secs(1);
    let mut seen = fingerprint(code_dir);
    loop {
        tokio::time::sleep(tick).await;
        let now = fingerprint(code_dir);
        if now == seen {
            continue;
        }
        // Wait for the burst to end: a second with no further change.
        let mut settled = now;
        loop {
            tokio::time::sleep(tick).await;
            let again = fingerprint(code_dir);
            if again == settled {
                break;
            }
            settled = again;
        }
        seen = settled;
        match once(ctx, backend, handle, code_dir, mode).await {
            Ok(report) if report.diff.is_empty() => {}
            Ok(report) => {
                if let Err(e) = print(ctx, &report) {
                    ctx.info(format!("theseus: {e:#}"));
                }
            }
            Err(e) => ctx.info(format!("theseus: sync failed: {e:#}")),
        }
    }
}
