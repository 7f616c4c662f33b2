//! Shipping a snapshot through a [`Shell`]: hash, ask, send what is missing, materialise.

use std::sync::Arc;

use serde::Serialize;

use super::archive::{self, ExtraFile};
use super::plan::{ObjectKey, StorePlan};
use super::{
    EXIT_CORRUPT, EXIT_EXISTS, EXIT_NO_TOOL, EXIT_OBJECT_GONE, Materialize, OBJECTS_DIR, ProgressFn, ScriptCall, Shell,
    ShellError, StatusFn, StdinFn, scripts,
};
use crate::snapshot::Snapshot;
use crate::{Error, Result};

/// Where and how to ship one run's code.
#[derive(Clone)]
pub struct ShipRequest {
    /// The code.
    pub snapshot: Snapshot,
    /// The cluster's work root on the machine (absolute): the store is `<root>/.theseus/objects`.
    pub root: String,
    /// The run's code dir (absolute, under `root`).
    pub dest: String,
    /// Links or copies.
    pub mode: Materialize,
    /// Per-run files (the bootstrap, a batch script), written after the snapshot.
    pub extra: Vec<ExtraFile>,
    /// Called with (bytes sent, bytes to send) while objects are uploaded.
    pub progress: Option<ProgressFn>,
    /// Called with one-line notes ("N of M files already there; sending X MiB").
    pub status: Option<StatusFn>,
}

/// What a ship did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShipReport {
    /// Regular files of the snapshot.
    pub files: usize,
    /// Of those, the files whose object the store had already.
    pub files_present: usize,
    /// Objects sent.
    pub objects_sent: usize,
    /// Bytes of the objects sent (file contents, without archive overhead).
    pub bytes_sent: u64,
}

/// Why a ship through the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The machine lacks a tool the protocol needs: ship the whole snapshot instead.
    #[error("`{tool}` is not available on {machine}")]
    NoTool {
        /// The tool.
        tool: String,
        /// The machine.
        machine: String,
    },
    /// Anything else, already worded for the user.
    #[error(transparent)]
    Failed(#[from] Error),
}

/// Ships `request.snapshot` into `request.dest` through the store next to it (see the module
/// docs of [`super`]); the run dir appears whole or not at all.
pub async fn ship(shell: &dyn Shell, request: ShipRequest) -> Result<ShipReport, StoreError> {
    let plan = plan_of(&request.snapshot).await?;
    ship_planned(shell, request, plan, false).await
}

/// The store plan of `snapshot` (its files hashed, or taken from its hash cache).
pub async fn plan_of(snapshot: &Snapshot) -> Result<Arc<StorePlan>> {
    let snapshot = snapshot.clone();
    tokio::task::spawn_blocking(move || {
        let digests = snapshot.digests(snapshot.hash_cache.as_deref())?;
        Ok(Arc::new(StorePlan::new(&snapshot, &digests)))
    })
    .await
    .map_err(|e| Error::backend("store", format!("hashing task failed: {e}")))?
}

/// [`ship()`] with the plan already made ([`plan_of`]). With `tree` (link mode only), the run
/// dir also gets the snapshot's tree archive ([`super::tree`]), which the store keeps as an
/// object, so that a later run of the same code can be built from the store without a ship.
pub async fn ship_planned(
    shell: &dyn Shell,
    request: ShipRequest,
    plan: Arc<StorePlan>,
    tree: bool,
) -> Result<ShipReport, StoreError> {
    let rel = relative_dest(&request.root, &request.dest)?;
    let root = request.root.trim_end_matches('/').to_owned();
    let plan = &plan;
    // The run dir says what code it holds, for a later `theseus sync`.
    let mut request = request;
    request.extra.push(super::manifest::Manifest::of(plan).file());
    if tree && request.mode == Materialize::Link {
        let tree = super::tree::Tree::of(plan)
            .map_err(|e| Error::backend("store", format!("cannot write the tree archive: {e}")))?;
        request.extra.push(tree.file());
    }
    // A concurrent `gc` may take an object between the question and the links: once more.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let report = ship_once(shell, &request, plan, &root, &rel).await;
        match report {
            Err(StoreError::Failed(Error::Backend { message, .. })) if attempt < 2 && message.starts_with(GONE) => {
                tracing::warn!("{message}; shipping again");
                if let Some(status) = &request.status {
                    status(&format!("{message}; shipping again"));
                }
            }
            other => return other,
        }
    }
}

