//! The persistent hash cache of [`super::Snapshot::digests`]: one small file per snapshot root
//! and kind in the cache dir, so that a re-snapshot hashes only what changed.
//!
//! Working-tree and plain-dir files are keyed by path and the stat data git's index keys on
//! (`read-cache.c`, `ie_match_stat` / `fill_stat_data`): size, mtime and ctime with nanoseconds,
//! inode and device. A file whose mtime is too close to the moment it was hashed is not cached
//! (git's "racy clean" entries, `is_racy_timestamp`): an edit in the same timestamp tick could
//! leave its stat data unchanged. Commit files are keyed by their git blob id.
//!
//! The file is `MAGIC VERSION KIND\n`, then one record per file (`name\0fields\0`), then the
//! sha256 of everything before it. It is written to a temp name and renamed, holds only the
//! files of the last snapshot of its root, and a file that is unreadable, of another version or
//! whose checksum fails is ignored: the cache never makes a snapshot fail.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::Sha256Digest;

/// First word of a cache file.
const MAGIC: &str = "theseus-hash-cache";
/// Format version; a file of another version is ignored.
const VERSION: u32 = 1;
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

    fn render(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}",
            self.size, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1, self.ino, self.dev
        )
    }

    fn parse(words: &[&str]) -> Option<StatKey> {
        let [size, ms, mn, cs, cn, ino, dev] = words else { return None };
        Some(StatKey {
            size: size.parse().ok()?,
            mtime: (ms.parse().ok()?, mn.parse().ok()?),
            ctime: (cs.parse().ok()?, cn.parse().ok()?),
            ino: ino.parse().ok()?,
            dev: dev.parse().ok()?,
        })
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
        let name = format!("{}-{}", kind.name(), hex::encode(&Sha256::digest(root.as_os_str().as_encoded_bytes())[..12]));
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
        for (name, entry) in entries {
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            if let Some(stat) = &entry.stat {
                body.extend_from_slice(stat.render().as_bytes());
                body.push(b' ');
            }
            body.extend_from_slice(hex::encode(entry.digest).as_bytes());
            body.push(0);
        }
        let sum = Sha256::digest(&body);
        let tmp = dir.join(format!(".tmp-{}-{:016x}", std::process::id(), rand::random::<u64>()));
        let written = std::fs::File::create(&tmp).and_then(|mut file| {
            file.write_all(&body)?;
            file.write_all(&sum)
        });
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
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if Sha256::digest(body).as_slice() != sum {
        return None;
    }
    let newline = body.iter().position(|&b| b == b'\n')?;
    if std::str::from_utf8(&body[..newline]).ok()? != format!("{MAGIC} {VERSION} {}", kind.name()) {
        return None;
    }
    let mut fields = body[newline + 1..].split(|&b| b == 0);
    let mut entries = HashMap::new();
    while let Some(name) = fields.next() {
        if name.is_empty() {
            break;
        }
        let name = std::str::from_utf8(name).ok()?.to_owned();
        let rest = std::str::from_utf8(fields.next()?).ok()?;
        let words: Vec<&str> = rest.split(' ').collect();
        let (stat_words, hex_digest) = words.split_last().map(|(last, init)| (init, *last))?;
        let stat = match kind {
            CacheKind::Stat => Some(StatKey::parse(stat_words)?),
            CacheKind::Blob if stat_words.is_empty() => None,
            CacheKind::Blob => return None,
        };
        let mut digest = [0u8; 32];
        hex::decode_to_slice(hex_digest, &mut digest).ok()?;
        entries.insert(name, CacheEntry { stat, digest });
    }
    Some(entries)
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
        std::fs::write(&file, b"theseus-hash-cache 999 stat\n").unwrap();
        assert!(HashCache::load(dir.path(), root, CacheKind::Stat).entries.is_empty(), "foreign: ignored");
    }
}
