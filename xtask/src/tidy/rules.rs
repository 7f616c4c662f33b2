//! Two layering rules of docs/ARCHITECTURE.md that a text scan can hold: pure modules do no IO,
//! and `anyhow` is a dependency of the binaries' crates only.

use std::path::Path;

use super::source;

/// Files and folders (relative to the workspace root) whose code must stay pure: the solver,
/// config validation, parsing and every renderer. A folder covers every `.rs` file under it.
pub(crate) const PURE: &[&str] = &[
    "crates/core/src/solver",
    "crates/core/src/fit.rs",
    "crates/core/src/plan.rs",
    "crates/core/src/keys",
    "crates/core/src/config/validate.rs",
    "crates/core/src/bootstrap/script.rs",
    "crates/core/src/bootstrap/enter.rs",
    "crates/core/src/shell.rs",
    "crates/core/src/duration.rs",
    "crates/core/src/chips.rs",
    "crates/core/src/store/plan.rs",
    "crates/core/src/lifecycle/start.rs",
    "crates/backend-volcano/src/render.rs",
    "crates/backend-volcano/src/types.rs",
    "crates/backend-volcano/src/quantity.rs",
    "crates/backend-volcano/src/status.rs",
    "crates/backend-volcano/src/helper.rs",
    "crates/backend-volcano/src/resources.rs",
    "crates/backend-volcano/src/handle.rs",
    "crates/backend-ssh/src/parse",
    "crates/backend-slurm/src/sbatch.rs",
    "crates/backend-slurm/src/config.rs",
    "crates/backend-slurm/src/fit.rs",
    "crates/backend-slurm/src/placement.rs",
    "crates/backend-volcano/src/config.rs",
    "crates/backend-volcano/src/rule.rs",
    "crates/backend-slurm/src/parse",
    "crates/backend-slurm/src/nodelist.rs",
];

/// What pure code may not name: the file system, processes, the network, the environment, clocks.
const IMPURE: &[&str] = &[
    "std::fs",
    "std::process",
    "std::net",
    "std::env",
    "tokio",
    "SystemTime::now",
    "Instant::now",
    "File::open",
    "File::create",
];

/// A line of a module doc that declares the file pure, so that a new crate's pure files (a
/// backend's fit rule) are checked without an entry in [`PURE`].
pub(crate) const PURE_MARK: &str = "//! Pure: no IO (checked by `cargo xtask tidy`).";

/// Each use of an impure name in a [`PURE`] file or a file carrying [`PURE_MARK`], as `file:
/// name`; a listed path that does not exist is reported too, so that the list follows the code
/// when it moves.
pub(crate) fn impure_uses(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut marked = Vec::new();
    collect_rs(&root.join("crates"), &mut marked);
    for file in marked {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        if text.lines().any(|l| l.trim() == PURE_MARK) {
            found.extend(impure_names(root, &file, &text));
        }
    }
    for entry in PURE {
        let path = root.join(entry);
        if !path.exists() {
            found.push(format!("{entry}: listed as pure in xtask/src/tidy/rules.rs but does not exist"));
            continue;
        }
        let mut files = Vec::new();
        collect_rs(&path, &mut files);
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else { continue };
            found.extend(impure_names(root, &file, &text));
        }
    }
    found.sort();
    found.dedup();
    found
}

/// `file: names `x`` for each impure name in `text`, the source of `file`.
fn impure_names(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let code = source::code(text);
    let shown = file.strip_prefix(root).unwrap_or(file).display().to_string();
    IMPURE.iter().filter(|name| names(&code, name)).map(|name| format!("{shown}: names `{name}`")).collect()
}

/// Whether `code` names `name` as a path (not as part of a longer identifier).
fn names(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + name.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

fn collect_rs(path: &Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else { return };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for entry in entries {
            collect_rs(&entry, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs")
        && !path.file_stem().is_some_and(|s| s == "tests" || s.to_string_lossy().ends_with("_tests"))
    {
        out.push(path.to_owned());
    }
}

/// Crates that may depend on `anyhow`: the binaries' (errors for people, not for callers).
const ANYHOW_ALLOWED: &[&str] = &["crates/cli", "crates/chaos", "xtask"];

/// Each library crate whose manifest depends on `anyhow`.
pub(crate) fn anyhow_in_libraries(root: &Path) -> Vec<String> {
    let mut manifests = vec![root.join("xtask/Cargo.toml")];
    if let Ok(entries) = std::fs::read_dir(root.join("crates")) {
        manifests.extend(entries.flatten().map(|e| e.path().join("Cargo.toml")).filter(|p| p.exists()));
    }
    manifests.sort();
    let mut found = Vec::new();
    for manifest in manifests {
        let dir = manifest.parent().unwrap_or(root);
        let shown = dir.strip_prefix(root).unwrap_or(dir).display().to_string();
        if ANYHOW_ALLOWED.contains(&shown.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&manifest).unwrap_or_default();
        let mut section = String::new();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.to_owned();
            } else if section == "[dependencies]" && (line.starts_with("anyhow ") || line.starts_with("anyhow.")) {
                found.push(format!("{shown}/Cargo.toml depends on anyhow (a library returns typed errors: thiserror)"));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_counts_only_as_a_whole_name() {
        assert!(names("let f = std::fs::read(p);", "std::fs"));
        assert!(names("use tokio::time;", "tokio"));
        assert!(!names("let my_tokio_thing = 1;", "tokio"));
        assert!(!names("use crate::std::fsx;", "std::fs"));
        assert!(names("let t = Instant::now();", "Instant::now"));
    }

    #[test]
    fn a_file_that_declares_itself_pure_is_checked_without_a_list_entry() {
        let root = std::env::temp_dir().join(format!("tidy-pure-{}", std::process::id()));
        let dir = root.join("crates/backend-x/src");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("fit.rs"),
            format!("//! The fit rule.\n{PURE_MARK}\nfn f() {{ std::fs::read(\"x\"); }}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("io.rs"), "//! Does IO.\nfn f() { std::fs::read(\"x\"); }\n").unwrap();
        let found = impure_uses(&root);
        std::fs::remove_dir_all(&root).unwrap();
        assert!(found.contains(&"crates/backend-x/src/fit.rs: names `std::fs`".to_owned()), "{found:?}");
        assert!(!found.iter().any(|f| f.contains("io.rs")), "{found:?}");
    }

    #[test]
    fn comments_and_tests_of_a_pure_file_may_name_io() {
        let text = "//! Reads nothing: not std::fs.\nfn f() {}\n#[cfg(test)]\nmod tests { use std::fs; }\n";
        assert!(!names(&source::code(text), "std::fs"));
    }
}
