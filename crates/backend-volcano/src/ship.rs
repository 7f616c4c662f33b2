//! Ships a code snapshot into a pod through the Kubernetes exec websocket and extracts it there.
//!
//! The same code works on `v5.channel.k8s.io` (which can close stdin) and `v4.channel.k8s.io`
//! (which cannot: closing stdin closes the websocket and loses the status), because it never
//! needs stdin EOF. Each archive is written twice:
//!
//! 1. a counting pass hashes the tar into a sink, giving its exact length and sha256 in
//!    constant memory;
//! 2. the tar is streamed into `sh -c` [`SHIP_SCRIPT`], which stores exactly that many bytes
//!    (`head -c`), checks length and sha256, extracts with `tar` and removes the temp file.
//!    stdin stays open until the status arrives. There is no `sync`: the job's pods open the
//!    files after the helper closed them, which a shared volume makes visible (close-to-open
//!    consistency), and a volume that moves to another node is unmounted first, which writes it
//!    out; `sync` would only guard against a crash of the storage itself, which a re-submit
//!    covers.
//!
//! This whole-snapshot ship is the fallback for a helper image that lacks a tool of the store
//! ([`theseus_core::store`], which streams once and verifies each object in the pod).
//!
//! The final chunk is held back until the second pass has been checked against the first: if
//! the working tree changed in between, the connection is dropped before the pod holds a
//! complete archive, and the error says so ([`ShipError::Changed`]).
//!
//! # Invariant: the bootstrap marks a complete ship
//! The code archive is extracted first; the bootstrap files (`.theseus/...`, the `extra_files`)
//! are shipped by a second exec only after the code archive arrived whole, matched its sha256
//! and `tar` exited 0. A dest without `.theseus/bootstrap.sh` is an incomplete ship and must not
//! be run. An interrupted transfer extracts nothing (it may leave [`TEMP_ARCHIVE`] in dest).

use std::io;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use sha2::{Digest, Sha256};
use theseus_core::backend::ProgressFn;
use theseus_core::bootstrap::RenderedFile;
use theseus_core::snapshot::{Manifest, Snapshot};
use tokio::io::AsyncRead;

pub use crate::error::{RemoteStep, ShipError};
use crate::exec::{self, Counted, ExecFailure, FRAME_BYTES, HashingSink, PumpError, exit_code};

/// The script run in the pod as `sh -c SHIP_SCRIPT theseus-ship <dest> <length> <sha256>
/// [<file>...]`. Values arrive only as positional arguments. Works with busybox and GNU tools.
///
/// Exit codes name the failed step (see [`RemoteStep`]); 10 means fewer bytes arrived than
/// announced, 11 a sha256 mismatch. It prints `sha256 <hex>` for the received archive and
/// `file <size> <hex>` for each listed file after extraction.
pub const SHIP_SCRIPT: &str = r#"set -u
fail() { code=$1; shift; printf 'theseus-ship: %s\n' "$*" >&2; exit "$code"; }
dest=$1 len=$2 want=$3
shift 3
tmp=.theseus-ship.tar
mkdir -p -- "$dest" || fail 20 "cannot create the destination"
cd "$dest" || fail 20 "cannot enter the destination"
head -c "$len" > "$tmp" || fail 21 "cannot store the archive"
got=$(wc -c < "$tmp") || fail 21 "cannot read the stored archive"
got=$((got + 0))
[ "$got" -eq "$len" ] || fail 10 "received $got of $len bytes"
sum=$(sha256sum < "$tmp") || fail 21 "cannot hash the stored archive"
sum=${sum%% *}
echo "sha256 $sum"
[ "$sum" = "$want" ] || fail 11 "archive sha256 is $sum, expected $want"
tar -x -f "$tmp" || fail 12 "tar exited with status $?"
rm -f -- "$tmp"
for f in "$@"; do
  size=$(wc -c < "$f") || fail 13 "cannot read $f"
  hash=$(sha256sum < "$f") || fail 13 "cannot hash $f"
  echo "file $((size + 0)) ${hash%% *}"
