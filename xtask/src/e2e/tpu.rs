//! The Cloud TPU scenarios of `cargo xtask e2e --sim`: the real `theseus` binary against
//! `theseus-tpu-sim` (Google's TPU API v2 over HTTPS with its own CA), whose workers are real:
//! one sshd per worker in its own network namespace, reached through the site's bastion
//! (a ProxyCommand in the user's ssh config), each with its own local disk and metadata server.
//! The cluster's `checkpoints` dir is the one path all workers share (a mounted bucket).
//!
//! 12. create → run → self-delete: a 2-worker JAX job on a VM theseus creates after `--yes`;
//!     `plan` shows what it will create first; the logs are merged, `worker-N` prefixed; worker 0
//!     deletes the VM when the job ends (the client is not following).
//! 13. reuse: a VM someone else made READY is used as it is (nothing to create, so no `--yes`)
//!     and is still there after the job.
//! 14. spot preemption in the middle of a JAX training: the VM is recreated, the training
//!     resumes from its latest checkpoint and ends with the checksum of an uninterrupted run.
//! 15. quota: one clear line, nothing created.
//! 16. no credentials: one line naming every place theseus looked.
//! 17. kill -9 of the client during the create: `gc` finds the VM and deletes it.

mod sim;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::{scratch_dir, text, wait_for, wait_seen};
use sim::TpuSim;

/// The zone every host uses, and the one whose quota scenario 15 sets to zero.
const ZONE: &str = "us-central2-b";
const QUOTA_ZONE: &str = "us-east1-d";
const PROJECT: &str = "e2e-project";
/// Hosts (the host name is the VM's node id, as in the original).
const HOST: &str = "e2e-tpu";
const SPOT_HOST: &str = "e2e-tpu-spot";
const REUSE_HOST: &str = "e2e-tpu-mine";
const QUOTA_HOST: &str = "e2e-tpu-quota";
const KILL_HOST: &str = "e2e-tpu-kill";
/// v4-16: 16 TensorCores, 8 chips, 2 workers of 4.
const ACCELERATOR: &str = "v4-16";
/// How long a job may take.
const JOB_TIMEOUT: Duration = Duration::from_secs(600);
const SHOW_TIMEOUT: Duration = Duration::from_secs(180);

/// Scenario number, title, body.
type Scenario = fn(&TpuWorld) -> Result<()>;
pub(crate) const SCENARIOS: [(u32, &str, Scenario); 6] = [
    (12, "TPU: create, run a 2-worker JAX job, worker 0 deletes the VM", create_run_delete),
    (13, "TPU: a READY VM is reused and kept", reuse_ready),
    (14, "TPU: spot preemption mid-training, recreate, resume, same checksum", preempted_resumes),
    (15, "TPU: quota exceeded, one line, nothing created", quota),
    (16, "TPU: no credentials, one line naming where theseus looked", no_credentials),
    (17, "TPU: client killed during the create, gc finds the VM", killed_during_create),
];

/// Whether scenario `n` is one of these.
pub(crate) fn is_tpu(n: u32) -> bool {
    SCENARIOS.iter().any(|(m, ..)| *m == n)
}

/// Everything a TPU scenario needs.
pub(crate) struct TpuWorld {
    theseus: PathBuf,
    home: PathBuf,
    code: PathBuf,
    /// The shared checkpoints dir (the bucket).
    bucket: PathBuf,
    sim: TpuSim,
    /// The user the workers let in.
    user: String,
    /// The environment of every `theseus` command (endpoint, CA, credentials).
    env: Vec<(String, String)>,
}

