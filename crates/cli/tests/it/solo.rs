//! Issue 28, part `standalone`: `--target`, `.env`, `theseus bootstrap` and the
//! `THESEUS_DISPATCH_*_OVERRIDE` variables, through the real binary.

use crate::{TestContext, text};

/// A config whose local host syncs the uv group `base`.
fn host_with_groups(ctx: &TestContext) {
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "hosts:\n  local:\n    type: local\n    uv_groups: [base, extra]\n",
    )
    .unwrap();
}

#[test]
fn target_groups_follow_the_hosts_and_the_experiments_once_each_in_plan_and_dry_run() {
    let ctx = TestContext::new();
    host_with_groups(&ctx);
    let code = tempfile::tempdir().unwrap();
    std::fs::write(
        code.path().join("exp.yaml"),
        "entrypoint: python3 -c 'print(1)'\nrequest: {chip: cpu}\nuv_groups: [exp, base]\n",
    )
    .unwrap();
    let exp = code.path().join("exp.yaml").display().to_string();
    let args = ["p", exp.as_str(), "--target", "gpu", "--target", "extra", "--target", "tools"];
    let out = ctx.run(&[&["plan"][..], &args].concat());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("uv groups: base, extra, exp, gpu, tools\n"), "{stdout}");
    let mut dry = vec!["submit", "--dry-run", "--code", code.path().to_str().unwrap()];
    dry.extend(args);
    let out = ctx.run(&dry);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("# uv groups: base, extra, exp, gpu, tools\n"), "{stdout}");
    assert!(
        stdout.contains("theseus_uv_groups=(--group base --group extra --group exp --group gpu --group tools)"),
        "the bootstrap syncs them: {stdout}"
    );
    let bad = ctx.run(&["plan", "p", &exp, "--target", "a b"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("is not a uv dependency group name"), "{}", text(&bad.stderr));
}

