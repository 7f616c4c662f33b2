//! Tests of the batch-size search (`batch_search.py`): the driver alone with fast knobs, and
//! the bootstrap running a job through it with real bash.

use super::*;

/// A job that records each start in `$FAKE_LOG` (one JSON line), runs out of memory (a marker
/// split across two writes, on stderr) above `$FAKE_FITS` (`$FAKE_FITS_STAGE<I>` in stage I), and otherwise exits
/// `$FAKE_PROBE_EXIT` as a probe (`THESEUS_DISPATCH_DISABLE_WANDB=1`) or `$FAKE_EXIT` as the
/// real run (default 0). A probe with `FAKE_PROBE_SLEEP` first starts `sleep 300` in its group
/// (its pid in `$FAKE_LOG.bg`), writes `$FAKE_LOG.started` and sleeps.
const FAKE_JOB: &str = r#"
import json, os, subprocess, sys, time
size = int(os.environ["THESEUS_DISPATCH_BATCH_SIZE"])
probe = os.environ.get("THESEUS_DISPATCH_DISABLE_WANDB") == "1"
log = os.environ["FAKE_LOG"]
with open(log, "a") as f:
    f.write(json.dumps({"size": size, "probe": probe, "wandb": os.environ.get("THESEUS_DISPATCH_DISABLE_WANDB"),
        "run_id": os.environ.get("THESEUS_DISPATCH_RUN_ID"), "start": os.environ.get("THESEUS_DISPATCH_START_TIME"),
        "checkpoints": os.environ.get("THESEUS_CHECKPOINTS_DIR"), "checkpoint": os.environ.get("THESEUS_CHECKPOINT_DIR"),
        "pgid": os.getpgid(0), "pid": os.getpid()}) + "\n")
fits = os.environ.get("FAKE_FITS_STAGE" + os.environ.get("THESEUS_STAGE", ""), os.environ.get("FAKE_FITS", "1000000"))
if size > int(fits):
    marker = os.environ.get("FAKE_MARKER", "RESOURCE_EXHAUSTED")
    half = len(marker) // 2
    sys.stderr.write("2026 jax error: " + marker[:half])
    sys.stderr.flush()
    time.sleep(0.2)
    sys.stderr.write(marker[half:] + " out of memory\n")
    sys.exit(1)
if probe and os.environ.get("FAKE_PROBE_SLEEP"):
    bg = subprocess.Popen(["sleep", "300"])
    with open(log + ".bg", "a") as f:
        f.write("%d\n" % bg.pid)
    with open(log + ".started.part", "w") as f:
        f.write(str(os.getpid()))
    os.replace(log + ".started.part", log + ".started")
    time.sleep(float(os.environ["FAKE_PROBE_SLEEP"]))
print("trained at", size, flush=True)
sys.exit(int(os.environ.get("FAKE_PROBE_EXIT" if probe else "FAKE_EXIT", "0")))
"#;

/// A temp dir with the driver, the fake job, a work dir and a run dir.
struct Search {
    tmp: tempfile::TempDir,
}

