//! Stages (`-s FILE`): run in order in one work dir, each with its own config, name,
//! checkpoints, status and log; stop at the first failure; skipped on a restart once completed;
//! a signal during a stage stops it and the stages after it.

use super::*;
use crate::job::stages::Stage;

/// A stage that records what it saw in `$THESEUS_RUN_DIR/order` (one line per run), prints a
/// line on stdout and on stderr, and exits with `$STAGE<i>_EXIT` (default 0). With
/// `STAGE<i>_SLEEP`, first touches `started-<i>` (holding its pid) and sleeps.
const STAGE_SH: &str = r#"i=$THESEUS_STAGE
printf '%s|%s|%s|%s|%s\n' "$i" "$THESEUS_NUM_STAGES" "$(tr -d '\n ' < "$THESEUS_CONFIG")" "$THESEUS_JOB_NAME" "${THESEUS_CHECKPOINT_DIR##*/}" >> "$THESEUS_RUN_DIR/order"
echo "out of stage $i"
echo "err of stage $i" >&2
eval "sleep_for=\${STAGE${i}_SLEEP:-}"
if [ -n "$sleep_for" ]; then echo $$ > "$THESEUS_RUN_DIR/.started-$i" && mv "$THESEUS_RUN_DIR/.started-$i" "$THESEUS_RUN_DIR/started-$i"; sleep "$sleep_for"; fi
eval "exit \${STAGE${i}_EXIT:-0}""#;

fn stage(n: usize) -> Stage {
    Stage {
        source: format!("stage {n}.yaml"),
        label: "sh -c ...".into(),
        entrypoint: vec!["/bin/sh".into(), "-c".into(), STAGE_SH.into(), "sh".into()],
        distributed: Distributed::None,
        config: json!({"stage": n}),
        batch_search: false,
    }
}

/// A job of three stages (all `STAGE_SH`), the main file `main.yaml`.
fn three(h: &Harness) -> BootstrapInput {
    let mut input = h.input(&["/bin/sh", "-c", STAGE_SH, "sh"]);
    input.config = json!({"stage": 1});
    input.source = "main.yaml".into();
    input.stages = vec![stage(2), stage(3)];
    input
}

fn order(h: &Harness) -> Vec<String> {
    std::fs::read_to_string(h.run.join("order")).unwrap_or_default().lines().map(str::to_owned).collect()
}