#[test]
fn dot_env_of_the_current_dir_feeds_the_client_never_overrides_and_names_bad_lines() {
    let ctx = TestContext::new();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("exp.yaml"), "entrypoint: sh -c 'echo \"tok=$TOK\"'\nrequest: {chip: cpu}\n")
        .unwrap();
    std::fs::write(dir.path().join(".env"), "export TOK='from dotenv'\nbroken line sEcReT\nOTHER=o\n").unwrap();
    let submit = |env: &[(&str, &str)]| {
        let mut cmd = ctx.cmd();
        cmd.current_dir(dir.path()).args(["submit", "e", "exp.yaml", "--secret-env", "TOK", "--follow", "--replace"]);
        cmd.envs(env.iter().copied());
        crate::run_bounded(cmd, std::time::Duration::from_secs(120))
    };
    let out = submit(&[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The secret reached the job through --secret-env (a local job also inherits the rest of
    // the client's environment; a remote one gets only what is forwarded).
    assert!(stdout.contains("tok=from dotenv\n"), "{stdout}");
    let warning = format!("{}:2: not `KEY=VALUE`; the line is ignored", dir.path().join(".env").display());
    assert!(stderr.contains(&warning), "{stderr}");
    assert_eq!(stderr.matches(":2: not").count(), 1, "warned once: {stderr}");
    assert!(!stderr.contains("sEcReT") && !stderr.contains("from dotenv"), "no value is printed: {stderr}");
    // A variable already set wins over the file.
    let out = submit(&[("TOK", "from env")]);
    assert!(text(&out.stdout).contains("tok=from env\n"), "{}", text(&out.stdout));
    // Without the file the secret is missing, and submit says so.
    std::fs::remove_file(dir.path().join(".env")).unwrap();
    let out = submit(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("TOK"), "{}", text(&out.stderr));
}

/// A code dir with `exp.yaml` (a Python job that prints what it sees and exits with `$EXIT`).
fn standalone_code() -> tempfile::TempDir {
    let code = tempfile::tempdir().unwrap();
    std::fs::write(
        code.path().join("exp.yaml"),
        "entrypoint: python3 job.py\nrequest: {chip: cpu}\nenv: {GREETING: \"hi 'there' $x\"}\nconfig: {lr: 0.1}\n",
    )
    .unwrap();
    std::fs::write(
        code.path().join("job.py"),
        "import os, sys\nprint('greeting', os.environ['GREETING'])\nprint('root', os.environ['THESEUS_ROOT'])\n\
         print('work', os.environ['THESEUS_WORK_DIR'])\nprint('lr', open(os.environ['THESEUS_CONFIG']).read().count('0.5'))\n\
         sys.exit(int(os.environ.get('EXIT', '0')))\n",
    )
    .unwrap();
    code
}

/// Runs a standalone script with bash from `cwd`, with a clean environment plus `env`.
fn run_script(
    script: &std::path::Path,
    cwd: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(script)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", cwd)
        .envs(env.iter().copied());
    crate::run_bounded(cmd, std::time::Duration::from_secs(120))
}

#[test]
fn bootstrap_writes_one_script_that_runs_the_job_anywhere_with_its_status_tree() {
    let ctx = TestContext::new();
    let code = standalone_code();
    let outdir = tempfile::tempdir().unwrap();
    let script = outdir.path().join("job.sh");
    let generate = |extra: &[&str]| {
        let mut cmd = ctx.cmd();
        cmd.current_dir(code.path()).args(["bootstrap", "demo", "exp.yaml", script.to_str().unwrap(), "lr=0.5"]);
        cmd.args(extra);
        cmd.output().unwrap()
    };
    let out = generate(&["-p", "proj"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), script.to_str().unwrap());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o777, 0o755);

    // Run elsewhere, in a dir whose path has spaces and quotes.
    let place = tempfile::tempdir().unwrap();
    let root = place.path().join("the \"root\" it's");
    let cwd = place.path().join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    // Without a root: exit 2 and a usage line, nothing extracted.
    let out = run_script(&script, &cwd, &[], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("pass --root PATH\nUsage: bash SCRIPT"), "{}", text(&out.stderr));
    assert!(std::fs::read_dir(&cwd).unwrap().next().is_none(), "nothing was written");
    let out = run_script(&script, &cwd, &["--root", root.to_str().unwrap()], &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let work = root.join("work/proj/default/demo");
    assert!(stdout.contains("greeting hi 'there' $x\n"), "{stdout}");
    assert!(stdout.contains(&format!("root {}\n", root.display())), "{stdout}");
    assert!(stdout.contains(&format!("work {}\n", work.display())), "{stdout}");
    assert!(stdout.contains("lr 1\n"), "the override reached the config: {stdout}");
    let status = root.join("status/proj/default/demo");
    let runs: Vec<_> = std::fs::read_dir(&status).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let metadata: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(runs[0].join("metadata.json")).unwrap()).unwrap();
    let run_id = runs[0].file_name().unwrap().to_str().unwrap();
    assert_eq!(metadata["status"], "completed");
    assert_eq!(metadata["exit_code"], 0);
    assert_eq!(metadata["run_id"], run_id);
    assert_eq!(metadata["run_key"], format!("proj/default/demo/{run_id}"));
    assert_eq!(metadata["job_key"], "python3 job.py", "an experiment's job key is its entrypoint");
    assert_eq!(metadata["hardware"]["host"], "bootstrap");
    assert!(!run_id.contains("THESEUS"), "a run id of this start: {run_id}");

    // Each start is a run of its own; the job's exit code is the script's.
    let out = run_script(&script, &cwd, &["--root", root.to_str().unwrap()], &[("EXIT", "7")]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_dir(&status).unwrap().count(), 2);
    let out = run_script(&script, &cwd, &["--bogus"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown argument: --bogus"), "{}", text(&out.stderr));

    // OUT is not replaced without --force; given --root (with quotes), none is needed to run.
    let out = generate(&["--root", root.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("exists; pass --force"), "{}", text(&out.stderr));
    let out = generate(&["--root", root.to_str().unwrap(), "--work", "/nonexistent/../x", "--force"]);
    assert_eq!(out.status.code(), Some(2), "a work dir with `..` is refused");
    let out = generate(&["--root", root.to_str().unwrap(), "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run_script(&script, &cwd, &[], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("root {}\n", root.display())));
    // The flags win over the values given when it was made; a relative one is from the cwd.
    let out = run_script(&script, &cwd, &["--root=other root"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("root {}\n", cwd.join("other root").display())));

    // A missing parent dir, a missing OUT and the flags that pick a host are refused.
    let refused = |args: &[&str], says: &str| {
        let out = ctx.cmd().current_dir(code.path()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
    };
    let missing = outdir.path().join("no/such/dir/x.sh");
    refused(&["bootstrap", "d", "exp.yaml", missing.to_str().unwrap()], "does not exist; create it first");
    refused(&["bootstrap", "d", "exp.yaml", "y.sh", "--host", "h"], "--host mean(s) nothing here");
    refused(&["bootstrap", "d", "exp.yaml"], "needs OUT");
    assert!(!code.path().join("y.sh").exists());
}
