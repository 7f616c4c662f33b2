//! A snapshot's tree archive: the whole code dir as one object of the store, so that a pod can
//! build a run dir from the store alone, with no helper and no upload.
//!
//! The archive ([`TREE`] in a run dir, and an object of the store once shipped in link mode) is
//! a tar of entries under `code/`: a hard link to `.theseus/objects/<key>` per file (the code
//! manifest too), and the snapshot's symlinks. Extracted in a fresh dir whose
//! `.theseus/objects` is a symlink to the store, it yields `code/`, the run dir's code as hard
//! links into the store; an object that is gone (reclaimed) makes `tar` fail. Its key names
//! the snapshot: the same tree gives the same bytes (fixed owner, modes and mtime 0).

use std::io;

use sha2::{Digest, Sha256};

use super::OBJECTS_DIR;
use super::archive::{ExtraFile, header};
use super::manifest::{MANIFEST, Manifest};
use super::plan::{ObjectKey, PlanEntry, StorePlan};

/// The tree archive's path in a run dir (linked into the store like the code manifest).
pub const TREE: &str = ".theseus/code-tree.tar";

/// The dir of the archive's entries.
pub const CODE_DIR: &str = "code";

/// A snapshot's tree archive and its object key.
#[derive(Debug, Clone)]
pub struct Tree {
    /// The archive.
    pub archive: Vec<u8>,
    /// Its key in the store.
    pub key: ObjectKey,
}

impl Tree {
    /// The tree archive of `plan` (whose code manifest is `manifest`).
    pub fn of(plan: &StorePlan) -> io::Result<Tree> {
        let manifest = Manifest::of(plan).file();
        let manifest_key = ObjectKey { sha256: Sha256::digest(&manifest.contents).into(), executable: false };
        let mut builder = tar::Builder::new(Vec::new());
        for (path, entry) in &plan.files {
            match entry {
                PlanEntry::Object(key) => {
                    let mut h = header(tar::EntryType::Link, key.mode(), 0);
                    builder.append_link(&mut h, format!("{CODE_DIR}/{path}"), format!("{OBJECTS_DIR}/{key}"))?;
                }
                PlanEntry::Symlink(target) => {
                    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                    builder.append_link(&mut h, format!("{CODE_DIR}/{path}"), target)?;
                }
            }
        }
        let mut h = header(tar::EntryType::Link, manifest_key.mode(), 0);
        builder.append_link(&mut h, format!("{CODE_DIR}/{MANIFEST}"), format!("{OBJECTS_DIR}/{manifest_key}"))?;
        let archive = builder.into_inner()?;
        let key = ObjectKey { sha256: Sha256::digest(&archive).into(), executable: false };
        Ok(Tree { archive, key })
    }

    /// As the per-run file [`super::scripts::MATERIALIZE`] links into the store.
    pub fn file(&self) -> ExtraFile {
        ExtraFile { path: TREE.into(), contents: self.archive.clone(), mode: 0o644 }
    }
}

/// Name of the env var that carries the run's own files (the bootstrap) to [`BUILD`]: a gzipped
/// tar of them, base64-encoded.
pub const RUN_FILES_ENV: &str = "THESEUS_RUN_FILES";

/// `ROOT DEST TREE`, with the run's own files in [`RUN_FILES_ENV`]: builds the run dir `DEST`
/// (absolute) from the store under `ROOT` and the tree archive object `TREE` (its key), in a
/// private dir of the store's `incoming` area, then renames it into place (`mv -T`: one rename,
/// which fails when `DEST` exists). A `DEST` that exists was renamed into place whole, by
/// this script in another pod of the run (each rank builds its own copy; the first rename
/// wins and the others drop theirs) or by a ship: it is kept. A tree or object that is gone
/// from the store (reclaimed since the client looked) fails with a message saying so, before
/// anything runs. POSIX `sh` with `tar`, `gzip`, `base64`, `ln`, `mv`, `mkdir`, `rm` (busybox or
/// GNU).
pub const BUILD: &str = r#"set -u
export LC_ALL=C
fail() { printf 'theseus: %s\n' "$*" >&2; exit 1; }
root=$1 dest=$2 tree=$3
objs="$root/.theseus/objects"
[ -d "$dest" ] && exit 0
[ -f "$objs/$tree" ] || fail "the code store under $root no longer holds this run's code (object $tree is gone, reclaimed?): submit again to ship it"
b="$root/.theseus/incoming/build.$$.$(od -An -N4 -tx4 /dev/urandom 2>/dev/null | tr -d ' ')"
trap 'rm -rf -- "$b"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p -- "$b/.theseus" || fail "cannot create $b"
ln -s -- "$objs" "$b/.theseus/objects" || fail "cannot link the store into $b"
err=$(cd -- "$b" && tar -x -m -f "$objs/$tree" 2>&1) || fail "a file of this run's code is gone from the code store under $root (reclaimed?): submit again to ship it ($err)"
printf '%s' "${THESEUS_RUN_FILES:-}" | base64 -d | gzip -dc | tar -x -m -f - -C "$b/code" || fail "cannot write the run's own files into $b/code"
mkdir -p -- "${dest%/*}" || fail "cannot create the parent of $dest"
mv -T -- "$b/code" "$dest" 2>/dev/null || [ -d "$dest" ] || fail "cannot move the run dir into place at $dest"
"#;

/// The run's own files as [`RUN_FILES_ENV`] wants them: a tar (parents first, mtime `mtime`),
/// gzipped (the bootstrap's text files shrink to about a quarter, so that they fit in one
/// environment string) and base64-encoded.
pub fn run_files_env(files: &[ExtraFile], mtime: u64) -> io::Result<String> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut dirs = std::collections::BTreeSet::new();
    for file in files {
        let path = std::path::Path::new(&file.path);
        for parent in path.ancestors().skip(1).filter(|p| !p.as_os_str().is_empty()) {
            dirs.insert(parent.to_path_buf());
        }
    }
    for dir in &dirs {
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        builder.append_data(&mut h, dir, io::empty())?;
    }
    for file in files {
        let mut h = header(tar::EntryType::Regular, file.mode, file.contents.len() as u64);
        h.set_mtime(mtime);
        builder.append_data(&mut h, &file.path, file.contents.as_slice())?;
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    io::Write::write_all(&mut gz, &builder.into_inner()?)?;
    Ok(crate::encoding::base64(&gz.finish()?))
}
