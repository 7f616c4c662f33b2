//! A preemption the scheduler ends itself after a grace (Slurm's GraceTime): the bootstrap runs
//! `THESEUS_PREEMPT_HOLD`, gives the job the seconds it prints and then waits for the
//! scheduler's own end instead of exiting (a Slurm job that exits within its grace is recorded
//! FAILED, never requeued).

use super::*;

/// A hold script that prints `seconds` (what Slurm's says for a job in its grace).
fn hold_script(h: &Harness, seconds: &str) -> String {
    let path = h.tmp.path().join("hold.sh");
    std::fs::write(&path, format!("echo {seconds}\n")).unwrap();
    path.display().to_string()
}

#[test]
fn a_preemption_with_a_grace_gives_the_job_the_grace_and_waits_for_the_scheduler() {
    let h = Harness::new();
    let input = h.input(&["/bin/sh", "-c", DEAF_JOB]);
    let hold = hold_script(&h, "4");
    let env = [("THESEUS_PREEMPT_HOLD", hold.as_str()), ("THESEUS_KILL_DEADLINE_SECONDS", "2")];
    let (_, mut child) = h.spawn(&input, &env);
    let orphan = orphan_pid(&h);
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    // The job is stopped (after the grace the hold gives, not KillWait's), recorded preempted,
    // and the bootstrap is still there: the scheduler ends the attempt.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(h.run.join("metadata.json")).map_or(true, |m| !m.contains("\"preempted\"")) {
        assert!(Instant::now() < deadline, "never recorded preempted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!still_alive_after_a_while(orphan), "the job's group was stopped");
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "the bootstrap waits for the scheduler's end");
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(err.contains("did not stop within 3s"), "the grace is the hold's, a second before its end:\n{err}");
    assert!(err.contains("preempted with a grace") && err.contains("up to 4s"), "{err}");
    assert_eq!(h.metadata("metadata.json")["status"], "preempted");
}

#[test]
fn without_a_hold_a_signal_ends_the_attempt_as_before() {
    for hold in ["", "0", "soon"] {
        let h = Harness::new();
        let input = h.input(&["/bin/sh", "-c", DEAF_JOB]);
        let script = hold_script(&h, hold);
        let env = [("THESEUS_PREEMPT_HOLD", script.as_str()), ("THESEUS_TERM_GRACE_SECONDS", "1")];
        let (_, child) = h.spawn(&input, &env);
        let _ = orphan_pid(&h);
        assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(143), "{hold:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("preempted with a grace"), "{hold:?}: {}", stderr(&out));
    }
}

/// A hold script that hangs (the controller does not answer) is given up after 5 s: the job,
/// already TERMed, ends as without one, and the bootstrap does not wait.
#[test]
fn a_hold_that_hangs_is_given_up() {
    let h = Harness::new();
    let input = h.input(&["/bin/sh", "-c", r#"touch "$THESEUS_RUN_DIR/started"; exec sleep 300"#]);
    let script = h.tmp.path().join("hang.sh");
    std::fs::write(&script, "sleep 60; echo 100\n").unwrap();
    let script = script.display().to_string();
    let (_, child) = h.spawn(&input, &[("THESEUS_PREEMPT_HOLD", script.as_str())]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h.run.join("started").exists() {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(!stderr(&out).contains("preempted with a grace"), "{}", stderr(&out));
    assert_eq!(h.metadata("metadata.json")["status"], "preempted");
}
