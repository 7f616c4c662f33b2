//! The sha256 of every file of a snapshot (of the target, for symlinks): the keys of the
//! content-addressed store ([`crate::store`]).
//!
//! Hashes of unchanged files come from a persistent cache ([`super::hash_cache`]): keyed by
//! path and stat data for working-tree and plain-dir files (as git's index is), by blob id for a
//! commit's files. The rest are stat'ed and hashed on up to `available_parallelism` threads,
//! each taking chunks of files in turn.

use std::io::Read;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::hash_cache::{CacheEntry, CacheKind, HashCache, StatKey};
use super::{Sha256Digest, Snapshot, SnapshotSource, git};
use crate::{Error, Result};

/// Files per unit of work handed to a hashing thread.
const CHUNK: usize = 32;

/// A file modified this close to the start of hashing is not cached: a later edit within the
/// same timestamp tick (1 s or 2 s on some filesystems) could leave its stat data unchanged
/// (git's racily clean entries, `read-cache.c` `is_racy_timestamp`).
const RACY: Duration = Duration::from_secs(2);

/// What [`Snapshot::digests_with_stats`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DigestStats {
    /// Regular files whose content was read and hashed.
    pub hashed: usize,
    /// Regular files whose hash came from the cache.
    pub cached: usize,
}

impl Snapshot {
    /// The sha256 of each file, in the order of [`Snapshot::files`]; for a symlink, of its
    /// target. `cache` is a dir where hashes of unchanged files are remembered between calls
    /// (see the module docs); `None` hashes everything.
    pub fn digests(&self, cache: Option<&Path>) -> Result<Vec<Sha256Digest>> {
        Ok(self.digests_with_stats(cache)?.0)
    }

    /// [`Snapshot::digests`], and how many files were hashed rather than taken from the cache.
    pub fn digests_with_stats(&self, cache: Option<&Path>) -> Result<(Vec<Sha256Digest>, DigestStats)> {
        self.digests_through(cache, &|i, reader| {
            hash_reader(reader).map_err(|e| Error::io("read", self.root.join(&self.files[i].path), e))
        })
    }

    /// [`Snapshot::digests_with_stats`] where `hash` reads the content of each file the cache
    /// does not know (index in [`Snapshot::files`], content) and returns its sha256: a caller
    /// can store the content on the way (the local store does, to read each file once). It is
    /// called from several threads at once.
    pub fn digests_through(&self, cache: Option<&Path>, hash: &HashFn<'_>) -> Result<(Vec<Sha256Digest>, DigestStats)> {
        let mut out = vec![[0u8; 32]; self.files.len()];
        for (i, file) in self.files.iter().enumerate() {
            if let Some(target) = &file.symlink {
                out[i] = Sha256::digest(target.as_bytes()).into();
            }
        }
        let regular: Vec<usize> = (0..self.files.len()).filter(|&i| self.files[i].symlink.is_none()).collect();
        let stats = match &self.source {
            SnapshotSource::GitCommit { commit } => self.commit_digests(commit, &regular, cache, hash, &mut out)?,
            SnapshotSource::GitWorktree | SnapshotSource::Directory => {
                self.disk_digests(&regular, cache, hash, &mut out)?
            }
        };
        Ok((out, stats))
    }

    /// Files on disk: stat each (in parallel), hash those whose stat data the cache lacks.
    fn disk_digests(
        &self,
        regular: &[usize],
        cache: Option<&Path>,
        hash: &HashFn<'_>,
        out: &mut [Sha256Digest],
    ) -> Result<DigestStats> {
        let start = SystemTime::now();
        let loaded = cache.map(|dir| HashCache::load(dir, &self.root, CacheKind::Stat));
        let results = parallel(regular, |i| -> Result<(StatKey, Sha256Digest, bool)> {
            let file = &self.files[i];
            let full = self.root.join(&file.path);
            let meta = std::fs::symlink_metadata(&full).map_err(|e| Error::io("read", &full, e))?;
            if !meta.is_file() {
                return Err(Error::InvalidConfig(format!(
                    "cannot ship `{}`: not a regular file any more",
                    full.display()
                )));
            }
            let stat = StatKey::of(&meta);
            if let Some(digest) = loaded.as_ref().and_then(|c| c.get(&file.path, Some(&stat))) {
                return Ok((stat, digest, false));
            }
            let mut handle = std::fs::File::open(&full).map_err(|e| Error::io("read", &full, e))?;
            let digest = hash(i, &mut handle)?;
            Ok((stat, digest, true))
        })?;
        let mut stats = DigestStats::default();
        let settled = start.checked_sub(RACY).unwrap_or(UNIX_EPOCH);
        let mut keep = Vec::with_capacity(results.len());
        for (&i, (stat, digest, hashed)) in regular.iter().zip(results) {
            out[i] = digest;
            if hashed {
                stats.hashed += 1;
            } else {
                stats.cached += 1;
            }
            let mtime =
                UNIX_EPOCH + Duration::new(stat.mtime.0.max(0) as u64, stat.mtime.1.clamp(0, 999_999_999) as u32);
            if mtime < settled {
                keep.push((self.files[i].path.as_str(), CacheEntry { stat: Some(stat), digest }));
            }
        }
        if let Some(cache) = loaded
            && (stats.hashed > 0 || keep.len() != cache.entries.len())
        {
            cache.save(&keep);
        }
        Ok(stats)
    }

