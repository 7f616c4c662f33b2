//! Developer tasks, run as `cargo xtask <task>` (alias in `.cargo/config.toml`).
//!
//! - `test`: the whole test suite, as CI runs it. Prepares what the tests need (a Python venv
//!   with JAX from PyPI; Debian's `chromium` for the dashboard's browser tests, installed with
//!   apt-get when it is missing and we are root, passed as `THESEUSTEST_CHROMIUM`), runs `cargo test --workspace` (xtask's own tests included: `--workspace`
//!   overrides `default-members`) with every optional test required, then `e2e --sim
//!   --require-kubectl` (kubectl installed with apt-get first when it is missing and we are root)
//!   the short fault matrix (`chaos`), a short run of every fuzz target (`fuzz`) and the wheel's
//!   checks (`dist --check --old-glibc`). It also starts the SSH/Slurm lab (`ci/lab/`) before
//!   the tests and stops it after the fault matrix, unless it was already running. A lab that cannot start fails the run; with
//!   `THESEUSTEST_REQUIRE_ALL=0` it is skipped instead (and the live tests say they did not run).
//! - `lab up|down|status|env|smoke`: the SSH/Slurm test lab on its own (see `ci/lab/README.md`).
//! - `tidy`: repository checks (every `.rs` file opens with a `//!` doc; no import circle between
//!   sibling modules of any crate, and no CLI command module uses another: [`tidy`]).
//! - `man [--check]`: writes (or checks) the man pages in `docs/man/` from the CLI definition.
//! - `setup-python`: only the venv step of `test`; prints the interpreter path.
//! - `e2e --sim`: the real `theseus` binary through the Volcano scenarios against the simulator
//!   (`test` runs it after the workspace tests); `e2e` does the same on a kind cluster with
//!   Volcano (`--dry-run` prints the steps, `--keep` keeps the cluster).
//! - `sim`: starts the Kubernetes + Volcano simulator and keeps it up for `kubectl --server`.
//! - `bench [--runs N] [--release] [--output json] [--strict]`: wall times of the real binary
//!   (plan, local submit, status, submit and shipping against the simulator) against goals;
//!   not part of `test`.
//! - `chaos [--full] [--flows=a,b] [--backends=a,b] [--jobs=N]`: the fault matrix against the simulator
//!   and the lab, and the client-crash matrix ([`chaos`]); `test` runs its short version after
//!   the end-to-end scenarios.
//! - `dist [--check] [--old-glibc] [--target=x86_64,aarch64,musl|all]`: the wheels (x86_64
//!   manylinux by default; aarch64 manylinux and x86_64 musllinux on request) and the sdist in
//!   `target/dist/` ([`dist`]); `--check` installs the wheel without Rust and runs the bundled
//!   example (the other targets' binaries: static musl, aarch64 under qemu), `--old-glibc` does
//!   so in a Debian bullseye chroot. `test` runs both for x86_64.
//! - `fuzz [--seconds N] [--full] [--targets=a,b]`: the coverage-guided fuzz targets of every
//!   parser ([`fuzz`]); `test` runs each for a few seconds after the fault matrix.

mod apt;
mod bench;
mod chaos;
mod chromium;
mod dist;
mod e2e;
mod fuzz;
mod lab;
mod man;
mod python;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    match args.first().map(String::as_str) {
        Some("test") => test(&root, &args[1..]),
        Some("lab") => lab::run(&root, &args[1..]),
        Some("tidy") => tidy::check(&root),
        Some("man") => man::run(&root, &args[1..]),
        Some("e2e") => e2e::run(&root, &args[1..]),
        Some("bench") => bench::run(&root, &args[1..]),
        Some("chaos") => chaos::run(&root, &args[1..]),
        Some("fuzz") => fuzz::run(&root, &args[1..]),
        Some("dist") => dist::run(&root, &args[1..]),
        Some("sim") => e2e::sim_command(&root, &args[1..]),
        Some("setup-python") => {
            println!("{}", python::ensure_venv(&root)?.display());
            Ok(())
        }
        _ => {
            eprintln!(
                "usage: cargo xtask <test [cargo test args...]|lab up|down|status|env|smoke|tidy|man [--check]|setup-python|e2e [--sim] [--dry-run] [--keep] [--only=N,..] [--require-kubectl]|sim [--port P]|bench [--runs N] [--release] [--output json] [--strict]|chaos [--full] [--flows=a,b] [--backends=a,b] [--jobs=N]|fuzz [--seconds N] [--full] [--targets=a,b]|dist [--check] [--old-glibc] [--target=x86_64,aarch64,musl|all]>"
            );
            std::process::exit(2);
        }
    }
}