impl Search {
    fn new() -> Search {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("batch_search.py"), BATCH_SEARCH).unwrap();
        std::fs::write(tmp.path().join("fake.py"), FAKE_JOB).unwrap();
        std::fs::create_dir_all(tmp.path().join("work")).unwrap();
        std::fs::create_dir_all(tmp.path().join("run")).unwrap();
        Search { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// The driver on the fake job, with fast knobs plus `env`.
    fn command(&self, env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new("python3");
        cmd.arg(self.path("batch_search.py"))
            .arg("--")
            .arg("python3")
            .arg(self.path("fake.py"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("THESEUS_RUN_DIR", self.path("run"))
            .env("THESEUS_WORK_DIR", self.path("work"))
            .env("THESEUS_RUN_ID", "20260101-000000-abcdef")
            .env("THESEUS_CHECKPOINTS_DIR", self.path("checkpoints"))
            .env("FAKE_LOG", self.path("log"))
            .env("THESEUS_DISPATCH_BATCH_CANDIDATES", "64,32,16")
            .env("THESEUS_DISPATCH_PROBE_COOLDOWN_SECONDS", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    fn run(&self, env: &[(&str, &str)]) -> Output {
        self.command(env).output().unwrap()
    }

    /// The job's starts, in order.
    fn starts(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.path("log")).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn sizes(&self) -> Vec<(u64, bool)> {
        self.starts().iter().map(|s| (s["size"].as_u64().unwrap(), s["probe"].as_bool().unwrap())).collect()
    }

    fn state(&self) -> Value {
        read_json(&self.path("run/batch-search.json"))
    }
}

fn outcomes(state: &Value) -> Vec<(u64, String)> {
    state["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["size"].as_u64().unwrap(), p["outcome"].as_str().unwrap().to_owned()))
        .collect()
}

fn probe(size: u64, outcome: &str) -> (u64, String) {
    (size, outcome.to_owned())
}

#[test]
fn the_scan_then_the_bisection_pick_the_largest_size_that_fits() {
    let s = Search::new();
    let out = s.run(&[("FAKE_FITS", "40")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // 64 runs out of memory, 32 fits; between them 48 does not, 40 does, 44 does not.
    assert_eq!(
        s.sizes(),
        [(64, true), (32, true), (48, true), (40, true), (44, true), (40, false)],
        "{}",
        stderr(&out)
    );
    let state = s.state();
    assert_eq!(
        outcomes(&state),
        [probe(64, "oom"), probe(32, "completed"), probe(48, "oom"), probe(40, "completed"), probe(44, "oom")]
    );
    assert_eq!(state["chosen"], 40);
    assert_eq!(state["phase"], "done");
    // The original's timeouts: an hour until something ran out of memory, then
    // max(5, THESEUS_DISPATCH_MIN_STABLE_CHECK_SECONDS = 60, 1.5 x the longest such probe).
    let timeouts: Vec<f64> =
        state["probes"].as_array().unwrap().iter().map(|p| p["timeout"].as_f64().unwrap()).collect();
    assert_eq!(timeouts, [3600.0, 60.0, 60.0, 60.0, 60.0]);
    assert_eq!(state["run"]["exit_code"], 0);
    assert_eq!(state["candidates"], json!([64, 32, 16]));
    // Probes without W&B and with checkpoints of their own; one run id for all; the real run
    // with the job's own checkpoints and W&B as the job's environment has it.
    let starts = s.starts();
    for start in &starts[..5] {
        assert_eq!(start["wandb"], "1");
        let dir = start["checkpoints"].as_str().unwrap();
        assert!(dir.starts_with(s.path("work/.theseus/batch-probe").to_str().unwrap()), "{dir}");
        assert!(start["checkpoint"].as_str().unwrap().starts_with(dir));
    }
    let real = &starts[5];
    assert_eq!(real["wandb"], Value::Null);
    assert_eq!(real["checkpoints"], s.path("checkpoints").to_str().unwrap());
    for start in &starts {
        assert_eq!(start["run_id"], "20260101-000000-abcdef");
        assert_eq!(start["start"], starts[0]["start"]);
    }
    assert!(!s.path("work/.theseus/batch-probe").exists(), "the probes' scratch dir is left behind");
    // The job's output goes through as it was (stdout to stdout, the marker lines to stderr).
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("trained at").count(), 3, "{stdout}");
    assert!(stderr(&out).contains("2026 jax error: RESOURCE_EXHAUSTED out of memory"), "{}", stderr(&out));
    assert!(stderr(&out).contains("[theseus] batch search: chose batch size 40"), "{}", stderr(&out));
}

#[test]
fn no_bisection_keeps_the_first_size_that_fits_as_the_original() {
    let s = Search::new();
    let out = s.run(&[("FAKE_FITS", "40"), ("THESEUS_DISPATCH_BISECT_STEPS", "0")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.sizes(), [(64, true), (32, true), (32, false)]);
    assert_eq!(s.state()["chosen"], 32);
}

#[test]
fn the_jax_internal_marker_counts_as_out_of_memory() {
    let s = Search::new();
    let out = s.run(&[("FAKE_FITS", "20"), ("FAKE_MARKER", "JaxRuntimeError: INTERNAL:")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // 64 and 32 do not fit, 16 does; between them 24 does not, 20 does, 22 does not.
    assert_eq!(
        outcomes(&s.state()),
        [
            probe(64, "oom"),
            probe(32, "oom"),
            probe(16, "completed"),
            probe(24, "oom"),
            probe(20, "completed"),
            probe(22, "oom")
        ]
    );
    assert_eq!(s.state()["chosen"], 20);
}

#[test]
fn a_probe_that_fails_otherwise_stops_the_search_with_its_code() {
    let s = Search::new();
    let out = s.run(&[("FAKE_FITS", "40"), ("FAKE_PROBE_EXIT", "7")]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(s.sizes(), [(64, true), (32, true)], "no real run");
    let state = s.state();
    assert_eq!(state["phase"], "failed");
    assert_eq!(state["chosen"], Value::Null);
    assert_eq!(outcomes(&state), [probe(64, "oom"), probe(32, "error")]);
    assert!(stderr(&out).contains("failed without running out of memory (exit code 7)"), "{}", stderr(&out));
}

#[test]
fn no_size_that_fits_fails_with_1() {
    let s = Search::new();
    let out = s.run(&[("FAKE_FITS", "8")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(s.sizes(), [(64, true), (32, true), (16, true)]);
    assert_eq!(s.state()["phase"], "failed");
}

#[test]
fn the_real_runs_exit_code_is_the_drivers() {
    let s = Search::new();
    let out = s.run(&[("FAKE_EXIT", "5")]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    // Nothing ran out of memory: the first size that fits is the one (a probe exiting 0 fits).
    assert_eq!(s.sizes(), [(64, true), (64, false)]);
    assert_eq!(s.state()["run"]["exit_code"], 5);
}

#[test]
fn a_probe_alive_at_its_timeout_is_stable_and_its_group_is_stopped() {
    let s = Search::new();
    let out = s.run(&[("FAKE_PROBE_SLEEP", "300"), ("THESEUS_DISPATCH_INITIAL_STABILITY_TIMEOUT", "1")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.sizes(), [(64, true), (64, false)]);
    let state = s.state();
    assert_eq!(outcomes(&state), [probe(64, "stable")]);
    assert_eq!(state["probes"][0]["timeout"], 1.0);
    // The probe ran in a group of its own, which was ended with what it started.
    let starts = s.starts();
    assert_eq!(starts[0]["pgid"], starts[0]["pid"], "the probe leads its own process group");
    assert_ne!(starts[1]["pgid"], starts[1]["pid"], "the real run stays in the driver's group");
    let bg: i32 = std::fs::read_to_string(s.path("log.bg")).unwrap().trim().parse().unwrap();
    assert!(!still_alive_after_a_while(bg), "the probe's background process {bg} outlived it");
}

#[test]
fn term_to_the_drivers_group_stops_the_driver_and_the_probe() {
    use std::os::unix::process::CommandExt as _;
    let s = Search::new();
    let mut cmd = s.command(&[("FAKE_PROBE_SLEEP", "300")]);
    // As the bootstrap starts it: leading a process group of its own.
    cmd.process_group(0);
    let child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s.path("log.started").exists() {
        assert!(Instant::now() < deadline, "the probe never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let probe: i32 = std::fs::read_to_string(s.path("log.started")).unwrap().parse().unwrap();
    let bg: i32 = std::fs::read_to_string(s.path("log.bg")).unwrap().trim().parse().unwrap();
    let status = Command::new("kill").args(["-TERM", "--", &format!("-{}", child.id())]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    for pid in [probe, bg] {
        let alive = still_alive_after_a_while(pid);
        if alive {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        assert!(!alive, "process {pid} of the probe outlived the driver");
    }
    assert_eq!(s.sizes(), [(64, true)], "no real run after TERM");
    assert_eq!(s.state()["phase"], "stopped");
}

#[test]
fn a_restarted_run_reuses_the_size_it_chose() {
    let s = Search::new();
    let out = s.run(&[("FAKE_FITS", "20"), ("THESEUS_DISPATCH_BISECT_STEPS", "0"), ("FAKE_EXIT", "9")]);
    assert_eq!(out.status.code(), Some(9), "{}", stderr(&out));
    std::fs::remove_file(s.path("log")).unwrap();
    let out = s.run(&[("FAKE_FITS", "20")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.sizes(), [(16, false)], "no probe on the second start");
    let state = s.state();
    assert_eq!(state["reused"], true);
    assert_eq!(state["phase"], "done");
    assert_eq!(outcomes(&state).len(), 3, "the first start's probes are kept");
}

#[test]
fn a_later_stage_searches_on_its_own() {
    let s = Search::new();
    let out = s.run(&[("FAKE_FITS", "20"), ("THESEUS_DISPATCH_BISECT_STEPS", "0")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::remove_file(s.path("log")).unwrap();
    let out = s.run(&[("FAKE_FITS", "40"), ("THESEUS_DISPATCH_BISECT_STEPS", "0"), ("THESEUS_STAGE", "2")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.sizes(), [(64, true), (32, true), (32, false)], "stage 2 does not reuse stage 1's 16");
    assert_eq!(read_json(&s.path("run/batch-search.stage-2.json"))["chosen"], 32);
    assert_eq!(s.state()["chosen"], 16, "stage 1's file is left as it was");
}

#[test]
fn a_choice_made_among_other_candidates_is_not_reused() {
    let s = Search::new();
    let out = s.run(&[("FAKE_FITS", "20"), ("THESEUS_DISPATCH_BISECT_STEPS", "0")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.state()["chosen"], 16);
    std::fs::remove_file(s.path("log")).unwrap();
    let out = s.run(&[("FAKE_FITS", "20"), ("THESEUS_DISPATCH_BATCH_CANDIDATES", "24,12")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.sizes()[..2], [(24, true), (12, true)], "searched again");
    assert_eq!(s.state()["reused"], Value::Null);
}

#[test]
fn bad_candidates_and_usage_are_errors_that_say_so() {
    let s = Search::new();
    for (candidates, says) in [("64,x", "not a positive whole number"), ("16,32", "largest first"), ("8,0", "positive")]
    {
        let out = s.run(&[("THESEUS_DISPATCH_BATCH_CANDIDATES", candidates)]);
        assert_eq!(out.status.code(), Some(2), "{candidates}: {}", stderr(&out));
        assert!(stderr(&out).contains("THESEUS_DISPATCH_BATCH_CANDIDATES") && stderr(&out).contains(says));
    }
    let out = s.run(&[("THESEUS_NUM_PROCESSES", "2")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("runs in one process"), "{}", stderr(&out));
    let out = s.run(&[("THESEUS_DISPATCH_MIN_STABLE_CHECK_SECONDS", "soon")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(s.starts().is_empty(), "nothing ran");
}

/// The bootstrap with `batch_search` set, on the fake job.
fn bootstrap_input(h: &Harness) -> BootstrapInput {
    std::fs::write(h.work.join("fake.py"), FAKE_JOB).unwrap();
    let mut input = h.input(&["python", "fake.py"]);
    input.batch_search = true;
    input.env = vec![
        env_var("FAKE_LOG", &h.dir("log"), false),
        env_var("THESEUS_DISPATCH_BATCH_CANDIDATES", "64 32 16", false),
        env_var("THESEUS_DISPATCH_PROBE_COOLDOWN_SECONDS", "0", false),
    ];
    input
}

#[test]
fn the_bootstrap_runs_the_job_through_the_search_and_records_it() {
    let h = Harness::new();
    let input = bootstrap_input(&h);
    let (rendered, out) = h.run(&input, &[("FAKE_FITS", "40")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_parses(script(&rendered));
    assert!(script(&rendered).contains("\ntheseus_batch_search=1\n"));
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["status"], "completed");
    let search = &metadata["batch_search"];
    assert_eq!(search["chosen"], 40, "{metadata}");
    assert_eq!(search["phase"], "done");
    assert_eq!(search["probes"].as_array().unwrap().len(), 5);
    assert!(stderr(&out).contains("batch_search.py -- "), "{}", stderr(&out));
    // Without the flag the script says 0 and the job runs once, as it is.
    let h = Harness::new();
    let mut input = bootstrap_input(&h);
    input.batch_search = false;
    let (rendered, out) = h.run(&input, &[("THESEUS_DISPATCH_BATCH_SIZE", "12")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(script(&rendered).contains("\ntheseus_batch_search=0\n"));
    assert!(h.metadata("metadata.json").get("batch_search").is_none());
}

#[test]
fn a_size_in_the_environment_skips_the_search() {
    let h = Harness::new();
    let input = bootstrap_input(&h);
    let (_, out) = h.run(&input, &[("THESEUS_DISPATCH_BATCH_SIZE", "12")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("THESEUS_DISPATCH_BATCH_SIZE=12 is set; not searching"), "{}", stderr(&out));
    let log = std::fs::read_to_string(h.dir("log")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("\"size\": 12"), "{log}");
    assert!(!h.run.join("batch-search.json").exists());
}

#[test]
fn term_to_the_bootstrap_during_a_probe_stops_it_and_records_preemption() {
    term_during_a_probe(&[]);
}

/// With no grace the bootstrap KILLs the driver's group at once: the probe, in a group of its
/// own, still ends (the driver stops its group, or the probe dies with the driver).
#[test]
fn a_probe_ends_even_when_the_bootstrap_kills_the_driver_at_once() {
    term_during_a_probe(&[("THESEUS_TERM_GRACE_SECONDS", "0")]);
    // The original's name for the grace, as the bootstrap reads it.
    term_during_a_probe(&[("THESEUS_MAIN_CHILD_TERM_GRACE_SECONDS", "0")]);
}

fn term_during_a_probe(env: &[(&str, &str)]) {
    let h = Harness::new();
    let input = bootstrap_input(&h);
    let mut env = env.to_vec();
    env.push(("FAKE_PROBE_SLEEP", "300"));
    let (_, child) = h.spawn(&input, &env);
    let started = PathBuf::from(h.dir("log.started"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the probe never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let probe: i32 = std::fs::read_to_string(&started).unwrap().parse().unwrap();
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    if env.len() == 1 {
        assert!(!stderr(&out).contains("did not stop within"), "the driver took the whole grace: {}", stderr(&out));
    }
    let alive = still_alive_after_a_while(probe);
    if alive {
        let _ = Command::new("kill").args(["-KILL", &probe.to_string()]).status();
    }
    assert!(!alive, "the probe {probe} outlived the bootstrap");
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["status"], "preempted");
    assert!(metadata["batch_search"]["phase"] == "stopped" || metadata["batch_search"]["phase"] == "scan");
}

#[test]
fn each_stage_that_asks_searches_on_its_own_and_the_metadata_shows_the_current_ones() {
    let h = Harness::new();
    let mut input = bootstrap_input(&h);
    input.stages = vec![crate::job::stages::Stage {
        source: "second.yaml".into(),
        label: "python fake.py".into(),
        entrypoint: vec!["python".into(), "fake.py".into()],
        distributed: Distributed::None,
        config: json!({}),
        batch_search: true,
    }];
    let env = [("FAKE_FITS_STAGE1", "20"), ("FAKE_FITS_STAGE2", "40"), ("THESEUS_DISPATCH_BISECT_STEPS", "0")];
    let (_, out) = h.run(&input, &env);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read_json(&h.run.join("batch-search.json"))["chosen"], 16);
    assert_eq!(read_json(&h.run.join("batch-search.stage-2.json"))["chosen"], 32);
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["batch_search"]["chosen"], 32, "{metadata}");
    let log = std::fs::read_to_string(h.dir("log")).unwrap();
    let sizes: Vec<u64> =
        log.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [64, 32, 16, 16, 64, 32, 32]);
}