done
"#;

/// Name of the temp archive in dest while it is being received.
pub const TEMP_ARCHIVE: &str = ".theseus-ship.tar";

/// Output of the script kept for error messages; the rest is drained and dropped.
const OUTPUT_CAP: usize = 64 * 1024;

/// Where to ship: a running pod (the helper) and a directory in it.
#[derive(Clone)]
pub struct ShipTarget {
    /// Pods of the helper's namespace.
    pub pods: Api<Pod>,
    /// The helper pod.
    pub pod: String,
    /// Its container, if it has several.
    pub container: Option<String>,
    /// Absolute directory in the pod; created if missing.
    pub dest: String,
}

/// A file written next to the code (a rendered bootstrap file), checked by size and sha256
/// inside the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFile {
    /// Path relative to dest, `/`-separated, without `..`.
    pub path: String,
    /// Content.
    pub contents: Vec<u8>,
    /// Permission bits, e.g. `0o755`.
    pub mode: u32,
}

impl From<&RenderedFile> for ExtraFile {
    fn from(file: &RenderedFile) -> Self {
        ExtraFile {
            path: file.path.clone(),
            contents: file.contents.clone().into_bytes(),
            mode: if file.executable { 0o755 } else { 0o644 },
        }
    }
}

/// What [`ship_snapshot`] shipped.
#[derive(Debug, Clone)]
pub struct ShipReport {
    /// Archive bytes sent (code plus extra files).
    pub bytes: u64,
    /// Hex sha256 of the code archive.
    pub sha256: String,
    /// Files written: the snapshot's plus the extra files.
    pub files: usize,
    /// The code archive's manifest.
    pub manifest: Manifest,
}

/// Ships `snapshot` into `target.dest`, then `extra_files`, reporting bytes sent / total to
/// `progress`. See the module doc for the protocol and the completeness invariant.
#[tracing::instrument(skip_all, fields(pod = %target.pod, dest = %target.dest))]
pub async fn ship_snapshot(
    target: &ShipTarget,
    snapshot: &Snapshot,
    extra_files: &[ExtraFile],
    progress: Option<ProgressFn>,
) -> Result<ShipReport, ShipError> {
    let counted = {
        let snapshot = snapshot.clone();
        tokio::task::spawn_blocking(move || {
            let mut sink = HashingSink::default();
            snapshot.write_tar(&mut sink, &mut |_| {}).map_err(ShipError::Snapshot)?;
            Ok::<_, ShipError>(sink.finish())
        })
        .await
        .map_err(|e| ShipError::Io(io::Error::other(e)))??
    };
    let extras = extras_archive(extra_files)?;
    let extras_len = extras.as_ref().map_or(0, |a| a.len() as u64);
    let mut progress = Progress { callback: progress, base: 0, total: counted.len + extras_len };
    tracing::debug!(bytes = counted.len, files = snapshot.file_count(), "shipping the code archive");

    let (reader, writer) = tokio::io::duplex(FRAME_BYTES);
    let mut bridge = tokio_util::io::SyncIoBridge::new(writer);
    let producer = {
        let snapshot = snapshot.clone();
        tokio::task::spawn_blocking(move || {
            let mut manifest = None;
            exec::write_framed(&mut bridge, |w| {
                manifest = Some(snapshot.write_tar(w, &mut |_| {}).map_err(io::Error::other)?);
                Ok(())
            })
            .map_err(|e| match e.downcast::<theseus_core::Error>() {
                Ok(e) => e,
                Err(e) => theseus_core::Error::io("stream the archive of", &snapshot.root, e),
            })?;
            Ok::<_, theseus_core::Error>(manifest.expect("written"))
        })
    };
    let sent = transfer(target, &counted, &[], reader, &mut progress).await;
    let produced = producer.await.map_err(|e| ShipError::Io(io::Error::other(e)))?;
    let manifest = match (sent, produced) {
        (Ok(_), Ok(manifest)) => manifest,
        (Err(ShipError::Changed { .. }), produced) => return Err(ShipError::Changed { source: produced.err() }),
        (Err(e), _) => return Err(e),
        (Ok(_), Err(e)) => return Err(ShipError::Snapshot(e)),
    };

    if let Some(archive) = extras {
        progress.base = counted.len;
        let expected = Counted::of(&archive);
        let paths: Vec<String> = extra_files.iter().map(|f| f.path.clone()).collect();
        let checks = transfer(target, &expected, &paths, &archive[..], &mut progress).await?;
        for (file, (size, hash)) in extra_files.iter().zip(&checks) {
            let want = (file.contents.len() as u64, hex::encode(Sha256::digest(&file.contents)));
            if (*size, hash) != (want.0, &want.1) {
                return Err(ShipError::HashMismatch {
                    pod: target.pod.clone(),
                    what: format!("file `{}`", file.path),
                    expected: format!("{} ({} bytes)", want.1, want.0),
                    actual: format!("{hash} ({size} bytes)"),
                });
            }
        }
    }
    Ok(ShipReport {
        bytes: counted.len + extras_len,
        sha256: counted.hex(),
        files: snapshot.file_count() + extra_files.len(),
        manifest,
    })
}

