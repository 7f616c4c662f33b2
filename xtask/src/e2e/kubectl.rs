//! kubectl for `cargo xtask test`: the e2e check against the simulator runs kubectl, and CI
//! requires it. When it is missing, root installs it with apt-get (Debian's `kubectl` package
//! where a repository has it, else Debian's own `kubernetes-client`); anyone else gets an error
//! saying how to install it or how to opt out.

use std::process::{Command, Stdio};

use anyhow::{Result, bail};

/// The apt-get commands tried in order until kubectl works.
pub(crate) const INSTALL: [&[&str]; 4] = [
    &["apt-get", "install", "-y", "kubectl"],
    &["apt-get", "update"],
    &["apt-get", "install", "-y", "kubectl"],
    &["apt-get", "install", "-y", "kubernetes-client"],
];

/// Makes sure kubectl runs, installing it when missing and `root`.
pub(crate) fn ensure(root: bool) -> Result<()> {
    ensure_with(root, &mut works, &mut |argv| {
        eprintln!("xtask: kubectl is missing; running `{}`", argv.join(" "));
        Command::new(argv[0])
            .args(&argv[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

fn ensure_with(root: bool, works: &mut dyn FnMut() -> bool, run: &mut dyn FnMut(&[&str]) -> bool) -> Result<()> {
    if works() {
        return Ok(());
    }
    if !root {
        bail!(
            "kubectl is required by `cargo xtask test` (the e2e check against the simulator) and is not installed; \
             install it (`sudo apt-get install kubectl`, or `kubernetes-client` on Debian), or set \
             THESEUSTEST_REQUIRE_ALL=0 to let that check say NOT RUN"
        );
    }
    for argv in INSTALL {
        // A failed `apt-get update` or a package no repository has: try the next way.
        let _ = run(argv);
        if works() {
            return Ok(());
        }
    }
    bail!(
        "kubectl is required by `cargo xtask test` and could not be installed with apt-get (tried `kubectl` and \
         `kubernetes-client`); install it by hand, or set THESEUSTEST_REQUIRE_ALL=0"
    )
}

/// Whether `kubectl version --client` runs.
fn works() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    rustix::process::getuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_kubectl_installs_nothing() {
        let mut ran = Vec::new();
        ensure_with(true, &mut || true, &mut |a| {
            ran.push(a.join(" "));
            true
        })
        .unwrap();
        assert!(ran.is_empty());
    }

    #[test]
    fn root_tries_apt_get_until_kubectl_works() {
        let mut ran = Vec::new();
        let result = ensure_with(true, &mut || false, &mut |a| {
            ran.push(a.join(" "));
            false
        });
        assert!(result.unwrap_err().to_string().contains("could not be installed"));
        assert_eq!(
            ran,
            [
                "apt-get install -y kubectl",
                "apt-get update",
                "apt-get install -y kubectl",
                "apt-get install -y kubernetes-client"
            ]
        );
        // The first install that works ends the attempts.
        let installed = std::cell::Cell::new(false);
        let mut ran = Vec::new();
        ensure_with(true, &mut || installed.get(), &mut |a| {
            ran.push(a.join(" "));
            installed.set(a == ["apt-get", "install", "-y", "kubectl"] && ran.len() == 3);
            installed.get()
        })
        .unwrap();
        assert_eq!(ran, ["apt-get install -y kubectl", "apt-get update", "apt-get install -y kubectl"]);
    }

    #[test]
    fn without_root_a_missing_kubectl_is_a_clear_error() {
        let mut ran = 0;
        let err = ensure_with(false, &mut || false, &mut |_| {
            ran += 1;
            true
        })
        .unwrap_err()
        .to_string();
        assert_eq!(ran, 0);
        assert!(err.contains("apt-get install kubectl") && err.contains("THESEUSTEST_REQUIRE_ALL=0"), "{err}");
    }
}
