//! The batch-size search (issue 28) through the real binary on the local host: the plan says
//! it, the probes run, `status` shows them and `metadata.json` records them; a job that cannot
//! search is refused before it starts.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::{TestContext, text};

/// Runs out of memory (the original's marker) above 40, trains otherwise.
const JOB: &str = r#"
import os, sys
size = int(os.environ["THESEUS_DISPATCH_BATCH_SIZE"])
if size > 40:
    print("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: out of memory", file=sys.stderr)
    sys.exit(1)
print("trained at", size, "wandb off" if os.environ.get("THESEUS_DISPATCH_DISABLE_WANDB") else "wandb on")
"#;

const EXPERIMENT: &str = "entrypoint: python job.py
batch_search: true
request: {chip: cpu}
env:
  THESEUS_DISPATCH_BATCH_CANDIDATES: 64,32,16
  THESEUS_DISPATCH_PROBE_COOLDOWN_SECONDS: '0'
";

fn code() -> tempfile::TempDir {
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("job.py"), JOB).unwrap();
    std::fs::write(code.path().join("exp.yaml"), EXPERIMENT).unwrap();
    code
}

/// `theseus COMMAND search exp.yaml EXTRA...` in the code dir.
fn run(ctx: &TestContext, command: &str, code: &Path, extra: &[&str]) -> Output {
    ctx.cmd().current_dir(code).args([command, "search", "exp.yaml"]).args(extra).output().unwrap()
}

/// The one run dir of job `search` under the local host's status dir.
fn run_dir(ctx: &TestContext) -> PathBuf {
    let runs = ctx.home().join(".local/share/theseus/status/general/default/search");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.pop().unwrap()
}

#[test]
fn the_search_runs_on_the_local_host_and_status_and_metadata_show_its_probes() {
    let ctx = TestContext::new();
    let code = code();
    let plan = run(&ctx, "plan", code.path(), &[]);
    let said = format!("{}{}", text(&plan.stdout), text(&plan.stderr));
    assert!(plan.status.success(), "{said}");
    assert!(said.contains("batch-size search: probes at 64 32 16 (largest first)"), "{said}");

    let out = run(&ctx, "submit", code.path(), &["--follow"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("[theseus] batch search: chose batch size 40"), "{stdout}");
    assert!(stdout.contains("trained at 40 wandb on"), "{stdout}");

    let status = ctx.run(&["status", "search"]);
    let shown = text(&status.stdout);
    assert!(status.status.success(), "{shown}{}", text(&status.stderr));
    let line = shown.lines().find(|l| l.contains("batch search:")).unwrap_or_else(|| panic!("{shown}"));
    assert!(line.starts_with("  batch search: 64 oom ("), "{line}");
    assert!(line.contains("32 completed ("), "{line}");
    assert!(line.ends_with("-> 40 (the run exited 0)"), "{line}");
    let json = ctx.run(&["--output", "json", "status", "search"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["batch_search"]["chosen"], 40, "{json}");

    let metadata = std::fs::read_to_string(run_dir(&ctx).join("metadata.json")).unwrap();
    let metadata: serde_json::Value = serde_json::from_str(&metadata).unwrap();
    assert_eq!(metadata["status"], "completed");
    assert_eq!(metadata["batch_search"]["chosen"], 40, "{metadata}");
    let sizes: Vec<u64> =
        metadata["batch_search"]["probes"].as_array().unwrap().iter().map(|p| p["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [64, 32, 48, 40, 44]);
}

#[test]
fn a_size_in_the_environment_turns_the_search_off_and_several_processes_are_refused() {
    let ctx = TestContext::new();
    let code = code();
    let plan = run(&ctx, "plan", code.path(), &["--env", "THESEUS_DISPATCH_BATCH_SIZE=8"]);
    let said = format!("{}{}", text(&plan.stdout), text(&plan.stderr));
    assert!(plan.status.success(), "{said}");
    assert!(!said.contains("batch-size search"), "{said}");

    let out = run(&ctx, "submit", code.path(), &["--chip", "cpu", "-n", "2"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("batch_search: true asks for a batch-size search, which runs in one process"), "{stderr}");
    assert!(stderr.contains("--env THESEUS_DISPATCH_BATCH_SIZE=32"), "{stderr}");
    assert!(!ctx.home().join(".local/share/theseus/status").exists(), "nothing started");
}

/// On the Slurm lab: the search runs in the batch step, and `status` reads its probes from the
/// run dir on the cluster over SSH.
#[test]
fn the_search_runs_on_slurm_and_status_reads_its_probes_over_ssh() {
    let Some((port, user, key, known, shared)) = crate::slurm::lab("batch search on slurm") else { return };
    let ctx = TestContext::new();
    let ssh_config = crate::slurm::write_configs(&ctx, &port, &user, &key, &known, &shared);
    let code = code();
    let out = ctx
        .cmd()
        .current_dir(code.path())
        .env("THESEUS_SSH_CONFIG", &ssh_config)
        .args(["submit", "search", "exp.yaml", "--host", "slurm", "--follow"])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("trained at 40 wandb on"), "{stdout}");
    let status = ctx.cmd().env("THESEUS_SSH_CONFIG", &ssh_config).args(["status", "search"]).output().unwrap();
    let shown = text(&status.stdout);
    assert!(status.status.success(), "{shown}{}", text(&status.stderr));
    assert!(shown.contains("\n  batch search: 64 oom ("), "{shown}");
    assert!(shown.contains("-> 40 (the run exited 0)"), "{shown}");
}

/// A job config of the original whose `training.per_device_batch_size` is -1 (here by an
/// override): the probes run its registered job with the size and W&B off, then the real run
/// with the chosen size and W&B as configured, through the runner of job configs.
#[test]
fn a_job_config_asking_with_minus_one_runs_its_job_with_the_size_found() {
    let Some(python) = crate::jax_python("batch search of a job config") else { return };
    let ctx = TestContext::new();
    let code = crate::original::code();
    let out = ctx
        .cmd()
        .env("THESEUS_PYTHON", &python)
        .arg("submit")
        .arg("hi")
        .arg(code.path().join("hello.yaml"))
        .args(["training.per_device_batch_size=-1", "--env", "THESEUS_DISPATCH_BATCH_CANDIDATES=16,8"])
        .args(["--env", "THESEUS_DISPATCH_PROBE_COOLDOWN_SECONDS=0", "--code"])
        .arg(code.path())
        .arg("--follow")
        .output()
        .unwrap();
    let all = format!("{}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{all}");
    assert!(all.contains("batch-size search: probes at 16 8 (largest first)"), "{all}");
    // Nothing ran out of memory: the first candidate fits, and the job runs again in full.
    assert!(all.contains("batch=16 wandb=False"), "the probe: {all}");
    assert!(all.contains("[theseus] batch search: chose batch size 16"), "{all}");
    assert!(all.contains("batch=16 wandb=True"), "the real run: {all}");
    let status = ctx.cmd().args(["status", "hi"]).output().unwrap();
    let shown = text(&status.stdout);
    assert!(
        shown.contains("\n  batch search: 16 completed (") && shown.contains("-> 16 (the run exited 0)"),
        "{shown}"
    );
}
