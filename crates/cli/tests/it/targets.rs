//! One place to run a job on each of the four backends for the tests of the commands that reach
//! a running job (`forward`, `shell`, `sync`): the local host, a plain host over the lab's sshd,
//! the lab's Slurm through its login node, and Volcano on the simulator. Each [`Target`] has its
//! own HOME, dispatch config and (for the SSH labs) ssh config, and names its host in `submit`.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::volcano::SimWorld;
use crate::{TestContext, text};

/// Which backend a [`Target`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Local,
    Plain,
    Slurm,
    Volcano,
}

/// A fresh HOME configured for one backend.
pub(crate) struct Target {
    pub(crate) ctx: TestContext,
    pub(crate) kind: Kind,
    ssh_config: Option<PathBuf>,
    host: Option<&'static str>,
    world: Option<SimWorld>,
}

impl Target {
    /// The target, or `None` (with a loud NOT RUN line, a failure under
    /// `THESEUSTEST_REQUIRE_ALL=1`) when its lab is not up.
    pub(crate) fn new(kind: Kind, test: &str) -> Option<Target> {
        let ctx = TestContext::new();
        match kind {
            Kind::Local => Some(Target { ctx, kind, ssh_config: None, host: None, world: None }),
            Kind::Volcano => {
                let world = SimWorld::start(&ctx);
                Some(Target { ctx, kind, ssh_config: None, host: Some("k8s"), world: Some(world) })
            }
            Kind::Plain | Kind::Slurm => {
                let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
                let port_var = if kind == Kind::Plain { "THESEUSTEST_SSH_PORT" } else { "THESEUSTEST_SLURM_SSH_PORT" };
                let user_var = if kind == Kind::Plain { "THESEUSTEST_SSH_USER" } else { "THESEUSTEST_SLURM_SSH_USER" };
                let (Some(port), Some(user), Some(key), Some(known), Some(shared)) = (
                    get(port_var),
                    get(user_var),
                    get("THESEUSTEST_SSH_KEY"),
                    get("THESEUSTEST_SSH_KNOWN_HOSTS"),
                    get("THESEUSTEST_SLURM_SHARED"),
                ) else {
                    let msg = format!(
                        "{test} ({kind:?}): NOT RUN: the SSH/Slurm lab is not up (`cargo xtask lab up`; `cargo xtask \
                         test` starts it)"
                    );
                    assert!(std::env::var("THESEUSTEST_REQUIRE_ALL").as_deref() != Ok("1"), "{msg}");
                    eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
                    return None;
                };
                let ssh_config = ctx.home().join("lab_ssh_config");
                std::fs::write(
                    &ssh_config,
                    format!(
                        "Host lab\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  \
                         IdentitiesOnly yes\n  UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n"
                    ),
                )
                .unwrap();
                // A dir of its own that the lab's user may write.
                let suffix = ctx.home().file_name().unwrap().to_string_lossy().into_owned();
                let base = format!("{shared}/it-{}-{suffix}", std::process::id());
                let hosts = if kind == Kind::Plain {
                    "hosts:\n  box: {type: plain, ssh: lab, cluster: lab, chips: {h100: 1}}\n".to_owned()
                } else {
                    "hosts:\n  box:\n    type: slurm\n    cluster: lab\n    ssh: lab\n    partitions: [gpu]\n    \
                     cpu_partitions: [cpu]\n    mem: 300M\n    time: \"10\"\ngres_mapping:\n  h100: h100\n"
                        .to_owned()
                };
                std::fs::write(
                    ctx.home().join(".theseus.yaml"),
                    format!(
                        "clusters:\n  lab:\n    root: {base}\n    work: {base}/work\n    log: {base}/logs\n    \
                         status: {base}/status\n{hosts}"
                    ),
                )
                .unwrap();
                Some(Target { ctx, kind, ssh_config: Some(ssh_config), host: Some("box"), world: None })
            }
        }
    }

    /// `theseus ARGS` with this target's HOME and ssh config.
    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = self.ctx.cmd();
        if let Some(config) = &self.ssh_config {
            cmd.env("THESEUS_SSH_CONFIG", config);
        }
        cmd.args(args);
        cmd
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// `theseus submit NAME EXPERIMENT --code CODE` on this target's host; panics unless it
    /// succeeds.
    pub(crate) fn submit(&self, name: &str, experiment: &str, code: &std::path::Path) -> Output {
        let mut args = vec!["submit", name, experiment, "--code", code.to_str().unwrap()];
        if let Some(host) = self.host {
            args.extend(["--host", host]);
        }
        let out = self.run(&args);
        assert!(out.status.success(), "{:?} submit: {}", self.kind, text(&out.stderr));
        out
    }

    /// The Python with JAX and Jupyter Lab that this target's jobs can run: the test venv for
    /// the local host and the simulator's pods (processes of this machine), the lab's venv
    /// (readable by the lab's user) for the SSH labs. Panics when it is not set up.
    pub(crate) fn python(&self) -> String {
        let var = match self.kind {
            Kind::Local | Kind::Volcano => "THESEUSTEST_PYTHON",
            Kind::Plain | Kind::Slurm => "THESEUSTEST_REMOTE_PYTHON",
        };
        std::env::var(var).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| {
            panic!("{var} is not set: `cargo xtask test` (or `cargo xtask setup-python` and `lab up`) sets it")
        })
    }

    /// The host this target's jobs go to (`--host`), if it names one.
    pub(crate) fn host(&self) -> Option<&'static str> {
        self.host
    }

    /// The simulator, on [`Kind::Volcano`].
    pub(crate) fn sim(&self) -> Option<&theseus_kube_sim::Sim> {
        self.world.as_ref().map(|w| &w.sim)
    }

    /// Waits until rank 0 of job `name` is running (Slurm and Volcano start a moment later
    /// than `submit` returns).
    pub(crate) fn wait_running(&self, name: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        loop {
            let out = self.run(&["status", name, "--output", "json"]);
            let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if status["status"]["state"] == "running" {
                return;
            }
            if matches!(status["status"]["state"].as_str(), Some("failed" | "completed" | "cancelled")) {
                let logs = self.run(&["logs", name]);
                panic!(
                    "{:?}: job `{name}` ended before it ran: {}\nits log:\n{}{}",
                    self.kind,
                    text(&out.stdout),
                    text(&logs.stdout),
                    text(&logs.stderr)
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}: job `{name}` never ran: {}{}",
                self.kind,
                text(&out.stdout),
                text(&out.stderr)
            );
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    }
}
