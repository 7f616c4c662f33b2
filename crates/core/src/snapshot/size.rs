//! Large files in the code: a forgotten checkpoint or dataset is not shipped without a word.
//!
//! A file of at least [`SizeLimits::warn`] bytes is shipped with a warning naming it, its size
//! and how to leave it out; one over [`SizeLimits::max`] stops the submit (or sync) with the
//! same fix, before anything is created. As dstack and SkyPilot do for their workdirs, the fix
//! is an ignore file the snapshot honours: `.gitignore` (inside a git repository, a file git
//! tracks is untracked first with `git rm --cached`). The defaults, 100 MiB and 2 GiB, are
//! changed with `THESEUS_WARN_FILE_SIZE` and `THESEUS_MAX_FILE_SIZE` (bytes, or with a
//! `K`/`M`/`G`/`T` suffix, powers of 1024; `0` turns the check off).
//!
//! Pure: a snapshot's listing and the limits in, warnings or one error out.

use super::{Snapshot, SnapshotSource};
use crate::{Error, Result};

/// Default warning size: 100 MiB.
pub const DEFAULT_WARN: u64 = 100 << 20;
/// Default hard limit: 2 GiB.
pub const DEFAULT_MAX: u64 = 2 << 30;
/// The variable that sets [`SizeLimits::warn`].
pub const WARN_VAR: &str = "THESEUS_WARN_FILE_SIZE";
/// The variable that sets [`SizeLimits::max`].
pub const MAX_VAR: &str = "THESEUS_MAX_FILE_SIZE";

/// Size limits for one shipped file; `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeLimits {
    /// Files of at least this many bytes are named in a warning.
    pub warn: Option<u64>,
    /// Files of more than this many bytes stop the submit.
    pub max: Option<u64>,
}

impl Default for SizeLimits {
    fn default() -> SizeLimits {
        SizeLimits { warn: Some(DEFAULT_WARN), max: Some(DEFAULT_MAX) }
    }
}

impl SizeLimits {
    /// The limits, with [`WARN_VAR`] and [`MAX_VAR`] read through `var`.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<SizeLimits> {
        let mut limits = SizeLimits::default();
        for (name, slot) in [(WARN_VAR, &mut limits.warn), (MAX_VAR, &mut limits.max)] {
            if let Some(text) = var(name).filter(|t| !t.trim().is_empty()) {
                let bytes = parse_size(&text).map_err(|m| {
                    Error::InvalidConfig(format!("{name}={text:?}: {m}; write bytes, e.g. 500M or 4G (0 turns it off)"))
                })?;
                *slot = (bytes > 0).then_some(bytes);
            }
        }
        Ok(limits)
    }
}

/// Bytes from `123`, `500M`, `4G`, `1.5G`, `2GiB` (powers of 1024).
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("unknown unit {unit:?}")),
    };
    let value: f64 = number.parse().map_err(|_| "not a size".to_owned())?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err("out of range".into());
    }
    Ok(bytes as u64)
}

/// A size for people: `2.0 GiB`, `150.0 MiB`, `12 KiB`, `80 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

impl Snapshot {
    /// Checks the size of every file against `limits`: a warning for each large file, or an
    /// error naming the files over the hard limit and how to leave them out.
    pub fn check_sizes(&self, limits: &SizeLimits) -> Result<Vec<String>> {
        let how = self.exclude_hint();
        let regular = || self.files.iter().filter(|f| f.symlink.is_none());
        if let Some(max) = limits.max {
            let over: Vec<String> =
                regular().filter(|f| f.size > max).map(|f| format!("`{}` ({})", f.path, human(f.size))).collect();
            if !over.is_empty() {
                return Err(Error::InvalidConfig(format!(
                    "the code in `{}` has files over {} ({MAX_VAR}): {}; {how}, or raise {MAX_VAR} (0 turns the \
                     limit off) to ship them",
                    self.root.display(),
                    human(max),
                    over.join(", ")
                )));
            }
        }
        let Some(warn) = limits.warn else { return Ok(Vec::new()) };
        Ok(regular()
            .filter(|f| f.size >= warn)
            .map(|f| {
                format!(
                    "`{}` in the code is {} and is shipped with it; if the job does not need it, {how} \
                     ({WARN_VAR} sets this warning's size)",
                    f.path,
                    human(f.size)
                )
            })
            .collect())
    }

    /// How to leave a file out of this snapshot.
    fn exclude_hint(&self) -> &'static str {
        match self.source {
            SnapshotSource::Directory => "list it in a `.gitignore` of the code dir",
            SnapshotSource::GitWorktree => {
                "list it in `.gitignore` (if git tracks it, also `git rm --cached` it), or put it outside the repository"
            }
            SnapshotSource::GitCommit { .. } => "remove it from the commit (`git rm --cached`, then commit)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::SnapshotMode;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("123").unwrap(), 123);
        assert_eq!(parse_size("500M").unwrap(), 500 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert!(parse_size("5 parsecs").is_err());
        assert_eq!(human(2 << 30), "2.0 GiB");
        let limits = SizeLimits::from_env(|name| (name == MAX_VAR).then(|| "0".to_owned())).unwrap();
        assert_eq!(limits, SizeLimits { warn: Some(DEFAULT_WARN), max: None });
        let bad = SizeLimits::from_env(|name| (name == WARN_VAR).then(|| "lots".to_owned())).unwrap_err();
        assert!(bad.to_string().starts_with("THESEUS_WARN_FILE_SIZE=\"lots\": unknown unit"), "{bad}");
    }

    /// Issue 23 point 12: a 2 GiB file in the code (a forgotten checkpoint) is not shipped
    /// without a word. A sparse file: no disk is used.
    #[test]
    fn a_large_file_is_named_and_one_over_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("train.py"), "print(1)\n").unwrap();
        let big = std::fs::File::create(dir.path().join("ckpt.pt")).unwrap();
        big.set_len(2 << 30).unwrap();
        let snapshot = Snapshot::collect(dir.path(), SnapshotMode::Dirty).unwrap();
        let warnings = snapshot.check_sizes(&SizeLimits::default()).unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("`ckpt.pt` in the code is 2.0 GiB"), "{warnings:?}");
        assert!(warnings[0].contains(".gitignore"), "{warnings:?}");
        let limits = SizeLimits { warn: Some(DEFAULT_WARN), max: Some(1 << 30) };
        let err = snapshot.check_sizes(&limits).unwrap_err().to_string();
        assert!(err.contains("files over 1.0 GiB (THESEUS_MAX_FILE_SIZE): `ckpt.pt` (2.0 GiB)"), "{err}");
        assert!(err.contains(".gitignore"), "{err}");
        std::fs::write(dir.path().join(".gitignore"), "*.pt\n").unwrap();
        let snapshot = Snapshot::collect(dir.path(), SnapshotMode::Dirty).unwrap();
        assert_eq!(snapshot.check_sizes(&limits).unwrap(), Vec::<String>::new(), "ignored, it is not shipped");
    }
}
