//! Resuming: `submit --restore` / `--fresh` through the real binary on the local host, the
//! bundled example's checkpoint, and a real two-process JAX training stopped with SIGTERM in the
//! middle and submitted again under the same name, which ends with the same parameters.

use std::time::{Duration, Instant};

use crate::{TestContext, jax_python, run_bounded, text};

const HELLO: &str = "examples/hello/experiment.yaml";

/// The job's checkpoint dir under a fresh HOME (the built-in local host's checkpoints dir).
fn ckpt_dir(ctx: &TestContext, name: &str) -> std::path::PathBuf {
    ctx.home().join(".local/share/theseus/checkpoints/general/default").join(name)
}

#[test]
fn the_bundled_example_keeps_a_checkpoint_and_a_second_submit_resumes_from_it() {
    let ctx = TestContext::new();
    let first = ctx.run(&["submit", "hello", HELLO, "--follow"]);
    let (stdout, stderr) = (text(&first.stdout), text(&first.stderr));
    assert!(first.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("step 2: loss=0.7290"), "{stdout}");
    assert!(stdout.contains("[theseus] attempt 1: starting fresh (no latest marker in"), "{stdout}");
    let latest = std::fs::read_to_string(ckpt_dir(&ctx, "hello").join("latest")).unwrap();
    assert_eq!(latest, "step_3\n");
    // Under the same name it resumes (nothing is left to do); with --fresh it starts over.
    let again = ctx.run(&["submit", "hello", HELLO, "--follow", "steps=5"]);
    let (stdout, stderr) = (text(&again.stdout), text(&again.stderr));
    assert!(again.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("(latest, left by an earlier run of hello)"), "{stdout}");
    assert!(stdout.contains("resumed from step 3") && !stdout.contains("step 0:"), "{stdout}");
    assert!(stdout.contains("step 4: loss="), "{stdout}");
    let fresh = ctx.run(&["submit", "hello", HELLO, "--follow", "--fresh"]);
    let (stdout, stderr) = (text(&fresh.stdout), text(&fresh.stderr));
    assert!(fresh.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("starting fresh (submit --fresh"), "{stdout}");
    assert!(stdout.contains("step 0: loss=0.9000") && !stdout.contains("resumed"), "{stdout}");
}

