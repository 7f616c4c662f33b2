//! The `theseus` binary against the real 2-node Slurm lab (`cargo xtask lab`): `plan` picks the
//! partition and node count from live `sinfo`, and a 2-node job runs to completion with its
//! output followed; the original's example `hpc` layout (`work` and `log` on each node's own
//! `/scratch`, a shared `share`) runs a 2-node job too, and `plan` shows the time limit. ssh reads
//! a config file of the test's own through `THESEUS_SSH_CONFIG`.

use std::path::Path;

use crate::{TestContext, text};

/// The lab's login node, or `None` (with a loud NOT RUN line; a failure under
/// `THESEUSTEST_REQUIRE_ALL=1`) when the lab is not up.
pub(crate) fn lab(test: &str) -> Option<(String, String, String, String, String)> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        get("THESEUSTEST_SLURM_SSH_PORT"),
        get("THESEUSTEST_SLURM_SSH_USER"),
        get("THESEUSTEST_SSH_KEY"),
        get("THESEUSTEST_SSH_KNOWN_HOSTS"),
        get("THESEUSTEST_SLURM_SHARED"),
    ) {
        (Some(port), Some(user), Some(key), Some(known), Some(shared)) => Some((port, user, key, known, shared)),
        _ => {
            let msg = format!(
                "{test}: NOT RUN: the Slurm lab is not up (`cargo xtask lab up`; `cargo xtask test` starts it)"
            );
            if std::env::var("THESEUSTEST_REQUIRE_ALL").is_ok_and(|v| v == "1") {
                panic!("{msg}");
            }
            eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
            None
        }
    }
}

pub(crate) fn write_configs(ctx: &TestContext, port: &str, user: &str, key: &str, known: &str, shared: &str) -> String {
    let ssh_config = ctx.home().join("lab_ssh_config");
    std::fs::write(
        &ssh_config,
        format!(
            "Host lab-login\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  IdentitiesOnly yes\n  \
             UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n"
        ),
    )
    .unwrap();
    let base = format!("{shared}/cli-{}-{}", std::process::id(), theseus_core_free_suffix(ctx.home()));
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        format!(
            "clusters:\n  lab:\n    root: {base}\n    work: {base}/work\n    log: {base}/logs\n    status: {base}/status\n\
             \x20 hpc:\n    root: {base}/juicefs\n    work: {local}/{name}/theseus\n    log: {local}/{name}/theseus/logs\n\
             \x20   share: {base}/dispatch\n\
             hosts:\n  slurm:\n    type: slurm\n    cluster: lab\n    ssh: lab-login\n    partitions: [gpu]\n\
             \x20   cpu_partitions: [cpu]\n    mem: 300M\n    time: \"10\"\n\
             \x20 hpc-login:\n    type: slurm\n    cluster: hpc\n    ssh: lab-login\n    partitions: [gpu, cpu]\n\
             \x20   cpu_partitions: [cpu]\n    mem: 300M\ngres_mapping:\n  h100: h100\n",
            local = std::env::var("THESEUSTEST_SLURM_NODE_LOCAL").unwrap_or_else(|_| "/scratch".into()),
            name = base.rsplit('/').next().unwrap_or("cli"),
        ),
    )
    .unwrap();
    ssh_config.display().to_string()
}