/// Prefix of the message of a materialise that found an object gone.
const GONE: &str = "an object of the store disappeared";

async fn ship_once(
    shell: &dyn Shell,
    request: &ShipRequest,
    plan: &Arc<StorePlan>,
    root: &str,
    rel: &str,
) -> Result<ShipReport, StoreError> {
    let machine = shell.describe();
    let failed = |what: &str, e: ShellError| match e {
        ShellError::Exit { code: EXIT_NO_TOOL, stderr } => StoreError::NoTool {
            tool: stderr.trim().trim_start_matches("theseus-store: ").to_owned(),
            machine: machine.clone(),
        },
        ShellError::Exit { code: EXIT_OBJECT_GONE, stderr } => {
            StoreError::Failed(Error::backend("store", format!("{GONE} while {what} on {machine}: {}", stderr.trim())))
        }
        ShellError::Exit { code: EXIT_EXISTS, .. } => {
            StoreError::Failed(Error::AlreadyExists { what: format!("run dir `{}` on {machine}", request.dest) })
        }
        e => StoreError::Failed(Error::backend("store", format!("{what} on {machine} failed: {e}"))),
    };

    let missing =
        send_missing(shell, &request.snapshot, plan, root, rel, request.progress.clone(), request.status.clone())
            .await?;
    let bytes = plan.bytes_of(&missing);
    let files = plan.regular_files();
    let present = plan.files_present(&missing);
    let token = format!("{}-{}", upload_id(), std::process::id());
    // Read once: the archive must be the same bytes each time the transport writes it (the
    // exec shell writes it twice and refuses a second pass that differs).
    let mtime = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (plan2, extra, mode, root2, rel2, token2) =
        (Arc::clone(plan), request.extra.clone(), request.mode, root.to_owned(), rel.to_owned(), token.clone());
    let stdin: StdinFn =
        Arc::new(move |w| archive::write_materialize(&plan2, &root2, &rel2, mode, &extra, &token2, mtime, w));
    let len = archive::counted_len(|w| stdin(w))
        .map_err(|e| StoreError::Failed(Error::backend("store", format!("cannot write the run dir's archive: {e}"))))?;
    shell
        .run(ScriptCall {
            script: scripts::MATERIALIZE,
            args: vec![root.to_owned(), rel.to_owned(), token, mode.to_string(), len.to_string()],
            stdin: Some(stdin),
            stdin_len: Some(len),
            progress: None,
            label: "the run dir's materialisation",
        })
        .await
        .map_err(|e| failed("making the run dir", e))?;
    Ok(ShipReport { files, files_present: present, objects_sent: missing.len(), bytes_sent: bytes })
}

