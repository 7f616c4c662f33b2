//! Job configs of the original theseus (`job:` instead of `entrypoint:`), run through the real
//! binary on the local host against a stand-in for the original's package written from its
//! documented contract (`tests/data/original-pkg`): registry, configuration, hardware, topology
//! with `--n_shards`, restore from `--restore` and from `latest`, and the status tree
//! (`metadata.json` with the original's fields, `output.log` beside it).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{TestContext, jax_python, text};

/// The stand-in package and its job configs, copied into a temp dir shipped as the code.
pub(crate) fn code() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/original-pkg");
    copy_tree(&src, dir.path());
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() != "__pycache__" {
                copy_tree(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `theseus submit NAME FILE ARGS --code DIR --follow` with the test Python.
fn submit(ctx: &TestContext, python: &str, code: &Path, name: &str, file: &str, args: &[&str]) -> (bool, i32, String) {
    let out = ctx
        .cmd()
        .env("THESEUS_PYTHON", python)
        .arg("submit")
        .arg(name)
        .arg(code.join(file))
        .args(args)
        .arg("--code")
        .arg(code)
        .arg("--follow")
        .output()
        .unwrap();
    let all = format!("{}\n{}", text(&out.stdout), text(&out.stderr));
    (out.status.success(), out.status.code().unwrap_or(-1), all)
}

/// The run dirs of `name` under the local host's status root, oldest first.
fn run_dirs(ctx: &TestContext, project: &str, name: &str) -> Vec<PathBuf> {
    let dir = ctx.home().join(".local/share/theseus/status").join(project).join("default").join(name);
    let mut runs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    runs.sort();
    runs
}

fn metadata(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("metadata.json")).unwrap()).unwrap()
}

fn line<'a>(all: &'a str, prefix: &str) -> &'a str {
    all.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no line {prefix:?} in:\n{all}"))
}

#[test]
fn a_job_config_of_the_original_runs_its_registered_job_with_the_originals_status_tree() {
    let Some(python) = jax_python("a_job_config_of_the_original_runs_its_registered_job") else { return };
    let ctx = TestContext::new();
    let code = code();
    let (ok, _, all) = submit(&ctx, &python, code.path(), "hello", "hello.yaml", &["training.lr=0.5"]);
    assert!(ok, "{all}");
    let hello = line(&all, "[toy] hello ");
    for wanted in [
        "key=toy/hello",
        "name=hello",
        "project=None",
        "group=None",
        "chip=cpu",
        "shards=1",
        "distributed=False",
        "lr=0.5",
        "batch=8",
        "wandb=True",
    ] {
        assert!(hello.contains(&format!(" {wanted} ")), "{wanted}: {hello}");
    }
    let runs = run_dirs(&ctx, "general", "hello");
    assert_eq!(runs.len(), 1);
    // The cluster's status dir is the root of theseus's run dirs, as the original's.
    assert!(
        hello.ends_with(&format!("status={}", ctx.home().join(".local/share/theseus/status").display())),
        "{hello}"
    );
    let meta = metadata(&runs[0]);
    assert_eq!(meta["job_key"], "toy/hello");
    let run_id = meta["run_id"].as_str().unwrap();
    assert_eq!(meta["run_key"], format!("general/default/hello/{run_id}"));
    assert_eq!((meta["name"].clone(), meta["project"].clone()), (Value::from("hello"), Value::from("general")));
    assert_eq!(meta["status"], "completed");
    assert_eq!(meta["hardware"]["total_chips"], 0);
    assert_eq!(meta["hardware"]["hosts"], serde_json::json!(["local"]));
    assert_eq!(meta["config"]["training"]["lr"], 0.5);
    assert!(meta["last_heartbeat"].is_string() && meta["start_time"].is_string(), "{meta}");
    let log = std::fs::read_to_string(runs[0].join("output.log")).unwrap();
    assert!(log.contains("[toy] hello key=toy/hello"), "{log}");
}

