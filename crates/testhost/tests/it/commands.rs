//! `plan`, `submit --dry-run`, `submit` (`--follow`, `--replace`, `--yes`), `status`, `logs`,
//! `cancel` and `gc` of the `theseus` command line on a sandbox host, a type neither core nor
//! the CLI knows.

use std::io::{Read as _, Write as _};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{CancelOnDrop, SECRET, TestContext, text};

/// Submits `python job.py ARG` as job `name`; its run id.
fn submit(ctx: &TestContext, name: &str, arg: &str) -> String {
    let out = ctx.run(&["submit", name, &ctx.experiment(arg), "--host", "sb"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

/// The runner PID (its session) a sandbox run recorded.
fn session(ctx: &TestContext, name: &str, run: &str) -> i32 {
    let pid = ctx.sandbox().join("runs/general/default").join(name).join(run).join("pid");
    std::fs::read_to_string(pid).unwrap().trim().parse().unwrap()
}

/// `text` with each run of spaces made one (tables pad their columns).
fn squeeze(text: &str) -> String {
    text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect::<Vec<_>>().join("\n")
}

#[test]
fn plan_chooses_the_sandbox_and_passes_it_over_with_its_reason_when_too_big() {
    let ctx = TestContext::new();
    let exp = ctx.experiment("0");
    let out = ctx.run(&["plan", "j", &exp]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = squeeze(&text(&out.stdout));
    assert!(stdout.contains("sb sandbox chosen runs 1 process in the sandbox (2 slots)"), "{stdout}");
    assert!(stdout.contains("chosen: sb (sandbox): cpu-only, 1 node x 1 process"), "{stdout}");
    assert!(stdout.contains("note: sb is a test sandbox"), "{stdout}");

    // Three processes: the sandbox passes with the fit rule's reason; the local hosts answer
    // by this machine's CPUs.
    let out = ctx.run(&["plan", "j", &exp, "--chip", "cpu", "-n", "3"]);
    let all = squeeze(&(text(&out.stdout) + &text(&out.stderr)));
    assert!(
        all.contains("sb sandbox passed needs 3 processes, the sandbox has 2 slots (raise `slots` on the host)"),
        "{all}"
    );
    assert!(all.contains("here local"), "{all}");
}

#[test]
fn submit_dry_run_shows_the_plan_and_what_the_sandbox_would_do_and_starts_nothing() {
    let ctx = TestContext::new();
    let out = ctx.run(&["submit", "--dry-run", "j", &ctx.experiment("0"), "--host", "sb"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("# host: sb (sandbox): cpu-only, 1 node x 1 process"), "{stdout}");
    assert!(stdout.contains("# what the sandbox does"), "{stdout}");
    assert!(stdout.contains("# sandbox runner (bash)"), "{stdout}");
    assert!(stdout.contains(&format!("{}/code/general/default/j/", ctx.sandbox().display())), "{stdout}");
    assert!(!ctx.sandbox().join("runs").exists(), "a dry run starts nothing");
}

#[test]
fn submit_and_status_report_running_completed_and_failed_with_the_exit_code() {
    let ctx = TestContext::new();
    let ok = submit(&ctx, "ok", "0");
    let failed = submit(&ctx, "bad", "3");
    let status = ctx.status_until(&ok, |s| s["state"] != "running" && s["state"] != "pending");
    assert_eq!((&status["state"], &status["exit_code"]), (&"completed".into(), &0.into()), "{status}");
    let status = ctx.status_until(&failed, |s| s["state"] != "running" && s["state"] != "pending");
    assert_eq!((&status["state"], &status["exit_code"]), (&"failed".into(), &3.into()), "{status}");
    let logs = ctx.run(&["logs", &ok]);
    assert!(text(&logs.stdout).contains("hello from the sandbox"), "{}", text(&logs.stdout));

    // Two processes: two ranks, one line each.
    let out = ctx.run(&["submit", "two", &ctx.experiment("0"), "--chip", "cpu", "-n", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let two = text(&out.stdout).trim().to_owned();
    let status = ctx.status_until(&two, |s| s["state"] != "running" && s["state"] != "pending");
    assert_eq!((&status["state"], status["ranks"].as_array().map(Vec::len)), (&"completed".into(), Some(2)));
    let logs = text(&ctx.run(&["logs", &two]).stdout);
    assert_eq!(logs.matches("hello from the sandbox").count(), 2, "{logs}");

    let sleeper = submit(&ctx, "sleeper", "sleep");
    let _cancel = CancelOnDrop(&ctx, sleeper.clone());
    let status = ctx.status_until(&sleeper, |s| s["state"] != "pending");
    assert_eq!(status["state"], "running", "{status}");
    let list = text(&ctx.run(&["list"]).stdout);
    assert!(list.contains(&sleeper) && list.contains("running"), "{list}");
}

#[test]
fn cancel_stops_every_process_of_the_run() {
    let ctx = TestContext::new();
    let run = submit(&ctx, "sleeper", "sleep");
    let _cancel = CancelOnDrop(&ctx, run.clone());
    ctx.status_until(&run, |s| s["state"] == "running");
    let sid = session(&ctx, "sleeper", &run);
    // The runner, the bootstrap and the job (in a process group of its own).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while theseus_testhost::procs::in_session(sid).len() < 3 {
        assert!(std::time::Instant::now() < deadline, "the job never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = ctx.run(&["cancel", &run]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(theseus_testhost::procs::in_session(sid).is_empty(), "processes are left after cancel");
    let status = ctx.status_until(&run, |_| true);
    assert_eq!(status["state"], "cancelled", "{status}");
}

#[test]
fn gc_removes_the_code_dirs_of_ended_runs_keeps_their_status_and_a_running_run() {
    let ctx = TestContext::new();
    let done = submit(&ctx, "done", "0");
    ctx.status_until(&done, |s| s["state"] == "completed");
    let live = submit(&ctx, "live", "sleep");
    let _cancel = CancelOnDrop(&ctx, live.clone());
    ctx.status_until(&live, |s| s["state"] == "running");
    let runs = ctx.sandbox().join("runs/general/default");
    let code = ctx.sandbox().join("code/general/default");

    let dry = ctx.run(&["gc", "--older-than", "0s", "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let stderr = text(&dry.stderr);
    assert!(
        stderr.contains(&format!("sb: would remove the code dir of ended run general/default/done/{done}")),
        "{stderr}"
    );
    assert!(!stderr.contains(&live), "{stderr}");
    assert!(code.join("done").join(&done).exists(), "a dry run removes nothing");

    let out = ctx.run(&["gc", "--older-than", "0s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("sb: removed the code dir of ended run general/default/done/{done}")), "{stderr}");
    assert!(!code.join("done").join(&done).exists() && runs.join("done").join(&done).exists());
    assert_eq!(ctx.status_until(&done, |_| true)["state"], "completed");
    let logs = text(&ctx.run(&["logs", &done]).stdout);
    assert!(logs.contains("hello from the sandbox"), "{logs}");
    // Nothing is left to remove.
    let again = text(&ctx.run(&["gc", "--older-than", "0s"]).stderr);
    assert!(!again.contains("sb: removed"), "{again}");
    assert!(runs.join("live").join(&live).exists() && code.join("live").join(&live).exists());
    assert_eq!(ctx.status_until(&live, |_| true)["state"], "running");
}

#[test]
fn a_bad_sandbox_key_names_the_file_the_key_and_the_fix() {
    let ctx = TestContext::new();
    let config = ctx.home().join(".theseus.yaml");
    let text_before = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text_before.replace("slots: 2", "slots: 0")).unwrap();
    let out = ctx.run(&["plan", "j", &ctx.experiment("0")]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(".theseus.yaml") && stderr.contains("hosts.sb.slots"), "{stderr}");
    assert!(stderr.contains("set `slots: 1` or more"), "{stderr}");
}

#[test]
fn one_name_has_one_live_run_unless_replaced() {
    let ctx = TestContext::new();
    let first = submit(&ctx, "same", "sleep");
    let _first = CancelOnDrop(&ctx, first.clone());
    ctx.status_until(&first, |s| s["state"] == "running");
    let out = ctx.run(&["submit", "same", &ctx.experiment("sleep")]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("live run `{first}` of job `same` on host `sb`")), "{stderr}");

    let out = ctx.run(&["submit", "same", &ctx.experiment("sleep"), "--replace"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let second = text(&out.stdout).trim().to_owned();
    let _second = CancelOnDrop(&ctx, second.clone());
    assert!(theseus_testhost::procs::in_session(session(&ctx, "same", &first)).is_empty(), "the first run is stopped");
    assert_ne!(ctx.status_until(&first, |_| true)["state"], "running");
    assert_eq!(ctx.status_until(&second, |s| s["state"] != "pending")["state"], "running");
}

#[test]
fn a_secret_reaches_the_job_and_no_output_or_file_of_the_sandbox() {
    let ctx = TestContext::new();
    let exp = ctx.experiment("secret");
    let args = ["submit", "secret", exp.as_str(), "--secret-env", "MY_TOKEN"];
    let dry = ctx.cmd().env("MY_TOKEN", SECRET).args(args).arg("--dry-run").output().unwrap();
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    assert!(text(&dry.stdout).contains("MY_TOKEN=<redacted>"), "{}", text(&dry.stdout));
    let out = ctx.cmd().env("MY_TOKEN", SECRET).args(args).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run = text(&out.stdout).trim().to_owned();
    assert_eq!(ctx.status_until(&run, |s| s["state"] != "running" && s["state"] != "pending")["state"], "completed");
    let logs = text(&ctx.run(&["logs", &run]).stdout);
    assert!(logs.contains("token True"), "{logs}");
    for out in [&dry, &out] {
        assert!(!text(&out.stdout).contains(SECRET) && !text(&out.stderr).contains(SECRET));
    }
    let mut dirs = vec![ctx.sandbox()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                assert!(!String::from_utf8_lossy(&bytes).contains(SECRET), "{} holds the secret", path.display());
            }
        }
    }
}

#[test]
fn submit_follow_streams_the_output_and_exits_with_the_jobs_code() {
    let ctx = TestContext::new();
    let out = ctx.run(&["submit", "followed", &ctx.experiment("3"), "--follow"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stdout.contains("hello from the sandbox"), "{stdout}");
    assert!(stderr.contains("failed (exit code 3)"), "{stderr}");
    let out = ctx.run(&["submit", "followed-ok", &ctx.experiment("0"), "--follow"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// The sandbox `sb` pretends each submit creates "a sandbox VM" (its `creates` key).
fn creating(ctx: &TestContext) {
    let config = ctx.home().join(".theseus.yaml");
    let before = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, before.replace("slots: 2", "slots: 2\n    creates: a sandbox VM")).unwrap();
}

#[test]
fn what_a_host_would_create_is_listed_by_plan_and_the_dry_run_and_created_only_when_confirmed() {
    let ctx = TestContext::new();
    creating(&ctx);
    let exp = ctx.experiment("0");
    let out = ctx.run(&["plan", "j", &exp, "--host", "sb"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("will create:\n  - a sandbox VM\n"), "{}", text(&out.stdout));
    let out = ctx.run(&["plan", "j", &exp, "--host", "sb", "--output", "json"]);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["creates"], serde_json::json!(["a sandbox VM"]), "{plan}");
    let out = ctx.run(&["submit", "--dry-run", "j", &exp, "--host", "sb"]);
    assert!(text(&out.stdout).contains("# will create:\n#   - a sandbox VM\n"), "{}", text(&out.stdout));
    let out = ctx.run(&["submit", "--dry-run", "j", &exp, "--host", "sb", "--output", "json"]);
    let dry: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(dry["creates"], serde_json::json!(["a sandbox VM"]), "{dry}");

    // A secret the shell does not have is the submit's to refuse, not a reason to not know.
    let out = ctx.run(&["plan", "j", &exp, "--host", "sb", "--secret-env", "NOT_SET_HERE"]);
    assert!(text(&out.stdout).contains("will create:\n  - a sandbox VM\n"), "{}", text(&out.stdout));

    // No terminal to ask on and no --yes: refused before anything is shipped or recorded.
    let out = ctx.run(&["submit", "j", &exp, "--host", "sb"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error: submitting to sb would create: a sandbox VM; pass --yes to create it"), "{stderr}");
    assert!(!ctx.sandbox().exists(), "nothing was shipped: {stderr}");
    assert_eq!(text(&ctx.run(&["list", "--output", "json"]).stdout).trim(), "[]", "no run was recorded");

    let out = ctx.run(&["submit", "j", &exp, "--host", "sb", "--yes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("theseus: creating (--yes): a sandbox VM"), "{}", text(&out.stderr));
    let run = text(&out.stdout).trim().to_owned();
    assert_eq!(ctx.status_until(&run, |s| s["state"] != "running" && s["state"] != "pending")["state"], "completed");

    // `repl` submits through the same check.
    let out = ctx.run(&["repl", "--host", "sb", "--chip", "cpu", "--name", "r"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("would create: a sandbox VM; pass --yes to create it"), "{stderr}");
    assert!(!ctx.sandbox().join("runs/repl").exists(), "the session was not started: {stderr}");

    // A host that creates nothing needs no --yes.
    let out = ctx.run(&["submit", "k", &exp, "--host", "here"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn on_a_terminal_submit_asks_before_it_creates_and_a_no_creates_nothing() {
    let ctx = TestContext::new();
    creating(&ctx);
    let exp = ctx.experiment("0");
    // `script` (util-linux) gives the command a terminal; the answer is typed into it.
    // The answer is typed once the question is shown (`script` merges stderr into its stdout).
    let on_terminal = |name: &str, answer: &str| {
        let line = format!("{} submit {name} {exp} --host sb", env!("CARGO_BIN_EXE_theseus-testhost"));
        let mut script = ctx.cmd_of("script");
        script.args(["-qec", &line, "/dev/null"]).stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = script.spawn().expect("script runs");
        let mut stdout = child.stdout.take().unwrap();
        let shown = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let shown = shown.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = stdout.read(&mut buf) {
                    shown.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            })
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !text(&shown.lock().unwrap()).contains("Create? [y/N]") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(answer.as_bytes()).unwrap();
        let status = child.wait().unwrap();
        drop(stdin);
        reader.join().unwrap();
        let shown = text(&shown.lock().unwrap());
        (status.code(), shown)
    };
    let (code, shown) = on_terminal("no", "n\n");
    assert_eq!(code, Some(2), "{shown}");
    assert!(shown.contains("will create:\r\ntheseus:   - a sandbox VM\r\nCreate? [y/N]"), "{shown}");
    assert!(shown.contains("not confirmed: nothing was created"), "{shown}");
    assert!(!ctx.sandbox().exists(), "nothing was shipped: {shown}");
    // Ctrl-C at the question (or before it): interrupted, nothing created.
    let (code, shown) = on_terminal("interrupted", "\x03");
    assert_eq!(code, Some(130), "{shown}");
    assert!(!ctx.sandbox().exists(), "nothing was shipped: {shown}");
    let (code, shown) = on_terminal("yes", "y\n");
    assert_eq!(code, Some(0), "{shown}");
    assert!(ctx.sandbox().join("runs/general/default/yes").is_dir(), "{shown}");
}

#[test]
fn the_sandbox_flag_sets_its_key_on_sandbox_hosts_and_a_bad_value_names_the_flag() {
    let ctx = TestContext::new();
    let exp = ctx.experiment("0");
    let out = ctx.run(&["plan", "j", &exp, "--chip", "cpu", "-n", "3", "--sandbox-slots", "4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = squeeze(&text(&out.stdout));
    assert!(stdout.contains("sb sandbox chosen runs 3 processes in the sandbox (4 slots)"), "{stdout}");

    let out = ctx.run(&["plan", "j", &exp, "--sandbox-slots", "many"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "error: --sandbox-slots many: hosts.sb.slots: invalid type: string \"many\", expected u32 (fix the flag"
        ),
        "{stderr}"
    );
    let out = ctx.run(&["submit", "j", &exp, "--sandbox-slots", "0"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--sandbox-slots 0: hosts.sb.slots: a sandbox needs at least 1 slot"), "{stderr}");
    assert!(!ctx.sandbox().exists(), "nothing was shipped");

    let help = text(&ctx.run(&["submit", "--help"]).stdout);
    assert!(help.contains("Options of `sandbox` hosts") && help.contains("--sandbox-slots <N>"), "{help}");
}

#[test]
fn a_host_that_cannot_say_what_it_would_create_shows_why_in_plan_and_refuses_the_submit() {
    let ctx = TestContext::new();
    let config = ctx.home().join(".theseus.yaml");
    let before = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, before.replace("slots: 2", "slots: 2\n    creates: 'error: the API did not answer'"))
        .unwrap();
    let exp = ctx.experiment("0");
    let out = ctx.run(&["plan", "j", &exp, "--host", "sb"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("will create: unknown, the host did not say: sandbox(sb): the API did not answer"),
        "{}",
        text(&out.stdout)
    );
    let dry = ctx.run(&["submit", "--dry-run", "j", &exp, "--host", "sb", "--output", "json"]);
    assert!(dry.status.success(), "a dry run still works: {}", text(&dry.stderr));
    let dry: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(dry["creates_error"], "sandbox(sb): the API did not answer", "{dry}");
    let out = ctx.run(&["submit", "j", &exp, "--host", "sb", "--yes"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: cannot tell what submitting to sb would create: sandbox(sb): the API did not answer; nothing was created"),
        "{stderr}"
    );
    assert!(!ctx.sandbox().exists(), "nothing was shipped");
}

#[test]
fn a_host_flag_of_a_type_without_hosts_changes_nothing_and_says_so() {
    let ctx = TestContext::new();
    let config = ctx.home().join(".theseus.yaml");
    let before = std::fs::read_to_string(&config).unwrap();
    let only_local = before.split("  sb:").next().unwrap().to_owned() + "  here:\n    type: local\n";
    std::fs::write(&config, only_local).unwrap();
    let out = ctx.run(&["plan", "j", &ctx.experiment("0"), "--sandbox-slots", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("warning: --sandbox-slots 3: the config has no `sandbox` host; the flag changes nothing"),
        "{}",
        text(&out.stderr)
    );
}
