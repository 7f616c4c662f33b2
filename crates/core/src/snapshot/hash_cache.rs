//! The persistent hash cache of [`super::Snapshot::digests`]: one small file per snapshot root
//! and kind in the cache dir, so that a re-snapshot hashes only what changed.
//!
//! Working-tree and plain-dir files are keyed by path and the stat data git's index keys on
//! (`read-cache.c`, `ie_match_stat` / `fill_stat_data`): size, mtime and ctime with nanoseconds,
//! inode and device. A file whose mtime is too close to the moment it was hashed is not cached
//! (git's "racy clean" entries, `is_racy_timestamp`): an edit in the same timestamp tick could
//! leave its stat data unchanged. Commit files are keyed by their git blob id.
//!
//! The file is `MAGIC VERSION KIND\n`, then one binary record per file (name length as `u16`,
//! the name, for the stat kind seven little-endian 64-bit stat fields, the 32-byte digest),
//! then a 64-bit checksum of everything before it (a word-wise multiply-rotate hash: cheap even
//! in debug builds, and any corrupted word changes it). It is written to a temp name and
//! renamed, holds only the files of the last snapshot of its root, and a file that is
//! unreadable, of another version, cut short or whose checksum fails is ignored: the cache never
//! makes a snapshot fail.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::Sha256Digest;

/// First word of a cache file.
const MAGIC: &str = "theseus-hash-cache";
/// Format version; a file of another version is ignored.
const VERSION: u32 = 2;
/// Cache files kept in the dir (one per root and kind); the least recently written go first.
const MAX_FILES: usize = 64;

/// What a cache file's records are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CacheKind {
    /// Path + stat data (working tree, plain dir).
    Stat,
    /// Git blob id (a commit).
    Blob,
}

impl CacheKind {
    fn name(self) -> &'static str {
        match self {
            CacheKind::Stat => "stat",
            CacheKind::Blob => "blob",
        }
    }
}

/// The stat data a cached hash is valid for (git's index keys on the same fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StatKey {
    pub(super) size: u64,
    pub(super) mtime: (i64, i64),
    pub(super) ctime: (i64, i64),
    pub(super) ino: u64,
    pub(super) dev: u64,
}

impl StatKey {
    pub(super) fn of(meta: &std::fs::Metadata) -> StatKey {
        StatKey {
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
            dev: meta.dev(),
        }
    }

    /// The seven fields, in the file's order.
    fn words(&self) -> [u64; 7] {
        [
            self.size,
            self.mtime.0 as u64,
            self.mtime.1 as u64,
            self.ctime.0 as u64,
            self.ctime.1 as u64,
            self.ino,
            self.dev,
        ]
    }

    fn from_words(w: [u64; 7]) -> StatKey {
        StatKey {
            size: w[0],
            mtime: (w[1] as i64, w[2] as i64),
            ctime: (w[3] as i64, w[4] as i64),
            ino: w[5],
            dev: w[6],
        }
    }
}

/// One cached hash: the file's stat data (for [`CacheKind::Stat`]) and its sha256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CacheEntry {
    pub(super) stat: Option<StatKey>,
    pub(super) digest: Sha256Digest,
}

/// The cache file of one snapshot root and kind.
#[derive(Debug)]
pub(super) struct HashCache {
    path: PathBuf,
    kind: CacheKind,
    /// By path (stat) or blob id (blob).
    pub(super) entries: HashMap<String, CacheEntry>,
}

impl HashCache {
    /// The cache of `root` in `dir`; empty when there is none or it cannot be trusted.
    pub(super) fn load(dir: &Path, root: &Path, kind: CacheKind) -> HashCache {
        let name =
            format!("{}-{}", kind.name(), hex::encode(&Sha256::digest(root.as_os_str().as_encoded_bytes())[..12]));
        let path = dir.join(name);
        let entries = std::fs::read(&path).ok().and_then(|bytes| parse(&bytes, kind)).unwrap_or_default();
        HashCache { path, kind, entries }
    }

    /// The cached hash of `name`, if its stat data (for the stat kind) is unchanged.
    pub(super) fn get(&self, name: &str, stat: Option<&StatKey>) -> Option<Sha256Digest> {
        let entry = self.entries.get(name)?;
        (entry.stat.as_ref() == stat).then_some(entry.digest)
    }

    /// Replaces the file with `entries` (temp file + rename). Failures are only logged: the
    /// cache is an optimisation.
    pub(super) fn save(&self, entries: &[(&str, CacheEntry)]) {
        if let Err(e) = self.try_save(entries) {
            tracing::debug!("cannot write the hash cache `{}`: {e}", self.path.display());
        }
    }