#[test]
fn flags_of_the_original_reach_the_job() {
    let Some(python) = jax_python("flags_of_the_original_reach_the_job") else { return };
    let ctx = TestContext::new();
    let code = code();
    // A job config without `job:` takes -j; --n_shards reaches Topology; the runtime overrides
    // of the original's bootstrap apply; --load imports a module of the shipped code first.
    let config = std::fs::read_to_string(code.path().join("hello.yaml")).unwrap().replace("job: toy/hello\n", "");
    std::fs::write(code.path().join("nokey.yaml"), config).unwrap();
    std::fs::write(code.path().join("plugin.py"), "print('[toy] plugin loaded', flush=True)\n").unwrap();
    let (ok, _, all) = submit(
        &ctx,
        &python,
        code.path(),
        "flags",
        "nokey.yaml",
        &[
            "-j",
            "toy/hello",
            "--n_shards",
            "2",
            "-p",
            "proj",
            "--load",
            "plugin.py",
            "--env",
            "THESEUS_DISPATCH_BATCH_SIZE=4",
            "--env",
            "THESEUS_DISPATCH_DISABLE_WANDB=1",
        ],
    );
    assert!(ok, "{all}");
    let hello = line(&all, "[toy] hello ");
    for wanted in ["key=toy/hello", "project=proj", "shards=2", "batch=4", "wandb=False"] {
        assert!(hello.contains(&format!(" {wanted} ")), "{wanted}: {hello}");
    }
    let plugin = all.find("[toy] plugin loaded").unwrap_or_else(|| panic!("{all}"));
    assert!(plugin < all.find("[toy] hello").unwrap(), "the module is imported before the job runs");
    let meta = metadata(&run_dirs(&ctx, "proj", "flags")[0]);
    assert_eq!(meta["config"]["request"]["n_shards"], 2);
    assert_eq!(meta["config"]["job"], "toy/hello");
}

#[test]
fn a_restorable_job_resumes_from_latest_and_restores_from_a_given_checkpoint() {
    let Some(python) = jax_python("a_restorable_job_resumes_from_latest") else { return };
    let ctx = TestContext::new();
    let code = code();
    let (ok, _, all) = submit(&ctx, &python, code.path(), "count", "count.yaml", &[]);
    assert!(ok, "{all}");
    assert!(all.contains("[toy] count done at 3 (started at 0)"), "{all}");
    let ckpt = ctx.home().join(".local/share/theseus/checkpoints/general/default/count");
    assert_eq!(std::fs::read_to_string(ckpt.join("latest")).unwrap(), "step_3");
    // Again under the same name: RestoreableJob.latest + from_checkpoint(resume=True).
    let (ok, _, all) = submit(&ctx, &python, code.path(), "count", "count.yaml", &["training.steps=5"]);
    assert!(ok, "{all}");
    assert!(all.contains("[toy] restored from general/default/count/step_3 (resume=True)"), "{all}");
    assert!(all.contains("[toy] count done at 5 (started at 3)"), "{all}");
    // --fresh ignores it, as theseus's own resume does.
    let (ok, _, all) = submit(&ctx, &python, code.path(), "count", "count.yaml", &["--fresh"]);
    assert!(ok, "{all}");
    assert!(all.contains("[toy] count done at 3 (started at 0)") && !all.contains("restored"), "{all}");
    // --restore under another name: from_checkpoint_path(<relative to the checkpoints dir>).
    let (ok, _, all) =
        submit(&ctx, &python, code.path(), "other", "count.yaml", &["--restore", "general/default/count/step_1"]);
    assert!(ok, "{all}");
    assert!(all.contains("[toy] restored from general/default/count/step_1 (resume=False)"), "{all}");
    assert!(all.contains("[toy] count done at 3 (started at 1)"), "{all}");
}

