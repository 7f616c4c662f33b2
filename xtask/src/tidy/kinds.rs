//! Core names no backend kind: outside its tests, no identifier of `crates/core/src` has a word
//! (split at `_` and case changes, compared without case) that is a host type other than
//! `local`. Host types live in their backend crates behind core's `HostType` trait; a kind
//! named in core's code means core decides something for one backend.
//!
//! Comments and strings are not read: they may mention the original dispatcher's config or a
//! backend in prose. What core still names is listed in [`KNOWN`], each with why; an entry
//! that no longer matches is reported, so the list only shrinks.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::source;

/// Words of host types other than `local`.
const KIND_WORDS: &[&str] = &["slurm", "volcano", "plain", "kubernetes", "sbatch", "tpu"];

/// Identifiers core may still name, by file (relative to the workspace root), with why.
const KNOWN: &[(&str, &str, &str)] =
    &[("crates/core/src/chips.rs", "Tpu", "the TPU chip family of the catalog, not a host type")];

/// Each identifier of core's non-test code that names another host type and is not in
/// [`KNOWN`], as `file: identifier`, then each [`KNOWN`] entry that no longer matches.
pub(crate) fn named_kinds(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    collect(&root.join("crates/core/src"), &mut files);
    let mut found = Vec::new();
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let shown = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        for ident in identifiers(&source::code(&text)) {
            if !names_a_kind(ident) || !seen.insert((shown.clone(), ident.to_owned())) {
                continue;
            }
            if !KNOWN.iter().any(|(path, known, _)| *path == shown && *known == ident) {
                found.push(format!("{shown}: `{ident}` names a host type other than local"));
            }
        }
    }
    for (path, ident, _) in KNOWN {
        if !seen.contains(&((*path).to_owned(), (*ident).to_owned())) {
            found.push(format!("{path}: `{ident}` is no longer named; drop it from KNOWN in xtask/src/tidy/kinds.rs"));
        }
    }
    found
}

/// The identifiers of `code`, in order (with repeats).
fn identifiers(code: &str) -> impl Iterator<Item = &str> {
    code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
}

/// Whether a word of `ident` (split at `_` and at a lower-to-upper case change) is a kind.
fn names_a_kind(ident: &str) -> bool {
    let mut words = Vec::new();
    for part in ident.split('_') {
        let mut word = String::new();
        let mut previous_lower = false;
        for c in part.chars() {
            if c.is_uppercase() && previous_lower {
                words.push(std::mem::take(&mut word));
            }
            previous_lower = c.is_lowercase() || c.is_ascii_digit();
            word.extend(c.to_lowercase());
        }
        words.push(word);
    }
    words.iter().any(|w| KIND_WORDS.contains(&w.as_str()))
}

/// Core's `.rs` files, test files (`tests.rs`, `*_tests.rs`, `tests/`) left out.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if path.is_dir() {
            if stem != "tests" {
                collect(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && stem != "tests" && !stem.ends_with("_tests") {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_at_underscores_and_case_changes() {
        for (ident, kind) in [
            ("SlurmAvailability", true),
            ("HOST_SLURM", true),
            ("plain_host", true),
            ("VolcanoHost", true),
            ("explain", false),
            ("LOCAL", false),
            ("Plainly", false),
            ("TpuV4", true),
        ] {
            assert_eq!(names_a_kind(ident), kind, "{ident}");
        }
    }
}
