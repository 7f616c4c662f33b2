//! Repository checks that run before the tests: every Rust file starts with a `//!` doc, the
//! modules of every crate import one way ([`imports`]), pure modules do no IO and libraries
//! return typed errors ([`rules`]), and docs/ARCHITECTURE.md names only what exists ([`docs`]).

use std::path::Path;

use anyhow::{Result, bail};

mod docs;
mod imports;
mod kinds;
mod rules;
mod source;

/// Fails listing every `.rs` file (outside `target`) whose first line is not a `//!` comment,
/// then every import circle between sibling modules.
pub(crate) fn check(root: &Path) -> Result<()> {
    let mut missing = Vec::new();
    for dir in ["crates", "xtask"] {
        walk(&root.join(dir), &mut missing)?;
    }
    if !missing.is_empty() {
        bail!("these files do not start with a `//!` doc comment:\n  {}", missing.join("\n  "));
    }
    let mut broken = rules::impure_uses(root);
    broken.extend(rules::anyhow_in_libraries(root));
    broken.extend(docs::missing_names(root));
    broken.extend(kinds::named_kinds(root));
    if !broken.is_empty() {
        bail!(
            "repository rules broken (pure modules do no IO: move the IO to the caller; libraries use thiserror; \
             the architecture doc names only what exists):\n  {}",
            broken.join("\n  ")
        );
    }
    let circles = imports::check(root).map_err(anyhow::Error::msg)?;
    if !circles.is_empty() {
        let listed: String = circles.iter().map(ToString::to_string).collect();
        bail!(
            "{} import circle(s) between sibling modules (a parent and its children may use each other; \
             siblings must use each other one way: move what both need into a module below them):\n{listed}",
            circles.len()
        );
    }
    Ok(())
}

fn walk(dir: &Path, missing: &mut Vec<String>) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            walk(&path, missing)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)?;
            if !text.trim_start().starts_with("//!") {
                missing.push(path.display().to_string());
            }
        }
    }
    Ok(())
}