#[test]
fn an_unregistered_key_or_code_without_the_package_fails_with_one_clear_line() {
    let Some(python) = jax_python("an_unregistered_key_fails_with_one_clear_line") else { return };
    let ctx = TestContext::new();
    let code = code();
    let (ok, rc, all) = submit(&ctx, &python, code.path(), "nope", "hello.yaml", &["-j", "toy/nope"]);
    assert!(!ok && rc == 3, "{rc}: {all}");
    assert!(
        all.contains("[theseus] job config: job 'toy/nope' is not registered in the shipped code's theseus.registry.JOBS (registered: toy/count, toy/hello)"),
        "{all}"
    );
    let meta = metadata(&run_dirs(&ctx, "general", "nope")[0]);
    assert_eq!((meta["status"].clone(), meta["exit_code"].clone()), (Value::from("failed"), Value::from(3)));
    // The job's own repository must be the code shipped.
    let bare = tempfile::tempdir().unwrap();
    std::fs::copy(code.path().join("hello.yaml"), bare.path().join("hello.yaml")).unwrap();
    let (ok, rc, all) = submit(&ctx, &python, bare.path(), "bare", "hello.yaml", &[]);
    assert!(!ok && rc == 3, "{rc}: {all}");
    assert!(all.contains("[theseus] job config: the shipped code has no `theseus` package"), "{all}");
}

