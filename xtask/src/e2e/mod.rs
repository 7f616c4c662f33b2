//! `cargo xtask e2e`: the real `theseus` binary through the five Volcano scenarios of
//! [`scenarios`], against the simulator (`--sim`, in CI) or a kind cluster with Volcano
//! ([`kind`], for machines with Docker; `--dry-run` prints every step and manifest).
//! `cargo xtask sim` keeps a simulator up for manual poking ([`sim::serve`]).
//!
//! Both targets get the same world: a fresh temp `HOME` with a kubeconfig and a
//! `~/.theseus.yaml` whose `e2e` host points at the cluster, and a local directory that is the
//! PVC (the sim mounts host paths as they are; kind gets it through an `extraMounts` hostPath),
//! so the scenarios can look at run dirs on it.

mod api;
mod forward;
mod kind;
pub(crate) mod kubectl;
mod passes;
mod proxy;
mod refusals;
mod scenarios;
mod shared;
mod sim;
mod tpu;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub(crate) use sim::{Rbac, serve as sim_command, start_world as start_sim_world};

/// Host of the dispatch config every scenario but the unpullable-helper one uses.
const HOST: &str = "e2e";
/// Same cluster, but its helper image cannot be pulled.
const BROKEN_HOST: &str = "e2e-broken-helper";
/// An image no registry has (`.invalid` never resolves), made unpullable in the sim as well.
/// A host whose queue does not exist (scenario 6).
const NO_QUEUE_HOST: &str = "e2e-no-queue";
/// A host whose queue scenario 7 creates and closes.
const CLOSED_QUEUE_HOST: &str = "e2e-closed-queue";
/// That queue.
const CLOSED_QUEUE: &str = "e2e-closed";
const UNPULLABLE_IMAGE: &str = "registry.invalid/theseus-e2e/no-such-helper:0";
/// Value of the secret variable jobs get; must never show up in any output.
const SECRET_VALUE: &str = "e2e-s3cr3t-value";

/// `cargo xtask e2e [--sim] [--dry-run] [--keep] [--only=N,..] [--require-kubectl]`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let flags = parse(args)?;
    if flags.sim {
        if flags.dry_run {
            bail!("--dry-run is for the real cluster; `cargo xtask e2e --sim` is harmless to run");
        }
        sim::e2e(root, &flags)
    } else {
        kind::e2e(root, &flags)
    }
}

fn parse(args: &[String]) -> Result<Flags> {
    let mut flags = Flags::default();
    for arg in args {
        match arg.as_str() {
            "--sim" => flags.sim = true,
            "--dry-run" => flags.dry_run = true,
            "--keep" => flags.keep = true,
            "--require-kubectl" => flags.require_kubectl = true,
            other if other.starts_with("--only=") => {
                for n in other["--only=".len()..].split(',') {
                    flags.only.push(n.parse().with_context(|| format!("bad scenario number `{n}` in {other}"))?);
                }
            }
            other => {
                bail!(
                    "unknown argument `{other}`\nusage: cargo xtask e2e [--sim] [--dry-run] [--keep] [--only=1,2] [--require-kubectl]"
                )
            }
        }
    }
    Ok(flags)
}

#[derive(Debug, Default)]
pub(crate) struct Flags {
    sim: bool,
    dry_run: bool,
    keep: bool,
    only: Vec<u32>,
    /// With `--sim`: the kubectl check fails instead of NOT RUN when kubectl is missing
    /// (`cargo xtask test` passes it).
    require_kubectl: bool,
}

/// What differs between the targets in the dispatch config.
pub(crate) struct Target {
    /// Namespace and queue of the jobs.
    pub(crate) namespace: String,
    pub(crate) queue: String,
    /// Image of the job pods.
    pub(crate) image: String,
    /// Name of the PVC and where pods mount it.
    pub(crate) pvc_name: String,
    pub(crate) mount_path: String,
    /// Extra `env` of the host (the sim's pods need the venv's python).
    pub(crate) host_env: Vec<(String, String)>,
}