    fn try_save(&self, entries: &[(&str, CacheEntry)]) -> std::io::Result<()> {
        let dir = self.path.parent().expect("a cache file has a dir");
        std::fs::create_dir_all(dir)?;
        let mut body = format!("{MAGIC} {VERSION} {}\n", self.kind.name()).into_bytes();
        body.reserve(entries.len() * (32 + 2 + 64 + 56));
        for (name, entry) in entries {
            let Ok(len) = u16::try_from(name.len()) else { continue };
            body.extend_from_slice(&len.to_le_bytes());
            body.extend_from_slice(name.as_bytes());
            if let Some(stat) = &entry.stat {
                for word in stat.words() {
                    body.extend_from_slice(&word.to_le_bytes());
                }
            }
            body.extend_from_slice(&entry.digest);
        }
        let sum = checksum(&body);
        let body = [body, sum.to_le_bytes().to_vec()].concat();
        let tmp = dir.join(format!(".tmp-{}-{:016x}", std::process::id(), rand::random::<u64>()));
        let written = std::fs::File::create(&tmp).and_then(|mut file| file.write_all(&body));
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &self.path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        prune(dir);
        Ok(())
    }
}

/// The records of a cache file, or `None` when it is not one this version wrote whole.
fn parse(bytes: &[u8], kind: CacheKind) -> Option<HashMap<String, CacheEntry>> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if checksum(body).to_le_bytes() != sum {
        return None;
    }
    let newline = body.iter().position(|&b| b == b'\n')?;
    if body[..newline] != *format!("{MAGIC} {VERSION} {}", kind.name()).as_bytes() {
        return None;
    }
    let mut rest = &body[newline + 1..];
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        rest = tail;
        Some(head)
    };
    let mut entries = HashMap::new();
    while let Some(len) = take(2) {
        let len = u16::from_le_bytes(len.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(len)?).ok()?.to_owned();
        let stat = match kind {
            CacheKind::Stat => {
                let mut words = [0u64; 7];
                for word in &mut words {
                    *word = u64::from_le_bytes(take(8)?.try_into().ok()?);
                }
                Some(StatKey::from_words(words))
            }
            CacheKind::Blob => None,
        };
        let digest: Sha256Digest = take(32)?.try_into().ok()?;
        entries.insert(name, CacheEntry { stat, digest });
    }
    Some(entries)
}

/// A 64-bit hash of `bytes`, a word at a time (FxHash's multiply-rotate step): fast in debug
/// builds, and every step is a bijection of the running value, so a file that differs in any
/// one word never matches.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut hash = bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        hash = (hash.rotate_left(5) ^ u64::from_le_bytes(word.try_into().expect("8 bytes"))).wrapping_mul(K);
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    (hash.rotate_left(5) ^ u64::from_le_bytes(last)).wrapping_mul(K)
}

/// Removes the oldest cache files beyond [`MAX_FILES`] and stray temp files.
fn prune(dir: &Path) {
    let Ok(read) = std::fs::read_dir(dir) else { return };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = read
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= MAX_FILES {
        return;
    }
    files.sort();
    for (_, path) in &files[..files.len() - MAX_FILES] {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_cache_loads_back_and_a_damaged_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new("/some/repo");
        let stat = StatKey { size: 3, mtime: (1, 2), ctime: (3, 4), ino: 5, dev: 6 };
        let entry = CacheEntry { stat: Some(stat), digest: [7; 32] };
        let cache = HashCache::load(dir.path(), root, CacheKind::Stat);
        assert!(cache.entries.is_empty());
        cache.save(&[("a b\nc.txt", entry)]);
        let loaded = HashCache::load(dir.path(), root, CacheKind::Stat);
        assert_eq!(loaded.get("a b\nc.txt", Some(&stat)), Some([7; 32]));
        assert_eq!(loaded.get("a b\nc.txt", Some(&StatKey { ino: 9, ..stat })), None);
        assert!(HashCache::load(dir.path(), Path::new("/other"), CacheKind::Stat).entries.is_empty());
        assert!(HashCache::load(dir.path(), root, CacheKind::Blob).entries.is_empty());

        let file = std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().path();
        let mut bytes = std::fs::read(&file).unwrap();
        let flipped = bytes.len() / 2;
        bytes[flipped] ^= 1;
        std::fs::write(&file, &bytes).unwrap();
        assert!(HashCache::load(dir.path(), root, CacheKind::Stat).entries.is_empty(), "corrupt: ignored");
        let foreign = b"theseus-hash-cache 999 stat\n".to_vec();
        std::fs::write(&file, [foreign.clone(), checksum(&foreign).to_le_bytes().to_vec()].concat()).unwrap();
        assert!(HashCache::load(dir.path(), root, CacheKind::Stat).entries.is_empty(), "foreign: ignored");
    }
}
