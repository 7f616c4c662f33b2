//! Live code sync (`theseus sync`): the current local code into a running run's code dir,
//! through the same store as shipping. Only what changed moves, and files the local tree no
//! longer has are deleted; files the job made itself are left alone.
//!
//! Every shipped run dir has a manifest, [`MANIFEST`] (path → object key or symlink target),
//! written with the bootstrap. A sync reads it ([`scripts_sync::READ`]), diffs it against the
//! new snapshot ([`diff`], pure), uploads the objects the store lacks (the ship's own query and
//! upload), and applies the change with [`scripts_sync::APPLY`]: one tar stream builds a stage
//! dir inside the run dir (hard links into the store, or copies, for added and changed files;
//! empty markers for deleted ones; the new manifest; a token last), then deletions and one
//! `mv -f` (a rename: atomic per file) per changed file. A cut stream changes nothing.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::sync::Arc;

use serde::Serialize;

use super::archive::{ExtraFile, header};
pub use super::manifest::{MANIFEST, Manifest};
use super::plan::{PlanEntry, StorePlan};
use super::ship::{relative_dest, send_missing, upload_id};
use super::{Materialize, OBJECTS_DIR, ProgressFn, ScriptCall, Shell, ShellError, StatusFn, StdinFn, StoreError};
use crate::snapshot::Snapshot;
use crate::{Error, Result};

#[path = "sync_scripts.rs"]
pub mod scripts_sync;

/// Exit code of [`scripts_sync::READ`] when the run dir has no manifest.
pub const EXIT_NO_MANIFEST: i32 = 44;
/// Exit code of the sync scripts when the run dir is gone.
pub const EXIT_NO_RUN_DIR: i32 = 45;

/// What differs between a run dir's code and the local code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SyncDiff {
    /// New paths.
    pub added: Vec<String>,
    /// Paths whose content, mode or link target changed.
    pub changed: Vec<String>,
    /// Paths the local code no longer has.
    pub deleted: Vec<String>,
}

impl SyncDiff {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.deleted.is_empty()
    }
}

/// The change from `old` (the run dir's) to `new` (the local code's). Pure.
pub fn diff(old: &Manifest, new: &Manifest) -> SyncDiff {
    let mut d = SyncDiff::default();
    for (path, value) in &new.files {
        match old.files.get(path) {
            None => d.added.push(path.clone()),
            Some(before) if before != value => d.changed.push(path.clone()),
            Some(_) => {}
        }
    }
    d.deleted = old.files.keys().filter(|p| !new.files.contains_key(*p)).cloned().collect();
    d
}

/// Where and how to sync.
#[derive(Clone)]
pub struct SyncRequest {
    /// The local code now.
    pub snapshot: Snapshot,
    /// The cluster's work root (absolute): the store is `<root>/.theseus/objects`.
    pub root: String,
    /// The run's code dir (absolute, under `root`).
    pub dest: String,
    /// Links or copies, as the run dir was made.
    pub mode: Materialize,
    /// Called with (bytes sent, bytes to send) while objects are uploaded.
    pub progress: Option<ProgressFn>,
    /// Called with one-line notes.
    pub status: Option<StatusFn>,
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    /// The change applied.
    #[serde(flatten)]
    pub diff: SyncDiff,
    /// Objects sent.
    pub objects_sent: usize,
    /// Bytes of the objects sent.
    pub bytes_sent: u64,
}

