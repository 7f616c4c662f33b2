//! Pushing local code into a running job (`sync`, `repl --sync`): one sync with its size checks,
//! progress and the check that the run still runs ([`once`]), its report on stdout ([`print`]),
//! and a watch that syncs again after each burst of edits ([`watch_changes`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use theseus_core::backend::{DynBackend, JobHandle, SyncOptions, SyncReport};
use theseus_core::snapshot::{Snapshot, SnapshotMode};

use crate::args::OutputFormat;
use crate::context::Context;

/// Syncs `code_dir` into the run once.
pub(crate) async fn once(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    handle: &JobHandle,
    code_dir: &Path,
    mode: SnapshotMode,
) -> Result<SyncReport> {
    let mut snapshot = Snapshot::collect(code_dir, mode)?;
    crate::prepare::check_sizes(ctx, &snapshot)?;
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
    let now = tokio::time::timeout(theseus_core::lifecycle::STATUS_TIMEOUT, backend.status(handle)).await;
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
        return crate::output::print_json(report);
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
