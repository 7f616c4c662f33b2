//! `output.log`: the job's stdout and stderr (and the bootstrap's lines from the job's start)
//! copied beside `metadata.json` (as the original's status tree had it), while they still go
//! where they went before; and what a job config of the
//! original adds to the bootstrap (`job.py`, the runner's variables, `job_key`).

use std::os::unix::process::CommandExt;

use super::*;

/// Prints one line on each stream, then more after a TERM (which it catches), or ends.
const TALKER: &str = r#"
import os, signal, sys, time
def bye(*_):
    print("stdout after TERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("stdout line", flush=True)
print("stderr line", file=sys.stderr, flush=True)
if os.environ.get("TALK_WAIT"):
    open(os.path.join(os.environ["THESEUS_RUN_DIR"], "started"), "w").close()
    time.sleep(60)
"#;

fn talker(h: &Harness) -> BootstrapInput {
    std::fs::write(h.work.join("talk.py"), TALKER).unwrap();
    h.input(&["python", "talk.py"])
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_jobs_output_is_copied_into_output_log_and_still_reaches_its_streams() {
    let h = Harness::new();
    let (_, out) = h.run(&talker(&h), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "stdout line\n");
    assert!(stderr(&out).contains("\nstderr line\n"), "{}", stderr(&out));
    let log = read(&h.run.join("output.log"));
    assert!(log.contains("stdout line\n") && log.contains("stderr line\n"), "{log:?}");
    // With the bootstrap's own lines from the job's start on, as the original's had its own.
    assert!(log.contains("[theseus] running: "), "{log:?}");
    assert_eq!(h.metadata("metadata.json")["status"], "completed");
    // No FIFO is left behind.
    let names: Vec<String> =
        std::fs::read_dir(&h.run).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.starts_with(".output")), "{names:?}");
}

#[test]
fn other_ranks_write_their_own_output_log() {
    let h = Harness::new();
    let mut input = talker(&h);
    input.launch = Launch::Local { coordinator_port: 4567 };
    let (_, out) = h.run(&input, &[("THESEUS_LOCAL_RANK", "1"), ("THESEUS_LOCAL_WORLD_SIZE", "2")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(read(&h.run.join("output.rank-1.log")).contains("stdout line\n"));
    assert!(!h.run.join("output.log").exists(), "rank 1 leaves rank 0's log alone");
}

#[test]
fn a_term_to_the_whole_process_group_still_copies_the_jobs_last_words() {
    // Slurm and the local backend's cancel signal the bootstrap's process group: the copy
    // ignores TERM and ends when the job has, so what the job printed while stopping is kept.
    let h = Harness::new();
    let rendered = h.install(&talker(&h));
    let mut cmd = Command::new("bash");
    cmd.arg(h.work.join(&rendered.entry))
        .current_dir(h.tmp.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", h.tmp.path())
        .env("THESEUS_PYTHON", "python3")
        .env("TALK_WAIT", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h.run.join("started").exists() {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let group = format!("-{}", child.id());
    assert!(Command::new("kill").args(["-TERM", "--", &group]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("stdout after TERM"), "{}", stderr(&out));
    let log = read(&h.run.join("output.log"));
    assert!(log.contains("stdout line\n") && log.contains("stdout after TERM\n"), "{log:?}");
    assert_eq!(h.metadata("metadata.json")["status"], "preempted");
}

#[test]
fn a_background_process_holding_the_output_does_not_hold_the_final_metadata() {
    // It ignores TERM and keeps the job's stdout open: the copy is waited for a bounded time.
    let h = Harness::new();
    let job = r#"echo early; (trap '' TERM; exec sleep 300) & echo $! > "$THESEUS_RUN_DIR/orphan"; echo done"#;
    let input = h.input(&["/bin/sh", "-c", job]);
    let (_, out) = h.run(&input, &[("THESEUS_CAPTURE_WAIT_SECONDS", "1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(h.metadata("metadata.json")["status"], "completed");
    let log = read(&h.run.join("output.log"));
    assert!(log.contains("early\n") && log.contains("done\n"), "{log:?}");
    let orphan = read(&h.run.join("orphan")).trim().to_owned();
    let _ = Command::new("kill").args(["-KILL", &orphan]).status();
}

#[test]
fn a_job_config_gets_the_runner_its_variables_and_its_key_in_the_metadata() {
    let h = Harness::new();
    let mut input = h.input(&["python", "dump.py"]);
    assert!(!render(&input).unwrap().files.iter().any(|f| f.path.ends_with("job.py")));
    input.job_config = Some(JobConfigRun { key: "toy/train".into(), cluster: "lab".into() });
    input.hardware = Some(Hardware { chip: None, count: 0, nodes: 1, host: "box".into() });
    let (rendered, out) = h.run(&input, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runner = rendered.files.iter().find(|f| f.path == ".theseus/job.py").unwrap();
    assert_eq!(runner.contents, JOB_RUNNER);
    let env = &h.dump()["env"];
    for (name, value) in [
        ("THESEUS_JOB_KEY", "toy/train"),
        ("THESEUS_CLUSTER", "lab"),
        ("THESEUS_CHIP", ""),
        ("THESEUS_TOTAL_CHIPS", "0"),
        ("THESEUS_NODES", "1"),
        ("THESEUS_HOST", "box"),
    ] {
        assert_eq!(env[name], value, "{name}");
    }
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["job_key"], "toy/train");
    assert_eq!(metadata["hardware"]["hosts"], json!(["box"]));
    assert_eq!(metadata["hardware"]["total_chips"], 0);
}
