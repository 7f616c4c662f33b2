//! Tests of the tree archive and of [`tree::BUILD`], run with `sh` and with busybox.

use std::path::Path;

use super::tests::{BUSYBOX, assert_same_tree, repo, request, walk};
use super::tree::{self, BUILD, RUN_FILES_ENV, Tree};
use super::*;
use crate::snapshot::{Snapshot, SnapshotMode};

/// Runs [`BUILD`] with `shell` (`sh`, or busybox's) for `dest`, the run files being `files`.
fn build(shell: &[&str], root: &Path, dest: &Path, tree: &ObjectKey, files: &[ExtraFile]) -> std::process::Output {
    let mut cmd = std::process::Command::new(shell[0]);
    cmd.args(&shell[1..])
        .args(["-c", BUILD, "theseus-build"])
        .arg(root)
        .arg(dest)
        .arg(tree.path())
        .env(RUN_FILES_ENV, tree::run_files_env(files, 1_700_000_000).unwrap());
    cmd.output().unwrap()
}

fn shells() -> Vec<Vec<&'static str>> {
    let mut out = vec![vec!["sh"]];
    if Path::new(BUSYBOX).exists() {
        out.push(vec![BUSYBOX, "sh"]);
    }
    out
}

/// Ships `code` once (with its tree) into `root` and returns the tree's key.
async fn shipped(code: &Path, root: &Path) -> ObjectKey {
    let req = request(code, root, "first", Materialize::Link);
    let plan = plan_of(&req.snapshot).await.unwrap();
    ship_planned(&LocalShell, req, plan.clone(), true).await.unwrap();
    let key = Tree::of(&plan).unwrap().key;
    assert!(root.join(OBJECTS_DIR).join(key.path()).is_file(), "the tree became an object");
    key
}

fn bootstrap() -> Vec<ExtraFile> {
    vec![ExtraFile { path: ".theseus/bootstrap.sh".into(), contents: b"echo boot\n".to_vec(), mode: 0o755 }]
}

#[tokio::test]
async fn a_run_dir_built_from_the_store_equals_the_snapshot_with_its_own_files() {
    for shell in shells() {
        let (code, root) = (repo(), tempfile::tempdir().unwrap());
        let key = shipped(code.path(), root.path()).await;
        let dest = root.path().join("p/g/n/second");
        let out = build(&shell, root.path(), &dest, &key, &bootstrap());
        assert!(out.status.success(), "{shell:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_same_tree(code.path(), &dest);
        assert_eq!(std::fs::read(dest.join(".theseus/bootstrap.sh")).unwrap(), b"echo boot\n");
        assert!(dest.join(manifest::MANIFEST).is_file(), "{shell:?}: the code manifest is there for `sync`");
        let incoming: Vec<String> = walk(&root.path().join(".theseus/incoming"));
        assert!(incoming.is_empty(), "{shell:?}: build dirs left: {incoming:?}");
        // Hard links into the store, as a shipped run dir's are.
        use std::os::unix::fs::MetadataExt as _;
        assert!(std::fs::metadata(dest.join("train.py")).unwrap().nlink() >= 3, "{shell:?}");
    }
}

#[tokio::test]
async fn a_reclaimed_tree_or_object_fails_clearly_and_builds_nothing() {
    for shell in shells() {
        let (code, root) = (repo(), tempfile::tempdir().unwrap());
        let key = shipped(code.path(), root.path()).await;
        let objects = root.path().join(OBJECTS_DIR);
        let plan = plan_of(&Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap()).await.unwrap();
        let data = *plan.objects.keys().next().unwrap();
        std::fs::remove_file(objects.join(data.path())).unwrap();
        let dest = root.path().join("p/g/n/second");
        let out = build(&shell, root.path(), &dest, &key, &bootstrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("gone from the code store"), "{shell:?}: {stderr}");
        assert!(!dest.exists(), "{shell:?}");
        std::fs::remove_file(objects.join(key.path())).unwrap();
        let out = build(&shell, root.path(), &dest, &key, &bootstrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("no longer holds this run's code"), "{shell:?}: {stderr}");
        assert!(!dest.exists(), "{shell:?}");
    }
}

#[tokio::test]
async fn ranks_building_the_same_run_dir_at_once_all_succeed_and_one_copy_wins_whole() {
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    let key = shipped(code.path(), root.path()).await;
    let dest = root.path().join("p/g/n/gang");
    let files = bootstrap();
    let ranks: Vec<_> = (0..4)
        .map(|_| {
            let (root, dest, files) = (root.path().to_owned(), dest.clone(), files.clone());
            std::thread::spawn(move || build(&["sh"], &root, &dest, &key, &files))
        })
        .collect();
    for rank in ranks {
        let out = rank.join().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_same_tree(code.path(), &dest);
    assert!(walk(&root.path().join(".theseus/incoming")).is_empty());
}

#[test]
fn the_tree_names_the_code_and_nothing_else() {
    let code = repo();
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    let plan = StorePlan::new(&snapshot, &snapshot.digests(None).unwrap());
    assert_eq!(Tree::of(&plan).unwrap().key, Tree::of(&plan).unwrap().key);
    std::fs::write(code.path().join("train.py"), "print('changed')\n").unwrap();
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    let changed = StorePlan::new(&snapshot, &snapshot.digests(None).unwrap());
    assert_ne!(Tree::of(&plan).unwrap().key, Tree::of(&changed).unwrap().key);
}
