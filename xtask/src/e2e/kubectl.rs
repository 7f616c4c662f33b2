//! kubectl for `cargo xtask test`: the e2e check against the simulator runs kubectl, and CI
//! requires it. When it is missing, root installs it with apt-get (Debian's `kubectl` package
//! where a repository has it, else Debian's own `kubernetes-client`); anyone else gets an error
//! saying how to install it or how to opt out.

use std::process::{Command, Stdio};

use anyhow::Result;

use crate::apt::{self, Tool};

/// How the e2e check gets it.
pub(crate) const TOOL: Tool = Tool {
    name: "kubectl",
    needed_by: "the e2e check against the simulator",
    install: &[
        &["apt-get", "install", "-y", "kubectl"],
        &["apt-get", "update"],
        &["apt-get", "install", "-y", "kubectl"],
        &["apt-get", "install", "-y", "kubernetes-client"],
    ],
    by_hand: "`sudo apt-get install kubectl`, or `kubernetes-client` on Debian",
};

/// Makes sure kubectl runs, installing it when missing and `root`.
pub(crate) fn ensure(root: bool) -> Result<()> {
    apt::ensure(&TOOL, root, &mut works)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_kubectl_installs_nothing() {
        let mut ran = Vec::new();
        apt::ensure_with(&TOOL, true, &mut || true, &mut |a| {
            ran.push(a.join(" "));
            true
        })
        .unwrap();
        assert!(ran.is_empty());
    }

    #[test]
    fn root_tries_apt_get_until_kubectl_works() {
        let mut ran = Vec::new();
        let result = apt::ensure_with(&TOOL, true, &mut || false, &mut |a| {
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
        apt::ensure_with(&TOOL, true, &mut || installed.get(), &mut |a| {
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
        let err = apt::ensure_with(&TOOL, false, &mut || false, &mut |_| {
            ran += 1;
            true
        })
        .unwrap_err()
        .to_string();
        assert_eq!(ran, 0);
        assert!(err.contains("apt-get install kubectl") && err.contains("THESEUSTEST_REQUIRE_ALL=0"), "{err}");
    }
}
