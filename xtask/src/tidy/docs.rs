//! docs/ARCHITECTURE.md names only what exists: each path it puts in backticks (from the
//! workspace root, such as `crates/core/src/probe.rs`, or a bare file name such as `probe.rs`)
//! must exist, and each test or function it names (a snake_case word of at least four words,
//! each starting with a letter) must be a `fn` somewhere in the workspace.

use std::collections::BTreeSet;
use std::path::Path;

/// The document checked.
pub(crate) const DOC: &str = "docs/ARCHITECTURE.md";

/// Where paths from the root may start.
const ROOTS: &[&str] = &["crates/", "xtask/", "ci/", "docs/", "fuzz/", "python/", ".ci/"];

/// Each name in [`DOC`] that does not exist, as one line.
pub(crate) fn missing_names(root: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(root.join(DOC)) else {
        return vec![format!("{DOC} does not exist")];
    };
    let mut files = BTreeSet::new();
    let mut fns = BTreeSet::new();
    for dir in ["crates", "xtask", "fuzz"] {
        index(&root.join(dir), &mut files, &mut fns);
    }
    let mut missing = Vec::new();
    for span in spans(&text) {
        let problem = match classify(span) {
            Named::RootPath(path) if !root.join(path.trim_end_matches('/')).exists() => "no such path",
            Named::FileName(name) if !files.contains(name) => "no file of that name",
            Named::Function(name) if !fns.contains(name) => "no fn of that name",
            _ => continue,
        };
        missing.push(format!("{DOC}: `{span}`: {problem}"));
    }
    missing
}

/// What a backticked span names.
#[derive(Debug, PartialEq, Eq)]
enum Named<'a> {
    RootPath(&'a str),
    FileName(&'a str),
    Function(&'a str),
    Other,
}

fn classify(span: &str) -> Named<'_> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    if !span.chars().all(plain) {
        return Named::Other;
    }
    if ROOTS.iter().any(|r| span.starts_with(r)) {
        return Named::RootPath(span);
    }
    let one_dot = span.matches('.').count() == 1;
    if !span.contains('/') && one_dot && (span.ends_with(".rs") || span.ends_with(".sh") || span.ends_with(".py")) {
        return Named::FileName(span);
    }
    let snake = span.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    let words = span.split('_').all(|w| w.starts_with(|c: char| c.is_ascii_lowercase()));
    if snake && words && span.matches('_').count() >= 3 {
        return Named::Function(span);
    }
    Named::Other
}

/// The backticked spans of `text` (single backticks; fenced blocks are skipped).
fn spans(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
            out.push(inside);
        }
    }
    // A span broken across lines is rare in this file; those are left unchecked.
    out
}

fn index(dir: &Path, files: &mut BTreeSet<String>, fns: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" {
                index(&path, files, fns);
            }
            continue;
        }
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for at in text.match_indices("fn ").map(|(i, _)| i + 3) {
                let word: String = text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !word.is_empty() {
                    fns.insert(word);
                }
            }
        }
        files.insert(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_classified_by_their_shape() {
        assert_eq!(classify("crates/core/src/probe.rs"), Named::RootPath("crates/core/src/probe.rs"));
        assert_eq!(classify("probe.rs"), Named::FileName("probe.rs"));
        assert_eq!(classify("a_writer_killed_in_the_middle"), Named::Function("a_writer_killed_in_the_middle"));
        assert_eq!(classify("read_bounded"), Named::Other);
        assert_eq!(classify("theseus submit NAME"), Named::Other);
        assert_eq!(classify("<work>/.theseus"), Named::Other);
        assert_eq!(classify("bus.volcano.sh"), Named::Other);
        assert_eq!(classify("manylinux_2_17_x86_64"), Named::Other);
    }

    #[test]
    fn fenced_blocks_and_unclosed_ticks_are_skipped() {
        let text = "see `a.rs` and `b_c_d_e`\n```\n`not_this_one_here`\n```\nodd ` tick\n";
        assert_eq!(spans(text), ["a.rs", "b_c_d_e"]);
    }
}
