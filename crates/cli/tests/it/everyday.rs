//! The CLI's everyday edges at real sites (issue 23 point 12): a ledger on a read-only
//! filesystem, runs submitted with `-d FILE` looked up without it, and the like.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::{TestContext, text};

/// A job that prints a line and sleeps, with its code dir.
fn sleeper() -> tempfile::TempDir {
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("wait.py"), "import time\nprint('waiting', flush=True)\ntime.sleep(600)\n")
        .unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python wait.py\nrequest: {chip: cpu}\n").unwrap();
    code
}

fn submit(ctx: &TestContext, code: &Path, name: &str, extra: &[&str]) -> String {
    let exp = code.join("exp.yaml");
    let out = ctx
        .cmd()
        .args(extra)
        .args(["submit", name, exp.to_str().unwrap(), "--code", code.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

fn wait_for_log(ctx: &TestContext, run_id: &str, extra: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = ctx.cmd().args(extra).args(["logs", run_id]).output().unwrap();
        if ["waiting", "rank"].iter().any(|w| text(&logs.stdout).contains(w)) {
            return;
        }
        assert!(Instant::now() < deadline, "the job never started: {}", text(&logs.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `theseus ARGS` with the state dir mounted read-only (a private mount namespace: the test
/// runs as root, which file modes would not stop).
fn run_read_only(ctx: &TestContext, args: &[&str]) -> Output {
    let state = ctx.home().join("state");
    let cmd = ctx.cmd();
    let program = cmd.get_program().to_owned();
    let mut wrapped = std::process::Command::new("unshare");
    wrapped
        .args(["-m", "sh", "-c", "mount --bind -o ro \"$0\" \"$0\" && exec \"$@\""])
        .arg(&state)
        .arg(program)
        .args(args)
        .current_dir(crate::repo_root())
        .env_clear()
        .envs(cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))));
    wrapped.output().unwrap()
}

/// Cancels the test's jobs when the test ends, passed or failed.
struct CancelOnDrop<'a>(&'a TestContext, Vec<String>, &'a [&'a str]);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        for run in &self.1 {
            let _ = self.0.cmd().args(self.2).args(["cancel", run]).output();
        }
    }
}

#[test]
fn a_read_only_ledger_does_not_block_list_status_and_logs() {
    let ctx = TestContext::new();
    let code = sleeper();
    let run_id = submit(&ctx, code.path(), "ro-sleepy", &[]);
    let _cleanup = CancelOnDrop(&ctx, vec![run_id.clone()], &[]);
    wait_for_log(&ctx, &run_id, &[]);
    for args in [&["list"][..], &["status", "ro-sleepy"], &["logs", "ro-sleepy"]] {
        let out = run_read_only(&ctx, args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{args:?} failed:\n{stderr}");
        match args[0] {
            "list" | "status" => assert!(stdout.contains("running"), "{args:?}: {stdout}"),
            _ => assert!(stdout.contains("waiting"), "{args:?}: {stdout}"),
        }
        let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("read-only")).collect();
        assert!(warnings.len() <= 1, "{args:?} warns at most once: {stderr}");
    }
}

/// A Volcano run submitted with `-d FILE` (the only place its host is defined) is looked up,
/// followed and cancelled without the file: its host config comes from the ledger.
#[test]
fn runs_submitted_with_a_dispatch_file_are_found_without_it() {
    let ctx = TestContext::new();
    let world = crate::volcano::SimWorld::start(&ctx);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("site.yaml");
    std::fs::rename(ctx.home().join(".theseus.yaml"), &file).unwrap();
    let d = ["-d", file.to_str().unwrap()];
    let exp = world.exp("sleep.yaml");
    let out = ctx.cmd().args(d).args(["submit", "from-file", &exp, "--code", world.code()]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run_id = text(&out.stdout).trim().to_owned();
    let _cleanup = CancelOnDrop(&ctx, vec![run_id.clone()], &d);
    wait_for_log(&ctx, &run_id, &d);
    let status = ctx.run(&["status", "from-file"]);
    assert!(status.status.success(), "status without -d: {}", text(&status.stderr));
    assert!(text(&status.stdout).contains("running"), "{}", text(&status.stdout));
    let logs = ctx.run(&["logs", "from-file"]);
    assert!(logs.status.success(), "logs without -d: {}", text(&logs.stderr));
    assert!(text(&logs.stdout).contains("rank"), "{}", text(&logs.stdout));
    let cancel = ctx.run(&["cancel", "from-file"]);
    assert!(cancel.status.success(), "cancel without -d: {}", text(&cancel.stderr));
    assert!(text(&cancel.stdout).contains("cancelled"), "{}", text(&cancel.stdout));
}

/// A 2 GiB file in the code (a forgotten checkpoint; sparse here) is named with its size and
/// the fix; over the limit (`THESEUS_MAX_FILE_SIZE`), the submit is refused and nothing is left.
#[test]
fn a_large_file_in_the_code_is_named_or_refused() {
    let ctx = TestContext::new();
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python -c pass\nrequest: {chip: cpu}\n").unwrap();
    std::fs::File::create(code.path().join("ckpt.pt")).unwrap().set_len(2 << 30).unwrap();
    let exp = code.path().join("exp.yaml");
    let args = ["submit", "big", exp.to_str().unwrap(), "--code", code.path().to_str().unwrap()];
    let dry = ctx.cmd().args(args).arg("--dry-run").output().unwrap();
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let stderr = text(&dry.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("theseus: warning: `ckpt.pt` in the code is 2.0 GiB") && l.contains(".gitignore")),
        "{stderr}"
    );
    let refused = ctx.cmd().args(args).env("THESEUS_MAX_FILE_SIZE", "1G").output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    let stderr = text(&refused.stderr);
    assert!(stderr.contains("files over 1.0 GiB (THESEUS_MAX_FILE_SIZE): `ckpt.pt` (2.0 GiB)"), "{stderr}");
    let list = ctx.run(&["list", "--no-refresh"]);
    assert!(!text(&list.stdout).contains("big"), "nothing was recorded: {}", text(&list.stdout));
}