fn statuses(metadata: &Value) -> Vec<(String, Value)> {
    metadata["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["status"].as_str().unwrap().to_owned(), s["exit_code"].clone()))
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn stages_run_in_order_each_with_its_config_name_status_and_log() {
    let h = Harness::new();
    let input = three(&h);
    let (rendered, out) = h.run(&input, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_parses(script(&rendered));
    let configs: Vec<_> =
        rendered.files.iter().map(|f| f.path.as_str()).filter(|p| p.ends_with("config.json")).collect();
    assert_eq!(configs, [".theseus/config.json", ".theseus/stage-2/config.json", ".theseus/stage-3/config.json"]);
    assert_eq!(
        order(&h),
        [
            "1|3|{\"stage\":1}|job|job",
            "2|3|{\"stage\":2}|job_stage2|job_stage2",
            "3|3|{\"stage\":3}|job_stage3|job_stage3"
        ]
    );
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["status"], "completed");
    assert_eq!(metadata["stage"], 3);
    // The job's own status is the only `"status": "` in the file (the Slurm follow greps for it).
    assert_eq!(read(&h.run.join("metadata.json")).matches("\"status\": \"").count(), 1);
    let stages = metadata["stages"].as_array().unwrap();
    let names: Vec<_> = stages.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["main.yaml", "stage 2.yaml", "stage 3.yaml"]);
    for s in stages {
        assert_eq!((s["status"].as_str(), s["exit_code"].as_i64()), (Some("completed"), Some(0)), "{s}");
        assert!(s["start"].as_str().is_some_and(|t| t.ends_with('Z')) && s["end"].is_string(), "{s}");
    }
    for i in 1..=3 {
        let log = read(&h.run.join(format!("stage-{i}.log")));
        assert!(log.contains(&format!("out of stage {i}\n")) && log.contains(&format!("err of stage {i}\n")), "{log}");
        assert!(log.contains(&format!("[theseus] stage {i} of 3 (")), "{log}");
        for j in (1..=3).filter(|j| *j != i) {
            assert!(!log.contains(&format!("of stage {j}\n")), "stage-{i}.log: {log}");
        }
    }
    // The backend's own capture still gets everything.
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    for i in 1..=3 {
        assert!(
            stdout.contains(&format!("out of stage {i}\n")) && err.contains(&format!("err of stage {i}\n")),
            "{err}"
        );
    }
    // A job of one stage has no stage fields and no stage log (as before stages existed).
    let h = Harness::new();
    let (_, out) = h.run(&h.input(&["/bin/sh", "-c", STAGE_SH, "sh"]), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let metadata = h.metadata("metadata.json");
    assert!(metadata.get("stages").is_none() && metadata.get("stage").is_none(), "{metadata}");
    assert!(!h.run.join("stage-1.log").exists());
    assert_eq!(order(&h)[0].split('|').take(2).collect::<Vec<_>>(), ["1", "1"]);
}

#[test]
fn the_first_failing_stage_ends_the_job_with_its_exit_code() {
    let h = Harness::new();
    let (_, out) = h.run(&three(&h), &[("STAGE2_EXIT", "5")]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert_eq!(order(&h).iter().map(|l| &l[..1]).collect::<Vec<_>>(), ["1", "2"], "stage 3 did not run");
    let metadata = h.metadata("metadata.json");
    assert_eq!((metadata["status"].as_str(), metadata["exit_code"].as_i64()), (Some("failed"), Some(5)));
    assert_eq!(metadata["stage"], 2);
    assert_eq!(
        statuses(&metadata),
        [("completed".into(), json!(0)), ("failed".into(), json!(5)), ("pending".into(), Value::Null)]
    );
    assert!(!h.run.join("stage-3.log").exists());
    let err = stderr(&out);
    assert!(
        err.contains("the job exited with 5 in stage 2 of 3 (stage 2.yaml); the stages after it do not run"),
        "{err}"
    );
}

#[test]
fn a_restart_skips_the_stages_that_completed() {
    let h = Harness::new();
    let input = three(&h);
    let (_, out) = h.run(&input, &[("STAGE2_EXIT", "7")]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    // The restarted attempt (same run dir): stage 1 is not run again, 2 and 3 are.
    let (_, out) = h.run(&input, &[("THESEUS_RESTART_COUNT", "1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stages: Vec<String> = order(&h).iter().map(|l| l[..1].to_owned()).collect();
    assert_eq!(stages, ["1", "2", "2", "3"]);
    let err = stderr(&out);
    assert!(
        err.contains(
            "[theseus] stage 1 of 3 (main.yaml) completed in an earlier attempt of this run; not running it again"
        ),
        "{err}"
    );
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["status"], "completed");
    assert_eq!(statuses(&metadata).iter().filter(|(s, _)| s == "completed").count(), 3);
    assert!(metadata["stages"][0]["start"].is_string(), "the earlier attempt's times are kept: {metadata}");
    // Both attempts of stage 2 are in its log.
    assert_eq!(read(&h.run.join("stage-2.log")).matches("out of stage 2").count(), 2);
    // A new run (another run dir) starts from stage 1 again.
    let h2 = Harness::new();
    let (_, out) = h2.run(&three(&h2), &[("THESEUS_RESTART_COUNT", "1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(order(&h2).len(), 3);
}

#[test]
fn a_signal_during_stage_two_stops_it_and_the_stages_after_it() {
    let h = Harness::new();
    let (_, child) = h.spawn(&three(&h), &[("STAGE2_SLEEP", "60")]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h.run.join("started-2").exists() {
        assert!(Instant::now() < deadline, "stage 2 never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stage_pid = read(&h.run.join("started-2")).trim().to_owned();
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let metadata = h.metadata("metadata.json");
    assert_eq!((metadata["status"].as_str(), metadata["exit_code"].as_i64()), (Some("preempted"), Some(143)));
    assert_eq!(
        statuses(&metadata),
        [("completed".into(), json!(0)), ("preempted".into(), json!(143)), ("pending".into(), Value::Null)]
    );
    assert_eq!(order(&h).len(), 2, "stage 3 did not run");
    let alive = Command::new("kill").args(["-0", &stage_pid]).stderr(Stdio::null()).status().unwrap();
    assert!(!alive.success(), "stage 2's process {stage_pid} is still running");
    // The bootstrap's own lines about the signal reached both its output and the stage's log.
    assert!(stderr(&out).contains("[theseus] received SIGTERM"), "{}", stderr(&out));
    assert!(read(&h.run.join("stage-2.log")).contains("[theseus] received SIGTERM"));
    // The restart runs stage 2 again (it did not complete), not stage 1.
    let (_, out) = h.run(&three(&h), &[("THESEUS_RESTART_COUNT", "1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(order(&h).iter().map(|l| l[..1].to_owned()).collect::<Vec<_>>(), ["1", "2", "2", "3"]);
}

#[test]
fn each_stage_resumes_from_its_own_checkpoints_and_restore_is_the_first_stages() {
    let h = Harness::new();
    let mut input = three(&h);
    let restore = h.dir("shared/restore-me");
    std::fs::create_dir_all(&restore).unwrap();
    input.resume.restore = Some(restore.clone());
    // Stage 2 left a checkpoint in an earlier run of the name: it resumes from it.
    let stage2 = format!("{}_stage2", input.checkpoint_dir());
    std::fs::create_dir_all(format!("{stage2}/step_3")).unwrap();
    std::fs::write(format!("{stage2}/latest"), "step_3\n").unwrap();
    let sh = r#"printf '%s %s\n' "$THESEUS_STAGE" "${THESEUS_RESTORE_FROM-none}" >> "$THESEUS_RUN_DIR/restore""#;
    input.entrypoint = vec!["/bin/sh".into(), "-c".into(), sh.into()];
    for s in &mut input.stages {
        s.entrypoint = input.entrypoint.clone();
    }
    let (_, out) = h.run(&input, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read(&h.run.join("restore")), format!("1 {restore}\n2 {stage2}/step_3\n3 none\n"));
}

#[test]
fn a_stage_is_checked_like_the_entrypoint() {
    let h = Harness::new();
    let mut input = three(&h);
    input.stages[1].distributed = Distributed::Jax;
    let err = render(&input).unwrap_err().to_string();
    assert!(err.starts_with("stage 3 (stage 3.yaml): distributed: jax needs a python entrypoint"), "{err}");
    input.stages[1].entrypoint.clear();
    assert!(render(&input).unwrap_err().to_string().contains("stage 3 (stage 3.yaml): the entrypoint is empty"));
    // Hostile stage names and arguments parse and reach the job as they are.
    let mut input = three(&h);
    for (value, s) in h.hostile().into_iter().zip([0, 1].iter().cycle()) {
        input.stages[*s].source = value.clone();
        input.stages[*s].entrypoint.push(value);
        assert_parses(script(&render(&input).unwrap()));
    }
    let (_, out) = h.run(&input, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let names: Vec<_> = h.metadata("metadata.json")["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["main.yaml", input.stages[0].source.as_str(), input.stages[1].source.as_str()]);
    h.assert_no_injection();
}

#[test]
fn each_rank_keeps_its_own_stage_logs_status_and_completion() {
    let h = Harness::new();
    let mut input = three(&h);
    input.launch = Launch::Local { coordinator_port: 4567 };
    let rank1 = [("THESEUS_LOCAL_RANK", "1"), ("THESEUS_LOCAL_WORLD_SIZE", "2")];
    let (_, out) = h.run(&input, &[rank1[0], rank1[1], ("STAGE3_EXIT", "4")]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let metadata = h.metadata("metadata.rank-1.json");
    assert_eq!(
        statuses(&metadata),
        [("completed".into(), json!(0)), ("completed".into(), json!(0)), ("failed".into(), json!(4))]
    );
    assert!(!h.run.join("metadata.json").exists(), "rank 1 leaves rank 0's files alone");
    assert!(read(&h.run.join("stage-2.rank-1.log")).contains("out of stage 2"));
    assert!(!h.run.join("stage-2.log").exists());
    // Rank 1's restart runs every stage again while rank 0 has not recorded them: the ranks
    // must agree on which stages they run.
    let restart = [rank1[0], rank1[1], ("THESEUS_RESTART_COUNT", "1"), ("STAGE3_EXIT", "4")];
    let (_, out) = h.run(&input, &restart);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(order(&h).len(), 6);
    assert!(
        stderr(&out).contains("completed on this rank in an earlier attempt, but not on rank(s) 0"),
        "{}",
        stderr(&out)
    );
    // Once rank 0 recorded them too, both skip them.
    let (_, out) = h.run(&input, &[("THESEUS_LOCAL_RANK", "0"), rank1[1], ("STAGE3_EXIT", "4")]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(order(&h).len(), 9);
    let (_, out) = h.run(&input, &[rank1[0], rank1[1], ("THESEUS_RESTART_COUNT", "2")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(order(&h).len(), 10);
    assert!(stderr(&out).contains("stage 2 of 3 (stage 2.yaml) completed in an earlier attempt"), "{}", stderr(&out));
}

#[test]
fn a_signal_between_two_stages_records_the_first_as_completed_and_stops() {
    let h = Harness::new();
    let mut input = three(&h);
    // Stage 1 leaves a process outside its group holding its output open: the bootstrap then
    // waits (at most 5 s) for the stage log's copy, and the signal arrives meanwhile.
    let escape = r#"setsid sleep 60 & echo $! > "$THESEUS_RUN_DIR/escaped"; exit 0"#;
    input.entrypoint = vec!["/bin/sh".into(), "-c".into(), escape.into()];
    let (_, child) = h.spawn(&input, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h.run.join(".stages/done-1").exists() {
        assert!(Instant::now() < deadline, "stage 1 never completed");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    // The escaped process holds the output pipes: it goes first, or the wait would last its 60 s.
    std::thread::sleep(Duration::from_millis(500));
    let escaped = read(&h.run.join("escaped")).trim().to_owned();
    let _ = Command::new("kill").args(["-KILL", &escaped]).status();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["status"], "preempted");
    assert_eq!(
        statuses(&metadata),
        [("completed".into(), json!(0)), ("pending".into(), Value::Null), ("pending".into(), Value::Null)]
    );
    assert!(order(&h).is_empty(), "stage 2 did not start");
}