    /// A commit's files: hashes by blob id from the cache, the rest read from
    /// `git cat-file --batch` (one per thread).
    fn commit_digests(
        &self,
        commit: &str,
        regular: &[usize],
        cache: Option<&Path>,
        hash: &HashFn<'_>,
        out: &mut [Sha256Digest],
    ) -> Result<DigestStats> {
        let ids = git::blob_ids(&self.root, commit)?;
        let loaded = cache.map(|dir| HashCache::load(dir, &self.root, CacheKind::Blob));
        let mut oids = Vec::with_capacity(regular.len());
        let mut todo = Vec::new();
        let mut stats = DigestStats::default();
        for &i in regular {
            let path = &self.files[i].path;
            let oid = ids.get(path).ok_or_else(|| Error::NotFound { what: format!("`{path}` in commit {commit}") })?;
            match loaded.as_ref().and_then(|c| c.get(oid, None)) {
                Some(digest) => {
                    out[i] = digest;
                    stats.cached += 1;
                }
                None => todo.push(i),
            }
            oids.push((i, oid.as_str()));
        }
        let readers: Mutex<Vec<git::BlobReader>> = Mutex::new(Vec::new());
        let hashed = parallel(&todo, |i| -> Result<Sha256Digest> {
            let oid = &ids[&self.files[i].path];
            let taken = readers.lock().expect("not poisoned").pop();
            let mut reader = match taken {
                Some(reader) => reader,
                None => git::BlobReader::start(&self.root)?,
            };
            let digest = {
                let (size, blob) = reader.open(oid)?;
                let mut counted = CountingReader { inner: blob, read: 0 };
                let digest = hash(i, &mut counted)?;
                // The next blob starts after this one's last byte.
                if counted.read != size {
                    std::io::copy(&mut counted, &mut std::io::sink()).map_err(|e| Error::Command {
                        command: "git cat-file --batch".into(),
                        message: e.to_string(),
                    })?;
                }
                digest
            };
            reader.finish_blob()?;
            readers.lock().expect("not poisoned").push(reader);
            Ok(digest)
        })?;
        for (&i, digest) in todo.iter().zip(hashed) {
            out[i] = digest;
            stats.hashed += 1;
        }
        if let Some(cache) = loaded
            && (stats.hashed > 0 || oids.len() != cache.entries.len())
        {
            let keep: Vec<(&str, CacheEntry)> =
                oids.iter().map(|&(i, oid)| (oid, CacheEntry { stat: None, digest: out[i] })).collect();
            cache.save(&keep);
        }
        Ok(stats)
    }
}

/// See [`Snapshot::digests_through`].
pub type HashFn<'a> = dyn Fn(usize, &mut dyn Read) -> Result<Sha256Digest> + Sync + 'a;

/// Counts what is read through it.
struct CountingReader<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// The sha256 of everything `reader` yields.
pub(crate) fn hash_reader(mut reader: impl Read) -> std::io::Result<Sha256Digest> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

/// `work` of each of `items`, in their order, on up to `available_parallelism` threads taking
/// [`CHUNK`] items at a time; the first error (in item order) wins, and the others stop early.
fn parallel<T: Send>(items: &[usize], work: impl Fn(usize) -> Result<T> + Sync) -> Result<Vec<T>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.len().div_ceil(CHUNK));
    if threads <= 1 {
        return items.iter().map(|&i| work(i)).collect();
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let done: Mutex<Vec<(usize, Result<T>)>> = Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut local = Vec::new();
                loop {
                    let chunk = next.fetch_add(1, Ordering::Relaxed);
                    let begin = chunk * CHUNK;
                    if begin >= items.len() || failed.load(Ordering::Relaxed) {
                        break;
                    }
                    for (pos, &item) in items.iter().enumerate().skip(begin).take(CHUNK) {
                        let result = work(item);
                        let err = result.is_err();
                        local.push((pos, result));
                        if err {
                            failed.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                }
                done.lock().expect("not poisoned").extend(local);
            });
        }
    });
    let mut done = done.into_inner().expect("not poisoned");
    done.sort_by_key(|(pos, _)| *pos);
    if let Some(pos) = done.iter().position(|(_, r)| r.is_err()) {
        return Err(done.swap_remove(pos).1.err().expect("an error"));
    }
    Ok(done.into_iter().map(|(_, r)| r.expect("checked")).collect())
}
