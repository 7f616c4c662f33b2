//! The Python environment the tests need: a venv with JAX (CPU), Jupyter Lab and OmegaConf from PyPI, made once
//! under the target dir and reused while its marker file names the same pins.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// JAX version the tests pin (CPU wheels from PyPI).
pub(crate) const JAX: &str = "jax==0.10.2";

/// Jupyter Lab for the `theseus repl` tests (a real server whose `/api/status` they fetch).
pub(crate) const JUPYTER: &str = "jupyterlab==4.6.6";

/// OmegaConf, which the runner of job configs of the original (`.theseus/job.py`) and the tests'
/// stand-in for the original's package use.
pub(crate) const OMEGACONF: &str = "omegaconf==2.3.0";

/// What the venvs hold: [`JAX`], [`JUPYTER`] and [`OMEGACONF`], as pip arguments separated by spaces.
pub(crate) fn requirements() -> String {
    format!("{JAX} {JUPYTER} {OMEGACONF}")
}

/// Creates (if needed) the venv and returns its python.
pub(crate) fn ensure_venv(root: &Path) -> Result<PathBuf> {
    let venv = crate::target_dir(root).join("xtask-venv");
    let python = venv.join("bin/python");
    let marker = venv.join(".theseus-complete");
    // Rebuilt when the pins change (the marker holds the requirements it was made with).
    if python.exists() && std::fs::read_to_string(&marker).is_ok_and(|m| m == requirements()) {
        return Ok(python);
    }
    let base = find_python()?;
    eprintln!("xtask: creating a Python venv with {} in {}", requirements(), venv.display());
    if venv.exists() {
        std::fs::remove_dir_all(&venv).with_context(|| format!("cannot remove stale {}", venv.display()))?;
    }
    if run(Command::new(&base).args(["-m", "venv"]).arg(&venv)).is_err() {
        // Debian's python3 needs the python3-venv package for `-m venv`; CI runs as root.
        eprintln!("xtask: `{base} -m venv` failed; trying to install python3-venv with apt-get");
        let _ = std::fs::remove_dir_all(&venv);
        run(Command::new("apt-get").args(["install", "-y", "-qq", "python3-venv"]))
            .context("cannot create a venv; install python3-venv (Debian) and retry")?;
        run(Command::new(&base).args(["-m", "venv"]).arg(&venv))?;
    }
    run(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        JAX,
        JUPYTER,
        OMEGACONF,
    ]))?;
    run(Command::new(&python).args(["-c", "import jax; print('xtask: jax', jax.__version__)"]))?;
    std::fs::write(&marker, requirements())?;
    Ok(python)
}

/// Debian's own `python3`, which PEP 668 marks "externally managed" (an `EXTERNALLY-MANAGED`
/// file in its stdlib dir), with pip: the Python of Debian- and Ubuntu-based images, on which
/// the bootstrap must install uv without `pip install --user`. When it or its pip is missing
/// and we are root, `apt-get install python3-pip` adds them.
pub(crate) fn managed_python() -> Option<PathBuf> {
    let python = PathBuf::from("/usr/bin/python3");
    let check = |python: &Path| -> bool {
        let probe = "import os, sys, sysconfig; \
                     sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')) else 1)";
        let quiet = |args: &[&str]| Command::new(python).args(args).output().is_ok_and(|o| o.status.success());
        quiet(&["-c", probe]) && quiet(&["-m", "pip", "--version"])
    };
    if check(&python) {
        return Some(python);
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !root {
        return None;
    }
    eprintln!("xtask: installing Debian's python3-pip (an externally managed python3 for a bootstrap test)");
    let installed = Command::new("apt-get")
        .args(["install", "-y", "-qq", "python3-pip"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .is_ok_and(|s| s.success());
    (installed && check(&python)).then_some(python)
}

fn find_python() -> Result<String> {
    for candidate in ["python3", "python"] {
        if Command::new(candidate).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Ok(candidate.to_owned());
        }
    }
    bail!("python3 is needed for the tests (JAX jobs); install it (e.g. `apt-get install python3 python3-venv`)")
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}
