//! A submit whose code the cluster's store holds already (against the simulator): no helper
//! job, no exec, and the job's pods build the run dir from the store; a tree reclaimed behind
//! the index's back fails the job with a message saying so; `reclaim` drops the index.

use std::path::Path;

use theseus_core::backend::{JobState, SubmitOptions};
use theseus_core::store::{Materialize, OBJECTS_DIR};
use theseus_core::testing;

use crate::flow::World;
use crate::store_flow::{harness, job, recording, work_dir};
use crate::store_tree::assert_run_dir_matches;

/// Requests of the simulator so far that create a vcjob (not the dry-run check), and that
/// exec into a pod.
fn created_jobs_and_execs(world: &World) -> (usize, usize) {
    let requests = world.sim.requests();
    let path = |p: &str| p.split('?').next().unwrap_or_default().to_owned();
    let jobs = requests
        .iter()
        .filter(|(m, p)| {
            m == "POST" && !p.contains("dryRun") && p.contains("batch.volcano.sh") && path(p).ends_with("/jobs")
        })
        .count();
    let execs = requests.iter().filter(|(_, p)| p.contains("/exec")).count();
    (jobs, execs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubmit_of_code_the_store_holds_starts_no_helper_and_its_pods_build_the_run_dir() {
    let world = World::start(1).await;
    let h = harness(&world);
    let (first, _code) = job(&h, "hit-a", 3000).await;
    let before = created_jobs_and_execs(&world);
    let handle = h.backend.submit(&first, &SubmitOptions::default()).await.expect("first submit");
    let after_first = created_jobs_and_execs(&world);
    assert_eq!(after_first.0 - before.0, 2, "the first submit creates a helper and the gang job");
    assert!(after_first.1 > before.1, "the first submit ships over exec");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);

    let (mut second, _c2) = job(&h, "hit-b", 3000).await;
    second.snapshot = first.snapshot.clone();
    let (options, reports, notes) = recording();
    let handle = h.backend.submit(&second, &options).await.expect("second submit");
    let after_second = created_jobs_and_execs(&world);
    assert_eq!(after_second.0 - after_first.0, 1, "only the gang job: no helper");
    assert_eq!(after_second.1, after_first.1, "no exec: nothing shipped");
    let report = reports.lock().unwrap()[0].clone();
    assert_eq!((report.objects_sent, report.bytes_sent, report.files_present), (0, 0, report.files), "{report:?}");
    assert!(notes.lock().unwrap().iter().any(|n| n.contains("no helper")), "{:?}", notes.lock().unwrap());
    // The run's own files are stored once, in a ConfigMap the job owns; its pods refer to it,
    // so no pod object (or environment string) grows with the bootstrap.
    let files = format!("{}-files", handle.id);
    let map = world.sim.objects("v1", "ConfigMap").into_iter().find(|m| m["metadata"]["name"] == files.as_str());
    let map = map.unwrap_or_else(|| panic!("no ConfigMap {files}"));
    assert_eq!(map["metadata"]["ownerReferences"][0]["name"], handle.id.as_str(), "{map}");
    for pod in world
        .sim
        .objects("v1", "Pod")
        .iter()
        .filter(|p| p["metadata"]["labels"]["volcano.sh/job-name"] == handle.id.as_str())
    {
        let env = pod["spec"]["containers"][0]["env"].as_array().cloned().unwrap_or_default();
        let files = env.iter().find(|e| e["name"] == "THESEUS_RUN_FILES").expect("the run files' variable");
        assert!(files.get("value").is_none() && files["valueFrom"]["configMapKeyRef"].is_object(), "{files}");
    }
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);
    let run = work_dir(&world, &second);
    assert_run_dir_matches(&first.snapshot.root, &run, Materialize::Link);
    for file in &second.bootstrap.files {
        let found = std::fs::read_to_string(run.join(&file.path)).unwrap();
        // env.sh gains, at each start, the values the bootstrap found then (THESEUS_ATTEMPT,
        // THESEUS_RESTORE_FROM) after what was rendered.
        let rendered = match found.split_once("# ---- set by the bootstrap at start ----\n") {
            Some((before, after)) if file.path.ends_with("env.sh") => {
                assert!(after.starts_with("export THESEUS_ATTEMPT=1\n"), "{after}");
                before
            }
            _ => found.as_str(),
        };
        assert_eq!(rendered, file.contents, "{}", file.path);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_reclaimed_after_the_index_was_read_fails_the_job_clearly_and_runs_nothing() {
    let world = World::start(1).await;
    let h = harness(&world);
    let (first, _code) = job(&h, "gone-a", 3000).await;
    let handle = h.backend.submit(&first, &SubmitOptions::default()).await.expect("first submit");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);
    // The store loses every object (as a reclaim of a cold store would) but the index still
    // names the tree.
    let objects = Path::new(&world.cluster.work).join(OBJECTS_DIR);
    std::fs::remove_dir_all(&objects).unwrap();

    let (mut second, _c2) = job(&h, "gone-b", 3000).await;
    second.snapshot = first.snapshot.clone();
    let handle = h.backend.submit(&second, &SubmitOptions::default()).await.expect("the submit trusts the index");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Failed);
    assert!(!work_dir(&world, &second).exists(), "no run dir, no code ran");
    let layout = world.backend().run_layout(&second.identity).unwrap();
    let log = std::fs::read_to_string(&layout.log_file).unwrap_or_default();
    assert!(log.contains("no longer holds this run's code") && log.contains("submit again"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_drops_the_index_so_the_next_submit_ships_again() {
    let world = World::start(1).await;
    let h = harness(&world);
    let (first, _code) = job(&h, "re-a", 3000).await;
    let handle = h.backend.submit(&first, &SubmitOptions::default()).await.expect("first submit");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);
    let index = || {
        let maps = world.sim.objects("v1", "ConfigMap");
        maps.iter().filter(|m| m["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("theseus-tree-"))).count()
    };
    assert_eq!(index(), 1, "the ship recorded its tree");
    world.backend().reclaim_store(&theseus_core::backend::ReclaimOptions::default()).await.expect("reclaim");
    assert_eq!(index(), 0, "reclaim dropped the index");

    let (mut second, _c2) = job(&h, "re-b", 3000).await;
    second.snapshot = first.snapshot.clone();
    let before = created_jobs_and_execs(&world);
    let handle = h.backend.submit(&second, &SubmitOptions::default()).await.expect("second submit");
    assert_eq!(created_jobs_and_execs(&world).0 - before.0, 2, "a helper ships the code again");
    assert_eq!(index(), 1, "and records the tree again");
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);
    assert_run_dir_matches(&first.snapshot.root, &work_dir(&world, &second), Materialize::Link);
}
