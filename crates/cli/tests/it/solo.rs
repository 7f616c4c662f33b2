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

/// Waits (bounded) until `f` holds.
fn until(what: &str, limit: std::time::Duration, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !f() {
        assert!(std::time::Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// The state `theseus status NAME` shows.
fn state(target: &crate::targets::Target, name: &str) -> String {
    let out = target.run(&["status", name, "--output", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    json["status"]["state"].as_str().unwrap_or("").to_owned()
}

#[test]
fn a_repl_waiting_in_a_busy_slurm_queue_is_not_cancelled_by_the_startup_timeout_but_by_slurm_wait_timeout() {
    use std::io::BufRead as _;
    let Some(target) = crate::targets::Target::new(crate::targets::Kind::Slurm, "slurm queue wait") else { return };
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("hog.yaml"), "entrypoint: sleep 600\n").unwrap();
    let code_str = code.path().to_str().unwrap().to_owned();
    // Every GPU of the lab (2 nodes x 4) held by another job: a session asking for one waits.
    let hog = code.path().join("hog.yaml");
    let out = target.run(&[
        "submit",
        "hog",
        hog.to_str().unwrap(),
        "--code",
        &code_str,
        "--host",
        "box",
        "--chip",
        "h100",
        "-n",
        "8",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The hog goes when the test ends, whatever happens (the lab is shared by the other tests).
    struct Cancel<'a>(&'a crate::targets::Target);
    impl Drop for Cancel<'_> {
        fn drop(&mut self) {
            let _ = self.0.run(&["cancel", "hog"]);
        }
    }
    let _hog = Cancel(&target);
    until("the hog runs", std::time::Duration::from_secs(120), || state(&target, "hog") == "running");
    let python_env = format!("THESEUS_PYTHON={}", target.python());
    let repl = |name: &str, extra: &[&str]| {
        let mut args = vec!["repl", "--name", name, "--chip", "h100", "-n", "1", "--host", "box", "--no-check"];
        args.extend([
            "--env",
            python_env.as_str(),
            "--code",
            code_str.as_str(),
            "--port",
            "0",
            "--startup-timeout",
            "3",
        ]);
        args.extend(extra);
        target.cmd(&args)
    };

    // Bounded: cancelled with a clear line once --slurm-wait-timeout ran out.
    let out = crate::run_bounded(repl("q1", &["--slurm-wait-timeout", "8s"]), std::time::Duration::from_secs(180));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("session q1 is waiting in the queue: pending ("), "progress with Slurm's reason: {stderr}");
    assert!(stderr.contains("in the queue (pending (") && stderr.contains("--slurm-wait-timeout ran out"), "{stderr}");
    assert_eq!(state(&target, "q1"), "cancelled");

    // Unbounded: still waiting well past --startup-timeout (3 s); Ctrl-C then takes it back.
    let mut child =
        repl("q2", &[]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        })
    };
    let waiting = || lines.lock().unwrap().iter().any(|l| l.contains("session q2 is waiting in the queue"));
    until("the session says it waits", std::time::Duration::from_secs(120), waiting);
    std::thread::sleep(std::time::Duration::from_secs(10));
    assert!(child.try_wait().unwrap().is_none(), "cancelled while queued: {:?}", lines.lock().unwrap());
    assert_eq!(state(&target, "q2"), "pending");
    std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{:?}", lines.lock().unwrap());
    assert_eq!(state(&target, "q2"), "cancelled", "{:?}", lines.lock().unwrap());
}

#[test]
fn a_bootstrap_script_runs_every_stage_with_its_files_in_their_own_dirs() {
    let ctx = TestContext::new();
    let code = tempfile::tempdir().unwrap();
    let exp = "entrypoint: sh -c 'echo stage $THESEUS_STAGE of $THESEUS_NUM_STAGES'\nrequest: {chip: cpu}\n";
    std::fs::write(code.path().join("a.yaml"), exp).unwrap();
    std::fs::write(code.path().join("b.yaml"), exp).unwrap();
    let script = code.path().join("out.sh");
    let out = ctx
        .cmd()
        .current_dir(code.path())
        .args(["bootstrap", "st", "a.yaml", script.to_str().unwrap(), "-s", "b.yaml", "--root", "/nonexistent"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let place = tempfile::tempdir().unwrap();
    let root = place.path().join("root");
    let out = run_script(&script, place.path(), &["--root", root.to_str().unwrap()], &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("stage 1 of 2\n") && stdout.contains("stage 2 of 2\n"), "{stdout}");
}
