//! The bundled example, the job commands, config errors and dry runs through the binary.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{TestContext, text};

#[test]
fn help_lists_every_command() {
    let ctx = TestContext::new();
    let out = ctx.run(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for cmd in ["submit", "plan", "status", "logs", "cancel", "list", "config", "chips"] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(cmd)), "`{cmd}` missing from:\n{help}");
    }
}

#[test]
fn the_bundled_example_runs_to_completion_without_any_config() {
    let ctx = TestContext::new();
    let out = ctx.run(&["submit", "hello", "examples/hello/experiment.yaml", "--follow"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("hello from theseus (run "), "{stdout}");
    assert!(stdout.contains("process 0 of 1, color=blue"), "{stdout}");
    assert!(stdout.contains("step 2: loss="), "{stdout}");
    assert!(stderr.contains("chose local"), "the choice is explained: {stderr}");
    assert!(stderr.contains("completed (exit code 0)"), "{stderr}");

    let list = text(&ctx.run(&["list"]).stdout);
    assert!(list.lines().any(|l| l.contains("hello") && l.contains("completed")), "{list}");
    let status = ctx.run(&["status", "hello", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["status"]["state"], "completed");
    assert_eq!(v["status"]["exit_code"], 0);
    let logs = text(&ctx.run(&["logs", "hello"]).stdout);
    assert!(logs.contains("done"), "{logs}");
}

#[test]
fn overrides_reach_the_job_config() {
    let ctx = TestContext::new();
    let out = ctx.run(&["submit", "hello", "examples/hello/experiment.yaml", "steps=5", "--follow"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("step 4: loss="));
    let bad = ctx.run(&["submit", "hello", "examples/hello/experiment.yaml", "steps"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("steps"), "{}", text(&bad.stderr));
}

#[test]
fn a_failing_job_reports_its_exit_code() {
    let ctx = TestContext::new();
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("fail.py"), "import sys\nprint('about to fail')\nsys.exit(3)\n").unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python fail.py\nrequest: {chip: cpu}\n").unwrap();
    let exp = code.path().join("exp.yaml");
    let out = ctx
        .cmd()
        .args(["submit", "failing", exp.to_str().unwrap(), "--code", code.path().to_str().unwrap(), "--follow"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("about to fail"));
    assert!(text(&out.stderr).contains("failed (exit code 3)"), "{}", text(&out.stderr));
}

#[test]
fn cancel_stops_a_running_job() {
    let ctx = TestContext::new();
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("wait.py"), "import time\nprint('waiting', flush=True)\ntime.sleep(600)\n")
        .unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python wait.py\nrequest: {chip: cpu, count: 2}\n")
        .unwrap();
    let exp = code.path().join("exp.yaml");
    let out = ctx
        .cmd()
        .args(["submit", "sleepy", exp.to_str().unwrap(), "--code", code.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run_id = text(&out.stdout).trim().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = text(&ctx.run(&["logs", &run_id]).stdout);
        if logs.matches("waiting").count() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "both ranks never started: {logs}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let cancel = ctx.run(&["cancel", "sleepy"]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    assert!(text(&cancel.stdout).contains("cancelled"), "{}", text(&cancel.stdout));
    assert_eq!(processes_of(&run_id), 0, "no process of the job is left");
    let status = text(&ctx.run(&["status", &run_id]).stdout);
    assert!(status.contains("cancelled"), "{status}");
}

/// Processes whose environment carries the run's marker.
fn processes_of(run_id: &str) -> usize {
    let needle = format!("THESEUS_LOCAL_RUN={run_id}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.chars().all(|c| c.is_ascii_digit())))
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .map(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
                .unwrap_or(false)
        })
        .count()
}

#[test]
fn dry_run_touches_nothing_and_redacts_secrets() {
    let ctx = TestContext::new();
    let out = ctx
        .cmd()
        .env("MY_TOKEN", "tok-123-secret")
        .args([
            "submit",
            "hello",
            "examples/hello/experiment.yaml",
            "--dry-run",
            "--secret-env",
            "MY_TOKEN",
            "--env",
            "PLAIN=visible",
        ])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("would ship"), "{stdout}");
    assert!(stdout.contains("set -Eeuo pipefail"), "the bootstrap is printed: {stdout}");
    assert!(stdout.contains("PLAIN=visible"));
    assert!(stdout.contains("MY_TOKEN=<redacted>"));
    assert!(!stdout.contains("tok-123-secret") && !text(&out.stderr).contains("tok-123-secret"));
    assert!(!ctx.home().join("state").exists(), "no ledger was created");
    assert!(!ctx.home().join(".local/share/theseus").exists(), "nothing was shipped");
}

#[test]
fn config_show_and_check_work_without_a_file() {
    let ctx = TestContext::new();
    let check = ctx.run(&["config", "check"]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    let show = ctx.run(&["config", "show", "--output", "json"]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["config"]["hosts"]["local"]["type"], "local");
    let sources = v["sources"].as_array().unwrap();
    assert!(sources.iter().any(|s| s["source"] == "built-in defaults"), "{sources:?}");
}

#[test]
fn config_errors_name_the_file_and_key() {
    let ctx = TestContext::new();
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "clusters:\n  c: {root: /r, work: /w}\nhosts:\n  gpu-box:\n    ssh: box\n    cluster: c\n    chips: {h10: 8}\n",
    )
    .unwrap();
    let out = ctx.run(&["config", "check"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(r#"~/.theseus.yaml: hosts.gpu-box.chips.h10: unknown chip "h10" (did you mean "h100"?)"#),
        "{stderr}"
    );
}

#[test]
fn plan_explains_the_choice() {
    let ctx = TestContext::new();
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "clusters:\n  c: {root: /r, work: /w}\nhosts:\n  box:\n    type: plain\n    ssh: box\n    cluster: c\n    chips: {h100: 8}\n",
    )
    .unwrap();
    let out = ctx.run(&["plan", "p", "examples/hello/experiment.yaml", "--chip", "cpu", "-n", "2"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("box") && stdout.contains("plain hosts run one process"), "{stdout}");
    assert!(stdout.contains("chosen:  local"), "{stdout}");
    let gpu = ctx.run(&["plan", "p", "examples/hello/experiment.yaml", "--chip", "h100", "-n", "4"]);
    assert_eq!(gpu.status.code(), Some(2), "the plain host `box` cannot be reached: {}", text(&gpu.stdout));
    assert!(text(&gpu.stderr).contains("cannot satisfy 4 x h100"), "{}", text(&gpu.stderr));
}

/// A `priority` entry naming a host that is gone is skipped as the original skipped it: every
/// command runs, with one warning line naming the entry and the closest host.
#[test]
fn a_priority_entry_naming_a_gone_host_is_a_warning_and_every_command_runs() {
    let ctx = TestContext::new();
    std::fs::write(ctx.home().join(".theseus.yaml"), "priority: [locl, local]\n").unwrap();
    let warning = r#"theseus: warning: ~/.theseus.yaml: priority[0]: unknown host "locl" (did you mean "local"?); the entry is skipped"#;
    for args in [
        &["config", "check"][..],
        &["plan", "p", "examples/hello/experiment.yaml", "--chip", "cpu"],
        &["du"],
        &["gc", "--dry-run"],
    ] {
        let out = ctx.run(args);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().filter(|l| l.contains("priority")).collect::<Vec<_>>(), [warning], "{args:?}");
    }
    let plan = text(&ctx.run(&["plan", "p", "examples/hello/experiment.yaml", "--chip", "cpu"]).stdout);
    assert!(plan.contains("chosen:  local"), "{plan}");
}

/// Submitted from a subdirectory of a repository, the whole repository ships and the job starts
/// in that subdirectory, as the original's did (it shipped only the subtree and ran at its
/// root): `python train.py` written for `repo/exp/` runs. `--env THESEUS_CODE_SUBDIR=` starts it
/// at the top.
#[test]
fn a_job_submitted_from_a_subdirectory_starts_there() {
    let ctx = TestContext::new();
    let repo = tempfile::tempdir().unwrap();
    let exp = repo.path().join("exp");
    std::fs::create_dir_all(&exp).unwrap();
    std::fs::write(repo.path().join("shared.py"), "WHERE = 'top'\n").unwrap();
    let train = "import os, sys\nsys.path.insert(0, os.environ['THESEUS_WORK_DIR'])\nimport shared\n\
                 print('cwd', os.path.relpath(os.getcwd(), os.environ['THESEUS_WORK_DIR']), shared.WHERE)\n";
    std::fs::write(exp.join("train.py"), train).unwrap();
    std::fs::write(exp.join("experiment.yaml"), "entrypoint: python3 train.py\nrequest: {chip: cpu}\n").unwrap();
    let git = |args: &[&str]| {
        let ok = Command::new("git").arg("-C").arg(repo.path()).args(args).output().unwrap().status.success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]);
    let out = ctx.cmd().current_dir(&exp).args(["submit", "sub", "experiment.yaml", "--follow"]).output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("cwd exp top"), "{stdout}");
    assert!(stderr.contains("the job starts in `exp/` of the shipped repository"), "{stderr}");
    assert!(stdout.contains("[theseus] in exp/ of the shipped code (where submit ran)"), "{stdout}");

    std::fs::write(exp.join("top.yaml"), "entrypoint: python3 exp/train.py\nrequest: {chip: cpu}\n").unwrap();
    let top = ctx
        .cmd()
        .current_dir(&exp)
        .args(["submit", "top", "top.yaml", "--env", "THESEUS_CODE_SUBDIR=", "--follow"])
        .output()
        .unwrap();
    assert!(top.status.success(), "{}", text(&top.stderr));
    assert!(text(&top.stdout).contains("cwd . top"), "{}", text(&top.stdout));
}

#[test]
fn a_gpu_job_on_a_machine_without_gpus_ends_with_a_hint_to_use_the_cpu() {
    let ctx = TestContext::new();
    let code = tempfile::tempdir().unwrap();
    // No `request`: one GPU of any kind, which this machine (the built-in local host) lacks.
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python3 -c 'print(1)'\n").unwrap();
    let exp = code.path().join("exp.yaml").display().to_string();
    let out = ctx.run(&["plan", "p", &exp]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let error = lines.iter().position(|l| l.starts_with("error: cannot satisfy 1 x any-gpu")).expect(&stderr);
    assert_eq!(
        lines[error + 1..].last().copied(),
        Some("hint: this machine has no GPUs: add `--chip cpu` or `request: {chip: cpu}` to run on its CPUs"),
        "{stderr}"
    );
}

#[test]
fn a_tpu_request_without_a_tpu_host_is_refused_by_the_solver_with_a_hint_and_no_gpu_host_is_probed() {
    let ctx = TestContext::new();
    // `box` cannot be reached: probed, it would be "unknown" and named in a hint.
    let config = "clusters:\n  c: {root: /r, work: /w}\nhosts:\n  laptop: {type: local, chips: {h100: 8}}\n  \
                  box: {type: plain, ssh: box.invalid, cluster: c, chips: {h100: 8}}\n";
    std::fs::write(ctx.home().join(".theseus.yaml"), config).unwrap();
    let out = ctx.run(&["plan", "p", "examples/hello/experiment.yaml", "--chip", "v4", "-n", "8"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error: cannot satisfy 8 x tpu-v4: no host can serve 8 x tpu-v4"), "{stderr}");
    assert!(stderr.contains("tpu-v4 is not a GPU; this machine runs GPU and CPU jobs only"), "{stderr}");
    assert!(
        stderr.contains("hint: no host offers tpu-v4: add a host that has tpu-v4 chips to ~/.theseus.yaml"),
        "{stderr}"
    );
    assert!(!stderr.contains("not supported"), "{stderr}");
    assert!(stderr.contains("tpu-v4 is not a GPU; a plain host runs GPU and CPU jobs only"), "{stderr}");
    assert!(!stderr.contains("did not answer") && !stderr.contains("unknown: box"), "box was probed: {stderr}");
}

#[test]
fn chip_cpu_without_n_is_one_process_whatever_gpu_count_the_experiment_asks_for() {
    let ctx = TestContext::new();
    let code = tempfile::tempdir().unwrap();
    std::fs::write(
        code.path().join("exp.yaml"),
        "entrypoint: python3 -c 'print(1)'\nrequest: {chip: h100, count: 8}\n",
    )
    .unwrap();
    let exp = code.path().join("exp.yaml").display().to_string();
    let plan = |extra: &[&str]| {
        let mut args = vec!["plan", "p", exp.as_str(), "--oversubscribe", "--output", "json"];
        args.extend_from_slice(extra);
        let out = ctx.run(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["plan"]["processes_per_node"].as_u64().unwrap() * json["plan"]["nodes"].as_u64().unwrap()
    };
    assert_eq!(plan(&["--chip", "cpu"]), 1, "the experiment's 8 is a GPU count");
    assert_eq!(plan(&["--chip", "cpu", "-n", "3"]), 3, "-n with --chip cpu is the process count");
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python3 -c 'print(1)'\nrequest: {chip: cpu, count: 2}\n")
        .unwrap();
    assert_eq!(plan(&["--chip", "cpu"]), 2, "an experiment's own CPU count stays");
    let help = text(&ctx.run(&["submit", "--help"]).stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("`--chip cpu` without `-n` runs one process"), "{help}");
}

#[test]
fn config_show_redacts_secrets_in_every_format() {
    let ctx = TestContext::new();
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "clusters:\n  c:\n    root: /r\n    work: /w\n    wandb: wandb-key-s3cret\n    hf_token: hf_tok3n-s3cret\n    \
         mount: \"redis://:redis-pa55word@redis.example.com:6379/0\"\n\
         hosts:\n  box:\n    ssh: box\n    cluster: c\n    env: {MY_API_TOKEN: tok-s3cret, NCCL_DEBUG: WARN}\n",
    )
    .unwrap();
    for format in ["text", "json", "yaml"] {
        let out = ctx.run(&["config", "show", "--output", format]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{format}: {stderr}");
        for secret in ["wandb-key-s3cret", "hf_tok3n-s3cret", "redis-pa55word", "tok-s3cret"] {
            assert!(!stdout.contains(secret) && !stderr.contains(secret), "{format}: {secret} shown:\n{stdout}");
        }
        assert!(stdout.contains("<redacted>") && stdout.contains("WARN"), "{format}: {stdout}");
    }
}

/// The visible subcommands, from `theseus --help`.
fn subcommands(ctx: &TestContext) -> Vec<String> {
    let help = text(&ctx.run(&["--help"]).stdout);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // Wrapped descriptions continue on deeper-indented lines.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn completions_for_every_shell_list_every_subcommand() {
    let ctx = TestContext::new();
    let commands = subcommands(&ctx);
    assert!(commands.len() >= 10 && commands.iter().any(|c| c == "completions"), "{commands:?}");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = ctx.run(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for command in &commands {
            assert!(script.contains(command.as_str()), "{shell}: `{command}` missing");
        }
    }
    let bad = ctx.run(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
}

#[test]
fn the_committed_man_pages_are_what_the_binary_writes() {
    let ctx = TestContext::new();
    let out_dir = ctx.home().join("man");
    let out = ctx.run(&["man", "--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let committed = crate::repo_root().join("docs/man");
    let mut written: Vec<String> =
        std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    written.sort();
    for command in subcommands(&ctx) {
        assert!(written.contains(&format!("theseus-{command}.1")), "no page for `{command}`: {written:?}");
    }
    for name in &written {
        let fresh = std::fs::read_to_string(out_dir.join(name)).unwrap();
        let kept = std::fs::read_to_string(committed.join(name)).unwrap_or_default();
        assert!(fresh == kept, "docs/man/{name} is out of date: run `cargo xtask man`");
    }
    let mut kept: Vec<String> =
        std::fs::read_dir(&committed).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    kept.sort();
    assert_eq!(kept, written, "docs/man holds pages the binary no longer writes: run `cargo xtask man`");
}

#[test]
fn the_job_sees_the_cluster_dirs_and_its_hardware_in_metadata() {
    let ctx = TestContext::new();
    let code = tempfile::tempdir().unwrap();
    std::fs::write(
        code.path().join("exp.yaml"),
        "entrypoint: sh -c 'printf \"dirs %s|%s|%s\\n\" \"$THESEUS_DATA_DIR\" \"$THESEUS_CHECKPOINTS_DIR\" \
         \"$THESEUS_RESULTS_DIR\"; tr -d \"\\n\" < \"$THESEUS_RUN_DIR/metadata.json\"; echo'\n\
         request: {chip: cpu, count: 1}\nconfig: {lr: 0.5}\n",
    )
    .unwrap();
    let exp = code.path().join("exp.yaml");
    let out = ctx.run(&["submit", "meta", exp.to_str().unwrap(), "--code", code.path().to_str().unwrap(), "--follow"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let dirs = stdout.lines().find_map(|l| l.strip_prefix("dirs ")).unwrap_or_else(|| panic!("{stdout}"));
    let dirs: Vec<&str> = dirs.split('|').collect();
    let root = ctx.home().join(".local/share/theseus");
    for (dir, name) in dirs.iter().zip(["data", "checkpoints", "results"]) {
        assert_eq!(*dir, root.join(name).to_str().unwrap(), "{stdout}");
        assert!(std::path::Path::new(dir).is_dir(), "{dir} exists before the job looks");
    }
    let metadata: serde_json::Value =
        serde_json::from_str(stdout.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("{stdout}")))
            .unwrap();
    assert_eq!(
        metadata["hardware"],
        serde_json::json!({"chip": null, "count": 0, "total_chips": 0, "nodes": 1, "host": "local", "hosts": ["local"]})
    );
    assert_eq!(metadata["config"], serde_json::json!({"lr": 0.5}));
    let run_id = metadata["run_id"].as_str().unwrap();
    // As in the original: `job_key` names what runs (here the entrypoint line), `run_key` the run.
    assert!(metadata["job_key"].as_str().is_some_and(|k| k.starts_with("sh -c ")), "{metadata}");
    assert_eq!(metadata["run_key"], format!("general/default/meta/{run_id}"));
    assert_eq!(metadata["status"], "running");
}
