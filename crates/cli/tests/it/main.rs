//! End-to-end tests of the `theseus` binary: each test runs the real binary in a fresh HOME
//! (no config file unless the test writes one) and checks exit code, stdout and stderr.

mod batch;
mod browser;
mod cli;
mod config_load;
mod everyday;
mod forward;
mod gc;
mod inputs;
mod jax;
mod lifecycle;
mod original;
mod probe;
mod repl;
mod resume;
mod shell;
mod ship;
mod slurm;
mod solo;
mod solver_rules;
mod stages;
mod sync;
mod targets;
mod testhost;
mod ui;
mod ui_kept;
mod ui_slurm;
mod volcano;
mod volcano_faults;
mod volcano_gone;
mod volcano_queues;
mod volcano_rbac;
mod volcano_sites;
mod volcano_start;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use theseus_core::config::HostTypes;

/// The binary's registry ([`theseus_cli::registry`] of [`theseus_cli::HOST_TYPES`]), for tests
/// that load configs in-process.
pub(crate) fn host_types() -> HostTypes {
    theseus_cli::registry(theseus_cli::HOST_TYPES)
}

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

/// Runs `cmd`, killing it (by its PID) when it has not ended within `limit`: a hang is a
/// failure, not a stuck test run (a generous bound, never a timing assertion). Its output is
/// read as it comes, so a chatty command cannot block on a full pipe.
pub(crate) fn run_bounded(mut cmd: Command, limit: std::time::Duration) -> Output {
    use std::io::Read as _;
    let mut child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap_or_default();
            panic!("`{cmd:?}` did not end within {limit:?}; stderr:\n{}", text(&stderr));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    Output { status, stdout: stdout.join().unwrap_or_default(), stderr: stderr.join().unwrap_or_default() }
}