/// The workspace root (the parent of this crate).
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_owned()
}

/// The target dir cargo uses for this workspace.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

fn test(root: &Path, extra: &[String]) -> Result<()> {
    tidy::check(root)?;
    let python = python::ensure_venv(root)?;
    // CI requires every optional test; a developer without root can opt out explicitly.
    let require_all = std::env::var("THESEUSTEST_REQUIRE_ALL").map_or(true, |v| v != "0");
    let managed = python::managed_python();
    if managed.is_none() {
        eprintln!(
            "xtask: WARNING: no externally managed python3 with pip (Debian's python3 and python3-pip); \
             the bootstrap's uv install test will not run"
        );
    }
    // The dashboard's browser tests drive headless Chromium (installed here when missing).
    let chromium = chromium::ensure(apt::is_root(), require_all)?;
    let was_running = lab::is_running(root);
    let lab = match lab::up(root) {
        Ok(lab) => Some(lab),
        Err(err) if require_all => {
            return Err(err.context(
                "cannot start the SSH/Slurm test lab, which `cargo xtask test` requires (it needs root \
                 and apt-get); set THESEUSTEST_REQUIRE_ALL=0 to run without it",
            ));
        }
        Err(err) => {
            eprintln!("xtask: WARNING: running without the SSH/Slurm lab: {err:#}");
            None
        }
    };
    eprintln!("xtask: running the workspace tests with THESEUSTEST_PYTHON={}", python.display());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["test", "--workspace", "--all-targets"])
        .args(extra)
        .env("THESEUSTEST_PYTHON", &python)
        .env("THESEUSTEST_MANAGED_PYTHON", managed.as_deref().unwrap_or(Path::new("")))
        .env("THESEUSTEST_CHROMIUM", chromium.as_deref().unwrap_or(Path::new("")))
        .env("THESEUSTEST_REQUIRE_ALL", if require_all { "1" } else { "0" });
    for (key, value) in lab.iter().flat_map(|lab| &lab.vars) {
        cmd.env(key, value);
    }
    let mut after = || -> Result<()> {
        let status = cmd.status().context("cannot run cargo test")?;
        if !status.success() {
            bail!("tests failed ({status})");
        }
        e2e_and_chaos(root, require_all)
    };
    let ran = after();
    // Stop the lab also when the tests failed, but leave one that was up before us.
    let stopped = if lab.is_some() && !was_running { lab::down(root) } else { Ok(()) };
    ran?;
    stopped.context("cannot stop the test lab")
}

/// The end-to-end scenarios against the simulator, then the short fault matrix (the lab is up).
fn e2e_and_chaos(root: &Path, require_all: bool) -> Result<()> {
    let mut e2e_args = vec!["--sim".to_owned()];
    if require_all {
        // CI runs the kubectl check of `e2e --sim` too: installed here when missing (root).
        e2e::kubectl::ensure(apt::is_root())?;
        e2e_args.push("--require-kubectl".to_owned());
    }
    eprintln!("xtask: running the end-to-end scenarios against the simulator (cargo xtask e2e {})", e2e_args.join(" "));
    e2e::run(root, &e2e_args)?;
    eprintln!("xtask: running the short fault matrix (cargo xtask chaos)");
    chaos::run(root, &[])?;
    eprintln!("xtask: running every fuzz target for a few seconds (cargo xtask fuzz)");
    fuzz::run(root, &["--seconds".to_owned(), "8".to_owned()])?;
    // The wheel: installed without Rust and run; in an older glibc's userland too (a chroot,
    // root only), as CI runs it.
    let mut dist_args = vec!["--check".to_owned()];
    if require_all {
        dist_args.push("--old-glibc".to_owned());
    }
    eprintln!("xtask: building and checking the wheel (cargo xtask dist {})", dist_args.join(" "));
    dist::run(root, &dist_args)
}