impl Target {
    /// `~/.theseus.yaml`: the `e2e` host, and the same host with an unpullable helper image.
    pub(crate) fn dispatch_config(&self) -> String {
        let m = &self.mount_path;
        let mut host = format!(
            "    type: volcano\n    cluster: e2e\n    namespace: {}\n    queue: {}\n    image: {}\n\
             \x20   pvc_name: {}\n    pvc_mount_path: {m}\n    chips: {{h100: 4}}\n    cpu: \"1\"\n    memory: 1Gi\n\
             \x20   helper_resources: {{requests.cpu: 100m, requests.memory: 64Mi}}\n",
            self.namespace, self.queue, self.image, self.pvc_name
        );
        if !self.host_env.is_empty() {
            host.push_str("    env:\n");
            for (key, value) in &self.host_env {
                host.push_str(&format!("      {key}: {value}\n"));
            }
        }
        let queue = format!("    queue: {}\n", self.queue);
        let no_queue = host.replace(&queue, "    queue: e2e-no-such-queue\n");
        let closed = host.replace(&queue, &format!("    queue: {CLOSED_QUEUE}\n"));
        let team_a = host.replace(&queue, &format!("    queue: {}\n", shared::TEAM_A));
        let (key, value) = shared::NOWHERE_SELECTOR;
        format!(
            "# Written by `cargo xtask e2e`.\nclusters:\n  e2e:\n    root: {m}\n    work: {m}/work\n    log: {m}/logs\n\
             \x20   status: {m}/status\nhosts:\n  {HOST}:\n{host}  {BROKEN_HOST}:\n{host}    helper_image: {UNPULLABLE_IMAGE}\n\
             \x20 {NO_QUEUE_HOST}:\n{no_queue}  {CLOSED_QUEUE_HOST}:\n{closed}  {dev}:\n{host}    priority_class: e2e-dev\n\
             \x20 {team_a_host}:\n{team_a}  {nowhere}:\n{host}    node_selector: {{{key}: {value}}}\n",
            dev = shared::DEV_HOST,
            team_a_host = shared::TEAM_A_HOST,
            nowhere = shared::NOWHERE_HOST,
        )
    }
}

/// Everything a scenario needs.
pub(crate) struct World {
    /// The `theseus` binary.
    pub(crate) theseus: PathBuf,
    /// The image of job pods (also of the other team's jobs the harness creates).
    pub(crate) job_image: String,
    /// The queue of the `e2e` host.
    pub(crate) queue: String,
    /// The temp `HOME` (kubeconfig, dispatch config, ledger).
    pub(crate) home: PathBuf,
    /// The code dir shipped by every submit.
    pub(crate) code: PathBuf,
    /// The PVC as seen from this machine.
    pub(crate) pvc: PathBuf,
    pub(crate) api: api::Api,
    pub(crate) namespace: String,
    /// `--server` for kubectl, when the target is the simulator.
    pub(crate) kubectl_server: Option<String>,
    /// `--token` for kubectl, when the simulator runs with RBAC (an admin's).
    pub(crate) kubectl_token: Option<String>,
    /// `--certificate-authority` for kubectl: the simulator's CA.
    pub(crate) kubectl_ca: Option<PathBuf>,
    /// Extra environment of every `theseus` command (a pass's proxy variables).
    pub(crate) env: Vec<(String, String)>,
    /// The simulator's `--access-log` (every request it served), when the target is it.
    pub(crate) access_log: Option<PathBuf>,
}

impl World {
    /// A `theseus` command with a clean environment and the world's `HOME`.
    pub(crate) fn theseus_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.theseus);
        cmd.env_clear()
            .env("HOME", &self.home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .env("NO_COLOR", "1")
            .env("E2E_TOKEN", SECRET_VALUE)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.code)
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `theseus args...` and returns its output (fails only if it cannot be started).
    pub(crate) fn theseus(&self, args: &[&str]) -> Result<Output> {
        let out = self.theseus_cmd(args).output().with_context(|| format!("cannot run {}", self.theseus.display()))?;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if stdout.contains(SECRET_VALUE) || stderr.contains(SECRET_VALUE) {
            bail!("`theseus {}` printed the secret value", args.join(" "));
        }
        Ok(out)
    }

    /// Runs `theseus args...` and fails (quoting its output) unless it exits 0.
    pub(crate) fn theseus_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.theseus(args)?;
        if !out.status.success() {
            bail!("`theseus {}` failed ({}):\n{}{}", args.join(" "), out.status, text(&out.stdout), text(&out.stderr));
        }
        Ok(text(&out.stdout))
    }

    /// `kubectl` for the simulator: its URL and CA, and the admin's token when RBAC is on.
    pub(crate) fn kubectl_sim(&self, server: &str) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.args(["--kubeconfig", "/dev/null", "--server", server]);
        if let Some(ca) = &self.kubectl_ca {
            cmd.arg("--certificate-authority").arg(ca);
        }
        if let Some(token) = &self.kubectl_token {
            cmd.args(["--token", token]);
        }
        cmd
    }

    /// Writes the job files every scenario submits.
    pub(crate) fn write_code(dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        let files = [
            ("allgather.py", include_str!("../../../examples/jax-cpu/allgather.py")),
            ("hello.py", HELLO_PY),
            // No `distributed` key: the default (auto) initialises JAX on the job's import of jax.
            ("jax.yaml", "entrypoint: python allgather.py\nenv:\n  JAX_PLATFORMS: cpu\nconfig:\n  multiplier: 10\n"),
            ("hello.yaml", "entrypoint: python hello.py\n"),
            ("sleep.yaml", "entrypoint: python -c \"import time; time.sleep(600)\"\n"),
            ("train.py", include_str!("../../../examples/jax-train/train.py")),
            ("train.yaml", shared::TRAIN_YAML),
        ];
        for (name, body) in files {
            std::fs::write(dir.join(name), body)
                .with_context(|| format!("cannot write {}", dir.join(name).display()))?;
        }
        Ok(())
    }
}

