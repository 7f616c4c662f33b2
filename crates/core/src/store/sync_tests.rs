//! Sync end to end with real `sh`, `tar` and `sha256sum`: after a ship, edits, additions,
//! deletions, a file that became a dir, awkward names, both modes; files the job made stay.

use std::path::Path;

use super::super::tests::write;
use super::*;
use crate::snapshot::SnapshotMode;
use crate::store::{LocalShell, ShipRequest, ship};

fn ship_request(code: &Path, root: &Path, mode: Materialize) -> ShipRequest {
    ShipRequest {
        snapshot: Snapshot::collect(code, SnapshotMode::Dirty).unwrap(),
        root: root.to_str().unwrap().to_owned(),
        dest: root.join("p/n/r1").to_str().unwrap().to_owned(),
        mode,
        extra: vec![ExtraFile { path: ".theseus/bootstrap.sh".into(), contents: b"echo\n".to_vec(), mode: 0o755 }],
        progress: None,
        status: None,
    }
}

fn sync_request(code: &Path, root: &Path, mode: Materialize) -> SyncRequest {
    SyncRequest {
        snapshot: Snapshot::collect(code, SnapshotMode::Dirty).unwrap(),
        root: root.to_str().unwrap().to_owned(),
        dest: root.join("p/n/r1").to_str().unwrap().to_owned(),
        mode,
        progress: None,
        status: None,
    }
}

/// Relative paths of the regular files and symlinks under `dir`, but `.theseus/`.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            if rel.starts_with(".theseus") {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

async fn edit_and_sync(mode: Materialize) {
    let code = tempfile::tempdir().unwrap();
    let c = code.path();
    let awkward = "dir with space/new\nline -x 'q' $v ü.py";
    write(&c.join("train.py"), "print(1)\n", 0o644);
    write(&c.join("keep.py"), "K = 1\n", 0o644);
    write(&c.join("gone/old.py"), "old\n", 0o644);
    write(&c.join("was_file"), "file\n", 0o644);
    write(&c.join(awkward), "awkward\n", 0o644);
    let root = tempfile::tempdir().unwrap();
    ship(&LocalShell, ship_request(c, root.path(), mode)).await.unwrap();
    let run = root.path().join("p/n/r1");
    let kept_inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(run.join("keep.py")).unwrap());
    // The job writes a file of its own.
    std::fs::write(run.join("job-output.txt"), "made by the job\n").unwrap();

    write(&c.join("train.py"), "print(2)\n", 0o755);
    write(&c.join("added/new.py"), "new\n", 0o644);
    std::fs::remove_dir_all(c.join("gone")).unwrap();
    std::fs::remove_file(c.join("was_file")).unwrap();
    write(&c.join("was_file/inside.py"), "now a dir\n", 0o644);
    write(&c.join(awkward), "awkward 2\n", 0o644);
    let report = sync(&LocalShell, sync_request(c, root.path(), mode)).await.unwrap();
    assert_eq!(report.diff.added, ["added/new.py", "was_file/inside.py"]);
    assert_eq!(report.diff.changed, [awkward, "train.py"]);
    assert_eq!(report.diff.deleted, ["gone/old.py", "was_file"]);
    assert_eq!(report.objects_sent, 4, "train.py (new content), new.py, inside.py and the awkward file");

    assert_eq!(std::fs::read_to_string(run.join("train.py")).unwrap(), "print(2)\n");
    let exec = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(run.join("train.py")).unwrap().permissions());
    assert!(exec & 0o111 != 0, "the mode change arrived");
    assert_eq!(std::fs::read_to_string(run.join(awkward)).unwrap(), "awkward 2\n");
    assert_eq!(std::fs::read_to_string(run.join("was_file/inside.py")).unwrap(), "now a dir\n");
    assert!(!run.join("gone").exists(), "the dir a deletion emptied goes too");
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(run.join("keep.py")).unwrap());
    assert_eq!(ino, kept_inode, "an unchanged file is not touched");
    assert_eq!(std::fs::read_to_string(run.join("job-output.txt")).unwrap(), "made by the job\n");
    let mut want = tree(c);
    want.push("job-output.txt".into());
    want.sort();
    assert_eq!(tree(&run), want);
    assert!(
        std::fs::read_dir(run.join(".theseus")).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("sync.")),
        "no stage dir left"
    );

    // Nothing changed since: nothing moves.
    let again = sync(&LocalShell, sync_request(c, root.path(), mode)).await.unwrap();
    assert!(again.diff.is_empty() && again.objects_sent == 0, "{again:?}");
}