/// `list` against a host that does not answer says so: one line per host on stderr, and its
/// live rows marked (`?` after the state; `unanswered` in JSON) instead of shown as if current.
#[test]
fn list_says_which_host_did_not_answer() {
    let ctx = TestContext::new();
    let world = crate::volcano::SimWorld::start(&ctx);
    let exp = world.exp("sleep.yaml");
    let out = ctx.run(&["submit", "quiet-host", &exp, "--code", world.code()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run_id = text(&out.stdout).trim().to_owned();
    let _cleanup = CancelOnDrop(&ctx, vec![run_id.clone()], &[]);
    wait_for_log(&ctx, &run_id, &[]);
    // The cluster stops answering: its API address now refuses connections.
    let kubeconfig = ctx.home().join(".kube/config");
    let good = std::fs::read_to_string(&kubeconfig).unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    std::fs::write(&kubeconfig, good.replace(&world.sim.url(), &format!("http://{closed}"))).unwrap();

    let list = ctx.run(&["list"]);
    let (stdout, stderr) = (text(&list.stdout), text(&list.stderr));
    assert!(list.status.success(), "{stderr}");
    let row = stdout.lines().find(|l| l.contains(&run_id)).unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.split_whitespace().any(|cell| cell == "pending?" || cell == "running?"), "the row is marked: {row}");
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("host `k8s` did not answer")).collect();
    assert_eq!(said.len(), 1, "one line for the host: {stderr}");
    let json = ctx.run(&["list", "--output", "json"]);
    let rows: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let row = rows.as_array().unwrap().iter().find(|r| r["identity"]["run_id"] == run_id.as_str()).unwrap();
    assert!(row["unanswered"].as_str().is_some_and(|m| !m.is_empty()), "{row}");
    assert!(row["state"] == "pending" || row["state"] == "running", "its last known state: {row}");
    std::fs::write(&kubeconfig, good).unwrap();
}

