//! Shipping through the content-addressed store to the Slurm lab: run dirs hold exactly the
//! snapshot, and a re-submit after a one-line edit sends one object and links the rest.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use theseus_backend_slurm::slurm::SlurmHandleData;
use theseus_core::backend::{Backend, JobState, PreparedJob, SubmitOptions};
use theseus_core::bootstrap::{self, BootstrapInput};
use theseus_core::job::{Distributed, Entrypoint, Experiment, JobIdentity};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::store::ShipReport;

fn write(path: &Path, content: &[u8], mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A small repo: executable and plain files, two files with one content, a nested dir, an
/// empty file, a name with a space, and a symlink.
fn code_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(&d.join("train.py"), b"print('hi')\n", 0o644);
    write(&d.join("run.sh"), b"#!/bin/sh\necho run-sh-ran\n", 0o755);
    write(&d.join("pkg/a.py"), b"A = 1\n", 0o644);
    write(&d.join("pkg/same.py"), b"A = 1\n", 0o644);
    write(&d.join("pkg/deep/data.txt"), b"data\n", 0o644);
    write(&d.join("with space.txt"), b"spaced\n", 0o600);
    write(&d.join("empty"), b"", 0o644);
    std::os::unix::fs::symlink("pkg/a.py", d.join("link.py")).unwrap();
    dir
}

/// A job named `name` (project `store-it`) of the code in `dir` running `words` on `b`.
fn job_of(b: &dyn Backend, plan: &theseus_core::solver::Plan, name: &str, dir: &Path, words: &[&str]) -> PreparedJob {
    let snapshot = Snapshot::collect(dir, SnapshotMode::Dirty).unwrap();
    let identity = JobIdentity::new(name, Some("store-it"), None);
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    let experiment = Experiment { entrypoint: Entrypoint::Words(words.clone()), ..Experiment::default() };
    let layout = b.layout(&identity, plan).unwrap();
    let input =
        BootstrapInput::for_layout(identity.clone(), &layout, vec![], words, Distributed::None, serde_json::json!({}));
    let bootstrap = bootstrap::render(&input).unwrap();
    PreparedJob { identity, experiment, env: vec![], plan: plan.clone(), snapshot, bootstrap }
}

/// Files (and symlinks) under `dir`, relative, without dirs.
fn walk(dir: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(next) = todo.pop() {
        for entry in std::fs::read_dir(&next).unwrap().map(Result::unwrap) {
            if entry.file_type().unwrap().is_dir() {
                todo.push(entry.path());
            } else {
                found.insert(entry.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    found
}

/// `run` holds exactly the snapshot of `code` (bytes, executable bits, symlink targets) plus
/// `extra` (the per-run files under `.theseus/`), nothing else.
fn assert_run_dir_is(code: &Path, run: &Path, extra: &[String]) {
    let snapshot = Snapshot::collect(code, SnapshotMode::Dirty).unwrap();
    for file in &snapshot.files {
        let (a, b) = (code.join(&file.path), run.join(&file.path));
        let ma = std::fs::symlink_metadata(&a).unwrap();
        let mb =
            std::fs::symlink_metadata(&b).unwrap_or_else(|e| panic!("{} missing from the run dir: {e}", file.path));
        assert_eq!(ma.file_type().is_symlink(), mb.file_type().is_symlink(), "{}: symlink or not", file.path);
        if ma.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(&a).unwrap(), std::fs::read_link(&b).unwrap(), "{}", file.path);
            continue;
        }
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "{}: bytes", file.path);
        assert_eq!(ma.mode() & 0o111 != 0, mb.mode() & 0o111 != 0, "{}: executable bit", file.path);
        assert!(matches!(mb.mode() & 0o111, 0 | 0o111), "{}: x for all or none", file.path);
    }
    let mut expected: BTreeSet<String> = snapshot.files.iter().map(|f| f.path.clone()).collect();
    expected.extend(extra.iter().cloned());
    // A ship through the store records the run dir's code for `theseus sync` (a whole ship, the
    // fallback without the store's tools, has none), listing exactly the snapshot's paths.
    let manifest = theseus_core::store::sync::MANIFEST;
    if let Ok(text) = std::fs::read_to_string(run.join(manifest)) {
        let listed: theseus_core::store::sync::Manifest = serde_json::from_str(&text).unwrap();
        let paths: BTreeSet<String> = listed.files.keys().cloned().collect();
        assert_eq!(paths, snapshot.files.iter().map(|f| f.path.clone()).collect(), "the code manifest");
        expected.insert(manifest.to_owned());
    }
    assert_eq!(walk(run), expected, "the run dir holds the snapshot and the per-run files only");
}

/// Submit options that collect the ship report.
#[derive(Default, Clone)]
struct Seen {
    reports: Arc<Mutex<Vec<ShipReport>>>,
}

impl Seen {
    fn options(&self) -> SubmitOptions {
        let reports = self.reports.clone();
        SubmitOptions {
            shipped: Some(Arc::new(move |r: &ShipReport| reports.lock().unwrap().push(r.clone()))),
            ..SubmitOptions::default()
        }
    }

    fn reports(&self) -> Vec<ShipReport> {
        self.reports.lock().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_run_dirs_hold_exactly_the_snapshot_and_share_unchanged_files() {
    let Some(lab) = crate::slurm::lab() else { return };
    let (b, _) = crate::slurm::backend(lab, "store", crate::slurm::host());
    let plan = crate::slurm::plan("cpu", 1, 0);
    let code = code_tree();
    let extra = |job: &PreparedJob| {
        let mut extra: Vec<String> = job.bootstrap.files.iter().map(|f| f.path.clone()).collect();
        extra.push(theseus_backend_slurm::slurm::BATCH_SCRIPT.into());
        extra
    };
    let seen = Seen::default();
    let job1 = job_of(&*b, &plan, "store", code.path(), &["sh", "run.sh"]);
    let h1 = b.submit(&job1, &seen.options()).await.unwrap();
    let run1 = PathBuf::from(serde_json::from_value::<SlurmHandleData>(h1.data.clone()).unwrap().work_dir);
    assert_run_dir_is(code.path(), &run1, &extra(&job1));
    let status = crate::slurm::wait_terminal(&b, &h1).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    assert_run_dir_is(code.path(), &run1, &extra(&job1));
    assert_eq!(seen.reports().iter().map(|r| r.objects_sent).collect::<Vec<_>>(), [6]);

    write(&code.path().join("train.py"), b"print('changed')\n", 0o644);
    let seen2 = Seen::default();
    let job2 = job_of(&*b, &plan, "store", code.path(), &["sh", "run.sh"]);
    let h2 = b.submit(&job2, &seen2.options()).await.unwrap();
    let run2 = PathBuf::from(serde_json::from_value::<SlurmHandleData>(h2.data.clone()).unwrap().work_dir);
    assert_run_dir_is(code.path(), &run2, &extra(&job2));
    assert_eq!(seen2.reports().iter().map(|r| (r.files_present, r.objects_sent)).collect::<Vec<_>>(), [(6, 1)]);
    let ino = |run: &Path, f: &str| std::fs::metadata(run.join(f)).unwrap().ino();
    assert_eq!(ino(&run1, "run.sh"), ino(&run2, "run.sh"));
    assert_eq!(crate::slurm::wait_terminal(&b, &h2).await.state, JobState::Completed);
}