const HELLO_PY: &str = "\
import os, time
print('hello from', os.environ['THESEUS_JOB_NAME'], 'run', os.environ['THESEUS_RUN_ID'], 'rank', os.environ['RANK'], flush=True)
time.sleep(1)
";

/// The text of a process output.
pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Polls `check` every `every` until it returns `Some`, or fails after `timeout` naming `what`.
pub(crate) fn wait_for<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    wait_seen(what, timeout, every, || Ok(check()?.ok_or_else(String::new)))
}

/// Polls `check` every `every` until it returns `Ok(value)`; `Err(seen)` means not yet, with
/// what it saw. After `timeout` (checked at least once) fails naming `what` and the last `seen`.
pub(crate) fn wait_seen<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<std::result::Result<T, String>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        let seen = match check()? {
            Ok(value) => return Ok(value),
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            if seen.is_empty() {
                bail!("timed out after {timeout:?} waiting for {what}");
            }
            bail!("timed out after {timeout:?} waiting for {what}; last seen: {seen}");
        }
        std::thread::sleep(every);
    }
}

/// Builds the `theseus` binary (and the simulator's, with `sim`) and returns the target dir's
/// `debug` directory (`release` with `release`).
pub(crate) fn build_binaries(root: &Path, with_sim: bool, release: bool) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root).args(["build", "--bins", "-p", "theseus-cli"]);
    if with_sim {
        cmd.args(["-p", "theseus-kube-sim", "-p", "theseus-tpu-sim"]);
    }
    if release {
        cmd.arg("--release");
    }
    eprintln!("e2e: building {}", if with_sim { "theseus and the simulators" } else { "theseus" });
    let status = cmd.status().context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    Ok(crate::target_dir(root).join(if release { "release" } else { "debug" }))
}

/// A fresh scratch dir under the target dir (kept after a failure for a look).
pub(crate) fn scratch_dir(root: &Path, kind: &str) -> Result<PathBuf> {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
    let dir = crate::target_dir(root).join(format!("xtask-e2e/{kind}-{stamp}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_times_out_says_what_it_saw_last() {
        let mut n = 0;
        let err = wait_seen("the helper pods to go", Duration::ZERO, Duration::ZERO, || {
            n += 1;
            Ok(Err::<(), _>(format!("pod theseus-ship-x Running, deleting (look {n})")))
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("waiting for the helper pods to go"), "{err}");
        assert!(err.contains("last seen: pod theseus-ship-x Running, deleting (look 1)"), "{err}");
        let mut calls = 0;
        let got = wait_seen("x", Duration::from_secs(3600), Duration::ZERO, || {
            calls += 1;
            Ok(if calls < 3 { Err("not yet".to_owned()) } else { Ok(calls) })
        })
        .unwrap();
        assert_eq!(got, 3);
    }

    #[test]
    fn flags_parse_require_kubectl() {
        assert!(parse(&["--sim".into(), "--require-kubectl".into()]).unwrap().require_kubectl);
        assert!(!parse(&["--sim".into()]).unwrap().require_kubectl);
        assert_eq!(parse(&["--only=2,5".into()]).unwrap().only, vec![2, 5]);
        assert!(parse(&["--bogus".into()]).is_err());
    }
}
