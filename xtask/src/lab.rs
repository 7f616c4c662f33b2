//! The SSH and Slurm test lab: a loopback sshd and a 2-node Slurm cluster with fake GPUs behind
//! an SSH login node, run by the scripts in `ci/lab/` (see `ci/lab/README.md`).
//!
//! The scripts print the env contract (`THESEUSTEST_SSH_*`, `THESEUSTEST_SLURM_*`,
//! `THESEUSTEST_REMOTE_PYTHON`) as `KEY=VALUE` lines; [`up`] returns them so that `cargo xtask
//! test` can hand them to the test processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// `cargo xtask lab <up|down|status|env|smoke>`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("up") => {
            for (key, value) in up(root)?.vars {
                println!("{key}={value}");
            }
            Ok(())
        }
        Some("down") => down(root),
        Some("status") => {
            let status = script(root, "lab.sh", "status").status().context("cannot run ci/lab/lab.sh")?;
            if !status.success() {
                bail!("the lab is not (fully) running");
            }
            Ok(())
        }
        Some("env") => checked(script(root, "lab.sh", "env")),
        Some("smoke") => checked(script(root, "smoke.sh", "")),
        _ => bail!("usage: cargo xtask lab <up|down|status|env|smoke>"),
    }
}

/// A running lab: the env vars the tests read.
pub(crate) struct Lab {
    pub(crate) vars: Vec<(String, String)>,
}

/// Starts the lab (a no-op when it already runs) and returns its env.
pub(crate) fn up(root: &Path) -> Result<Lab> {
    let out =
        script(root, "lab.sh", "start").stderr(Stdio::inherit()).output().context("cannot run ci/lab/lab.sh start")?;
    if !out.status.success() {
        bail!("ci/lab/lab.sh start failed ({}); see the messages above", out.status);
    }
    let stdout = String::from_utf8(out.stdout).context("lab env is not UTF-8")?;
    let vars: Vec<(String, String)> = stdout
        .lines()
        .filter_map(|line| line.split_once('='))
        .filter(|(key, _)| key.starts_with("THESEUSTEST_"))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    if vars.is_empty() {
        bail!("ci/lab/lab.sh start printed no THESEUSTEST_* variables");
    }
    Ok(Lab { vars })
}

/// Whether the lab is already fully running (then `cargo xtask test` leaves it running).
pub(crate) fn is_running(root: &Path) -> bool {
    script(root, "lab.sh", "status").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Stops every process the lab started (by pidfile) and removes its network namespace.
pub(crate) fn down(root: &Path) -> Result<()> {
    checked(script(root, "lab.sh", "stop"))
}

fn script(root: &Path, name: &str, arg: &str) -> Command {
    let mut cmd = Command::new(root.join("ci/lab").join(name));
    if !arg.is_empty() {
        cmd.arg(arg);
    }
    // The scripts put the lab under <target>/lab (or a /var/tmp fallback) and pin the same JAX.
    cmd.current_dir(root)
        .env("CARGO_TARGET_DIR", target_dir(root))
        .env("THESEUS_LAB_JAX", crate::python::requirements());
    cmd
}

fn target_dir(root: &Path) -> PathBuf {
    let dir = crate::target_dir(root);
    if dir.is_absolute() { dir } else { root.join(dir) }
}

fn checked(mut cmd: Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}