/// A suffix that differs between tests of one process.
fn theseus_core_free_suffix(home: &Path) -> String {
    home.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

#[test]
fn plan_reads_live_sinfo_and_a_two_node_job_runs_through_the_binary() {
    let Some((port, user, key, known, shared)) = lab("slurm plan and submit") else { return };
    let ctx = TestContext::new();
    let ssh_config = write_configs(&ctx, &port, &user, &key, &known, &shared);
    let code = tempfile::tempdir().unwrap();
    std::fs::write(
        code.path().join("job.py"),
        "import os\nprint('task', os.environ.get('SLURM_PROCID'), 'of', os.environ.get('SLURM_NTASKS'), flush=True)\n",
    )
    .unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python3 job.py\n").unwrap();
    let exp = code.path().join("exp.yaml").display().to_string();

    let plan = ctx
        .cmd()
        .env("THESEUS_SSH_CONFIG", &ssh_config)
        .args(["plan", "p", &exp, "--host", "slurm", "--chip", "h100", "-n", "8", "--output", "json"])
        .output()
        .unwrap();
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    let v: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(v["plan"]["partition"], "gpu", "{v}");
    assert_eq!((v["plan"]["nodes"].as_u64(), v["plan"]["chips_per_node"].as_u64()), (Some(2), Some(4)), "{v}");

    let out = ctx
        .cmd()
        .env("THESEUS_SSH_CONFIG", &ssh_config)
        .args(["submit", "pair", &exp, "--code", code.path().to_str().unwrap(), "--host", "slurm", "--chip", "h100"])
        .args(["-n", "8", "--follow"])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("task 0 of 2") && stdout.contains("task 1 of 2"), "{stdout}");
    assert!(stderr.contains("completed (exit code 0)"), "{stderr}");
    let status =
        ctx.cmd().env("THESEUS_SSH_CONFIG", &ssh_config).args(["status", "pair", "--output", "json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
    assert_eq!(v["status"]["state"], "completed", "{v} {}", text(&status.stderr));
    // In words: each rank's end and the node it ran on.
    let status = ctx.cmd().env("THESEUS_SSH_CONFIG", &ssh_config).args(["status", "pair"]).output().unwrap();
    let said = text(&status.stdout);
    for rank in 0..2 {
        let line = said.lines().find(|l| l.trim_start().starts_with(&format!("rank {rank}: ")));
        let line = line.unwrap_or_else(|| panic!("no line for rank {rank}:\n{said}"));
        assert!(line.contains("completed on node") && line.ends_with("(exit code 0)"), "{said}");
    }
}

/// Issue 23 points 10 and 11 through the binary: the original's example `hpc` cluster layout,
/// `work: /scratch/...` node-local (the lab's `/scratch` is a different dir on each node and on
/// the login node) with `log` under it and a shared `share`, runs a 2-node job; `plan` shows the
/// original's 14-day limit for a host without `time:`.
#[test]
fn the_originals_hpc_layout_with_a_node_local_work_runs_a_two_node_job() {
    let Some((port, user, key, known, shared)) = lab("slurm node-local work") else { return };
    let ctx = TestContext::new();
    let ssh_config = write_configs(&ctx, &port, &user, &key, &known, &shared);
    let code = tempfile::tempdir().unwrap();
    std::fs::write(
        code.path().join("job.py"),
        "import os\nprint('task', os.environ.get('SLURM_PROCID'), 'on', os.environ.get('SLURMD_NODENAME'), 'in', os.getcwd(), \
         flush=True)\n",
    )
    .unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python3 job.py\n").unwrap();
    let exp = code.path().join("exp.yaml").display().to_string();
    let ssh = |args: &[&str]| ctx.cmd().env("THESEUS_SSH_CONFIG", &ssh_config).args(args).output().unwrap();

    let plan = ssh(&["plan", "p", &exp, "--host", "hpc-login", "--chip", "h100", "-n", "8"]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    assert!(text(&plan.stdout).contains("time limit 14-0 (the default"), "{}", text(&plan.stdout));

    let out = ssh(&[
        "submit",
        "hpc-pair",
        &exp,
        "--code",
        code.path().to_str().unwrap(),
        "--host",
        "hpc-login",
        "--chip",
        "h100",
        "-n",
        "8",
        "--follow",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let local = std::env::var("THESEUSTEST_SLURM_NODE_LOCAL").unwrap_or_else(|_| "/scratch".into());
    for task in ["task 0 on node", "task 1 on node"] {
        let line = stdout.lines().find(|l| l.contains(task)).unwrap_or_else(|| panic!("{task} in {stdout}"));
        assert!(line.contains(&format!(" in {local}/")), "{line}");
    }
    assert!(stderr.contains("completed (exit code 0)"), "{stderr}");
}

#[test]
fn the_users_ssh_config_decides_host_keys_unless_the_theseus_config_says_so() {
    let Some((port, user, key, _known, shared)) = lab("ssh config decides host keys") else { return };
    let ctx = TestContext::new();
    // The user's config trusts the login node without a known-hosts entry, as many lab
    // configs do; `ssh lab-login` works with it.
    let ssh_config = ctx.home().join("lenient_ssh_config");
    std::fs::write(
        &ssh_config,
        format!(
            "Host lab-login\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  IdentitiesOnly yes\n  \
             StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        ),
    )
    .unwrap();
    let base = format!("{shared}/cli-keys-{}", std::process::id());
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        format!(
            "clusters:\n  lab: {{root: {base}, work: {base}/work}}\n\
             hosts:\n  strict:\n    type: slurm\n    cluster: lab\n    ssh: lab-login\n    known_hosts: strict\n    partitions: [gpu]\n\
             \x20 lenient:\n    type: slurm\n    cluster: lab\n    ssh: lab-login\n    partitions: [gpu]\n\
             gres_mapping:\n  h100: h100\n"
        ),
    )
    .unwrap();
    let out = ctx
        .cmd()
        .env("THESEUS_SSH_CONFIG", &ssh_config)
        .args(["plan", "p", "examples/hello/experiment.yaml", "--chip", "h100", "-n", "1"])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    let row = |host: &str| stdout.lines().find(|l| l.starts_with(&format!("{host} "))).unwrap_or_default().to_owned();
    assert!(row("lenient").contains("chosen"), "the user's config lets it connect:\n{stdout}");
    let strict = row("strict");
    assert!(strict.contains("passed") && strict.contains("host key verification failed"), "{stdout}");
    assert!(strict.contains("known_hosts: accept-new"), "the fix is named: {stdout}");
    assert!(!stdout.contains("unknown: strict"), "a host key refusal is not `unknown`:\n{stdout}");
}

/// Issue 23 point 12: `submit --follow` of a job Slurm can never start (3 nodes on a 2-node
/// partition: it pends with `PartitionConfig` or `PartitionNodeLimit` for ever; `--no-check` skips the plan's sinfo
/// look that would refuse it) ends at once with Slurm's reason, the job cancelled.
#[test]
fn follow_gives_up_at_once_on_a_slurm_job_that_can_never_start() {
    let Some((port, user, key, known, shared)) = lab("slurm job that can never start") else { return };
    let ctx = TestContext::new();
    let ssh_config = write_configs(&ctx, &port, &user, &key, &known, &shared);
    let config = ctx.home().join(".theseus.yaml");
    let with_gpus =
        std::fs::read_to_string(&config).unwrap().replace("    mem: 300M\n", "    mem: 300M\n    gpus_per_node: 4\n");
    std::fs::write(&config, with_gpus).unwrap();
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python3 -c pass\n").unwrap();
    let exp = code.path().join("exp.yaml").display().to_string();
    let out = ctx
        .cmd()
        .env("THESEUS_SSH_CONFIG", &ssh_config)
        .args(["submit", "toobig", &exp, "--code", code.path().to_str().unwrap(), "--host", "slurm", "--chip", "h100"])
        .args(["-n", "12", "--no-check", "--follow"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // Slurm 22.05 says PartitionConfig here; others say PartitionNodeLimit (judged with sinfo).
    assert!(stderr.contains("can never start: Slurm says Partition"), "{stderr}");
    let status = ctx.cmd().env("THESEUS_SSH_CONFIG", &ssh_config).args(["status", "toobig"]).output().unwrap();
    assert!(text(&status.stdout).contains("cancelled"), "{}", text(&status.stdout));
}