/// Bytes a process has read so far (`rchar` of `/proc/PID/io`).
fn bytes_read(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines().find_map(|l| l.strip_prefix("rchar: ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// `sync` into a run that is cancelled while the sync copies reports failure, not success.
/// The sync hashes a 1.5 GiB (sparse) file after its check that the run is live; the cancel
/// comes once it has read 64 MiB of it.
#[test]
fn a_sync_into_a_run_cancelled_meanwhile_fails() {
    let ctx = TestContext::new();
    let code = sleeper();
    let run_id = submit(&ctx, code.path(), "sync-cancelled", &[]);
    let _cleanup = CancelOnDrop(&ctx, vec![run_id.clone()], &[]);
    wait_for_log(&ctx, &run_id, &[]);
    std::fs::File::create(code.path().join("big.bin")).unwrap().set_len(3 << 29).unwrap();
    let mut sync = ctx
        .cmd()
        .args(["sync", &run_id, "--code", code.path().to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while bytes_read(sync.id()) < 64 << 20 {
        assert!(sync.try_wait().unwrap().is_none(), "the sync ended before it read the big file");
        std::thread::sleep(Duration::from_millis(20));
    }
    let cancel = ctx.run(&["cancel", &run_id]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    assert!(sync.try_wait().unwrap().is_none(), "inconclusive: the sync ended before the cancel did");
    let out = sync.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "the sync into a cancelled run reported success: {stderr}");
    assert!(stderr.contains("ended (cancelled) while its code was synced"), "{stderr}");
}

/// Unquoted numbers and booleans in the config and the experiment reach the job as their text
/// (issue 23 point 9): `config check` accepts them, and the job sees `0` and `true`.
#[test]
fn unquoted_numbers_and_booleans_reach_the_job_as_text() {
    let ctx = TestContext::new();
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "hosts:\n  local:\n    type: local\n    cluster: local\n    env: {OMP_NUM_THREADS: 8, DEBUG: false}\n",
    )
    .unwrap();
    let check = ctx.run(&["config", "check"]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    let code = tempfile::tempdir().unwrap();
    std::fs::write(
        code.path().join("env.py"),
        "import os\nprint(*(f'{k}={os.environ[k]}' for k in ['NCCL_IB_DISABLE', 'OFFLINE', 'OMP_NUM_THREADS', 'DEBUG']))\n",
    )
    .unwrap();
    std::fs::write(
        code.path().join("exp.yaml"),
        "entrypoint: python env.py\nrequest: {chip: cpu}\nenv: {NCCL_IB_DISABLE: 0, OFFLINE: true}\n",
    )
    .unwrap();
    let exp = code.path().join("exp.yaml");
    let out = ctx
        .cmd()
        .args(["submit", "scalars", exp.to_str().unwrap(), "--code", code.path().to_str().unwrap(), "--follow"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("NCCL_IB_DISABLE=0 OFFLINE=true OMP_NUM_THREADS=8 DEBUG=false"),
        "{}",
        text(&out.stdout)
    );
}

/// After a `--replace` race the newest ledger row of a name can be a loser that failed while an
/// older run holds the name (issue 23 point 12): `status NAME` and `cancel NAME` reach the live
/// run, and cancel stops it.
#[test]
fn status_and_cancel_by_name_reach_the_live_run_not_the_newest_row() {
    use theseus_core::backend::JobState;
    use theseus_core::ledger::Ledger;
    let ctx = TestContext::new();
    let code = sleeper();
    let live = submit(&ctx, code.path(), "raced", &[]);
    let _cleanup = CancelOnDrop(&ctx, vec![live.clone()], &[]);
    wait_for_log(&ctx, &live, &[]);
    // A replacement that lost the race: recorded after the live run, failed.
    let ledger = Ledger::open(&ctx.home().join("state/theseus")).unwrap();
    let mut loser = ledger.find(&live).unwrap().unwrap();
    loser.identity.run_id = format!("{live}-lost");
    loser.handle.id = loser.identity.run_id.clone();
    loser.submitted_at = "2999-01-01T00:00:00Z".into();
    ledger.insert(&loser).unwrap();
    ledger.update_state(&loser.identity.run_id, JobState::Failed, None, Some("lost the name")).unwrap();
    drop(ledger);

    let status = ctx.run(&["status", "raced", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
    assert_eq!(v["run_id"], live.as_str(), "{v} {}", text(&status.stderr));
    let cancel = ctx.run(&["cancel", "raced"]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    let after = text(&ctx.run(&["status", &live]).stdout);
    assert!(after.contains("cancelled"), "the live run was stopped: {after}");
}

/// A submit to a plain host that cannot be reached (a closed loopback port) created nothing
/// there: one line names the cause, and the ledger keeps no failed run of it.
#[test]
fn a_submit_to_an_unreachable_host_leaves_no_failed_run() {
    let ctx = TestContext::new();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let work = ctx.home().join("remote");
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        format!(
            "clusters:\n  c:\n    root: {w}\n    work: {w}/work\nhosts:\n  box:\n    type: plain\n    cluster: c\n\
             \x20   ssh: 127.0.0.1\n    port: {closed}\n    connect_timeout: 5s\n    chips: {{cpu: 2}}\n",
            w = work.display()
        ),
    )
    .unwrap();
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: echo hi\n").unwrap();
    let exp = code.path().join("exp.yaml");
    let out = ctx
        .cmd()
        .args(["submit", "unreached", exp.to_str().unwrap(), "--code", code.path().to_str().unwrap()])
        .args(["--host", "box", "--chip", "cpu"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(error.len(), 1, "{stderr}");
    assert!(
        error[0].contains("failed to connect") && error[0].contains("refused"),
        "one line with the cause: {stderr}"
    );
    assert!(!stderr.contains("caused by"), "{stderr}");
    let list = ctx.run(&["list", "--no-refresh", "--output", "json"]);
    assert!(
        !text(&list.stdout).contains("unreached"),
        "a submit that created nothing is no failed run: {}",
        text(&list.stdout)
    );
}
