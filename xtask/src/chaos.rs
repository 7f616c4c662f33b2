//! `cargo xtask chaos [--full] [--flows submit,cancel,..]`: builds `theseus` and the fault
//! matrix runner (`crates/chaos`) and runs it: every API request of `submit`, `status`,
//! `logs -f`, `cancel` and `gc` against the Kubernetes simulator fails in turn, and each case
//! must end in success or one clear error, without a hang, a panic, or anything left behind.
//! `test` runs the short matrix (500, reset, and 409 on submit); `--full` adds 429 and requests
//! that never answer.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("chaos: building theseus and theseus-chaos");
    let status = Command::new(cargo)
        .current_dir(root)
        .args(["build", "--bins", "-p", "theseus-cli", "-p", "theseus-chaos"])
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    let bin = crate::target_dir(root).join("debug");
    let mut cmd = Command::new(bin.join("theseus-chaos"));
    cmd.arg("--theseus").arg(bin.join("theseus"));
    for arg in args {
        match arg.as_str() {
            "--full" => {
                cmd.arg("--full");
            }
            flows if flows.starts_with("--flows=") => {
                cmd.args(["--flows", &flows["--flows=".len()..]]);
            }
            other => bail!("unknown argument `{other}`: cargo xtask chaos [--full] [--flows=submit,cancel,..]"),
        }
    }
    let status = cmd.status().context("cannot run theseus-chaos")?;
    if !status.success() {
        bail!("the fault matrix found bad cases ({status}); each is listed above with its stderr");
    }
    Ok(())
}
