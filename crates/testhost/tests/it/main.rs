//! End-to-end tests of the `sandbox` host type: the `theseus-testhost` binary (the `theseus`
//! command line plus `sandbox`) driven in a fresh HOME with a sandbox host and a local one,
//! the backend conformance suite on the sandbox backend, and the registry as the only plug.

mod commands;
mod conformance;
mod registry;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A fresh HOME with a config of a sandbox host `sb` (2 slots) and a local host, and a code dir
/// with a job that exits with its first argument or sleeps.
pub(crate) struct TestContext {
    home: tempfile::TempDir,
    code: tempfile::TempDir,
}

/// The job: `python job.py CODE` prints a line and exits with CODE; `python job.py sleep` waits;
/// `python job.py secret` says whether `MY_TOKEN` reached it (knowing it only reversed, so that
/// the code holds no copy of it).
const JOB_PY: &str = "import os, sys, time\nprint('hello from the sandbox', flush=True)\n\
                      if sys.argv[1] == 'sleep':\n    time.sleep(600)\n\
                      if sys.argv[1] == 'secret':\n    print('token', os.environ.get('MY_TOKEN', '')[::-1] == REVERSED)\n    \
                      sys.exit(0)\nsys.exit(int(sys.argv[1]))\n";

/// The value of `MY_TOKEN` in [`JOB_PY`]'s `secret` mode.
pub(crate) const SECRET: &str = "tok-123-s3cret";

impl TestContext {
    pub(crate) fn new() -> TestContext {
        let ctx = TestContext { home: tempfile::tempdir().unwrap(), code: tempfile::tempdir().unwrap() };
        let home = ctx.home().display();
        let config = format!(
            "clusters:\n  box: {{root: {home}/root, work: {home}/root/work}}\nhosts:\n  sb:\n    type: sandbox\n    \
             cluster: box\n    slots: 2\n    dir: {home}/sandbox\n  here:\n    type: local\n"
        );
        std::fs::write(ctx.home().join(".theseus.yaml"), config).unwrap();
        let reversed: String = SECRET.chars().rev().collect();
        let job = JOB_PY.replace("REVERSED", &format!("{reversed:?}"));
        std::fs::write(ctx.code.path().join("job.py"), job).unwrap();
        ctx
    }

    pub(crate) fn home(&self) -> &Path {
        self.home.path()
    }

    /// The sandbox dir of host `sb`.
    pub(crate) fn sandbox(&self) -> PathBuf {
        self.home().join("sandbox")
    }

    /// An experiment running `python job.py ARG` on CPU.
    pub(crate) fn experiment(&self, arg: &str) -> String {
        let path = self.code.path().join(format!("{arg}.yaml"));
        std::fs::write(&path, format!("entrypoint: python job.py {arg}\nrequest: {{chip: cpu}}\n")).unwrap();
        path.display().to_string()
    }

    /// `theseus-testhost ARGS` in the code dir.
    pub(crate) fn cmd(&self) -> Command {
        self.cmd_of(env!("CARGO_BIN_EXE_theseus-testhost"))
    }

    /// `program` in the code dir with the test's HOME and state dir.
    pub(crate) fn cmd_of(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(self.code.path())
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

    /// `status RUN --output json`, until `done` holds of it (or 60 s pass).
    pub(crate) fn status_until(&self, run: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.run(&["status", run, "--output", "json"]);
            assert!(out.status.success(), "{}", text(&out.stderr));
            let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if done(&status["status"]) {
                return status["status"].clone();
            }
            assert!(Instant::now() < deadline, "status never got there: {status}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Cancels a job when a test ends, passed or not.
pub(crate) struct CancelOnDrop<'a>(pub(crate) &'a TestContext, pub(crate) String);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["cancel", &self.1]);
    }
}

pub(crate) fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}
