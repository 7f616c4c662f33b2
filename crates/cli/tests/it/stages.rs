//! `-s/--stage FILE` on the local host through the real binary: stages run in order in one
//! run, each with its own config and log, stop at the first failure, show in `plan` and
//! `--dry-run`, and files that cannot be stages are refused naming the file.

use std::path::{Path, PathBuf};

use crate::{TestContext, text};

/// A stage script: prints what it saw, exits with its first argument.
const STAGE_PY: &str = r#"import json, os, sys
with open(os.environ["THESEUS_CONFIG"]) as f:
    config = json.load(f)
print(f"stage {os.environ['THESEUS_STAGE']} of {os.environ['THESEUS_NUM_STAGES']}: x={config['x']} "
      f"A={os.environ.get('A')} B={os.environ.get('B')} name={os.environ['THESEUS_JOB_NAME']}", flush=True)
sys.exit(int(sys.argv[1]))
"#;

/// A code dir with `stage.py` and experiments `<name>.yaml` (entrypoint `python stage.py
/// EXIT`, `config: {x: ...}`, extra YAML).
fn code(experiments: &[(&str, i32, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stage.py"), STAGE_PY).unwrap();
    for (i, (name, exit, extra)) in experiments.iter().enumerate() {
        let yaml = format!(
            "entrypoint: python stage.py {exit}\nrequest: {{chip: cpu, count: 1}}\nconfig: {{x: {}}}\n{extra}",
            i + 1
        );
        std::fs::write(dir.path().join(format!("{name}.yaml")), yaml).unwrap();
    }
    dir
}

fn path(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(format!("{name}.yaml")).to_str().unwrap().to_owned()
}

/// The run dir (`metadata.json`) of job `name` under the built-in local host's status dir.
fn run_dir(ctx: &TestContext, name: &str) -> PathBuf {
    let job = ctx.home().join(".local/share/theseus/status/general/default").join(name);
    let runs: Vec<PathBuf> = std::fs::read_dir(&job)
        .unwrap_or_else(|e| panic!("{}: {e}", job.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

fn metadata(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("metadata.json")).unwrap()).unwrap()
}

#[test]
fn two_experiments_run_in_order_in_one_run_and_show_in_plan_and_dry_run() {
    let ctx = TestContext::new();
    let dir = code(&[("a", 0, "env: {A: '1'}\n"), ("b", 0, "env: {A: '1', B: '2'}\n")]);
    let (a, b, code) = (path(&dir, "a"), path(&dir, "b"), dir.path().to_str().unwrap());
    let plan = ctx.run(&["plan", "two", &a, "-s", &b, "x=9"]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    let shown = text(&plan.stdout);
    assert!(shown.contains(&format!("stage 1: {a}: python stage.py 0\nstage 2: {b}: python stage.py 0\n")), "{shown}");
    let dry = ctx.run(&["--output", "json", "submit", "two", &a, "--stage", &b, "--code", code, "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let dry: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(dry["stages"][1], serde_json::json!({"stage": 2, "file": b, "runs": "python stage.py 0"}));
    let files: Vec<&str> =
        dry["bootstrap"]["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(files.contains(&".theseus/stage-2/config.json"), "{files:?}");

    let out = ctx.run(&["submit", "two", &a, "-s", &b, "--code", code, "--follow", "x=9"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let first = stdout.find("stage 1 of 2: x=9 A=1 B=2 name=two\n").unwrap_or_else(|| panic!("{stdout}"));
    let second = stdout.find("stage 2 of 2: x=9 A=1 B=2 name=two_stage2\n").unwrap_or_else(|| panic!("{stdout}"));
    assert!(first < second, "{stdout}");
    let run = run_dir(&ctx, "two");
    let meta = metadata(&run);
    assert_eq!(meta["status"], "completed");
    let statuses: Vec<&str> =
        meta["stages"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["completed", "completed"]);
    assert_eq!(meta["stages"][1]["name"], b.as_str());
    let log = std::fs::read_to_string(run.join("stage-2.log")).unwrap();
    assert!(log.contains("stage 2 of 2:") && !log.contains("stage 1 of 2:"), "{log}");
}

#[test]
fn a_failing_second_stage_ends_the_run_with_its_exit_code() {
    let ctx = TestContext::new();
    let dir = code(&[("a", 0, ""), ("b", 3, ""), ("c", 0, "")]);
    let (a, b, c) = (path(&dir, "a"), path(&dir, "b"), path(&dir, "c"));
    let out = ctx.run(&["submit", "fails", &a, "-s", &b, "-s", &c, "--code", dir.path().to_str().unwrap(), "--follow"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("stage 1 of 3:") && stdout.contains("stage 2 of 3:"), "{stdout}");
    assert!(!stdout.contains("stage 3 of 3:"), "{stdout}");
    assert!(stdout.contains("the stages after it do not run"), "{stdout}");
    let meta = metadata(&run_dir(&ctx, "fails"));
    assert_eq!(
        (meta["status"].as_str(), meta["exit_code"].as_i64(), meta["stage"].as_i64()),
        (Some("failed"), Some(3), Some(2))
    );
    let statuses: Vec<&str> =
        meta["stages"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["completed", "failed", "pending"]);
    // `status` says which stage ended the run.
    let status = ctx.run(&["status", "fails"]);
    let shown = text(&status.stdout);
    assert!(shown.contains(&format!("exited with code 3 in stage 2 of 3 ({b})")), "{shown}");
}

#[test]
fn files_that_cannot_be_stages_are_refused_naming_the_file() {
    let ctx = TestContext::new();
    let dir = code(&[
        ("a", 0, "env: {K: one}\n"),
        ("envk", 0, "env: {K: two}\n"),
        ("gpu", 0, ""),
        ("bad", 0, "nonsense: 1\n"),
    ]);
    std::fs::write(dir.path().join("gpu.yaml"), "entrypoint: python stage.py 0\nrequest: {chip: h100, count: 8}\n")
        .unwrap();
    let a = path(&dir, "a");
    let missing = dir.path().join("missing.yaml").to_str().unwrap().to_owned();
    for (stage, wanted) in [
        (path(&dir, "envk"), "env.K: set differently by".to_owned()),
        (path(&dir, "gpu"), "request: the stage asks for chip h100, count 8".to_owned()),
        (path(&dir, "bad"), "nonsense".to_owned()),
        (missing.clone(), missing.clone()),
    ] {
        let out = ctx.run(&["plan", "x", &a, "-s", &stage]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{stage}: {stderr}");
        assert!(stderr.contains(&wanted) && stderr.contains(&stage), "{stage}: {stderr}");
        assert!(!stderr.contains("one") || !stderr.contains("two"), "no env value is shown: {stderr}");
    }
    // A FIFO as a stage is refused like one as the main file, without blocking on it.
    let fifo = dir.path().join("fifo.yaml");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let mut plan = ctx.cmd();
    plan.args(["plan", "x", &a, "-s", fifo.to_str().unwrap()]);
    let out = crate::run_bounded(plan, std::time::Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a regular file (a FIFO)"), "{}", text(&out.stderr));
    // With --chip/-n the flags decide for every stage.
    let out = ctx.run(&["plan", "x", &a, "-s", &path(&dir, "gpu"), "--chip", "cpu", "-n", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn two_jax_stages_each_form_one_two_process_job() {
    let Some(python) = crate::jax_python("two_jax_stages_each_form_one_two_process_job") else { return };
    let ctx = TestContext::new();
    let tmp = tempfile::tempdir().unwrap();
    // Stage 1 as the example (`distributed: jax`), stage 2 without the key (`auto`, on import),
    // with another multiplier: both on the same coordinator, one after the other.
    let second = tmp.path().join("second.yaml");
    std::fs::write(
        &second,
        "entrypoint: python examples/jax-cpu/allgather.py\nrequest: {chip: cpu, count: 2}\n\
         env: {JAX_PLATFORMS: cpu}\nconfig: {multiplier: 100}\n",
    )
    .unwrap();
    let out = ctx
        .cmd()
        .env("THESEUS_PYTHON", &python)
        .args(["submit", "jax-stages", "examples/jax-cpu/experiment.yaml", "-s", second.to_str().unwrap(), "--follow"])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for (multiplier, gathered) in [(10, "allgather=[1, 11]"), (100, "allgather=[1, 101]")] {
        for rank in 0..2 {
            let found = stdout.lines().any(|l| {
                l.starts_with(&format!("[rank-{rank}] process_index={rank} "))
                    && l.contains("process_count=2")
                    && l.contains(gathered)
            });
            assert!(found, "rank {rank}, multiplier {multiplier}:\n{stdout}");
        }
    }
}
