//! The resume step: `THESEUS_CHECKPOINT_DIR`, `THESEUS_ATTEMPT` and `THESEUS_RESTORE_FROM` in
//! the contract's order of precedence, the `latest` marker read defensively, and the values in
//! `env.sh` and `metadata.json`. Every case runs the real script with bash.

use super::*;

/// The job's checkpoint dir in the harness (`checkpoints` is `shared/check points/`).
fn ckpt_dir(h: &Harness) -> PathBuf {
    h.tmp.path().join("shared/check points/proj/grp/job")
}

/// A checkpoint dir `name` under the job's checkpoint dir, and `latest` naming it (written by
/// rename, as the examples do).
fn checkpoint(h: &Harness, name: &str) -> PathBuf {
    let dir = ckpt_dir(h).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    marker(h, &format!("{name}\n"));
    dir
}

fn marker(h: &Harness, text: &str) {
    std::fs::create_dir_all(ckpt_dir(h)).unwrap();
    let tmp = ckpt_dir(h).join(".latest.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, ckpt_dir(h).join("latest")).unwrap();
}

/// Runs the dump job once; returns (THESEUS_ATTEMPT, THESEUS_RESTORE_FROM, the resume line).
fn start(h: &Harness, input: &BootstrapInput, env: &[(&str, &str)]) -> (String, Option<String>, String) {
    let _ = std::fs::remove_file(h.run.join("dump.json"));
    let (_, out) = h.run(input, env);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let dump = h.dump();
    let line = err.lines().find(|l| l.contains("attempt ")).unwrap_or_else(|| panic!("no resume line: {err}"));
    assert_eq!(err.lines().filter(|l| l.contains("attempt ")).count(), 1, "{err}");
    (
        dump["env"]["THESEUS_ATTEMPT"].as_str().unwrap().to_owned(),
        dump["env"]["THESEUS_RESTORE_FROM"].as_str().map(str::to_owned),
        line.to_owned(),
    )
}

fn path(p: &Path) -> Option<String> {
    Some(p.to_str().unwrap().to_owned())
}

#[test]
fn the_checkpoint_dir_is_per_name_and_made_and_a_first_start_without_a_marker_starts_fresh() {
    let h = Harness::new();
    let input = h.input(&["python", "dump.py"]);
    let (attempt, from, line) = start(&h, &input, &[]);
    assert_eq!((attempt.as_str(), from), ("1", None));
    assert!(line.contains("starting fresh (no latest marker in"), "{line}");
    assert!(ckpt_dir(&h).is_dir());
    assert_eq!(h.dump()["env"]["THESEUS_CHECKPOINT_DIR"], Value::from(ckpt_dir(&h).to_str().unwrap()));
    assert_eq!(input.checkpoint_dir(), ckpt_dir(&h).to_str().unwrap());
}

#[test]
fn an_earlier_runs_marker_resumes_and_this_runs_own_marker_wins_on_a_restart() {
    let h = Harness::new();
    let earlier = checkpoint(&h, "step_40");
    let input = h.input(&["python", "dump.py"]);
    let (attempt, from, line) = start(&h, &input, &[]);
    assert_eq!((attempt.as_str(), from), ("1", path(&earlier)));
    assert!(line.contains("(latest, left by an earlier run of job)"), "{line}");
    // The same start again (nothing new written): still the earlier run's.
    let (_, from, line) = start(&h, &input, &[("THESEUS_RESTART_COUNT", "1")]);
    assert_eq!(from, path(&earlier));
    assert!(line.contains("left by an earlier run"), "{line}");
    // This run writes a checkpoint, then is restarted (attempt 3).
    let own = checkpoint(&h, "step_60");
    let (attempt, from, line) = start(&h, &input, &[("THESEUS_RESTART_COUNT", "2")]);
    assert_eq!((attempt.as_str(), from), ("3", path(&own)));
    assert!(
        line.contains(&format!("attempt 3: resuming from {} (latest, written by this run)", own.display())),
        "{line}"
    );
}

#[test]
fn restore_wins_over_an_earlier_marker_but_not_over_this_runs_own() {
    let h = Harness::new();
    checkpoint(&h, "step_40");
    let given = h.tmp.path().join("elsewhere/it's \"step\" $(x)");
    std::fs::create_dir_all(&given).unwrap();
    let mut input = h.input(&["python", "dump.py"]);
    input.resume.restore = path(&given);
    let (_, from, line) = start(&h, &input, &[]);
    assert_eq!(from, path(&given));
    assert!(line.contains("(submit --restore)"), "{line}");
    let own = checkpoint(&h, "step_80");
    let (_, from, line) = start(&h, &input, &[("THESEUS_RESTART_COUNT", "1")]);
    assert_eq!(from, path(&own));
    assert!(line.contains("written by this run"), "{line}");
    h.assert_no_injection();
}

#[test]
fn fresh_ignores_an_earlier_marker_but_not_this_runs_own() {
    let h = Harness::new();
    checkpoint(&h, "step_40");
    let mut input = h.input(&["python", "dump.py"]);
    input.resume.fresh = true;
    let (_, from, line) = start(&h, &input, &[]);
    assert_eq!(from, None);
    assert!(line.contains("starting fresh (submit --fresh"), "{line}");
    // Rewritten in place with the same text (as the original's writer does): still this run's.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(ckpt_dir(&h).join("latest"), "step_40\n").unwrap();
    let (_, from, line) = start(&h, &input, &[("THESEUS_RESTART_COUNT", "1")]);
    assert_eq!(from, path(&ckpt_dir(&h).join("step_40")));
    assert!(line.contains("written by this run"), "{line}");
}

#[test]
fn a_missing_restore_dir_stops_the_job_naming_the_flag() {
    let h = Harness::new();
    let mut input = h.input(&["python", "dump.py"]);
    input.resume.restore = Some(h.dir("no/such/step"));
    let (_, out) = h.run(&input, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("submit --restore: ") && err.contains("no/such/step is not a directory"), "{err}");
    assert!(!h.run.join("dump.json").exists(), "the job ran");
}

#[test]
fn a_bad_latest_marker_is_ignored_with_a_line_saying_why() {
    let cases: &[(&str, &str)] = &[
        ("", "is empty"),
        ("  \r\n", "is empty"),
        ("step_99\n", "which is not a directory"),
        ("../../../../etc\n", "leads out of the checkpoint dir"),
        ("a/../../b\n", "leads out of the checkpoint dir"),
        ("step\u{1b}[2J\n", "control characters"),
    ];
    for (text, why) in cases {
        let h = Harness::new();
        std::fs::create_dir_all(h.tmp.path().join("etc")).unwrap();
        marker(&h, text);
        let (attempt, from, line) = start(&h, &h.input(&["python", "dump.py"]), &[]);
        assert_eq!((attempt.as_str(), from), ("1", None), "{text:?}");
        assert!(line.contains("starting fresh (the latest marker") && line.contains(why), "{text:?}: {line}");
    }
    // A directory as the marker, and an unreadable one, are not read either.
    let h = Harness::new();
    std::fs::create_dir_all(ckpt_dir(&h).join("latest")).unwrap();
    let (_, from, line) = start(&h, &h.input(&["python", "dump.py"]), &[]);
    assert_eq!(from, None);
    assert!(line.contains("is not a readable file"), "{line}");
}

#[test]
fn a_marker_may_name_an_absolute_dir_and_blanks_around_the_name_are_dropped() {
    let h = Harness::new();
    let abs = h.tmp.path().join("other place/step_7");
    std::fs::create_dir_all(&abs).unwrap();
    marker(&h, &format!("  {}/  \r\nignored second line\n", abs.display()));
    let (_, from, _) = start(&h, &h.input(&["python", "dump.py"]), &[]);
    assert_eq!(from, path(&abs));
    let h = Harness::new();
    std::fs::create_dir_all(ckpt_dir(&h).join("step_5")).unwrap();
    marker(&h, " step_5 "); // no newline, as the original's `register` writes it
    let (_, from, _) = start(&h, &h.input(&["python", "dump.py"]), &[]);
    assert_eq!(from, path(&ckpt_dir(&h).join("step_5")));
}

#[test]
fn the_attempt_comes_from_the_backends_restart_count() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[], "1"),
        (&[("THESEUS_RESTART_COUNT", "")], "1"),
        (&[("THESEUS_RESTART_COUNT", "3")], "4"),
        (&[("THESEUS_RESTART_COUNT", "007")], "8"),
        (&[("THESEUS_RESTART_COUNT", "x1")], "1"),
        (&[("THESEUS_RESTART_COUNT", "99999999999999999999")], "1"),
        (&[("SLURM_RESTART_COUNT", "2")], "3"),
        (&[("THESEUS_RESTART_COUNT", "1"), ("SLURM_RESTART_COUNT", "5")], "2"),
        (&[("THESEUS_RESTART_COUNT", ""), ("SLURM_RESTART_COUNT", "5")], "6"),
        (&[("THESEUS_ATTEMPT", "9"), ("THESEUS_RESTORE_FROM", "/user/set")], "1"),
    ];
    let h = Harness::new();
    let input = h.input(&["python", "dump.py"]);
    for (env, want) in cases {
        let (attempt, from, _) = start(&h, &input, env);
        assert_eq!(attempt, *want, "{env:?}");
        assert_eq!(from, None, "{env:?}");
        assert_eq!(h.metadata("metadata.json")["attempt"], Value::from(want.parse::<u64>().unwrap()));
    }
}