/// Runs the TPU scenarios (those of `only`, all when empty) in one simulator; `bin` holds
/// `theseus` and `theseus-tpu-sim`.
pub(crate) fn run(root: &Path, bin: &Path, only: &[u32], keep: bool) -> Result<()> {
    let wanted: Vec<_> = SCENARIOS.iter().filter(|(n, ..)| only.is_empty() || only.contains(n)).collect();
    if wanted.is_empty() {
        return Ok(());
    }
    // The simulator's workers need what the SSH/Slurm lab installs (sshd, socat), let in the users
    // a VM's `ssh-keys` metadata names that exist on this machine (the lab's user), and run the
    // lab's Python, which that user can run.
    let lab = crate::lab::up(root).context("the TPU scenarios need the SSH/Slurm lab")?;
    let var = |key: &str| {
        lab.vars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .with_context(|| format!("the lab names no {key}"))
    };
    let (python, user) = (PathBuf::from(var("THESEUSTEST_REMOTE_PYTHON")?), var("THESEUSTEST_SSH_USER")?);
    let known = Command::new("id").arg("-u").arg(&user).output().is_ok_and(|o| o.status.success());
    ensure!(
        known,
        "the TPU scenarios log in to the simulator's workers as `{user}`, who does not exist here: run `cargo xtask lab up` first (it makes the user)"
    );
    let scratch = scratch_dir(root, "tpu")?;
    // What the workers' user reads or writes (the simulator's root with their authorized keys,
    // the shared bucket) must be reachable by that user, which a checkout inside a private dir
    // (`mktemp -d` is 0700) is not: it lives under /var/tmp, as the lab does.
    let shared = PathBuf::from(format!("/var/tmp/theseus-tpu-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&shared)?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755))?;
    }
    let world = TpuWorld::start(bin, &scratch, &shared, &user, &python)?;
    eprintln!("e2e: TPU simulator at {}, scratch dir {}", world.sim.endpoint, scratch.display());
    let mut failed = Vec::new();
    for (n, title, scenario) in wanted {
        let t = std::time::Instant::now();
        let result = scenario(&world);
        match &result {
            Ok(()) => eprintln!("e2e: [{n}] PASS {title} ({:.1}s)", t.elapsed().as_secs_f64()),
            Err(e) => {
                eprintln!("e2e: [{n}] FAIL {title} ({:.1}s)\n{e:#}", t.elapsed().as_secs_f64());
                failed.push(*n);
            }
        }
    }
    let left = world.sim.created_nodes().unwrap_or_else(|e| vec![format!("cannot list nodes: {e:#}")]);
    if !left.is_empty() && failed.is_empty() {
        eprintln!("e2e: FAIL VMs theseus created are left: {}", left.join(", "));
        failed.push(0);
    }
    drop(world);
    if failed.is_empty() && !keep {
        let _ = std::fs::remove_dir_all(&scratch);
        let _ = std::fs::remove_dir_all(&shared);
    } else {
        eprintln!("e2e: kept {} (the simulator's root and the bucket)", shared.display());
        eprintln!("e2e: kept {} (HOME, the simulator's root and worker disks)", scratch.display());
    }
    if !failed.is_empty() {
        bail!("TPU scenarios failed: {failed:?}");
    }
    Ok(())
}

impl TpuWorld {
    fn start(bin: &Path, scratch: &Path, shared: &Path, user: &str, python: &Path) -> Result<TpuWorld> {
        let (home, code, bucket) = (scratch.join("home"), scratch.join("code"), shared.join("bucket"));
        for dir in [&home.join(".ssh"), &bucket] {
            std::fs::create_dir_all(dir)?;
        }
        // The bucket is a mount every worker's user writes to; the dirs above it must let them in.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&bucket, std::fs::Permissions::from_mode(0o1777))?;

        super::World::write_code(&code)?;
        let sim = TpuSim::start(&bin.join("theseus-tpu-sim"), &shared.join("sim"), &[ZONE, QUOTA_ZONE])?;
        // The user's key, where gcloud keeps the one it puts in a TPU VM's metadata.
        let key = home.join(".ssh/google_compute_engine");
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "e2e", "-f"])
            .arg(&key)
            .output()
            .context("cannot run ssh-keygen")?;
        ensure!(out.status.success(), "ssh-keygen failed: {}", text(&out.stderr));
        // The site's bastion: worker addresses are reached through the simulator's VPC.
        std::fs::write(
            home.join(".ssh/config"),
            format!(
                "# Written by `cargo xtask e2e`: the TPU VMs' private network is reached through a bastion.\n\
                 Host {}\n  ProxyCommand {}\n  IdentityFile {}\n  StrictHostKeyChecking accept-new\n  UserKnownHostsFile {}\n",
                sim.worker_pattern,
                sim.ssh_proxy,
                key.display(),
                home.join(".ssh/known_hosts").display()
            ),
        )?;
        let credentials = home.join("sa-key.json");
        std::fs::write(&credentials, sim.service_account_key()?)?;
        std::fs::write(home.join(".theseus.yaml"), dispatch_config(&bucket, python, user))?;
        let env = vec![
            ("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU".to_owned(), sim.endpoint.clone()),
            ("CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE".to_owned(), sim.ca.display().to_string()),
            ("GOOGLE_APPLICATION_CREDENTIALS".to_owned(), credentials.display().to_string()),
            // ssh reads the config of the passwd entry's home, not of `$HOME`.
            ("THESEUS_SSH_CONFIG".to_owned(), home.join(".ssh/config").display().to_string()),
            // Worker 0 deletes the VM this long after the job ended (default 30 s).
            ("THESEUS_TPU_SELF_DELETE_AFTER_SECONDS".to_owned(), "2".to_owned()),
            // Not a GCE VM: the metadata server does not answer.
            ("GCE_METADATA_HOST".to_owned(), "127.0.0.1:9".to_owned()),
        ];
        Ok(TpuWorld { theseus: bin.join("theseus"), home, code, bucket, sim, user: user.to_owned(), env })
    }

    /// A `theseus` command with a clean environment, the world's `HOME` and credentials.
    fn theseus_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.theseus);
        cmd.env_clear()
            .env("HOME", &self.home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.code)
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    fn theseus(&self, args: &[&str]) -> Result<Output> {
        let out = self.theseus_cmd(args).output().with_context(|| format!("cannot run {}", self.theseus.display()))?;
        let all = text(&out.stdout) + &text(&out.stderr);
        for secret in self.sim.secrets() {
            ensure!(!all.contains(&secret), "`theseus {}` printed a token or key", args.join(" "));
        }
        Ok(out)
    }

    fn theseus_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.theseus(args)?;
        if !out.status.success() {
            bail!("`theseus {}` failed ({}):\n{}{}", args.join(" "), out.status, text(&out.stdout), text(&out.stderr));
        }
        Ok(text(&out.stdout))
    }

    fn status(&self, job: &str) -> Result<Value> {
        let out = self.theseus_ok(&["status", job, "--output", "json"])?;
        serde_json::from_str(&out).with_context(|| format!("status --output json: {out}"))
    }

    fn wait_terminal(&self, job: &str, timeout: Duration) -> Result<Value> {
        wait_seen(&format!("{job} to end"), timeout, Duration::from_secs(2), || {
            let v = self.status(job)?;
            let state = v["status"]["state"].as_str().unwrap_or("").to_owned();
            Ok(if ["completed", "failed", "cancelled"].contains(&state.as_str()) { Ok(v) } else { Err(state) })
        })
    }

    fn logs(&self, job: &str) -> Result<String> {
        let out = self.theseus(&["logs", job])?;
        Ok(text(&out.stdout) + &text(&out.stderr))
    }
}

