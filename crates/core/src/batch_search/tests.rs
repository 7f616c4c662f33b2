//! Tests of the batch-size search decision and of the `status` line.

use serde_json::json;

use super::*;
use crate::plan::HostKind;
use crate::testing::cpu_plan;

fn asking() -> Experiment {
    Experiment {
        config: json!({"training": {"per_device_batch_size": -1}}),
        batch_search: true,
        ..Experiment::default()
    }
}

fn var(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.into(), value: value.into(), secret: false }
}

#[test]
fn asks_only_for_minus_one() {
    assert!(asks_for_search(&json!({"training": {"per_device_batch_size": -1}})));
    for config in [
        json!({"training": {"per_device_batch_size": 32}}),
        json!({"training": {"per_device_batch_size": "-1"}}),
        json!({"training": {}}),
        json!({"per_device_batch_size": -1}),
        json!(null),
    ] {
        assert!(!asks_for_search(&config), "{config}");
    }
}

#[test]
fn searches_on_one_process_of_a_gpu_or_cpu_host() {
    let plan = cpu_plan("box", HostKind::LOCAL, 1);
    let note = decide(&asking(), &[], &plan).unwrap().expect("the search runs");
    assert!(note.contains("1024 512 256"), "{note}");
    let candidates = [var("THESEUS_DISPATCH_BATCH_CANDIDATES", "64,32")];
    let note = decide(&asking(), &candidates, &plan).unwrap().unwrap();
    assert!(note.contains("probes at 64 32 "), "{note}");
    // Not asked: nothing, whatever the config says.
    let not_asked = Experiment { batch_search: false, ..asking() };
    assert_eq!(decide(&not_asked, &[], &plan).unwrap(), None);
}

#[test]
fn a_size_in_the_environment_turns_it_off() {
    let plan = cpu_plan("tpu-pod", HostKind::named("tpu"), 4);
    let env = [var(SIZE_VARIABLE, "16")];
    // Even where the search could not run: the size is given.
    assert_eq!(decide(&asking(), &env, &plan).unwrap(), None);
}

#[test]
fn tpu_hosts_are_refused_naming_the_key_and_the_fix() {
    let plan = cpu_plan("pod", HostKind::named("tpu"), 1);
    let err = decide(&asking(), &[], &plan).unwrap_err().to_string();
    assert!(err.contains("training.per_device_batch_size: -1"), "{err}");
    assert!(err.contains("TPU"), "{err}");
    assert!(err.contains("--env THESEUS_DISPATCH_BATCH_SIZE=32"), "{err}");
    let explicit = Experiment { config: json!({}), ..asking() };
    let err = decide(&explicit, &[], &plan).unwrap_err().to_string();
    assert!(err.starts_with("invalid config: batch_search: true") || err.contains("batch_search: true"), "{err}");
}

#[test]
fn several_processes_are_refused() {
    let plan = cpu_plan("box", HostKind::LOCAL, 2);
    let err = decide(&asking(), &[], &plan).unwrap_err().to_string();
    assert!(err.contains("has 2"), "{err}");
    assert!(err.contains("THESEUS_DISPATCH_BATCH_SIZE"), "{err}");
}

#[test]
fn summary_lines() {
    let doc = json!({
        "candidates": [1024, 512, 256], "phase": "done", "chosen": 384,
        "probes": [
            {"size": 1024, "outcome": "oom", "seconds": 3.2, "exit_code": 1},
            {"size": 512, "outcome": "oom", "seconds": 4.0, "exit_code": 1},
            {"size": 256, "outcome": "stable", "seconds": 60.0, "exit_code": null},
            {"size": 384, "outcome": "stable", "seconds": 60.0, "exit_code": null},
        ],
        "run": {"size": 384, "exit_code": 0},
    });
    assert_eq!(
        summary(&doc).unwrap(),
        "batch search: 1024 oom (3s), 512 oom (4s), 256 stable (60s), 384 stable (60s) -> 384 (the run exited 0)"
    );
    let running = json!({"phase": "scan", "probes": [{"size": 1024, "outcome": "oom"}], "chosen": null});
    assert_eq!(summary(&running).unwrap(), "batch search: 1024 oom ...");
    let failed = json!({"phase": "failed", "probes": [{"size": 8, "outcome": "error"}], "exit_code": 3});
    assert_eq!(summary(&failed).unwrap(), "batch search: 8 error -> no size (search failed, exit code 3)");
    assert_eq!(summary(&json!({"phase": "scan", "probes": []})).unwrap(), "batch search: no probe yet ...");
    assert_eq!(summary(&json!([1, 2])), None);
}
