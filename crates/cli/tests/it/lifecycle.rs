//! The lifecycle of a run through the binary: one live job per name (refused, replaced and
//! marked, raced), a run recorded before anything is created and settled after a killed client,
//! and SIGINT/SIGTERM in each phase (shipping, following, `logs -f`, a Volcano host).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{TestContext, text};

/// A code dir with a job that prints `tick N` every 0.2 s for ten minutes.
struct Ticker {
    code: tempfile::TempDir,
}

impl Ticker {
    fn new() -> Ticker {
        let code = tempfile::tempdir().unwrap();
        std::fs::write(
            code.path().join("exp.yaml"),
            "entrypoint: sh -c 'i=0; while [ $i -lt 3000 ]; do echo tick $i; i=$((i+1)); sleep 0.2; done'\nrequest: {chip: cpu}\n",
        )
        .unwrap();
        Ticker { code }
    }

    fn exp(&self) -> String {
        self.code.path().join("exp.yaml").display().to_string()
    }

    fn code(&self) -> &str {
        self.code.path().to_str().unwrap()
    }

    fn submit_args<'a>(&'a self, exp: &'a str, name: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["submit", name, exp, "--code", self.code()];
        args.extend_from_slice(extra);
        args
    }
}

/// A child `theseus` whose stdout and stderr are collected by threads.
struct Running {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let collect = |mut pipe: Box<dyn Read + Send>| {
            let buf = Arc::new(Mutex::new(String::new()));
            let out = buf.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    out.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk[..n]));
                }
            });
            buf
        };
        let stdout = collect(Box::new(child.stdout.take().unwrap()));
        let stderr = collect(Box::new(child.stderr.take().unwrap()));
        Running { child, stdout, stderr }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn wait_for_stdout(&mut self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.stdout().contains(needle) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("theseus ended ({status}) before printing {needle:?}:\n{}\n{}", self.stdout(), self.stderr());
            }
            if Instant::now() > deadline {
                self.kill();
                panic!("no {needle:?} within {within:?}:\nstdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(ok.success(), "kill {signal} {pid}");
    }

    /// Waits for the exit; a child that does not end within `within` is killed (by its PID) and
    /// the test fails.
    fn wait(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader threads see the end of the pipes.
                std::thread::sleep(Duration::from_millis(100));
                return status;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "theseus did not end within {within:?}:\nstdout:\n{}\nstderr:\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// Run ids that have a live process carrying the local backend's marker.
fn live_runs(run_ids: &BTreeSet<String>) -> BTreeSet<String> {
    let mut live = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if !entry.file_name().to_str().is_some_and(|n| n.chars().all(|c| c.is_ascii_digit())) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')) {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else { continue };
        for var in env.split(|b| *b == 0) {
            if let Some(id) = var.strip_prefix(b"THESEUS_LOCAL_RUN=") {
                let id = String::from_utf8_lossy(id).into_owned();
                if run_ids.contains(&id) {
                    live.insert(id);
                }
            }
        }
    }
    live
}

/// Every record of the ledger, as JSON, without asking any backend.
fn ledger(ctx: &TestContext) -> Vec<serde_json::Value> {
    let out = ctx.run(&["list", "--no-refresh", "--output", "json", "--limit", "1000"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap().as_array().unwrap().clone()
}

fn record<'a>(records: &'a [serde_json::Value], run_id: &str) -> &'a serde_json::Value {
    records
        .iter()
        .find(|r| r["identity"]["run_id"] == run_id)
        .unwrap_or_else(|| panic!("run {run_id} not in {records:?}"))
}

/// Cancels every live run of `names` in this HOME (the test's own jobs).
fn cancel_all(ctx: &TestContext, names: &[&str]) {
    for name in names {
        let _ = ctx.run(&["cancel", name]);
    }
}

/// Cancels the test's jobs when the test ends, passed or failed.
struct CancelOnDrop<'a>(&'a TestContext, &'a [&'a str]);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        cancel_all(self.0, self.1);
    }
}