#[test]
fn restore_starts_from_the_given_checkpoint_and_is_recorded_and_shown() {
    let ctx = TestContext::new();
    let first = ctx.run(&["submit", "hello", HELLO, "--follow"]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let step_1 = ckpt_dir(&ctx, "hello").join("step_1");
    assert!(step_1.is_dir());
    // Relative to the checkpoints dir, as in the original.
    let rel = "general/default/hello/step_1";
    let plan = ctx.run(&["plan", "hello", HELLO, "--restore", rel]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    assert!(
        text(&plan.stdout).contains(&format!("resumes: from {} (--restore)", step_1.display())),
        "{}",
        text(&plan.stdout)
    );
    let dry = ctx.run(&["--output", "json", "submit", "hello", HELLO, "--restore", rel, "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(shown["resume"]["restore"], step_1.to_str().unwrap());
    assert_eq!(shown["resume"]["checkpoint_dir"], ckpt_dir(&ctx, "hello").to_str().unwrap());
    let out = ctx.run(&["submit", "hello", HELLO, "--restore", rel, "--follow"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("resuming from {} (submit --restore)", step_1.display())), "{stdout}");
    assert!(stdout.contains("resumed from step 1") && stdout.contains("step 1: loss=0.8100"), "{stdout}");
    assert!(!stdout.contains("step 0:"), "{stdout}");
    let status = ctx.run(&["--output", "json", "status", "hello"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["resume"]["restore"], step_1.to_str().unwrap());
    // An absolute path works too.
    let out = ctx.run(&["submit", "hello", HELLO, "--restore", step_1.to_str().unwrap(), "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_restore_that_cannot_be_used_fails_before_anything_starts_naming_the_flag() {
    let ctx = TestContext::new();
    for (args, wanted) in [
        (vec!["--restore", "general/default/hello/step_9"], "is not a directory on this machine"),
        (vec!["--restore", "/nonexistent/step_1"], "/nonexistent/step_1 is not a directory on this machine"),
        (vec!["--restore", "../../etc"], "may not leave it with `..`"),
        (vec!["--restore", ""], "the path is empty"),
        (vec!["--restore", "general/default/hello/step_1", "--fresh"], "cannot be used with"),
    ] {
        let mut all = vec!["submit", "hello", HELLO];
        all.extend(&args);
        let out = ctx.run(&all);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains("--restore") && stderr.contains(wanted), "{args:?}: {stderr}");
        assert!(!stderr.contains("submitted"), "{args:?}: {stderr}");
    }
    // Nothing ran, nothing was recorded.
    let list = ctx.run(&["list"]);
    assert!(!text(&list.stdout).contains("hello"), "{}", text(&list.stdout));
    assert!(!ckpt_dir(&ctx, "hello").exists());
}

/// `checkpoint step K` lines of rank 0 in `theseus logs NAME`.
fn checkpoints_logged(ctx: &TestContext, name: &str) -> Vec<u32> {
    let out = run_bounded(
        {
            let mut cmd = ctx.cmd();
            cmd.args(["logs", name]);
            cmd
        },
        Duration::from_secs(60),
    );
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("[rank-0] checkpoint step "))
        .filter_map(|k| k.trim().parse().ok())
        .collect()
}

/// `final params sha256 <hex>` of rank 0.
fn checksum(stdout: &str) -> String {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("[rank-0] final params sha256 "))
        .unwrap_or_else(|| panic!("no checksum in:\n{stdout}"));
    line.trim().to_owned()
}

#[test]
fn a_jax_training_stopped_with_sigterm_resumes_and_ends_with_the_same_params() {
    let Some(python) = jax_python("a_jax_training_stopped_with_sigterm_resumes_and_ends_with_the_same_params") else {
        return;
    };
    let ctx = TestContext::new();
    let experiment = "examples/jax-train/experiment.yaml";
    let config = ["steps=120", "checkpoint_every=20", "step_seconds=0.05"];
    let submit = |name: &str, extra: &[&str]| {
        let mut cmd = ctx.cmd();
        cmd.env("THESEUS_PYTHON", &python).args(["submit", name, experiment]).args(config).args(extra);
        cmd
    };
    // Run A, uninterrupted.
    let a = run_bounded(submit("train-a", &["--follow"]), Duration::from_secs(300));
    let (stdout, stderr) = (text(&a.stdout), text(&a.stderr));
    assert!(a.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("[rank-0] starting at step 0"), "{stdout}");
    let x = checksum(&stdout);

    // Run B, same config, stopped with SIGTERM (cancel) once a checkpoint at step >= 40 is logged.
    let b = run_bounded(submit("train-b", &[]), Duration::from_secs(120));
    assert!(b.status.success(), "{}", text(&b.stderr));
    let deadline = Instant::now() + Duration::from_secs(240);
    let at = loop {
        if let Some(k) = checkpoints_logged(&ctx, "train-b").into_iter().find(|k| *k >= 40) {
            break k;
        }
        assert!(Instant::now() < deadline, "no checkpoint at step >= 40 was logged");
        std::thread::sleep(Duration::from_millis(200));
    };
    let cancel = run_bounded(
        {
            let mut cmd = ctx.cmd();
            cmd.args(["cancel", "train-b"]);
            cmd
        },
        Duration::from_secs(120),
    );
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    let logged = checkpoints_logged(&ctx, "train-b");
    let last = *logged.iter().max().unwrap();
    assert!(last >= at && last < 120, "stopped before the end: checkpoints {logged:?}");
    let out = run_bounded(
        {
            let mut cmd = ctx.cmd();
            cmd.args(["logs", "train-b"]);
            cmd
        },
        Duration::from_secs(60),
    );
    assert!(!text(&out.stdout).contains("final params"), "the first run of train-b was not stopped mid-way");

    // Submitted again under the same name: resumes from the last complete checkpoint.
    let again = run_bounded(submit("train-b", &["--follow"]), Duration::from_secs(300));
    let (stdout, stderr) = (text(&again.stdout), text(&again.stderr));
    assert!(again.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("(latest, left by an earlier run of train-b)"), "{stdout}");
    let resumed: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("[rank-0] resumed from step "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no `resumed from step K` in:\n{stdout}"));
    assert!(resumed >= at && resumed == last, "resumed from {resumed}; checkpoints of the first run {logged:?}");
    assert!(!stdout.contains("starting at step 0"), "{stdout}");
    assert_eq!(checksum(&stdout), x, "the resumed training ends with other parameters");
}

/// A job that writes one checkpoint and waits, unless it was given one to resume from.
const RESTARTABLE: &str = r#"import os, time
ck = os.environ["THESEUS_CHECKPOINT_DIR"]
restore = os.environ.get("THESEUS_RESTORE_FROM")
print("restore", restore or "-", flush=True)
if not restore:
    os.makedirs(os.path.join(ck, "step_1"), exist_ok=True)
    with open(os.path.join(ck, ".latest.tmp"), "w") as f:
        f.write("step_1\n")
    os.replace(os.path.join(ck, ".latest.tmp"), os.path.join(ck, "latest"))
    print("checkpoint step 1", flush=True)
    time.sleep(600)
print("resumed", flush=True)
"#;

#[test]
fn an_evicted_volcano_job_restarts_shows_attempt_2_and_resumes_its_own_checkpoint() {
    let ctx = TestContext::new();
    let world = crate::volcano::SimWorld::start(&ctx);
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("job.py"), RESTARTABLE).unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python job.py\n").unwrap();
    let exp = code.path().join("exp.yaml");
    let code_dir = code.path().to_str().unwrap();
    let out =
        ctx.run(&["submit", "evictee", exp.to_str().unwrap(), "--code", code_dir, "--host", "k8s", "--chip", "cpu"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let logs = || text(&ctx.run(&["logs", "evictee"]).stdout);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !logs().contains("checkpoint step 1") {
        assert!(Instant::now() < deadline, "no checkpoint: {}", logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = ctx.run(&["status", "evictee"]);
    assert!(!text(&status.stdout).contains("attempt"), "{}", text(&status.stdout));
    // Its pod is deleted (evicted): Volcano's `PodEvicted -> RestartJob` starts it again.
    let pods = world.sim.objects("v1", "Pod");
    let pod = pods
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .find(|n| n.contains("evictee"))
        .unwrap_or_else(|| panic!("no pod of the job"))
        .to_owned();
    let ca = code.path().join("ca.pem");
    std::fs::write(&ca, world.sim.ca_pem()).unwrap();
    let url = format!("{}/api/v1/namespaces/default/pods/{pod}", world.sim.url());
    let deleted = std::process::Command::new("curl")
        .args(["-sS", "--fail", "-X", "DELETE", "--cacert"])
        .arg(&ca)
        .arg(&url)
        .output()
        .expect("curl runs");
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let deadline = Instant::now() + Duration::from_secs(90);
    let shown = loop {
        let out = ctx.run(&["--output", "json", "status", "evictee"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if v["status"]["attempt"] == 2 && v["status"]["state"] == "completed" {
            break v;
        }
        assert!(Instant::now() < deadline, "never restarted and completed: {v}\n{}", logs());
        std::thread::sleep(Duration::from_millis(300));
    };
    // The attempt is said once: by the backend's interruption line, else after the state.
    let status = text(&ctx.run(&["status", "evictee"]).stdout);
    assert_eq!(status.matches("attempt 2").count(), 1, "{status}\n{shown}");
    assert!(
        status.contains(": completed, attempt 2 (exit code 0)") || status.contains("completed on attempt 2"),
        "{status}"
    );
    let log = logs();
    // The new pod's THESEUS_ATTEMPT comes from the annotation `volcano.sh/job-retry-count`.
    assert!(
        log.contains("[theseus] attempt 2: resuming from ") && log.contains("(latest, written by this run)"),
        "{log}"
    );
    assert!(log.contains("resumed"), "{log}");
    assert!(log.contains("/general/default/evictee/step_1"), "{log}");
}

#[test]
fn jax_train_never_resumes_from_a_half_written_checkpoint_and_clears_it() {
    let Some(python) = jax_python("jax_train_never_resumes_from_a_half_written_checkpoint_and_clears_it") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    let config = tmp.path().join("config.json");
    std::fs::write(&config, r#"{"steps": 30, "checkpoint_every": 10}"#).unwrap();
    let run = |restore: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new(&python);
        cmd.arg(crate::repo_root().join("examples/jax-train/train.py"))
            .env("THESEUS_CONFIG", &config)
            .env("THESEUS_CHECKPOINT_DIR", &ckpt)
            .env("JAX_PLATFORMS", "cpu");
        if let Some(path) = restore {
            cmd.env("THESEUS_RESTORE_FROM", path);
        }
        let out = run_bounded(cmd, Duration::from_secs(120));
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let whole = run(None);
    assert_eq!(std::fs::read_to_string(ckpt.join("latest")).unwrap(), "step_30\n");
    // A run killed while it wrote step 40: its temp dir and marker are there, `latest` is not moved.
    std::fs::create_dir_all(ckpt.join(".step_40.tmp.999")).unwrap();
    std::fs::write(ckpt.join(".step_40.tmp.999/params.bin"), b"half").unwrap();
    std::fs::write(ckpt.join(".latest.tmp.999"), "step_40\n").unwrap();
    let resumed = run(Some(&ckpt.join("step_20")));
    assert!(resumed.contains("resumed from step 20"), "{resumed}");
    let sum = |out: &str| out.lines().find(|l| l.starts_with("final params sha256 ")).unwrap().to_owned();
    assert_eq!(sum(&resumed), sum(&whole));
    let left: Vec<String> =
        std::fs::read_dir(&ckpt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(left.iter().all(|n| !n.contains(".tmp.")), "{left:?}");
    // A checkpoint whose params do not match its state is refused, not used.
    std::fs::write(ckpt.join("step_10/params.bin"), b"corrupt").unwrap();
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(crate::repo_root().join("examples/jax-train/train.py"))
        .env("THESEUS_CONFIG", &config)
        .env("THESEUS_CHECKPOINT_DIR", &ckpt)
        .env("THESEUS_RESTORE_FROM", ckpt.join("step_10"))
        .env("JAX_PLATFORMS", "cpu");
    let out = run_bounded(cmd, Duration::from_secs(120));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("does not match state.json"), "{}", text(&out.stderr));
}
