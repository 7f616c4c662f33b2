//! Code snapshots: the set of files to ship, streamed as a tar archive in constant memory
//! (never a temp copy of the repository), with a manifest (path, size, sha256) for later
//! incremental shipping.
//!
//! - [`SnapshotMode::Dirty`] (default): tracked files as they are in the working tree, plus
//!   untracked files git does not ignore.
//! - [`SnapshotMode::Clean`]: the files of `HEAD`.
//! - Outside a git repository: the directory minus `.gitignore`d paths (and `.git`).
//!
//! Inside a git repository the snapshot always covers the whole repository (its top level),
//! even when collected from a subdirectory. Submodules are skipped with a warning. Symlinks are
//! shipped as symlinks, never followed. Archives are deterministic: fixed mtime, owner 0 and
//! modes 0644/0755 (0777 for symlinks).

use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{Error, Result};

pub use content::ContentVisitor;
pub use digest::{DigestStats, HashFn};

mod content;
mod digest;
#[cfg(test)]
mod digest_tests;
mod git;
mod hash_cache;
pub mod size;
#[cfg(test)]
pub(crate) mod tests;

/// A sha256 digest.
pub type Sha256Digest = [u8; 32];

/// Call `progress` at least every this many bytes of archive output.
const PROGRESS_STEP: u64 = 1 << 20;

/// Which files a snapshot takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotMode {
    /// Working tree: tracked (as modified) plus untracked-not-ignored files.
    #[default]
    Dirty,
    /// `HEAD` only.
    Clean,
}

/// Where a snapshot's files come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotSource {
    /// A git working tree (the repo's top level).
    GitWorktree,
    /// A git commit (`HEAD` at collection time).
    GitCommit {
        /// The commit id.
        commit: String,
    },
    /// A plain directory.
    Directory,
}

/// The files to ship, listed but not read yet.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// The directory the paths are relative to (the git top level, or the directory).
    pub root: PathBuf,
    /// Where the files come from.
    pub source: SnapshotSource,
    /// The files, sorted by path.
    pub files: Vec<SnapshotFile>,
    /// A dir where [`Snapshot::digests`] remembers hashes of unchanged files between runs
    /// (the CLI sets it to a dir of its state dir).
    #[serde(skip)]
    pub hash_cache: Option<PathBuf>,
}

/// One file of a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotFile {
    /// Path relative to the root, `/`-separated.
    pub path: String,
    /// Size in bytes (at listing time).
    pub size: u64,
    /// Executable bit.
    pub executable: bool,
    /// Symlink target, for symlinks.
    pub symlink: Option<String>,
}

/// What was actually written by [`Snapshot::write_tar`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Manifest {
    /// One entry per file, sorted by path.
    pub entries: Vec<ManifestEntry>,
}

/// One file of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManifestEntry {
    /// Path relative to the root.
    pub path: String,
    /// Bytes written.
    pub size: u64,
    /// Hex sha256 of the content (of the target, for symlinks).
    pub sha256: String,
}

/// Where `dir` lies inside the snapshot [`Snapshot::collect`] makes of it: its path relative to
/// the top of its git repository (`exp/small`), or `None` when `dir` is that top, is not in a
/// repository, or is a directory git ignores (then it ships as itself). The original shipped
/// only that subtree and ran the job at its root; theseus ships the whole repository and starts
/// the job there (`THESEUS_CODE_SUBDIR`).
pub fn subdir_in_snapshot(dir: &Path) -> Option<String> {
    let top = git::toplevel(dir).filter(|_| !git::is_ignored(dir))?;
    let (dir, top) = (dir.canonicalize().ok()?, top.canonicalize().ok()?);
    let rel = dir.strip_prefix(&top).ok()?;
    let rel = rel.to_str()?.trim_matches('/');
    (!rel.is_empty()).then(|| rel.to_owned())
}

