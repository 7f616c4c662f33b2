//! The parsers against output recorded from a real Slurm 22.05.8 (the `ci/lab` cluster, as the
//! test user through the login node; see `test_data/recorded/README.md`). Scenario: job 1 runs
//! on both nodes with one GPU each, job 2 waits for resources, job 3 failed with exit code 3,
//! job 4 completed, job 5 was cancelled while pending.

use theseus_backend_slurm::parse::{sacct, sinfo, squeue};
use theseus_core::availability::NodeAvailability;
use theseus_core::backend::JobState;

fn recorded(name: &str) -> String {
    let path = format!("{}/test_data/recorded/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn node(name: &str, free: u32) -> NodeAvailability {
    NodeAvailability { name: name.into(), gpu_type: Some("h100".into()), total: 4, free, usable: true }
}

#[test]
fn sinfo_two_nodes_one_gpu_used_each() {
    let got = sinfo::parse(&recorded("sinfo_node_format.txt")).unwrap();
    // Slurm prints the partitions of a node in no fixed order.
    let mut names: Vec<_> = got.partitions.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["cpu", "gpu"]);
    for partition in &got.partitions {
        assert_eq!(partition.nodes, [node("node1", 3), node("node2", 3)], "partition {}", partition.name);
    }
}

#[test]
fn squeue_json_all_states() {
    let out = recorded("squeue_all.json");
    let job = |id| squeue::parse_json(&out, id).unwrap().unwrap();
    let running = job("1");
    assert_eq!((running.state, running.nodes.as_deref()), (JobState::Running, Some("node[1-2]")));
    let pending = job("2");
    assert_eq!(
        (pending.state, pending.message.as_deref()),
        (JobState::Pending, Some("pending (Resources): waiting for the nodes it asked for to be free"))
    );
    let failed = job("3");
    assert_eq!((failed.state, failed.exit_code), (JobState::Failed, Some(3)));
    let done = job("4");
    assert_eq!((done.state, done.exit_code), (JobState::Completed, Some(0)));
    assert_eq!(job("5").state, JobState::Cancelled);
    assert_eq!(squeue::parse_json(&out, "999").unwrap(), None);
}

/// Slurm 22.05 ignores `--jobs` with `--json`: every listed job comes back, also for an unknown
/// id (exit 0), so the parser's lookup by id is what selects the job.
#[test]
fn squeue_json_ignores_the_job_filter() {
    let out = recorded("squeue_unknown_job.json");
    assert_eq!(recorded("squeue_unknown_job.json.exit").trim(), "0");
    assert_eq!(squeue::parse_json(&out, "999").unwrap(), None);
    assert_eq!(squeue::parse_json(&out, "4").unwrap().unwrap().state, JobState::Completed);
}

#[test]
fn squeue_text_all_states() {
    let out = recorded("squeue_text.txt");
    let job = |id| squeue::parse_text(&out, id).unwrap().unwrap();
    assert_eq!((job("1").state, job("1").nodes.as_deref()), (JobState::Running, Some("node[1-2]")));
    assert_eq!(job("2").state, JobState::Pending);
    assert_eq!(job("3").state, JobState::Failed);
    assert_eq!(job("4").state, JobState::Completed);
    assert_eq!(job("5").state, JobState::Cancelled);
    // An unknown id makes the text form fail (exit 1, "Invalid job id specified"), not print nothing.
    assert_eq!(recorded("squeue_unknown_job.txt.exit").trim(), "1");
    assert_eq!(squeue::parse_text(&recorded("squeue_unknown_job.txt"), "999").unwrap(), None);
}

/// Without slurmdbd, sacct prints nothing on stdout, the reason on stderr, and exits 1.
#[test]
fn sacct_without_accounting() {
    assert_eq!(recorded("sacct_job3.txt.exit").trim(), "1");
    assert_eq!(recorded("sacct_job3.txt.stderr").trim(), "Slurm accounting storage is disabled");
    assert_eq!(sacct::parse(&recorded("sacct_job3.txt"), "3").unwrap(), None);
}

