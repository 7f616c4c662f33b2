//! Pure: object keys, and which objects a snapshot needs and which of them a store lacks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use crate::snapshot::{Sha256Digest, Snapshot};

/// The name of an object in a store: its content's sha256, and whether it is executable (the
/// mode of a hard link is its object's). Written `ab/cdef…` or `ab/cdef….x`, the object's path
/// relative to [`super::OBJECTS_DIR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// sha256 of the content.
    pub sha256: Sha256Digest,
    /// Stored with mode 0555 rather than 0444.
    pub executable: bool,
}

impl ObjectKey {
    /// The object's path relative to the objects dir.
    pub fn path(&self) -> String {
        self.to_string()
    }

    /// The object's mode in the store (read-only).
    pub fn mode(&self) -> u32 {
        if self.executable { 0o555 } else { 0o444 }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = hex::encode(self.sha256);
        write!(f, "{}/{}{}", &hex[..2], &hex[2..], if self.executable { ".x" } else { "" })
    }
}

/// A line that is not an object key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an object key: {0:?}")]
pub struct BadKey(pub String);

impl FromStr for ObjectKey {
    type Err = BadKey;

    fn from_str(s: &str) -> Result<Self, BadKey> {
        let bad = || BadKey(s.chars().take(80).collect());
        let (name, executable) = match s.strip_suffix(".x") {
            Some(name) => (name, true),
            None => (s, false),
        };
        let (prefix, rest) = name.split_once('/').ok_or_else(bad)?;
        if prefix.len() != 2 || rest.len() != 62 {
            return Err(bad());
        }
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(format!("{prefix}{rest}"), &mut sha256).map_err(|_| bad())?;
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(bad());
        }
        Ok(ObjectKey { sha256, executable })
    }
}

/// One file of a run dir as the store sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanEntry {
    /// A regular file: a link to (or copy of) an object.
    Object(ObjectKey),
    /// A symlink with this target.
    Symlink(String),
}

/// A snapshot as objects: what each file is, and each distinct object once.
#[derive(Debug, Clone)]
pub struct StorePlan {
    /// Per file of the snapshot (same order): its path and entry.
    pub files: Vec<(String, PlanEntry)>,
    /// Each distinct object with the index of one snapshot file that has its content, and its
    /// size as listed.
    pub objects: BTreeMap<ObjectKey, (usize, u64)>,
}

impl StorePlan {
    /// The plan of `snapshot` whose files have `digests` (from [`Snapshot::digests`]).
    pub fn new(snapshot: &Snapshot, digests: &[Sha256Digest]) -> StorePlan {
        assert_eq!(snapshot.files.len(), digests.len(), "one digest per file");
        let mut objects = BTreeMap::new();
        let files = snapshot
            .files
            .iter()
            .zip(digests)
            .enumerate()
            .map(|(i, (file, digest))| {
                let entry = match &file.symlink {
                    Some(target) => PlanEntry::Symlink(target.clone()),
                    None => {
                        let key = ObjectKey { sha256: *digest, executable: file.executable };
                        objects.entry(key).or_insert((i, file.size));
                        PlanEntry::Object(key)
                    }
                };
                (file.path.clone(), entry)
            })
            .collect();
        StorePlan { files, objects }
    }

    /// The keys to ask the store about, one per line.
    pub fn query(&self) -> String {
        let mut out = String::with_capacity(self.objects.len() * 68);
        for key in self.objects.keys() {
            out.push_str(&key.path());
            out.push('\n');
        }
        out
    }

    /// The objects to send, given the store's answer to [`StorePlan::query`]; an answer naming a
    /// key that was not asked about is an error (a confused remote must not steer the upload).
    pub fn missing(&self, answer: &str) -> Result<Vec<ObjectKey>, BadKey> {
        let mut missing = BTreeSet::new();
        for line in answer.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let key: ObjectKey = line.parse()?;
            if !self.objects.contains_key(&key) {
                return Err(BadKey(line.to_owned()));
            }
            missing.insert(key);
        }
        Ok(missing.into_iter().collect())
    }

    /// Listed bytes of `keys`.
    pub fn bytes_of(&self, keys: &[ObjectKey]) -> u64 {
        keys.iter().filter_map(|k| self.objects.get(k)).map(|(_, size)| size).sum()
    }

    /// Number of regular files of the snapshot whose object is not in `missing`.
    pub fn files_present(&self, missing: &[ObjectKey]) -> usize {
        let missing: BTreeSet<&ObjectKey> = missing.iter().collect();
        self.files.iter().filter(|(_, e)| matches!(e, PlanEntry::Object(k) if !missing.contains(k))).count()
    }

    /// The plan of only the files at `paths` (and their objects).
    pub fn subset(&self, paths: &BTreeSet<&str>) -> StorePlan {
        let files: Vec<(String, PlanEntry)> =
            self.files.iter().filter(|(p, _)| paths.contains(p.as_str())).cloned().collect();
        let keys: BTreeSet<ObjectKey> =
            files.iter().filter_map(|(_, e)| if let PlanEntry::Object(k) = e { Some(*k) } else { None }).collect();
        let objects = self.objects.iter().filter(|(k, _)| keys.contains(k)).map(|(k, v)| (*k, *v)).collect();
        StorePlan { files, objects }
    }

    /// Number of regular files.
    pub fn regular_files(&self) -> usize {
        self.files.iter().filter(|(_, e)| matches!(e, PlanEntry::Object(_))).count()
    }
}
