//! `VolcanoBackend::reclaim_store` and `store_usage` against the simulator: a helper pod runs
//! core's reclaim scripts on the PVC; runs the cluster sees live are never touched.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use theseus_core::backend::{JobState, ReclaimKind, ReclaimOptions, SubmitOptions};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::store::Materialize;
use theseus_core::testing::{self, Harness};

use crate::flow::{RunProbe, World, plan};
use crate::store_tree::{assert_run_dir_matches, entries, objects_all_hash_to_their_names, write};

/// Sets the mtime of `path` and everything under it to 2001.
fn age(path: &Path) {
    let status = std::process::Command::new("find")
        .arg(path)
        .args(["-exec", "touch", "-h", "-d", "@1000000000", "{}", "+"])
        .status()
        .unwrap();
    assert!(status.success());
}

async fn helpers_left(world: &World) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let jobs = world.connection().list_jobs("theseus.dev/role=helper").await.unwrap();
        let names: Vec<String> = jobs.into_iter().filter_map(|j| j.metadata.name).collect();
        if names.is_empty() || tokio::time::Instant::now() > deadline {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_removes_finished_runs_leftovers_and_their_objects_but_never_a_live_run() {
    let mut world = World::start(1).await;
    // Small jobs, so that the reclaim helper fits next to the live one.
    world.host.cpu_cpu = Some("1".into());
    world.host.cpu_memory = Some("2Gi".into());
    let backend = Arc::new(world.backend());
    let h = Harness {
        backend: backend.clone(),
        plan: plan(1, 0),
        probe: Arc::new(RunProbe),
        timeout: Duration::from_secs(60),
    };
    let (a, code) = testing::prepare(&h, "done-a", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    write(&code.path().join("only_a.py"), b"A = 1\n", 0o644);
    write(&code.path().join("shared.py"), b"S = 1\n", 0o644);
    let a = theseus_core::backend::PreparedJob {
        snapshot: Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap(),
        ..a
    };
    let handle_a = h.backend.submit(&a, &SubmitOptions::default()).await.unwrap();
    assert_eq!(testing::wait_terminal(&h, &handle_a).await.state, JobState::Completed);
    let (live, code_live) = testing::prepare(&h, "live", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    write(&code_live.path().join("shared.py"), b"S = 1\n", 0o644);
    let live = theseus_core::backend::PreparedJob {
        snapshot: Snapshot::collect(code_live.path(), SnapshotMode::Dirty).unwrap(),
        ..live
    };
    let handle_live = h.backend.submit(&live, &SubmitOptions::default()).await.unwrap();

    let work = Path::new(&world.cluster.work);
    let run_a = backend.run_layout(&a.identity).unwrap();
    let run_live = backend.run_layout(&live.identity).unwrap();
    let crashed = work.join("conformance/default/crashed/20200101-000000-abcdef.partial");
    write(&crashed.join("x.py"), b"half\n", 0o644);
    age(&crashed);
    let upload = work.join(".theseus/incoming/0123456789abcdef");
    write(&upload.join("ab/cd"), b"half an object\n", 0o444);
    age(&upload);

    // A run the caller (the ledger) says is live stays, whatever the cluster says.
    let ledger_live = ReclaimOptions {
        older_than: Duration::ZERO,
        live: [a.identity.run_path()].into(),
        dry_run: true,
        ..Default::default()
    };
    let dry = backend.reclaim_store(&ledger_live).await.expect("dry run");
    assert!(dry.items.iter().all(|i| i.kind != ReclaimKind::RunDir), "{dry:?}");

    let options = ReclaimOptions { older_than: Duration::ZERO, dry_run: true, ..Default::default() };
    let dry = backend.reclaim_store(&options).await.expect("dry run");
    let paths = |kind| -> Vec<String> { dry.items.iter().filter(|i| i.kind == kind).map(|i| i.path.clone()).collect() };
    assert_eq!(paths(ReclaimKind::RunDir), vec![run_a.work_dir.clone()], "{dry:?}");
    assert_eq!(paths(ReclaimKind::Partial), vec![crashed.to_str().unwrap().to_owned()], "{dry:?}");
    assert_eq!(paths(ReclaimKind::Incoming), vec![upload.to_str().unwrap().to_owned()], "{dry:?}");
    assert!(dry.dry_run && dry.freed_bytes > 0, "{dry:?}");
    assert!(Path::new(&run_a.work_dir).exists() && crashed.exists() && upload.exists(), "a dry run removes nothing");
    assert!(helpers_left(&world).await.is_empty(), "the reclaim helper is deleted");

    let report = backend.reclaim_store(&ReclaimOptions { dry_run: false, ..options }).await.expect("reclaim");
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(!Path::new(&run_a.work_dir).exists() && !crashed.exists() && !upload.exists(), "{report:?}");
    assert!(report.items.iter().any(|i| i.kind == ReclaimKind::Object), "run A's own objects go: {report:?}");
    assert!(Path::new(&run_a.log_file).exists(), "the finished run's log stays");
    assert_run_dir_matches(code_live.path(), Path::new(&run_live.work_dir), Materialize::Link);
    objects_all_hash_to_their_names(work);
    let objects = work.join(theseus_core::store::OBJECTS_DIR);
    for object in entries(&objects) {
        let links = std::os::unix::fs::MetadataExt::nlink(&std::fs::metadata(objects.join(&object)).unwrap());
        assert!(links >= 2, "object {object} is linked by no run but stayed");
    }
    assert!(helpers_left(&world).await.is_empty(), "the reclaim helper is deleted");

    let usage = backend.store_usage().await.expect("usage");
    assert_eq!(usage.run_dirs, 1, "{usage:?}");
    assert_eq!(usage.unused_objects, 0, "{usage:?}");
    assert_eq!(usage.objects as usize, entries(&objects).len(), "{usage:?}");
    h.backend.cancel(&handle_live).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_whose_first_delete_is_never_answered_is_deleted_by_a_second_call() {
    // Found by `cargo xtask chaos --full`: the reclaim's helper stayed when the API server took
    // its DELETE and never answered, since the call's deadline (`api_timeout`, 30 s by default,
    // below the 60 s allowed per request) went by in that one request, leaving no retry.
    let world = World::start(1).await;
    let quick = theseus_backend_volcano::RetryPolicy {
        deadline: Duration::from_secs(2),
        ..theseus_backend_volcano::RetryPolicy::fast()
    };
    let backend = theseus_backend_volcano::VolcanoBackend::with_cluster(
        "sim",
        world.host.clone(),
        world.cluster.clone(),
        world.connection().with_retry(quick),
    );
    world.sim.faults().hang_requests("delete", "jobs", 1);
    let options = ReclaimOptions { older_than: Duration::ZERO, dry_run: true, ..Default::default() };
    let report = backend.reclaim_store(&options).await.expect("the reclaim itself works");
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(helpers_left(&world).await.is_empty(), "the helper is gone");
}