#[test]
fn a_live_name_is_refused_and_replace_marks_the_replaced_run() {
    let ctx = TestContext::new();
    let job = Ticker::new();
    let exp = job.exp();
    let _cleanup = CancelOnDrop(&ctx, &["held"]);
    let first = ctx.cmd().args(job.submit_args(&exp, "held", &[])).output().unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    let a = text(&first.stdout).trim().to_owned();

    let second = ctx.cmd().args(job.submit_args(&exp, "held", &[])).output().unwrap();
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "a second live job of one name: {stderr}");
    assert_eq!(stderr.matches("already").count(), 1, "one clear sentence: {stderr}");
    assert!(stderr.contains(&a) && stderr.contains("--replace"), "names the live run and the way out: {stderr}");
    let held: Vec<_> = ledger(&ctx).into_iter().filter(|r| r["identity"]["name"] == "held").collect();
    assert_eq!(held.len(), 1, "the refused submit left no record: {held:?}");

    let third = ctx.cmd().args(job.submit_args(&exp, "held", &["--replace"])).output().unwrap();
    assert!(third.status.success(), "{}", text(&third.stderr));
    let b = text(&third.stdout).trim().to_owned();
    let ids: BTreeSet<String> = [a.clone(), b.clone()].into();
    assert_eq!(live_runs(&ids), [b.clone()].into(), "only the replacement runs");

    let list = ctx.run(&["list", "--output", "json"]);
    let records: Vec<serde_json::Value> = serde_json::from_slice(&list.stdout).unwrap();
    let old = record(&records, &a);
    assert_eq!(old["state"], "cancelled", "{old}");
    assert_eq!(old["message"], format!("replaced by run {b}"), "{old}");
    let status = ctx.run(&["status", &a]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    let shown = text(&status.stdout);
    assert!(shown.contains("cancelled") && shown.contains(&format!("replaced by run {b}")), "{shown}");
    cancel_all(&ctx, &["held"]);
    assert!(live_runs(&ids).is_empty());
}

#[test]
fn concurrent_submits_of_one_name_through_the_binary_leave_one_live_job() {
    let ctx = TestContext::new();
    let job = Ticker::new();
    let exp = job.exp();
    let _cleanup = CancelOnDrop(&ctx, &["race"]);
    let mut seen = BTreeSet::new();
    for round in 0..6 {
        // Rounds 0, 2, 4 start from nothing live; rounds 1, 3, 5 replace what the round before left.
        let replace = round % 2 == 1;
        let extra: &[&str] = if replace { &["--replace"] } else { &[] };
        let children: Vec<_> = (0..3)
            .map(|_| {
                Running::spawn({
                    let mut cmd = ctx.cmd();
                    cmd.args(job.submit_args(&exp, "race", extra));
                    cmd
                })
            })
            .collect();
        let mut ok = 0;
        for mut child in children {
            let status = child.wait(Duration::from_secs(120));
            let stderr = child.stderr();
            if status.success() {
                ok += 1;
                seen.insert(child.stdout().trim().to_owned());
            } else {
                assert_eq!(status.code(), Some(2), "round {round}: {stderr}");
                assert_eq!(stderr.matches("already").count(), 1, "round {round}: one clear sentence: {stderr}");
            }
        }
        seen.extend(ledger(&ctx).iter().filter_map(|r| r["identity"]["run_id"].as_str().map(str::to_owned)));
        let live = live_runs(&seen);
        assert_eq!(live.len(), 1, "round {round} (replace: {replace}): {ok} submits succeeded, live runs {live:?}");
        if replace {
            cancel_all(&ctx, &["race"]);
            assert!(live_runs(&seen).is_empty());
        } else {
            assert_eq!(ok, 1, "round {round}");
        }
    }
    cancel_all(&ctx, &["race"]);
}

/// A code dir whose shipping takes a while: one large file next to the ticker.
fn big_ticker() -> Ticker {
    let job = Ticker::new();
    let file = std::fs::File::create(job.code.path().join("weights.bin")).unwrap();
    file.set_len(256 << 20).unwrap();
    job
}