/// Steps 1 and 2 of the protocol for `plan`: asks the store under the work root `root` which
/// objects it lacks and uploads them (reading them from `snapshot`) into an upload dir named
/// after `run` ([`upload_dir_name`]); returns the keys sent. Reports
/// "N of M files already there; sending X MiB" through `status`.
pub(super) async fn send_missing(
    shell: &dyn Shell,
    snapshot: &Snapshot,
    plan: &Arc<StorePlan>,
    root: &str,
    run: &str,
    progress: Option<ProgressFn>,
    status: Option<StatusFn>,
) -> Result<Vec<ObjectKey>, StoreError> {
    let objects = &format!("{root}/{OBJECTS_DIR}");
    let machine = shell.describe();
    let failed = |what: &str, e: ShellError| match e {
        ShellError::Exit { code: EXIT_NO_TOOL, stderr } => StoreError::NoTool {
            tool: stderr.trim().trim_start_matches("theseus-store: ").to_owned(),
            machine: machine.clone(),
        },
        e => StoreError::Failed(Error::backend("store", format!("{what} on {machine} failed: {e}"))),
    };
    let query = plan.query().into_bytes();
    let answer = shell
        .run(ScriptCall {
            script: scripts::MISSING,
            args: vec![objects.to_owned()],
            stdin: Some(Arc::new(move |w| w.write_all(&query))),
            stdin_len: None,
            progress: None,
            label: "the object store query",
        })
        .await
        .map_err(|e| failed("asking which objects are missing", e))?;
    let answer = String::from_utf8_lossy(&answer);
    let missing = plan.missing(&answer).map_err(|e| {
        StoreError::Failed(Error::backend("store", format!("the object store on {machine} answered nonsense: {e}")))
    })?;
    let bytes = plan.bytes_of(&missing);
    if let Some(status) = &status {
        let (files, present) = (plan.regular_files(), plan.files_present(&missing));
        status(&format!("{present} of {files} files already there; sending {}", mib(bytes)));
    }
    if missing.is_empty() {
        return Ok(missing);
    }
    let incoming = format!("{root}/.theseus/incoming/{}", upload_dir_name(run));
    let (snapshot2, plan2, keys) = (snapshot.clone(), Arc::clone(plan), missing.clone());
    let stdin: StdinFn =
        Arc::new(move |w| archive::write_objects(&snapshot2, &plan2, &keys, w).map_err(std::io::Error::other));
    let progress = progress.map(|p| -> ProgressFn { Arc::new(move |sent, _| p(sent, Some(bytes))) });
    let len = archive::objects_len(plan, &missing);
    let out = shell
        .run(ScriptCall {
            script: scripts::UPLOAD,
            args: vec![objects.to_owned(), incoming, missing.len().to_string(), len.to_string()],
            stdin: Some(stdin),
            stdin_len: Some(len),
            progress,
            label: "the upload of missing objects",
        })
        .await
        .map_err(|e| match e {
            ShellError::Exit { code: EXIT_CORRUPT, stderr } => match corrupt_file(snapshot, plan, &stderr) {
                // The store checks what it received against the hash taken before sending:
                // a mismatch is almost always a file edited in the meantime.
                Some(path) => StoreError::Failed(Error::InvalidConfig(format!(
                    "`{}` changed while it was being shipped ({machine} received other content than \
                     was hashed); submit again",
                    snapshot.root.join(path).display()
                ))),
                None => StoreError::Failed(Error::backend(
                    "store",
                    format!("an object arrived corrupt on {machine}: {}", stderr.trim()),
                )),
            },
            e => failed("uploading objects", e),
        })?;
    let stored = String::from_utf8_lossy(&out);
    if stored.trim() != format!("stored {}", missing.len()) {
        return Err(StoreError::Failed(Error::backend(
            "store",
            format!("the upload to {machine} ended without storing every object: `{}`", stored.trim()),
        )));
    }
    Ok(missing)
}

/// The snapshot path of the object that [`scripts::UPLOAD`] found corrupt (its message names
/// the object: `object ab/cdef… arrived corrupt`).
fn corrupt_file<'a>(snapshot: &'a Snapshot, plan: &StorePlan, stderr: &str) -> Option<&'a str> {
    let name = stderr.split_once("object ")?.1.split_whitespace().next()?;
    let key: ObjectKey = name.parse().ok()?;
    let (index, _) = plan.objects.get(&key)?;
    Some(snapshot.files.get(*index)?.path.as_str())
}

/// `dest` relative to `root`; both absolute, `dest` strictly under `root`.
pub(super) fn relative_dest(root: &str, dest: &str) -> Result<String> {
    crate::paths::check_under(root, dest).map_err(Error::InvalidConfig)?;
    let rel = dest
        .strip_prefix(root.trim_end_matches('/'))
        .and_then(|r| r.strip_prefix('/'))
        .filter(|r| !r.is_empty())
        .ok_or_else(|| Error::InvalidConfig(format!("run dir `{dest}` is not under the work root `{root}`")))?;
    Ok(rel.to_owned())
}

/// A random id for an upload's private dir and a run's token.
pub(super) fn upload_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The name of an upload dir: the run id (last part of the run path `dest`), so that `gc` can
/// tell whose it is (a run whose client was killed), and a random part.
pub(super) fn upload_dir_name(dest: &str) -> String {
    let run = dest.rsplit('/').next().unwrap_or("").replace('.', "_");
    format!("{run}.{}", upload_id())
}

/// `12.3 MiB`.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
