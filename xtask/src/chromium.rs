//! Chromium for `cargo xtask test`: the dashboard's browser tests drive Debian's headless
//! `chromium` (`THESEUSTEST_CHROMIUM`). When it is missing, root installs it with apt-get; anyone
//! else gets an error saying how to install it or how to opt out (with
//! `THESEUSTEST_REQUIRE_ALL=0` the browser tests then say they did not run).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Result;

use crate::apt::{self, Tool};

/// Where Debian's package puts it.
pub(crate) const BINARY: &str = "/usr/bin/chromium";

/// How the browser tests get it.
pub(crate) const TOOL: Tool = Tool {
    name: "Chromium",
    needed_by: "the dashboard's browser tests",
    install: &[
        &["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
        &["apt-get", "update"],
        &["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
    ],
    by_hand: "`sudo apt-get install chromium`",
};

/// The Chromium binary, installed when missing and `root`; `None` (after a warning) when it
/// cannot be had and `require` is false.
pub(crate) fn ensure(root: bool, require: bool) -> Result<Option<PathBuf>> {
    let binary = Path::new(BINARY);
    match apt::ensure(&TOOL, root, &mut || works(binary)) {
        Ok(()) => Ok(Some(binary.to_owned())),
        Err(err) if require => Err(err),
        Err(err) => {
            eprintln!("xtask: WARNING: the browser tests will not run: {err:#}");
            Ok(None)
        }
    }
}

/// Whether `binary --version` runs.
fn works(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_chromium_installs_nothing() {
        let mut ran = Vec::new();
        apt::ensure_with(&TOOL, true, &mut || true, &mut |a| {
            ran.push(a.join(" "));
            true
        })
        .unwrap();
        assert!(ran.is_empty());
    }

    #[test]
    fn root_tries_apt_get_until_chromium_runs() {
        let mut ran = Vec::new();
        let err = apt::ensure_with(&TOOL, true, &mut || false, &mut |a| {
            ran.push(a.join(" "));
            false
        })
        .unwrap_err();
        assert!(err.to_string().contains("could not be installed"), "{err}");
        assert_eq!(
            ran,
            [
                "apt-get install -y --no-install-recommends chromium",
                "apt-get update",
                "apt-get install -y --no-install-recommends chromium"
            ]
        );
        // The first install that works ends the attempts.
        let installed = std::cell::Cell::new(false);
        let mut ran = 0;
        apt::ensure_with(&TOOL, true, &mut || installed.get(), &mut |_| {
            ran += 1;
            installed.set(true);
            true
        })
        .unwrap();
        assert_eq!(ran, 1);
    }

    #[test]
    fn without_root_a_missing_chromium_is_a_clear_error() {
        let mut ran = 0;
        let err = apt::ensure_with(&TOOL, false, &mut || false, &mut |_| {
            ran += 1;
            true
        })
        .unwrap_err()
        .to_string();
        assert_eq!(ran, 0);
        assert!(err.contains("apt-get install chromium") && err.contains("THESEUSTEST_REQUIRE_ALL=0"), "{err}");
    }
}