/// Waits until the ledger records run `name` as `submitting`; returns its run id.
fn wait_submitting(ctx: &TestContext, child: &mut Running, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state_dir = ctx.home().join("state/theseus");
        if let Ok(ledger) = theseus_core::ledger::Ledger::open(&state_dir)
            && let Ok(Some(record)) = ledger.find(name)
            && record.state == theseus_core::backend::JobState::Submitting
        {
            return record.identity.run_id;
        }
        if let Ok(Some(status)) = child.child.try_wait() {
            panic!("theseus ended ({status}) and never recorded `{name}` as submitting:\n{}", child.stderr());
        }
        assert!(Instant::now() < deadline, "`{name}` never recorded as submitting");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn work_dir_of(ctx: &TestContext, name: &str, run_id: &str) -> PathBuf {
    ctx.home().join(".local/share/theseus/work/general/default").join(name).join(run_id)
}

#[test]
fn a_client_killed_during_submit_leaves_an_honest_record() {
    let ctx = TestContext::new();
    let job = big_ticker();
    let exp = job.exp();
    let _cleanup = CancelOnDrop(&ctx, &["killed"]);
    let mut child = Running::spawn({
        let mut cmd = ctx.cmd();
        cmd.args(job.submit_args(&exp, "killed", &[]));
        cmd
    });
    let run_id = wait_submitting(&ctx, &mut child, "killed");
    child.signal("-KILL");
    child.wait(Duration::from_secs(30));
    let work = work_dir_of(&ctx, "killed", &run_id);
    if work.exists() {
        // The copy was complete before the kill landed: the run may have started.
        eprintln!("a_client_killed_during_submit_leaves_an_honest_record: shipping ended before the kill; not checked");
        cancel_all(&ctx, &["killed"]);
        return;
    }
    let status = ctx.run(&["status", "killed", "--output", "json"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["run_id"], run_id.as_str());
    assert_eq!(v["status"]["state"], "unknown", "{v}");
    assert!(v["status"]["message"].as_str().unwrap().contains("the client stopped during submit (interrupted)"), "{v}");
    let list = ledger(&ctx);
    assert_eq!(record(&list, &run_id)["state"], "unknown", "settled in the ledger");
    // What a user does next: cancel settles it (nothing ever ran), and gc takes its half-made
    // run dir and upload dir at once, not after the hour's grace (no client works on them).
    let cancel = ctx.run(&["cancel", "killed", "--output", "json"]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    assert_eq!(record(&ledger(&ctx), &run_id)["state"], "cancelled");
    let gc = ctx.run(&["gc", "--older-than", "0s"]);
    assert!(gc.status.success(), "{}", text(&gc.stderr));
    let partial = work.with_file_name(format!("{run_id}.partial"));
    assert!(!partial.exists(), "{} is left after gc: {}", partial.display(), text(&gc.stdout));
    let incoming = ctx.home().join(".local/share/theseus/work/.theseus/incoming");
    let uploads: Vec<_> =
        std::fs::read_dir(&incoming).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(uploads.is_empty(), "upload dirs left: {uploads:?}");
}

#[test]
fn signals_during_shipping_clean_up_and_exit_143_or_130() {
    let ctx = TestContext::new();
    let job = big_ticker();
    let exp = job.exp();
    let _cleanup = CancelOnDrop(&ctx, &["shipping-term", "shipping-int"]);
    for (signal, code, name) in [("-TERM", 143, "SIGTERM"), ("-INT", 130, "SIGINT")] {
        let job_name = format!("shipping-{}", signal[1..].to_lowercase());
        let mut child = Running::spawn({
            let mut cmd = ctx.cmd();
            cmd.args(job.submit_args(&exp, &job_name, &[]));
            cmd
        });
        let run_id = wait_submitting(&ctx, &mut child, &job_name);
        child.signal(signal);
        let status = child.wait(Duration::from_secs(60));
        let stderr = child.stderr();
        assert_eq!(status.code(), Some(code), "{stderr}");
        assert!(one_line(&stderr, &format!("interrupted ({name})")), "one line: {stderr}");
        let work = work_dir_of(&ctx, &job_name, &run_id);
        assert!(!work.exists() || live_runs(&[run_id.clone()].into()).is_empty(), "nothing of the run is left running");
        assert!(!work.with_extension("partial").exists(), "no partial copy is left");
        let records = ledger(&ctx);
        let rec = record(&records, &run_id);
        assert_eq!(rec["state"], "cancelled", "{rec}");
        assert!(rec["message"].as_str().unwrap().contains(&format!("interrupted ({name}) during submit")), "{rec}");
    }
}

fn one_line(stderr: &str, needle: &str) -> bool {
    stderr.lines().filter(|l| l.contains(needle)).count() == 1
}

fn state_of(ctx: &TestContext, run_id: &str) -> String {
    let out = ctx.run(&["status", run_id, "--output", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["status"]["state"].as_str().unwrap_or("?").to_owned()
}

#[test]
fn signals_while_following_detach_with_one_line_and_leave_the_job_running() {
    let ctx = TestContext::new();
    let job = Ticker::new();
    let exp = job.exp();
    let _cleanup = CancelOnDrop(&ctx, &["follow-term", "follow-int"]);
    for (signal, code, name) in [("-TERM", 143, "SIGTERM"), ("-INT", 130, "SIGINT")] {
        let job_name = format!("follow-{}", &signal[1..].to_lowercase());
        let mut child = Running::spawn({
            let mut cmd = ctx.cmd();
            cmd.args(job.submit_args(&exp, &job_name, &["--follow"]));
            cmd
        });
        child.wait_for_stdout("tick 1", Duration::from_secs(60));
        child.signal(signal);
        let status = child.wait(Duration::from_secs(30));
        let stderr = child.stderr();
        assert_eq!(status.code(), Some(code), "{stderr}");
        assert!(one_line(&stderr, &format!("interrupted ({name})")), "{stderr}");
        assert!(stderr.contains("theseus logs -f"), "says how to follow again: {stderr}");
        let run_id =
            ledger(&ctx).iter().find(|r| r["identity"]["name"] == job_name.as_str()).unwrap()["identity"]["run_id"]
                .as_str()
                .unwrap()
                .to_owned();
        assert_eq!(state_of(&ctx, &run_id), "running", "following stopped, the job did not");

        // `logs -f` of the same run: the same rule.
        let mut logs = Running::spawn({
            let mut cmd = ctx.cmd();
            cmd.args(["logs", "-f", &run_id]);
            cmd
        });
        logs.wait_for_stdout("tick", Duration::from_secs(30));
        logs.signal(signal);
        let status = logs.wait(Duration::from_secs(30));
        let stderr = logs.stderr();
        assert_eq!(status.code(), Some(code), "{stderr}");
        assert!(one_line(&stderr, &format!("interrupted ({name})")), "{stderr}");
        assert_eq!(state_of(&ctx, &run_id), "running");
        cancel_all(&ctx, &[&job_name]);
        assert_eq!(state_of(&ctx, &run_id), "cancelled");
    }
}

#[test]
fn sigterm_during_submit_follow_to_a_volcano_host_ends_with_143() {
    let ctx = TestContext::new();
    let world = crate::volcano::SimWorld::start(&ctx);
    let _cleanup = CancelOnDrop(&ctx, &["vc-term"]);
    let (exp, code) = (world.exp("sleep.yaml"), world.code().to_owned());
    let mut child = Running::spawn({
        let mut cmd = ctx.cmd();
        cmd.args([
            "submit", "vc-term", &exp, "--code", &code, "--host", "k8s", "--chip", "h100", "-n", "4", "--follow",
        ]);
        cmd
    });
    // Shipping is over and the job runs: the follow loop is what must hear the signal.
    child.wait_for_stdout("rank 0", Duration::from_secs(120));
    child.signal("-TERM");
    let status = child.wait(Duration::from_secs(60));
    let stderr = child.stderr();
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(one_line(&stderr, "interrupted (SIGTERM)"), "{stderr}");
    drop(_cleanup);
    drop(world);
}

#[test]
fn a_run_its_backend_no_longer_has_is_never_shown_live() {
    let ctx = TestContext::new();
    let job = Ticker::new();
    let exp = job.exp();
    let _cleanup = CancelOnDrop(&ctx, &["vanished"]);
    let out = ctx.cmd().args(job.submit_args(&exp, "vanished", &[])).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run_id = text(&out.stdout).trim().to_owned();
    // Someone else removes the run behind the ledger's back (here: its processes and run dir).
    let cancel = ctx.run(&["cancel", &run_id]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    let state_dir = ctx.home().join("state/theseus");
    theseus_core::ledger::Ledger::open(&state_dir)
        .unwrap()
        .update_state(&run_id, theseus_core::backend::JobState::Running, None, None)
        .unwrap();
    let run_dir = ctx.home().join(".local/share/theseus/status/general/default/vanished").join(&run_id);
    std::fs::remove_dir_all(&run_dir).unwrap();

    let list = ctx.run(&["list", "--output", "json"]);
    let records: Vec<serde_json::Value> = serde_json::from_slice(&list.stdout).unwrap();
    let rec = record(&records, &run_id);
    assert_eq!(rec["state"], "unknown", "{rec}");
    assert!(rec["message"].as_str().unwrap().contains("no longer exists"), "{rec}");
    let status = ctx.run(&["status", &run_id]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert!(text(&status.stdout).contains("unknown"), "{}", text(&status.stdout));
}

#[test]
fn replace_on_a_volcano_host_marks_the_replaced_run() {
    let ctx = TestContext::new();
    let world = crate::volcano::SimWorld::start(&ctx);
    let _cleanup = CancelOnDrop(&ctx, &["vc-rep"]);
    let (exp, code) = (world.exp("sleep.yaml"), world.code().to_owned());
    let submit = |extra: &[&str]| {
        let mut args = vec!["submit", "vc-rep", &exp, "--code", &code, "--host", "k8s", "--chip", "h100", "-n", "4"];
        args.extend_from_slice(extra);
        let out = ctx.cmd().args(&args).output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    };
    let a = submit(&[]);
    let b = submit(&["--replace"]);
    let list = ctx.run(&["list", "--output", "json"]);
    let records: Vec<serde_json::Value> = serde_json::from_slice(&list.stdout).unwrap();
    let old = record(&records, &a);
    assert_eq!(old["state"], "cancelled", "{old}");
    assert_eq!(old["message"], format!("replaced by run {b}"), "{old}");
    let status = ctx.run(&["status", &a]);
    assert!(status.status.success(), "status of the replaced run: {}", text(&status.stderr));
    assert!(text(&status.stdout).contains("cancelled"), "{}", text(&status.stdout));
    drop(_cleanup);
    drop(world);
}
