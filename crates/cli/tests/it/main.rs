//! End-to-end tests of the `theseus` binary: each test runs the real binary in a fresh HOME
//! (no config file unless the test writes one) and checks exit code, stdout and stderr.

mod cli;
mod everyday;
mod forward;
mod gc;
mod inputs;
mod jax;
mod lifecycle;
mod probe;
mod repl;
mod shell;
mod ship;
mod slurm;
mod sync;
mod targets;
mod volcano;
mod volcano_faults;
mod volcano_rbac;
mod volcano_sites;
mod volcano_start;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh HOME and state dir for one test.
pub(crate) struct TestContext {
    pub(crate) home: tempfile::TempDir,
}

impl TestContext {
    pub(crate) fn new() -> TestContext {
        TestContext { home: tempfile::tempdir().unwrap() }
    }

    pub(crate) fn home(&self) -> &Path {
        self.home.path()
    }

    /// `theseus ARGS` run from the repository root (so the bundled examples ship).
    pub(crate) fn cmd(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_theseus"));
        cmd.current_dir(repo_root())
            .env_clear()
            .env("HOME", self.home())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("XDG_STATE_HOME", self.home().join("state"))
            .env("NO_COLOR", "1");
        cmd
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }
}

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().parent().unwrap().to_owned()
}

pub(crate) fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// Python with JAX for the tests, from `THESEUSTEST_PYTHON` (set by `cargo xtask test`).
/// Without it the test says loudly that it did not run, and fails when
/// `THESEUSTEST_REQUIRE_ALL=1` (as in CI).
pub(crate) fn jax_python(test: &str) -> Option<String> {
    match std::env::var("THESEUSTEST_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            let msg = format!(
                "{test}: NOT RUN: THESEUSTEST_PYTHON (a python with jax) is not set; `cargo xtask test` sets it up"
            );
            if std::env::var("THESEUSTEST_REQUIRE_ALL").is_ok_and(|v| v == "1") {
                panic!("{msg}");
            }
            eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
            None
        }
    }
}