#[tokio::test]
async fn a_sync_moves_exactly_what_changed_in_link_mode() {
    edit_and_sync(Materialize::Link).await;
}

#[tokio::test]
async fn a_sync_moves_exactly_what_changed_in_copy_mode() {
    edit_and_sync(Materialize::Copy).await;
}

/// A sync whose only change is a deletion sends no file: its archive has no `add` dir.
async fn delete_only(mode: Materialize) {
    let code = tempfile::tempdir().unwrap();
    write(&code.path().join("a.py"), "a\n", 0o644);
    write(&code.path().join("b.py"), "b\n", 0o644);
    let root = tempfile::tempdir().unwrap();
    ship(&LocalShell, ship_request(code.path(), root.path(), mode)).await.unwrap();
    std::fs::remove_file(code.path().join("b.py")).unwrap();
    let report = sync(&LocalShell, sync_request(code.path(), root.path(), mode)).await.unwrap();
    assert_eq!((report.diff.deleted.as_slice(), report.objects_sent), (["b.py".to_owned()].as_slice(), 0));
    assert_eq!(tree(&root.path().join("p/n/r1")), ["a.py"]);
    let again = sync(&LocalShell, sync_request(code.path(), root.path(), mode)).await.unwrap();
    assert!(again.diff.is_empty(), "{again:?}");
}

#[tokio::test]
async fn a_sync_that_only_deletes_works_in_both_modes() {
    delete_only(Materialize::Link).await;
    delete_only(Materialize::Copy).await;
}

#[tokio::test]
async fn a_local_ship_writes_the_manifest_a_sync_reads() {
    let code = tempfile::tempdir().unwrap();
    write(&code.path().join("a.py"), "a\n", 0o644);
    let root = tempfile::tempdir().unwrap();
    crate::store::ship_local(ship_request(code.path(), root.path(), Materialize::Link)).await.unwrap();
    write(&code.path().join("a.py"), "b\n", 0o644);
    let report = sync(&LocalShell, sync_request(code.path(), root.path(), Materialize::Link)).await.unwrap();
    assert_eq!(report.diff.changed, ["a.py"]);
    assert_eq!(std::fs::read_to_string(root.path().join("p/n/r1/a.py")).unwrap(), "b\n");
}

#[tokio::test]
async fn a_run_dir_without_a_manifest_or_gone_is_a_clear_error() {
    let code = tempfile::tempdir().unwrap();
    write(&code.path().join("a.py"), "a\n", 0o644);
    let root = tempfile::tempdir().unwrap();
    let err = sync(&LocalShell, sync_request(code.path(), root.path(), Materialize::Link)).await.unwrap_err();
    assert!(err.to_string().contains("run dir") && err.to_string().contains("p/n/r1"), "{err}");
    std::fs::create_dir_all(root.path().join("p/n/r1")).unwrap();
    let err = sync(&LocalShell, sync_request(code.path(), root.path(), Materialize::Link)).await.unwrap_err();
    assert!(err.to_string().contains("no code manifest") && err.to_string().contains("submit it again"), "{err}");
}

#[test]
fn the_diff_is_pure_and_ordered() {
    let m = |pairs: &[(&str, &str)]| Manifest {
        files: pairs.iter().map(|(p, v)| ((*p).to_owned(), (*v).to_owned())).collect(),
    };
    let d = diff(
        &m(&[("a", "obj:1"), ("b", "obj:2"), ("c", "link:x")]),
        &m(&[("a", "obj:1"), ("b", "obj:3"), ("d", "obj:4")]),
    );
    assert_eq!((d.added, d.changed, d.deleted), (vec!["d".to_owned()], vec!["b".to_owned()], vec!["c".to_owned()]));
}

#[test]
fn the_scripts_are_valid_shell() {
    for script in [scripts_sync::READ, scripts_sync::APPLY] {
        let out = std::process::Command::new("sh").arg("-n").arg("-c").arg(script).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