/// Issue 26, recorded by `record-slurm.sh DIR preempt` on the preempting lab: job 34
/// (requeue-able) and 35 (not) ran on `gpu`; the other team's 36 on `urgent` preempted both. 34
/// was requeued (PENDING, BeginTime, `restart_cnt` 1, `submit_time` = the preemption), then ran
/// its second attempt; 35 ended PREEMPTED. Nothing of 34 or 35 names 36: it is the job of
/// another partition that started at that second.
#[test]
fn preemption_and_requeue_as_slurm_reports_them() {
    use theseus_backend_slurm::parse::preempt;
    assert_eq!(recorded("preempt_ids.txt").trim(), "requeued=34 not_requeued=35 preemptor=36");
    let urgent =
        preempt::Preemptor { job_id: "36".into(), partition: "urgent".into(), user: Some("theseus-test-other".into()) };
    let by = "preempted at 2026-11-27T18:01:01Z (partition urgent job 36 of theseus-test-other)";

    let waiting = recorded("preempt_squeue_requeued.json");
    let job = squeue::parse_json(&waiting, "34").unwrap().unwrap();
    assert_eq!((job.state, job.reason.as_deref()), (JobState::Pending, Some("BeginTime")));
    let h = preempt::history(&waiting, "34").unwrap().unwrap();
    assert_eq!((h.restarts, h.interrupted_at, &h.preemptors), (1, Some(1_795_802_461), &vec![urgent.clone()]));
    assert!(recorded("preempt_scontrol_requeued.txt").contains(" Requeue=1 Restarts=1 "));
    assert_eq!(
        h.line(None, job.reason.as_deref()).unwrap(),
        format!("{by}; requeued, attempt 2, waiting to start (BeginTime)")
    );

    let second = recorded("preempt_squeue_second_attempt.json");
    assert_eq!(squeue::parse_json(&second, "34").unwrap().unwrap().state, JobState::Running);
    let h = preempt::history(&second, "34").unwrap().unwrap();
    assert_eq!(h.line(None, None).unwrap(), format!("{by}; requeued, attempt 2"));
    // Without --open-mode=append Slurm truncated the log when the second attempt started: the
    // first attempt's lines and slurmstepd's line are gone (theseus asks for append).
    let log = recorded("preempt_log_requeued.txt");
    assert_eq!(log.trim(), "attempt 1");
    assert_eq!(preempt::last_cancel(&log), None);

    let ended = preempt::history(&waiting, "35").unwrap().unwrap();
    assert_eq!(squeue::parse_json(&waiting, "35").unwrap().unwrap().state, JobState::Preempted);
    let cancel = preempt::last_cancel(&recorded("preempt_log_not_requeued.txt"));
    assert_eq!(cancel, Some(("2026-11-27T18:01:01".to_owned(), "preemption".to_owned())));
    assert_eq!(
        ended.line(cancel.as_ref(), None).unwrap(),
        format!("{by}; not requeued (the job is not requeue-able, or the site's PreemptMode cancels)")
    );
    // A job of another partition that started that second is no preemptor when its partition's
    // tier is not higher (found on the lab: a test's `cpu` job was named beside the real one).
    let tiers = preempt::partition_tiers(&recorded("preempt_scontrol_partitions.txt"));
    assert_eq!(
        tiers.iter().map(|(p, t)| (p.as_str(), *t)).collect::<Vec<_>>(),
        [("cpu", 1), ("gpu", 1), ("urgent", 10)]
    );
    let mut h = preempt::history(&waiting, "34").unwrap().unwrap();
    h.preemptors.insert(0, preempt::Preemptor { job_id: "33".into(), partition: "cpu".into(), user: None });
    h.keep_higher_tiers(&tiers);
    assert_eq!(h.preemptors, std::slice::from_ref(&urgent));
    // The preemptor itself and a job that was never interrupted have no such line.
    assert_eq!(preempt::history(&waiting, "36").unwrap().unwrap().line(None, None), None);
}

/// Issue 26, recorded by `record-slurm.sh DIR preempt-grace` (`gpu` has `GraceTime=10`): the
/// steps of 63 and 64 got TERM at once (the batch shells nothing); 63 ran on (as theseus's
/// bootstrap does) and was requeued when the grace ended, when the other team's 65 started; 64
/// exited 143 on its TERM and was recorded FAILED, not requeued, although requeue-able.
#[test]
fn preemption_with_a_grace_as_slurm_reports_it() {
    use theseus_backend_slurm::parse::preempt;
    assert_eq!(recorded("grace_ids.txt").trim(), "holds=63 exits=64 preemptor=65");
    assert!(recorded("grace_scontrol_partition.txt").contains(" GraceTime=10 "));
    let by = "preempted at 2026-11-27T18:31:37Z (partition urgent job 65 of theseus-test-other)";

    let within = recorded("grace_squeue_within.json");
    assert_eq!(squeue::parse_json(&within, "63").unwrap().unwrap().state, JobState::Running);
    let h = preempt::history(&within, "63").unwrap().unwrap();
    assert!(h.in_grace && h.requeue, "{h:?}");
    assert_eq!(
        h.line(None, None).unwrap(),
        format!("{by}; stopping within its partition's GraceTime, then requeued as attempt 2")
    );
    let exited = preempt::history(&within, "64").unwrap().unwrap();
    assert_eq!(squeue::parse_json(&within, "64").unwrap().unwrap().exit_code, Some(143));
    assert!(recorded("grace_scontrol_exited.txt").contains(" JobState=FAILED Reason=NonZeroExitCode "));
    assert_eq!(
        exited.line(None, None).unwrap(),
        format!(
            "{by}; it ended within its partition's GraceTime, so Slurm did not requeue it (a job must run on until \
             Slurm ends it)"
        )
    );

    // Requeued at the grace's end, when the preemptor started: that is the time the line gives.
    let requeued = recorded("grace_squeue_requeued.json");
    let h = preempt::history(&requeued, "63").unwrap().unwrap();
    let cancel = preempt::last_cancel(&recorded("grace_log_holds.txt"));
    assert_eq!(cancel, Some(("2026-11-27T18:31:54".to_owned(), "preemption".to_owned())));
    assert_eq!(
        h.line(cancel.as_ref(), Some("BeginTime")).unwrap(),
        "preempted at 2026-11-27T18:32:02Z (partition urgent job 65 of theseus-test-other); requeued, attempt 2, \
         waiting to start (BeginTime)"
    );
}
