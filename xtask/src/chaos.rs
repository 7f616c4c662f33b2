//! `cargo xtask chaos [--full] [--flows=submit,cancel,..] [--backends=volcano,plain,slurm,tpu,crash,load] [--jobs=N]`:
//! builds `theseus` and the fault matrix runner (`crates/chaos`) and runs it: every API request
//! of `submit`, `status`, `logs -f`, `cancel`, `gc` and `logs -f` of a collected run against the Kubernetes simulator fails in
//! turn; every remote command of `submit` and `cancel` on the lab's plain and Slurm hosts is
//! refused, loses its connection, or runs unheard; every API request and every remote command
//! of `submit`, `status`, `cancel` and `gc` on a Cloud TPU host against `theseus-tpu-sim`
//! (whose workers log in the lab's user) fails in turn; and the client is killed with SIGKILL at each
//! phase of `submit --follow` on all four backends. Each case must end in success or one clear
//! error, without a hang, a panic, or anything left behind. `test` runs the short matrix (500,
//! reset, and 409 on submit against the simulator); `--full` adds 429 and requests that never
//! answer.
//!
//! The lab is started when it is not running (and stopped again after); with
//! `THESEUSTEST_REQUIRE_ALL=0` a lab that cannot start is skipped (its rows say NOT RUN).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let require_all = std::env::var("THESEUSTEST_REQUIRE_ALL").map_or(true, |v| v != "0");
    let was_running = crate::lab::is_running(root);
    let lab = match crate::lab::up(root) {
        Ok(lab) => Some(lab),
        Err(err) if require_all => {
            return Err(err.context(
                "cannot start the SSH/Slurm lab for the fault matrix (it needs root and apt-get); set \
                 THESEUSTEST_REQUIRE_ALL=0 to run the matrix without it",
            ));
        }
        Err(err) => {
            eprintln!("chaos: WARNING: running without the SSH/Slurm lab: {err:#}");
            None
        }
    };
    let ran = run_with(root, args, lab.as_ref(), require_all);
    let stopped = if lab.is_some() && !was_running { crate::lab::down(root) } else { Ok(()) };
    ran?;
    stopped.context("cannot stop the test lab")
}

fn run_with(root: &Path, args: &[String], lab: Option<&crate::lab::Lab>, require_all: bool) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("chaos: building theseus, theseus-tpu-sim and theseus-chaos");
    let status = Command::new(cargo)
        .current_dir(root)
        .args(["build", "--bins", "-p", "theseus-cli", "-p", "theseus-tpu-sim", "-p", "theseus-chaos"])
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    let bin = crate::target_dir(root).join("debug");
    let mut cmd = Command::new(bin.join("theseus-chaos"));
    cmd.arg("--theseus").arg(bin.join("theseus"));
    for (key, value) in lab.iter().flat_map(|lab| &lab.vars) {
        cmd.env(key, value);
    }
    if require_all {
        cmd.arg("--require-lab");
    }
    for arg in args {
        match arg.as_str() {
            "--full" => {
                cmd.arg("--full");
            }
            flows if flows.starts_with("--flows=") => {
                cmd.args(["--flows", &flows["--flows=".len()..]]);
            }
            backends if backends.starts_with("--backends=") => {
                cmd.args(["--backends", &backends["--backends=".len()..]]);
            }
            jobs if jobs.starts_with("--jobs=") => {
                cmd.args(["--jobs", &jobs["--jobs=".len()..]]);
            }
            other => bail!(
                "unknown argument `{other}`: cargo xtask chaos [--full] [--flows=submit,cancel,..] \
                 [--backends=volcano,plain,slurm,tpu,crash,load] [--jobs=N]"
            ),
        }
    }
    let status = cmd.status().context("cannot run theseus-chaos")?;
    if !status.success() {
        bail!("the fault matrix found bad cases ({status}); each is listed above with its stderr");
    }
    Ok(())
}