/// Progress over all archives of one ship.
struct Progress {
    callback: Option<ProgressFn>,
    base: u64,
    total: u64,
}

impl Progress {
    fn report(&self, sent: u64) {
        if let Some(callback) = &self.callback {
            callback(self.base + sent, Some(self.total));
        }
    }
}

/// The extra files as a tar (parents first, fixed mtime and owner), or `None` if there are none.
fn extras_archive(files: &[ExtraFile]) -> Result<Option<Vec<u8>>, ShipError> {
    if files.is_empty() {
        return Ok(None);
    }
    let mut builder = tar::Builder::new(Vec::new());
    let mut dirs = std::collections::BTreeSet::new();
    for file in files {
        let path = std::path::Path::new(&file.path);
        let valid = !file.path.is_empty() && path.components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if !valid {
            return Err(ShipError::InvalidExtraFile { path: file.path.clone() });
        }
        for parent in path.ancestors().skip(1).filter(|p| !p.as_os_str().is_empty()) {
            dirs.insert(parent.to_path_buf());
        }
    }
    let header = |kind, mode, size| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(size);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header
    };
    let archive_err = |e| ShipError::Io(e);
    for dir in &dirs {
        builder.append_data(&mut header(tar::EntryType::Directory, 0o755, 0), dir, io::empty()).map_err(archive_err)?;
    }
    for file in files {
        let mut head = header(tar::EntryType::Regular, file.mode & 0o7777, file.contents.len() as u64);
        builder.append_data(&mut head, &file.path, &file.contents[..]).map_err(archive_err)?;
    }
    builder.into_inner().map(Some).map_err(archive_err)
}