/// Syncs `request.snapshot` into the run dir `request.dest` (see the module docs).
pub async fn sync(shell: &dyn Shell, request: SyncRequest) -> Result<SyncReport, StoreError> {
    let rel = relative_dest(&request.root, &request.dest)?;
    let root = request.root.trim_end_matches('/').to_owned();
    let machine = shell.describe();
    let old = shell
        .run(ScriptCall {
            script: scripts_sync::READ,
            args: vec![request.dest.clone()],
            stdin: None,
            stdin_len: None,
            progress: None,
            label: "the run dir's code manifest",
        })
        .await
        .map_err(|e| match e {
            ShellError::Exit { code: EXIT_NO_MANIFEST, .. } => StoreError::Failed(Error::backend(
                "store",
                format!(
                    "run dir `{}` on {machine} has no code manifest (it was shipped by an older theseus or without \
                     the store), so a sync cannot tell which files to delete; submit it again",
                    request.dest
                ),
            )),
            ShellError::Exit { code: EXIT_NO_RUN_DIR, .. } => {
                StoreError::Failed(Error::NotFound { what: format!("run dir `{}` on {machine}", request.dest) })
            }
            e => StoreError::Failed(Error::backend("store", format!("reading the code manifest on {machine}: {e}"))),
        })?;
    let old: Manifest = serde_json::from_slice(&old).map_err(|e| {
        StoreError::Failed(Error::backend(
            "store",
            format!("the code manifest of `{}` is unreadable: {e}", request.dest),
        ))
    })?;
    let snapshot = request.snapshot.clone();
    let cache = snapshot.hash_cache.clone();
    let digests = tokio::task::spawn_blocking(move || snapshot.digests(cache.as_deref()))
        .await
        .map_err(|e| Error::backend("store", format!("hashing task failed: {e}")))??;
    let plan = StorePlan::new(&request.snapshot, &digests);
    let new = Manifest::of(&plan);
    let change = diff(&old, &new);
    if change.is_empty() {
        return Ok(SyncReport { diff: change, objects_sent: 0, bytes_sent: 0 });
    }
    let moving: BTreeSet<&str> = change.added.iter().chain(&change.changed).map(String::as_str).collect();
    let part = Arc::new(plan.subset(&moving));
    let missing = send_missing(
        shell,
        &request.snapshot,
        &part,
        &root,
        // Not the run's id: `gc` takes the upload dirs of runs whose submit is over, and this
        // run's submit is, while this sync is not.
        "sync",
        request.progress.clone(),
        request.status.clone(),
    )
    .await?;
    let bytes = part.bytes_of(&missing);
    let token = format!("{}-{}", upload_id(), std::process::id());
    let (manifest, deleted, mode) = (new.file(), change.deleted.clone(), request.mode);
    let (part2, root2, rel2, token2) = (Arc::clone(&part), root.clone(), rel.clone(), token.clone());
    let stdin: StdinFn = Arc::new(move |w| write_apply(&part2, &root2, &rel2, mode, &deleted, &manifest, &token2, w));
    shell
        .run(ScriptCall {
            script: scripts_sync::APPLY,
            args: vec![root.clone(), rel, token, mode.to_string()],
            stdin: Some(stdin),
            stdin_len: None,
            progress: None,
            label: "the sync of the run dir",
        })
        .await
        .map_err(|e| match e {
            ShellError::Exit { code: EXIT_NO_RUN_DIR, .. } => {
                StoreError::Failed(Error::NotFound { what: format!("run dir `{}` on {machine}", request.dest) })
            }
            e => StoreError::Failed(Error::backend("store", format!("applying the sync on {machine} failed: {e}"))),
        })?;
    Ok(SyncReport { diff: change, objects_sent: missing.len(), bytes_sent: bytes })
}

/// The archive of [`scripts_sync::APPLY`]: entries relative to `root`, under the stage dir
/// `<dest>/.theseus/sync.<token>`: `add/<path>` for each file of `plan` (hard links to its
/// object, or symlinks to it under `copy/` for copies), `manifest.json` (the new one), an empty
/// `del/<path>` per deleted path, and `complete` (the token) last.
#[allow(clippy::too_many_arguments)]
fn write_apply(
    plan: &StorePlan,
    root: &str,
    dest: &str,
    mode: Materialize,
    deleted: &[String],
    manifest: &ExtraFile,
    token: &str,
    out: &mut dyn Write,
) -> io::Result<()> {
    let stage = format!("{dest}/.theseus/sync.{token}");
    let mut builder = tar::Builder::new(out);
    for (path, entry) in &plan.files {
        match (entry, mode) {
            (PlanEntry::Object(key), Materialize::Link) => {
                let mut h = header(tar::EntryType::Link, key.mode(), 0);
                builder.append_link(&mut h, format!("{stage}/add/{path}"), format!("{OBJECTS_DIR}/{key}"))?;
            }
            (PlanEntry::Object(key), Materialize::Copy) => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                let target = format!("{}/{OBJECTS_DIR}/{key}", root.trim_end_matches('/'));
                builder.append_link(&mut h, format!("{stage}/copy/{path}"), target)?;
            }
            (PlanEntry::Symlink(target), _) => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                builder.append_link(&mut h, format!("{stage}/add/{path}"), target)?;
            }
        }
    }
    let mut regular = |path: String, contents: &[u8], mode: u32| -> io::Result<()> {
        let mut h = header(tar::EntryType::Regular, mode, contents.len() as u64);
        builder.append_data(&mut h, path, contents)
    };
    regular(format!("{stage}/manifest.json"), &manifest.contents, manifest.mode)?;
    for path in deleted {
        regular(format!("{stage}/del/{path}"), b"", 0o644)?;
    }
    regular(format!("{stage}/complete"), token.as_bytes(), 0o644)?;
    builder.finish()
}

#[cfg(test)]
#[path = "sync_tests.rs"]
mod tests;