/// `~/.theseus.yaml`: a cluster whose root is each worker's own disk and whose checkpoints are
/// the shared bucket, and one host per scenario (the host name is the VM's name).
fn dispatch_config(bucket: &Path, python: &Path, user: &str) -> String {
    let host = |name: &str, zone: &str, extra: &str| {
        format!(
            "  {name}:\n    type: tpu\n    cluster: gcp\n    zone: {zone}\n    project: {PROJECT}\n    accelerator_type: {ACCELERATOR}\n\
             \x20   version: tpu-ubuntu2204-base\n    ssh_user: {user}\n{extra}    env:\n      JAX_PLATFORMS: cpu\n      THESEUS_PYTHON: {}\n",
            python.display()
        )
    };
    format!(
        "# Written by `cargo xtask e2e`.\nclusters:\n  gcp:\n    root: ~/theseus\n    work: ~/theseus/work\n    checkpoints: {}\n\
         hosts:\n{}{}{}{}{}",
        bucket.display(),
        host(HOST, ZONE, ""),
        host(SPOT_HOST, ZONE, "    spot: true\n"),
        host(REUSE_HOST, ZONE, ""),
        host(QUOTA_HOST, QUOTA_ZONE, ""),
        host(KILL_HOST, ZONE, ""),
    )
}