impl Snapshot {
    /// Lists the files of `dir` (or of the git repository containing it, unless git ignores
    /// `dir`, which then ships as a plain directory).
    pub fn collect(dir: &Path, mode: SnapshotMode) -> Result<Snapshot> {
        let meta = std::fs::metadata(dir).map_err(|e| Error::io("read", dir, e))?;
        if !meta.is_dir() {
            return Err(Error::InvalidConfig(format!("cannot snapshot `{}`: not a directory", dir.display())));
        }
        match git::toplevel(dir).filter(|_| !git::is_ignored(dir)) {
            Some(top) => match mode {
                SnapshotMode::Dirty => collect_worktree(top),
                SnapshotMode::Clean => collect_commit(top),
            },
            None => {
                if mode == SnapshotMode::Clean {
                    tracing::warn!("`{}` is not in a git repository; shipping the directory as it is", dir.display());
                }
                collect_directory(dir)
            }
        }
    }

    /// Number of files.
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// Size of the tar archive [`Snapshot::write_tar`] writes, as listed (a header block per
    /// file, contents padded to 512 bytes, extra blocks for long paths, two end blocks).
    /// Files that change between listing and writing make it approximate.
    pub fn estimated_tar_bytes(&self) -> u64 {
        let per_file: u64 = self
            .files
            .iter()
            .map(|f| {
                let long_name = if f.path.len() > 100 { 512 + f.path.len().div_ceil(512) as u64 * 512 } else { 0 };
                512 + long_name + f.size.div_ceil(512) * 512
            })
            .sum();
        per_file + 1024
    }

    /// Total bytes of all files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Streams the files as an uncompressed tar archive into `out`, calling `progress` with the
    /// bytes written so far. Memory use does not grow with the size of the repository.
    ///
    /// Working-tree files are read as they are now: a file whose size changed since listing is
    /// written with its current size; a file that disappeared is an error naming it.
    pub fn write_tar<W: Write>(&self, out: W, progress: &mut dyn FnMut(u64)) -> Result<Manifest> {
        let counter = CountingWriter { inner: out, written: 0, reported: 0, progress };
        let mut builder = tar::Builder::new(counter);
        let mut entries = Vec::with_capacity(self.files.len());
        let tar_err = |e: io::Error| Error::io("write the archive of", &self.root, e);
        match &self.source {
            SnapshotSource::GitCommit { commit } => {
                let ids = git::blob_ids(&self.root, commit)?;
                let mut blobs = git::BlobReader::start(&self.root)?;
                for file in &self.files {
                    let oid = ids
                        .get(&file.path)
                        .ok_or_else(|| Error::NotFound { what: format!("`{}` in commit {commit}", file.path) })?;
                    let entry = match &file.symlink {
                        Some(target) => append_symlink(&mut builder, &file.path, target).map_err(tar_err)?,
                        None => {
                            let (size, reader) = blobs.open(oid)?;
                            let entry = append_file(&mut builder, &file.path, size, file.executable, reader)
                                .map_err(tar_err)?;
                            blobs.finish_blob()?;
                            entry
                        }
                    };
                    entries.push(entry);
                }
            }
            SnapshotSource::GitWorktree | SnapshotSource::Directory => {
                for file in &self.files {
                    entries.push(self.append_from_disk(&mut builder, file)?);
                }
            }
        }
        let mut counter = builder.into_inner().map_err(tar_err)?;
        counter.flush().map_err(tar_err)?;
        (counter.progress)(counter.written);
        Ok(Manifest { entries })
    }

