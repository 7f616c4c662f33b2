//! `cargo xtask man [--check]`: the man pages in `docs/man/`, written by the `theseus` binary
//! itself (its hidden `man` command renders the clap definition with clap_mangen). `--check`
//! writes nothing and fails when a page is missing, stale or no longer made; a test of the cli
//! crate makes the same comparison, so `cargo xtask test` catches pages left stale.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Where the pages live in the repository.
pub(crate) const MAN_DIR: &str = "docs/man";

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        _ => bail!("usage: cargo xtask man [--check]"),
    };
    let bin = crate::e2e::build_binaries(root, false, false)?.join("theseus");
    let scratch = crate::e2e::scratch_dir(root, "man")?;
    let out = Command::new(&bin).args(["man", "--out"]).arg(&scratch).output().context("cannot run theseus man")?;
    if !out.status.success() {
        bail!("theseus man failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let fresh = pages(&scratch)?;
    let dir = root.join(MAN_DIR);
    let committed = if dir.exists() { pages(&dir)? } else { BTreeMap::new() };
    let _ = std::fs::remove_dir_all(&scratch);
    let mut differ: Vec<String> =
        fresh.iter().filter(|(name, text)| committed.get(*name) != Some(*text)).map(|(name, _)| name.clone()).collect();
    differ.extend(committed.keys().filter(|name| !fresh.contains_key(*name)).cloned());
    if check {
        if !differ.is_empty() {
            bail!("{MAN_DIR} is out of date ({}); run `cargo xtask man`", differ.join(", "));
        }
        eprintln!("man: {} pages up to date in {MAN_DIR}", fresh.len());
        return Ok(());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for name in committed.keys().filter(|name| !fresh.contains_key(*name)) {
        std::fs::remove_file(dir.join(name))?;
    }
    for (name, text) in &fresh {
        std::fs::write(dir.join(name), text)?;
    }
    eprintln!("man: wrote {} pages to {MAN_DIR} ({} changed)", fresh.len(), differ.len());
    Ok(())
}

/// The `.1` files of `dir`, by name.
fn pages(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "1") {
            let name = path.file_name().expect("a file").to_string_lossy().into_owned();
            out.insert(name, std::fs::read_to_string(&path)?);
        }
    }
    Ok(out)
}