/// The first `error:` line of a failed command, checking it is the only one.
fn one_error_line(out: &Output) -> Result<String> {
    let stderr = text(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    ensure!(!out.status.success(), "expected a failure; stderr:\n{stderr}");
    ensure!(errors.len() == 1, "expected one `error:` line, got {}:\n{stderr}", errors.len());
    Ok(errors[0].to_owned())
}

fn create_run_delete(world: &TpuWorld) -> Result<()> {
    let plan = world.theseus_ok(&["plan", "e2e-tpu-jax", "jax.yaml", "--host", HOST, "--chip", "tpu-v4", "-n", "8"])?;
    ensure!(
        plan.contains(HOST) && plan.to_lowercase().contains("create"),
        "plan does not say it creates the VM:\n{plan}"
    );
    // Without --yes and without a terminal: refused, nothing created.
    let refused =
        world.theseus(&["submit", "e2e-tpu-jax", "jax.yaml", "--host", HOST, "--chip", "tpu-v4", "-n", "8"])?;
    let line = one_error_line(&refused)?;
    ensure!(line.contains("--yes"), "the refusal does not name --yes: {line}");
    ensure!(world.sim.node(ZONE, HOST)?.is_none(), "a VM was created without confirmation");
    world.theseus_ok(&["submit", "e2e-tpu-jax", "jax.yaml", "--host", HOST, "--chip", "tpu-v4", "-n", "8", "--yes"])?;
    let v = world.wait_terminal("e2e-tpu-jax", JOB_TIMEOUT)?;
    let logs = world.logs("e2e-tpu-jax")?;
    ensure!(v["status"]["state"] == "completed", "e2e-tpu-jax ended {}:\n{v:#}\nlogs:\n{logs}", v["status"]["state"]);
    for rank in 0..2 {
        let line = logs
            .lines()
            .find(|l| l.starts_with(&format!("[worker-{rank}] process_index={rank} ")))
            .with_context(|| format!("no line of worker {rank} in the logs:\n{logs}"))?;
        ensure!(line.contains("process_count=2") && line.contains("allgather=[1, 11]"), "worker {rank}: {line}");
        eprintln!("e2e:       {line}");
    }
    // Nobody follows the job: worker 0 deletes the VM theseus created.
    wait_for("worker 0 to delete the VM", SHOW_TIMEOUT, Duration::from_secs(1), || {
        Ok(world.sim.node(ZONE, HOST)?.is_none().then_some(()))
    })?;
    Ok(())
}

fn reuse_ready(world: &TpuWorld) -> Result<()> {
    let key = std::fs::read_to_string(world.home.join(".ssh/google_compute_engine.pub"))?;
    world.sim.create_node(ZONE, REUSE_HOST, ACCELERATOR, &format!("{}:{}", world.user, key.trim()))?;
    wait_for("the user's VM to be READY", SHOW_TIMEOUT, Duration::from_secs(1), || {
        Ok(world.sim.node(ZONE, REUSE_HOST)?.filter(|n| n["state"] == "READY").map(|_| ()))
    })?;
    let plan = world.theseus_ok(&[
        "plan",
        "e2e-tpu-reuse",
        "hello.yaml",
        "--host",
        REUSE_HOST,
        "--chip",
        "tpu-v4",
        "-n",
        "8",
        "--output",
        "json",
    ])?;
    let plan: Value = serde_json::from_str(&plan)?;
    ensure!(plan["creates"].as_array().is_some_and(Vec::is_empty), "a READY VM should need nothing created: {plan:#}");
    // Nothing to create: no --yes needed.
    world.theseus_ok(&[
        "submit",
        "e2e-tpu-reuse",
        "hello.yaml",
        "--host",
        REUSE_HOST,
        "--chip",
        "tpu-v4",
        "-n",
        "8",
    ])?;
    let v = world.wait_terminal("e2e-tpu-reuse", JOB_TIMEOUT)?;
    let logs = world.logs("e2e-tpu-reuse")?;
    ensure!(v["status"]["state"] == "completed", "ended {}:\n{v:#}\n{logs}", v["status"]["state"]);
    ensure!(logs.contains("[worker-1] hello from e2e-tpu-reuse"), "no line of worker 1:\n{logs}");
    std::thread::sleep(Duration::from_secs(3));
    ensure!(world.sim.node(ZONE, REUSE_HOST)?.is_some(), "theseus deleted a VM it did not create");
    world.sim.delete_node(ZONE, REUSE_HOST)?;
    Ok(())
}

/// The `final params sha256` line of a training's logs.
fn checksum(logs: &str) -> Result<String> {
    logs.lines()
        .find_map(|l| l.split_once("final params sha256 ").map(|(_, h)| h.trim().to_owned()))
        .with_context(|| format!("no `final params sha256` in the logs:\n{logs}"))
}

fn preempted_resumes(world: &TpuWorld) -> Result<()> {
    let args = |name: &'static str, host: &'static str| {
        vec!["submit", name, "train.yaml", "--host", host, "--chip", "tpu-v4", "-n", "8", "--yes", "--fresh"]
    };
    world.theseus_ok(&args("e2e-tpu-train-ref", HOST))?;
    let v = world.wait_terminal("e2e-tpu-train-ref", JOB_TIMEOUT)?;
    let reference_logs = world.logs("e2e-tpu-train-ref")?;
    ensure!(v["status"]["state"] == "completed", "reference run ended {}:\n{reference_logs}", v["status"]["state"]);
    let reference = checksum(&reference_logs)?;
    world.theseus_ok(&args("e2e-tpu-train", SPOT_HOST))?;
    // At the checkpoint past step 40 (the shared bucket's `latest`), Google takes the spot VM back.
    let latest = world.bucket.join("general/default/e2e-tpu-train/latest");
    let at = wait_for("a checkpoint past step 40", JOB_TIMEOUT, Duration::from_millis(200), || {
        let step =
            std::fs::read_to_string(&latest).ok().and_then(|l| l.trim().strip_prefix("step_")?.parse::<u64>().ok());
        Ok(step.filter(|s| *s >= 40))
    })?;
    world.sim.preempt(ZONE, SPOT_HOST)?;
    eprintln!("e2e:       preempted the spot VM at the checkpoint of step {at}");
    wait_seen("status to say the VM was preempted", SHOW_TIMEOUT, Duration::from_secs(1), || {
        let v = world.status("e2e-tpu-train")?;
        let message = v["status"]["message"].as_str().unwrap_or("").to_owned();
        Ok(if message.contains("preempt") { Ok(()) } else { Err(message) })
    })?;
    let v = world.wait_terminal("e2e-tpu-train", JOB_TIMEOUT)?;
    let logs = world.logs("e2e-tpu-train")?;
    ensure!(
        v["status"]["state"] == "completed",
        "the preempted training ended {}:\n{v:#}\n{logs}",
        v["status"]["state"]
    );
    let resumed = logs
        .lines()
        .find_map(|l| l.split_once("resumed from step ")?.1.split_whitespace().next()?.parse::<u64>().ok())
        .with_context(|| format!("the recreated VM's training did not say where it resumed:\n{logs}"))?;
    ensure!(resumed >= 40, "resumed from step {resumed}, before the checkpoint at step {at}");
    let after = checksum(&logs)?;
    ensure!(after == reference, "preempted and resumed: {after}; uninterrupted: {reference}");
    eprintln!("e2e:       resumed from step {resumed}; same final params; status: {}", v["status"]["message"]);
    Ok(())
}

fn quota(world: &TpuWorld) -> Result<()> {
    world.sim.set_quota(PROJECT, QUOTA_ZONE, 0)?;
    let out = world.theseus(&[
        "submit",
        "e2e-tpu-quota",
        "hello.yaml",
        "--host",
        QUOTA_HOST,
        "--chip",
        "tpu-v4",
        "-n",
        "8",
        "--yes",
    ])?;
    let line = one_error_line(&out)?;
    ensure!(line.to_lowercase().contains("quota"), "the error does not say quota: {line}");
    eprintln!("e2e:       {line}");
    ensure!(world.sim.node(QUOTA_ZONE, QUOTA_HOST)?.is_none(), "a VM is left after the quota error");
    ensure!(world.sim.queued_resources(QUOTA_ZONE)?.is_empty(), "a queued resource is left after the quota error");
    Ok(())
}

fn no_credentials(world: &TpuWorld) -> Result<()> {
    let mut cmd = world.theseus_cmd(&[
        "submit",
        "e2e-tpu-nocred",
        "hello.yaml",
        "--host",
        HOST,
        "--chip",
        "tpu-v4",
        "-n",
        "8",
        "--yes",
    ]);
    cmd.env_remove("GOOGLE_APPLICATION_CREDENTIALS").env("PATH", "/usr/bin:/bin");
    let out = cmd.output()?;
    let line = one_error_line(&out)?;
    for place in ["GOOGLE_APPLICATION_CREDENTIALS", "application_default_credentials.json", "gcloud", "metadata"] {
        ensure!(line.contains(place), "the error does not name {place}: {line}");
    }
    eprintln!("e2e:       {line}");
    ensure!(world.sim.node(ZONE, HOST)?.is_none(), "a VM was created without credentials");
    Ok(())
}

fn killed_during_create(world: &TpuWorld) -> Result<()> {
    let mut child = world
        .theseus_cmd(&[
            "submit",
            "e2e-tpu-kill",
            "hello.yaml",
            "--host",
            KILL_HOST,
            "--chip",
            "tpu-v4",
            "-n",
            "8",
            "--yes",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    wait_for("the VM to be CREATING", SHOW_TIMEOUT, Duration::from_millis(100), || {
        Ok(world.sim.node(ZONE, KILL_HOST)?.map(|_| ()))
    })?;
    child.kill()?;
    child.wait()?;
    let dry = world.theseus_ok(&["gc", "--host", KILL_HOST, "--dry-run", "--older-than", "0s", "--output", "json"])?;
    let listed: Value = serde_json::from_str(&dry).with_context(|| format!("gc --output json: {dry}"))?;
    let names_vm = listed.as_array().into_iter().flatten().flat_map(|h| h["deleted"].as_array().into_iter().flatten());
    let names_vm: Vec<&Value> = names_vm.filter(|item| item.as_str().is_some_and(|i| i.contains(KILL_HOST))).collect();
    ensure!(!names_vm.is_empty(), "gc --dry-run does not list the VM:\n{dry}");
    eprintln!("e2e:       gc --dry-run: {}", names_vm[0]);
    ensure!(world.sim.node(ZONE, KILL_HOST)?.is_some(), "gc --dry-run removed the VM");
    world.theseus_ok(&["gc", "--host", KILL_HOST, "--older-than", "0s"])?;
    wait_for("gc to delete the VM", SHOW_TIMEOUT, Duration::from_secs(1), || {
        Ok(world.sim.node(ZONE, KILL_HOST)?.is_none().then_some(()))
    })?;
    Ok(())
}
