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
    assert_eq!((pending.state, pending.message.as_deref()), (JobState::Pending, Some("pending (Resources)")));
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