#[test]
fn env_sh_and_metadata_carry_this_starts_values() {
    let h = Harness::new();
    let step = checkpoint(&h, "step_'$(touch pwned-env)'\"x\\");
    let input = h.input(&["python", "dump.py"]);
    let (rendered, out) = h.run(&input, &[("THESEUS_RESTART_COUNT", "4")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!script(&rendered).contains("step_"), "runtime values are never in the script");
    let metadata = h.metadata("metadata.json");
    assert_eq!((metadata["attempt"].clone(), metadata["restore_from"].clone()), (json!(5), json!(step.to_str())));
    let shown = Command::new("sh")
        .arg("-c")
        .arg(". \"$1\"; printf '%s|%s|%s' \"$THESEUS_ATTEMPT\" \"$THESEUS_RESTORE_FROM\" \"$THESEUS_CHECKPOINT_DIR\"")
        .arg("-")
        .arg(h.work.join(".theseus/env.sh"))
        .current_dir(h.tmp.path())
        .output()
        .unwrap();
    let text = String::from_utf8(shown.stdout).unwrap();
    assert_eq!(text, format!("5|{}|{}", step.display(), ckpt_dir(&h).display()));
    // A later start replaces the values (no duplicate block); without a checkpoint, none.
    std::fs::remove_file(ckpt_dir(&h).join("latest")).unwrap();
    let mut fresh = input.clone();
    fresh.resume.fresh = true;
    let _ = start(&h, &fresh, &[]);
    let env_sh = std::fs::read_to_string(h.work.join(".theseus/env.sh")).unwrap();
    assert_eq!(env_sh.matches("set by the bootstrap at start").count(), 1, "{env_sh}");
    assert!(
        env_sh.ends_with("export THESEUS_ATTEMPT=1\nunset THESEUS_RESTORE_FROM THESEUS_RESTORE_SOURCE\n"),
        "{env_sh}"
    );
    assert_eq!(h.metadata("metadata.json")["restore_from"], Value::Null);
    h.assert_no_injection();
    assert!(!h.tmp.path().join("pwned-env").exists() && !h.work.join("pwned-env").exists());
}
