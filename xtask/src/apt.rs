//! Tools `cargo xtask test` needs from Debian's packages (kubectl, Chromium): when one is
//! missing, root installs it with apt-get, trying each step in turn until the tool works; anyone
//! else gets an error that says how to install it or how to opt out.

use std::process::{Command, Stdio};

use anyhow::{Result, bail};

/// A tool and how to get it.
pub(crate) struct Tool {
    /// Its name, as said in messages (`kubectl`).
    pub(crate) name: &'static str,
    /// What needs it, as said in messages (`the e2e check against the simulator`).
    pub(crate) needed_by: &'static str,
    /// The apt-get commands tried in order until it works.
    pub(crate) install: &'static [&'static [&'static str]],
    /// How a user installs it by hand (`sudo apt-get install kubectl`).
    pub(crate) by_hand: &'static str,
}

/// Makes sure `tool` works (`works`), installing it with apt-get when missing and `root`.
pub(crate) fn ensure(tool: &Tool, root: bool, works: &mut dyn FnMut() -> bool) -> Result<()> {
    ensure_with(tool, root, works, &mut |argv| {
        eprintln!("xtask: {} is missing ({} needs it); running `{}`", tool.name, tool.needed_by, argv.join(" "));
        Command::new(argv[0])
            .args(&argv[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// [`ensure`] with the commands run by `run` (tests).
pub(crate) fn ensure_with(
    tool: &Tool,
    root: bool,
    works: &mut dyn FnMut() -> bool,
    run: &mut dyn FnMut(&[&str]) -> bool,
) -> Result<()> {
    if works() {
        return Ok(());
    }
    let Tool { name, needed_by, by_hand, .. } = tool;
    if !root {
        bail!(
            "{name} is required by `cargo xtask test` ({needed_by}) and is not installed; install it \
             ({by_hand}), or set THESEUSTEST_REQUIRE_ALL=0 to let that check say NOT RUN"
        );
    }
    for argv in tool.install {
        // A failed `apt-get update`, a stale list or a package no repository has: the next step.
        let _ = run(argv);
        if works() {
            return Ok(());
        }
    }
    let tried: Vec<String> = tool.install.iter().map(|argv| format!("`{}`", argv.join(" "))).collect();
    bail!(
        "{name} is required by `cargo xtask test` and could not be installed with apt-get (tried {}); install it \
         by hand, or set THESEUSTEST_REQUIRE_ALL=0",
        tried.join(", ")
    )
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    rustix::process::getuid().is_root()
}