/// Runs [`SHIP_SCRIPT`] in the pod with `source` (which must yield exactly the archive counted
/// in `expected`) on stdin, and returns the `(size, sha256)` the pod reports for each of
/// `verify`.
async fn transfer<R: AsyncRead + Unpin>(
    target: &ShipTarget,
    expected: &Counted,
    verify: &[String],
    source: R,
    progress: &mut Progress,
) -> Result<Vec<(u64, String)>, ShipError> {
    let pod = || target.pod.clone();
    let want = expected.hex();
    let mut command = vec!["sh".to_owned(), "-c".into(), SHIP_SCRIPT.into(), "theseus-ship".into()];
    command.extend([target.dest.clone(), expected.len.to_string(), want.clone()]);
    command.extend(verify.iter().cloned());
    let progress = &*progress;
    let report = |sent| progress.report(sent);
    let exec_target = exec::ExecTarget {
        pods: &target.pods,
        pod: &target.pod,
        container: target.container.as_deref(),
        open_timeout: exec::OPEN_TIMEOUT,
    };
    let done =
        exec::run(&exec_target, command, Some((source, expected)), OUTPUT_CAP, &report).await.map_err(|failure| {
            match failure {
                ExecFailure::Refused(source) => ShipError::Exec { pod: pod(), source },
                ExecFailure::Missing(what) => {
                    ShipError::Protocol { pod: pod(), detail: format!("kube-rs gave no {what}") }
                }
                ExecFailure::NoAnswer => ShipError::Protocol {
                    pod: pod(),
                    detail: format!("the API server did not answer the exec in {}s", exec::OPEN_TIMEOUT.as_secs()),
                },
                ExecFailure::Pump(PumpError::Changed) => ShipError::Changed { source: None },
                ExecFailure::Pump(PumpError::Source(e)) => ShipError::Io(e),
            }
        })?;
    let sent = done.sent;
    let interrupted = |source| ShipError::Interrupted { pod: pod(), sent, total: expected.len, source };
    let Some(status) = done.status else {
        return Err(interrupted(done.broken));
    };
    let out = String::from_utf8_lossy(&done.stdout);
    let stderr = String::from_utf8_lossy(&done.stderr).trim().to_owned();
    let received = out.lines().find_map(|l| l.strip_prefix("sha256 ")).map(str::to_owned);
    if status.status.as_deref() != Some("Success") {
        let exit_code = exit_code(&status);
        let step = match exit_code {
            Some(10) => return Err(interrupted(None)),
            Some(11) => {
                return Err(ShipError::HashMismatch {
                    pod: pod(),
                    what: "the archive".into(),
                    expected: want,
                    actual: received.unwrap_or_else(|| "unknown".into()),
                });
            }
            None => RemoteStep::Start,
            Some(20) => RemoteStep::Prepare,
            Some(21) => RemoteStep::Store,
            Some(12) => RemoteStep::Extract,
            Some(13) => RemoteStep::Verify,
            Some(14) => RemoteStep::Sync,
            Some(_) => RemoteStep::Unknown,
        };
        let stderr = if stderr.is_empty() { status.message.unwrap_or_default() } else { stderr };
        return Err(ShipError::Remote { pod: pod(), step, exit_code, stderr });
    }
    if received.as_deref() != Some(want.as_str()) {
        let detail = format!("expected `sha256 {want}` on stdout, got {out:?}");
        return Err(ShipError::Protocol { pod: pod(), detail });
    }
    let checks: Vec<(u64, String)> = out
        .lines()
        .filter_map(|l| l.strip_prefix("file "))
        .filter_map(|l| {
            let (size, hash) = l.split_once(' ')?;
            Some((size.parse().ok()?, hash.to_owned()))
        })
        .collect();
    if checks.len() != verify.len() {
        let detail = format!("expected {} file checks on stdout, got {out:?}", verify.len());
        return Err(ShipError::Protocol { pod: pod(), detail });
    }
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_paths_must_stay_inside_dest() {
        for path in ["", "/etc/passwd", "../x", "a/../../x"] {
            let file = ExtraFile { path: path.into(), contents: vec![], mode: 0o644 };
            assert!(matches!(extras_archive(&[file]), Err(ShipError::InvalidExtraFile { .. })), "{path}");
        }
        let file = ExtraFile { path: ".theseus/bootstrap.sh".into(), contents: b"#!/bin/sh\n".to_vec(), mode: 0o755 };
        let archive = extras_archive(&[file]).unwrap().unwrap();
        let mut entries = tar::Archive::new(&archive[..]);
        let names: Vec<String> =
            entries.entries().unwrap().map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, [".theseus", ".theseus/bootstrap.sh"]);
    }
}