    /// Appends one file of the working tree as it is on disk now.
    fn append_from_disk<W: Write>(&self, builder: &mut tar::Builder<W>, file: &SnapshotFile) -> Result<ManifestEntry> {
        let full = self.root.join(&file.path);
        let vanished = |e: io::Error| Error::io("read", &full, e);
        let meta = std::fs::symlink_metadata(&full).map_err(vanished)?;
        let write_err = |e: io::Error| Error::io("write the archive entry for", &full, e);
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&full).map_err(vanished)?;
            let target = target.to_str().ok_or_else(|| {
                Error::InvalidConfig(format!("cannot ship symlink `{}`: its target is not UTF-8", full.display()))
            })?;
            return append_symlink(builder, &file.path, target).map_err(write_err);
        }
        if !meta.is_file() {
            return Err(Error::InvalidConfig(format!("cannot ship `{}`: not a regular file any more", full.display())));
        }
        let handle = std::fs::File::open(&full).map_err(vanished)?;
        let executable = meta.permissions().mode() & 0o111 != 0;
        append_file(builder, &file.path, meta.len(), executable, handle).map_err(|e| Error::io("archive", &full, e))
    }
}

/// Lists the working tree of the repository at `top`.
fn collect_worktree(top: PathBuf) -> Result<Snapshot> {
    let mut files = Vec::new();
    for (path, tracked) in git::worktree_paths(&top)? {
        if !tracked && is_dotenv(&path) {
            skip_dotenv(&path);
            continue;
        }
        let full = top.join(&path);
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(meta) => meta,
            // A tracked file deleted in the working tree.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("read", full, e)),
        };
        if meta.is_dir() {
            tracing::warn!(
                "skipping `{}`: submodules and nested repositories are not shipped",
                path.trim_end_matches('/')
            );
            continue;
        }
        if let Some(file) = disk_file(path, &full, &meta)? {
            files.push(file);
        }
    }
    Ok(Snapshot { root: top, source: SnapshotSource::GitWorktree, files, hash_cache: None })
}

/// Whether `path` names a dotenv file (`.env`, `.env.local`, ...; not a template such as
/// `.env.example`): what `theseus` and python-dotenv read secrets from.
fn is_dotenv(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.strip_prefix(".env") {
        Some("") => true,
        Some(rest) => rest.starts_with('.') && ![".example", ".sample", ".template", ".dist"].contains(&rest),
        None => false,
    }
}

/// Says that the dotenv file `path` stays behind: it holds secrets (API keys, tokens), which
/// must not be copied onto shared clusters with the code. One that git tracks is shipped (a
/// clean snapshot ships it too).
fn skip_dotenv(path: &str) {
    tracing::warn!(
        "not shipping `{path}`: an untracked dotenv file holds secrets; pass what the job needs with \
         --env or --secret-env, or `git add` it to ship it"
    );
}

/// Lists the files of `HEAD` of the repository at `top`.
fn collect_commit(top: PathBuf) -> Result<Snapshot> {
    let head = git::run(&top, &["rev-parse", "--verify", "HEAD^{commit}"]).map_err(|e| {
        Error::InvalidConfig(format!(
            "a clean snapshot needs a commit, but `HEAD` of `{}` has none ({e})",
            top.display()
        ))
    })?;
    let commit = String::from_utf8_lossy(&head).trim().to_owned();
    let entries = git::tree_entries(&top, &commit)?;
    let mut blobs = None;
    let mut files = Vec::with_capacity(entries.len());
    for entry in entries {
        let symlink = if entry.symlink {
            let reader = match &mut blobs {
                Some(reader) => reader,
                None => blobs.insert(git::BlobReader::start(&top)?),
            };
            let target = reader.read_small(&entry.oid)?;
            Some(String::from_utf8(target).map_err(|_| {
                Error::InvalidConfig(format!("cannot ship symlink `{}`: its target is not UTF-8", entry.path))
            })?)
        } else {
            None
        };
        files.push(SnapshotFile { path: entry.path, size: entry.size, executable: entry.executable, symlink });
    }
    Ok(Snapshot { root: top, source: SnapshotSource::GitCommit { commit }, files, hash_cache: None })
}

