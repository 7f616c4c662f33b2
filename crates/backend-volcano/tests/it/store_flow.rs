//! The submit flow ships through the content-addressed store on the PVC (against the
//! simulator): exact run dirs, one object after a one-line edit, concurrent submits, an upload
//! cut mid-stream, and v4-only exec.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use theseus_core::backend::{JobState, PreparedJob, SubmitOptions};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::store::{Materialize, ShipReport};
use theseus_core::testing::tempfile_dir::TempDir;
use theseus_core::testing::{self, Harness};

use crate::flow::{World, plan};
use crate::store_tree::{assert_run_dir_matches, entries, objects_all_hash_to_their_names, write};

pub(crate) fn harness(world: &World) -> Harness {
    Harness {
        backend: Arc::new(world.backend()),
        plan: plan(1, 0),
        probe: Arc::new(crate::flow::RunProbe),
        timeout: Duration::from_secs(60),
    }
}

/// A conformance job named `name` whose code dir also holds a few more files (modes, a
/// symlink, a duplicate, a file of `big` bytes).
pub(crate) async fn job(h: &Harness, name: &str, big: usize) -> (PreparedJob, TempDir) {
    let (mut job, code) = testing::prepare(h, name, &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let dir = code.path();
    write(&dir.join("pkg/model.py"), b"WIDTH = 128\nDEPTH = 4\n", 0o644);
    write(&dir.join("pkg/copy.py"), b"WIDTH = 128\nDEPTH = 4\n", 0o644);
    write(&dir.join("scripts/run it.sh"), b"#!/bin/sh\necho run\n", 0o755);
    write(&dir.join("data/blob.bin"), &(0..big).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>(), 0o644);
    symlink("pkg/model.py", dir.join("model-link.py")).unwrap();
    job.snapshot = Snapshot::collect(dir, SnapshotMode::Dirty).unwrap();
    (job, code)
}

pub(crate) type Recorded<T> = Arc<Mutex<Vec<T>>>;

/// Submit options that record the store's report and the notes.
pub(crate) fn recording() -> (SubmitOptions, Recorded<ShipReport>, Recorded<String>) {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let notes = Arc::new(Mutex::new(Vec::new()));
    let options = SubmitOptions {
        shipped: Some({
            let reports = reports.clone();
            Arc::new(move |r: &ShipReport| reports.lock().unwrap().push(r.clone()))
        }),
        status: Some({
            let notes = notes.clone();
            Arc::new(move |n: &str| notes.lock().unwrap().push(n.to_owned()))
        }),
        ..SubmitOptions::default()
    };
    (options, reports, notes)
}

pub(crate) fn work_dir(world: &World, job: &PreparedJob) -> PathBuf {
    PathBuf::from(world.backend().run_layout(&job.identity).unwrap().work_dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_builds_the_run_dir_from_the_store_and_a_one_line_edit_sends_one_object() {
    let world = World::start(1).await;
    let h = harness(&world);
    let (first, code) = job(&h, "store-a", 3000).await;
    let (options, reports, notes) = recording();
    let handle = h.backend.submit(&first, &options).await.expect("submit");
    let run = work_dir(&world, &first);
    assert_run_dir_matches(&first.snapshot.root, &run, Materialize::Link);
    for file in &first.bootstrap.files {
        let found = std::fs::read_to_string(run.join(&file.path)).unwrap();
        assert_eq!(crate::fixtures::as_shipped(&file.path, found), file.contents, "{}", file.path);
    }
    let report = reports.lock().unwrap().clone();
    assert_eq!(report.len(), 1, "one report per submit: {report:?}");
    assert_eq!((report[0].files_present, report[0].objects_sent), (0, report[0].files - 1), "copy.py shares an object");
    assert!(notes.lock().unwrap().iter().any(|n| n.contains("0 of") && n.contains("files already there")), "{notes:?}");
    // The job's pods run the hard-linked code from the PVC.
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);

    write(&first.snapshot.root.join("pkg/model.py"), b"WIDTH = 256\nDEPTH = 4\n", 0o644);
    let (mut second, _c2) = job(&h, "store-b", 3000).await;
    second.snapshot = Snapshot::collect(&first.snapshot.root, SnapshotMode::Dirty).unwrap();
    let (options, reports, _) = recording();
    h.backend.submit(&second, &options).await.expect("second submit");
    let report = reports.lock().unwrap()[0].clone();
    assert_eq!(report.objects_sent, 1, "{report:?}");
    assert_eq!(report.files_present, report.files - 1, "{report:?}");
    assert_eq!(report.bytes_sent, "WIDTH = 256\nDEPTH = 4\n".len() as u64);
    assert_run_dir_matches(&first.snapshot.root, &work_dir(&world, &second), Materialize::Link);
    assert_eq!(std::fs::read(run.join("pkg/model.py")).unwrap(), b"WIDTH = 128\nDEPTH = 4\n", "run 1 unchanged");
    objects_all_hash_to_their_names(Path::new(&world.cluster.work));
    drop(code);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_submits_uploading_the_same_objects_both_succeed() {
    let world = World::start(1).await;
    let h = harness(&world);
    let (a, _ca) = job(&h, "same-a", 200_000).await;
    let (mut b, _cb) = job(&h, "same-b", 200_000).await;
    b.snapshot = a.snapshot.clone();
    let (oa, ra, _) = recording();
    let (ob, rb, _) = recording();
    let (ha, hb) = tokio::join!(h.backend.submit(&a, &oa), h.backend.submit(&b, &ob));
    ha.expect("first concurrent submit");
    hb.expect("second concurrent submit");
    for job in [&a, &b] {
        assert_run_dir_matches(&a.snapshot.root, &work_dir(&world, job), Materialize::Link);
    }
    let sent = ra.lock().unwrap()[0].objects_sent + rb.lock().unwrap()[0].objects_sent;
    assert!(sent >= a.snapshot.files.len() - 2, "between them they sent every object: {sent}");
    objects_all_hash_to_their_names(Path::new(&world.cluster.work));
    let incoming = Path::new(&world.cluster.work).join(".theseus/incoming");
    assert_eq!(entries(&incoming), Vec::<String>::new(), "no upload or stdin file left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_cut_mid_stream_leaves_no_bad_object_and_the_next_submit_succeeds() {
    let world = World::start(1).await;
    let h = harness(&world);
    let (job, _code) = job(&h, "cut", 3_000_000).await;
    world.sim.faults().cut_exec_stdin_after(Some(1_000_000));
    let err = h.backend.submit(&job, &SubmitOptions::default()).await.expect_err("the upload is cut");
    assert!(err.to_string().contains("broke"), "{err}");
    world.sim.faults().cut_exec_stdin_after(None);
    let work = Path::new(&world.cluster.work);
    objects_all_hash_to_their_names(work);
    let run = work_dir(&world, &job);
    assert!(!run.exists(), "no run dir after a failed ship");
    assert!(!run.with_file_name(format!("{}.partial", job.identity.run_id)).exists());

    let (options, reports, _) = recording();
    let handle = h.backend.submit(&job, &options).await.expect("the next submit succeeds");
    assert_eq!(reports.lock().unwrap().len(), 1);
    assert_run_dir_matches(&job.snapshot.root, &run, Materialize::Link);
    objects_all_hash_to_their_names(work);
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_ship_works_over_v4_only_exec() {
    let world = World::start(1).await;
    world.sim.faults().exec_v4_only(true);
    let h = harness(&world);
    let (job, _code) = job(&h, "v4", 500_000).await;
    let (options, reports, _) = recording();
    let handle = h.backend.submit(&job, &options).await.expect("submit over v4");
    assert!(reports.lock().unwrap()[0].objects_sent > 0);
    assert_run_dir_matches(&job.snapshot.root, &work_dir(&world, &job), Materialize::Link);
    assert_eq!(testing::wait_terminal(&h, &handle).await.state, JobState::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_mode_gives_the_run_private_writable_files() {
    let mut world = World::start(1).await;
    world.cluster.materialize = Some(Materialize::Copy);
    let h = harness(&world);
    let (job, _code) = job(&h, "copied", 1000).await;
    let (options, reports, _) = recording();
    h.backend.submit(&job, &options).await.expect("submit");
    assert_eq!(reports.lock().unwrap().len(), 1);
    let run = work_dir(&world, &job);
    assert_run_dir_matches(&job.snapshot.root, &run, Materialize::Copy);
    std::fs::write(run.join("pkg/model.py"), "edited by the job\n").unwrap();
    objects_all_hash_to_their_names(Path::new(&world.cluster.work));
}