#[test]
fn plan_and_dry_run_show_the_job_key_and_bad_input_is_named() {
    let ctx = TestContext::new();
    let code = code();
    let hello = code.path().join("hello.yaml");
    let hello = hello.to_str().unwrap();
    let plan = ctx.run(&["plan", "hello", hello, "--n_shards", "2"]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    assert!(text(&plan.stdout).contains("job:     toy/hello (a job config of the original"), "{}", text(&plan.stdout));
    let dry = ctx.run(&["--output", "json", "submit", "hello", hello, "-j", "toy/count", "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let shown: Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(shown["job_key"], "toy/count");
    let files = shown["bootstrap"]["files"].as_array().unwrap();
    assert!(files.iter().any(|f| f["path"] == ".theseus/job.py"), "{shown}");
    let config = files.iter().find(|f| f["path"] == ".theseus/config.json").unwrap();
    let config: Value = serde_json::from_str(config["contents"].as_str().unwrap()).unwrap();
    assert_eq!(config["job"], "toy/count");
    let dry = ctx.run(&["submit", "hello", hello, "--dry-run"]);
    assert!(text(&dry.stdout).contains("# job config of the original: toy/hello"), "{}", text(&dry.stdout));
    // Errors name the file and the key or flag.
    let experiment = "examples/hello/experiment.yaml";
    for (args, wanted) in [
        (vec!["plan", "x", experiment, "-j", "toy/hello"], "examples/hello/experiment.yaml: -j/--job only apply"),
        (vec!["plan", "x", hello, "--load", "a-b"], "--load \"a-b\": expected a dotted module name"),
        (vec!["plan", "x", hello, "request.min_chips=-2"], "hello.yaml: request.min_chips: expected a whole number"),
        (vec!["plan", "x", hello, "--n-shards", "0"], "--n_shards: the shard count must be 1 or more"),
    ] {
        let out = ctx.run(&args);
        assert!(!out.status.success(), "{args:?}");
        assert!(text(&out.stderr).contains(wanted), "{args:?}: {}", text(&out.stderr));
    }
    let nokey = code.path().join("nokey.yaml");
    std::fs::write(&nokey, "training: {lr: 1}\n").unwrap();
    let out = ctx.run(&["plan", "x", nokey.to_str().unwrap()]);
    assert!(
        text(&out.stderr).contains("nokey.yaml: neither `entrypoint:` (an experiment) nor `job:`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn job_configs_run_as_stages_in_one_allocation() {
    let Some(python) = jax_python("job_configs_run_as_stages_in_one_allocation") else { return };
    let ctx = TestContext::new();
    let code = code();
    let count = code.path().join("count.yaml");
    let (ok, _, all) =
        submit(&ctx, &python, code.path(), "staged", "hello.yaml", &["-s", count.to_str().unwrap(), "--n_shards", "3"]);
    assert!(ok, "{all}");
    assert!(line(&all, "[toy] hello ").contains(" shards=3 "), "{all}");
    assert!(all.contains("[toy] count done at 3 (started at 0)"), "{all}");
    let run = &run_dirs(&ctx, "general", "staged")[0];
    let meta = metadata(run);
    assert_eq!(meta["job_key"], "toy/hello");
    assert_eq!(meta["status"], "completed");
    let log = std::fs::read_to_string(run.join("output.log")).unwrap();
    assert!(log.contains("[toy] hello ") && log.contains("[toy] count done at 3"), "{log}");
    // `--n_shards` reached the job config stage too.
    let plan =
        ctx.run(&["plan", "staged", code.path().join("hello.yaml").to_str().unwrap(), "-s", count.to_str().unwrap()]);
    assert!(text(&plan.stdout).contains("job toy/count"), "{}", text(&plan.stdout));
}

/// `theseus configure|jobs|run|checkpoints|restore` are the original package's own commands:
/// theseus runs its CLI (`theseus.cli`) in the project's Python with the arguments as given
/// (`--help` included); where the package cannot be imported, one line says so, exit 2.
#[test]
fn the_originals_local_commands_run_through_its_own_cli() {
    let ctx = TestContext::new();
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join("theseus")).unwrap();
    std::fs::write(project.path().join("theseus/__init__.py"), "").unwrap();
    std::fs::write(
        project.path().join("theseus/cli.py"),
        "import sys\ndef theseus():\n    print('original cli', sys.argv)\n    sys.exit(4)\n",
    )
    .unwrap();
    let out = ctx
        .cmd()
        .current_dir(project.path())
        .args(["configure", "gpt/train/pretrain", "run.yaml", "--help", "-n", "2"])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "the original's exit code: {stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("original cli ['theseus', 'configure', 'gpt/train/pretrain', 'run.yaml', '--help', '-n', '2']"),
        "{stdout}"
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let out = ctx.cmd().current_dir(elsewhere.path()).args(["jobs"]).output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`theseus jobs` is a command of the original theseus package"), "{stderr}");
}

/// As the original: an override reaches each job config that has its key (a data stage without
/// `training:` does not get one), and one that no job config of the submit has is an error
/// naming the key and the files (the original dropped it silently).
#[test]
fn overrides_reach_the_job_configs_that_have_the_key() {
    let ctx = TestContext::new();
    let code = code();
    let hello = code.path().join("hello.yaml");
    let data = code.path().join("data.yaml");
    std::fs::write(&data, "job: toy/count\nrequest: {min_chips: 0}\ndata: {shards: 2}\n").unwrap();
    let (hello, data) = (hello.to_str().unwrap(), data.to_str().unwrap());
    let dry = ctx.run(&[
        "--output",
        "json",
        "submit",
        "x",
        hello,
        "-s",
        data,
        "training.per_device_batch_size=4",
        "data.shards=5",
        "--dry-run",
    ]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let shown: Value = serde_json::from_slice(&dry.stdout).unwrap();
    let files = shown["bootstrap"]["files"].as_array().unwrap();
    let config = |path: &str| -> Value {
        let f = files.iter().find(|f| f["path"] == path).unwrap_or_else(|| panic!("{path}: {shown}"));
        serde_json::from_str(f["contents"].as_str().unwrap()).unwrap()
    };
    let (main, stage) = (config(".theseus/config.json"), config(".theseus/stage-2/config.json"));
    assert_eq!(main["training"]["per_device_batch_size"], 4);
    assert!(main.get("data").is_none(), "{main}");
    assert_eq!(stage["data"]["shards"], 5);
    assert!(stage.get("training").is_none(), "the data stage gets no training section: {stage}");
    let out = ctx.run(&["plan", "x", hello, "-s", data, "trainig.lr=1"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("override trainig.lr: no job config of this submit has that key"), "{stderr}");
    assert!(stderr.contains("data.yaml"), "{stderr}");
}