/// Lists a plain directory, honoring `.gitignore` files inside it.
fn collect_directory(dir: &Path) -> Result<Snapshot> {
    let root = dir.canonicalize().map_err(|e| Error::io("read", dir, e))?;
    let walker = ignore::WalkBuilder::new(&root)
        .standard_filters(false)
        .git_ignore(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build();
    let mut files = Vec::new();
    for entry in walker {
        let entry = entry.map_err(|e| Error::InvalidConfig(format!("cannot list `{}`: {e}", root.display())))?;
        let Some(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            continue;
        }
        let rel = entry.path().strip_prefix(&root).unwrap_or(entry.path());
        let path = rel
            .to_str()
            .ok_or_else(|| {
                Error::InvalidConfig(format!("cannot ship `{}`: the path is not valid UTF-8", rel.display()))
            })?
            .to_owned();
        if is_dotenv(&path) {
            skip_dotenv(&path);
            continue;
        }
        let meta = std::fs::symlink_metadata(entry.path()).map_err(|e| Error::io("read", entry.path(), e))?;
        match disk_file(path, entry.path(), &meta)? {
            Some(file) => files.push(file),
            None => tracing::warn!("skipping `{}`: not a regular file or symlink", entry.path().display()),
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Snapshot { root, source: SnapshotSource::Directory, files, hash_cache: None })
}

/// A [`SnapshotFile`] from the metadata of a file on disk; `None` for anything but regular files
/// and symlinks.
fn disk_file(path: String, full: &Path, meta: &std::fs::Metadata) -> Result<Option<SnapshotFile>> {
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(full).map_err(|e| Error::io("read", full, e))?;
        let target = target.to_str().ok_or_else(|| {
            Error::InvalidConfig(format!("cannot ship symlink `{}`: its target is not UTF-8", full.display()))
        })?;
        return Ok(Some(SnapshotFile {
            path,
            size: target.len() as u64,
            executable: false,
            symlink: Some(target.into()),
        }));
    }
    if !meta.is_file() {
        return Ok(None);
    }
    let executable = meta.permissions().mode() & 0o111 != 0;
    Ok(Some(SnapshotFile { path, size: meta.len(), executable, symlink: None }))
}

/// A deterministic header: mtime 0, owner 0, the given mode.
fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}

/// Appends a regular file of exactly `size` bytes read from `data` (zero-padded if `data` ends
/// early, cut if it has more), hashing what is written.
fn append_file<W: Write>(
    builder: &mut tar::Builder<W>,
    path: &str,
    size: u64,
    executable: bool,
    data: impl Read,
) -> io::Result<ManifestEntry> {
    let mut header = header(tar::EntryType::Regular, if executable { 0o755 } else { 0o644 }, size);
    let mut reader =
        HashingReader { inner: ExactReader { inner: data.take(size), remaining: size }, hasher: Sha256::new() };
    builder.append_data(&mut header, path, &mut reader)?;
    Ok(ManifestEntry { path: path.to_owned(), size, sha256: hex::encode(reader.hasher.finalize()) })
}

/// Appends a symlink; the manifest hashes its target.
fn append_symlink<W: Write>(builder: &mut tar::Builder<W>, path: &str, target: &str) -> io::Result<ManifestEntry> {
    let mut header = header(tar::EntryType::Symlink, 0o777, 0);
    builder.append_link(&mut header, path, target)?;
    Ok(ManifestEntry {
        path: path.to_owned(),
        size: target.len() as u64,
        sha256: hex::encode(Sha256::digest(target.as_bytes())),
    })
}

/// Yields exactly `remaining` bytes: those of `inner`, then zeros if it ends early.
struct ExactReader<R> {
    inner: R,
    remaining: u64,
}

impl<R: Read> Read for ExactReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let max = buf.len().min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let mut n = self.inner.read(&mut buf[..max])?;
        if n == 0 {
            // The file shrank after its size was read: pad so the header stays right.
            buf[..max].fill(0);
            n = max;
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

/// Hashes everything read through it.
struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Counts bytes written and reports them to a progress callback.
struct CountingWriter<'a, W> {
    inner: W,
    written: u64,
    reported: u64,
    progress: &'a mut dyn FnMut(u64),
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        if self.written - self.reported >= PROGRESS_STEP {
            self.reported = self.written;
            (self.progress)(self.written);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
