//! [`ship_local`]: the same layout and guarantees as the scripts, and one store shared with them.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::tests::write;
use super::*;
use crate::Error;
use crate::snapshot::tests::git;
use crate::snapshot::{Snapshot, SnapshotMode};

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("train.py"), "print('hi')\n", 0o644);
    write(&dir.path().join("run.sh"), "#!/bin/sh\necho run\n", 0o755);
    write(&dir.path().join("pkg/a.py"), "A = 1\n", 0o644);
    write(&dir.path().join("pkg/same.py"), "A = 1\n", 0o644);
    write(&dir.path().join("pkg/deep/er/c.py"), "C = 3\n", 0o644);
    std::os::unix::fs::symlink("pkg/a.py", dir.path().join("link.py")).unwrap();
    dir
}

fn request(code: &Path, root: &Path, run: &str, mode: Materialize, cache: Option<&Path>) -> ShipRequest {
    let mut snapshot = Snapshot::collect(code, SnapshotMode::Dirty).unwrap();
    snapshot.hash_cache = cache.map(Path::to_owned);
    ShipRequest {
        snapshot,
        root: root.to_str().unwrap().to_owned(),
        dest: root.join("p/g/n").join(run).to_str().unwrap().to_owned(),
        mode,
        extra: vec![ExtraFile { path: ".theseus/bootstrap.sh".into(), contents: b"echo\n".to_vec(), mode: 0o755 }],
        progress: None,
        status: None,
    }
}

/// The run dir holds exactly the snapshot's files (bytes, executable bits, symlink targets)
/// plus `.theseus/bootstrap.sh` and the code manifest.
fn assert_same_tree(code: &Path, run: &Path) {
    let snapshot = Snapshot::collect(code, SnapshotMode::Dirty).unwrap();
    let mut expected: Vec<String> = snapshot.files.iter().map(|f| f.path.clone()).collect();
    expected.push(".theseus/bootstrap.sh".into());
    expected.push(crate::store::sync::MANIFEST.into());
    expected.sort();
    let mut found = walk(run, "");
    found.sort();
    assert_eq!(found, expected);
    for file in &snapshot.files {
        let (a, b) = (code.join(&file.path), run.join(&file.path));
        let (ma, mb) = (std::fs::symlink_metadata(&a).unwrap(), std::fs::symlink_metadata(&b).unwrap());
        assert_eq!(ma.file_type().is_symlink(), mb.file_type().is_symlink(), "{}", file.path);
        if ma.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(&a).unwrap(), std::fs::read_link(&b).unwrap());
            continue;
        }
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "{}", file.path);
        assert_eq!(ma.mode() & 0o111 != 0, mb.mode() & 0o111 != 0, "{}", file.path);
    }
}

fn walk(dir: &Path, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = format!("{prefix}{}", entry.file_name().into_string().unwrap());
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&entry.path(), &format!("{name}/")));
        } else {
            out.push(name);
        }
    }
    out
}

fn no_leftovers(root: &Path) {
    let incoming = root.join(".theseus/incoming");
    assert!(!incoming.exists() || std::fs::read_dir(&incoming).unwrap().next().is_none(), "no upload dir left");
    let partial: Vec<String> = walk(&root.join("p/g/n"), "").into_iter().filter(|p| p.contains(".partial")).collect();
    assert!(partial.is_empty(), "{partial:?}");
}

#[tokio::test]
async fn a_second_local_ship_sends_only_what_changed_and_links_the_rest() {
    let (code, root, cache) = (repo(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first =
        ship_local(request(code.path(), root.path(), "r1", Materialize::Link, Some(cache.path()))).await.unwrap();
    assert_eq!((first.files, first.files_present, first.objects_sent), (5, 0, 4), "same.py shares a.py's object");
    assert_same_tree(code.path(), &root.path().join("p/g/n/r1"));

    write(&code.path().join("train.py"), "print('changed')\n", 0o644);
    let second =
        ship_local(request(code.path(), root.path(), "r2", Materialize::Link, Some(cache.path()))).await.unwrap();
    assert_eq!((second.files_present, second.objects_sent), (4, 1));
    assert_eq!(second.bytes_sent, "print('changed')\n".len() as u64);
    assert_same_tree(code.path(), &root.path().join("p/g/n/r2"));
    let meta = |p: &str| std::fs::metadata(root.path().join(p)).unwrap();
    assert_eq!(meta("p/g/n/r1/pkg/a.py").ino(), meta("p/g/n/r2/pkg/a.py").ino());
    let object = meta("p/g/n/r2/run.sh");
    assert_eq!((object.mode() & 0o777, object.mtime()), (0o555, 0), "objects are read-only, mtime 0");
    assert_eq!(std::fs::read_to_string(root.path().join("p/g/n/r1/train.py")).unwrap(), "print('hi')\n");
    no_leftovers(root.path());
}

#[tokio::test]
async fn the_scripts_and_the_native_path_share_one_store() {
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    ship(&LocalShell, request(code.path(), root.path(), "r1", Materialize::Link, None)).await.unwrap();
    let native = ship_local(request(code.path(), root.path(), "r2", Materialize::Link, None)).await.unwrap();
    assert_eq!(native.objects_sent, 0, "the native path finds the scripts' objects");
    write(&code.path().join("new.py"), "new\n", 0o644);
    ship_local(request(code.path(), root.path(), "r3", Materialize::Link, None)).await.unwrap();
    let scripts = ship(&LocalShell, request(code.path(), root.path(), "r4", Materialize::Link, None)).await.unwrap();
    assert_eq!(scripts.objects_sent, 0, "the scripts find the native path's objects");
    assert_same_tree(code.path(), &root.path().join("p/g/n/r4"));
    // Both ways share one code manifest per tree as well.
    super::tests::assert_manifest_shared(root.path(), &["r1", "r2"]);
    super::tests::assert_manifest_shared(root.path(), &["r3", "r4"]);
    let copy = ship_local(request(code.path(), root.path(), "c1", Materialize::Copy, None)).await.unwrap();
    assert_eq!(copy.objects_sent, 0);
    assert_eq!(std::fs::metadata(root.path().join("p/g/n/c1").join(sync::MANIFEST)).unwrap().nlink(), 1);
}

#[tokio::test]
async fn local_copy_mode_gives_each_run_private_writable_files() {
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    ship_local(request(code.path(), root.path(), "r1", Materialize::Copy, None)).await.unwrap();
    ship_local(request(code.path(), root.path(), "r2", Materialize::Copy, None)).await.unwrap();
    let run1 = root.path().join("p/g/n/r1");
    assert_same_tree(code.path(), &run1);
    let mode = std::fs::metadata(run1.join("run.sh")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o755);
    std::fs::write(run1.join("pkg/a.py"), "edited in place\n").unwrap();
    assert_eq!(std::fs::read_to_string(root.path().join("p/g/n/r2/pkg/a.py")).unwrap(), "A = 1\n");
    let again = ship_local(request(code.path(), root.path(), "r3", Materialize::Copy, None)).await.unwrap();
    assert_eq!(again.objects_sent, 0);
    assert_eq!(std::fs::read_to_string(root.path().join("p/g/n/r3/pkg/a.py")).unwrap(), "A = 1\n");
    no_leftovers(root.path());
}

#[tokio::test]
async fn a_locally_tampered_object_is_sent_again_even_when_its_hash_is_cached() {
    let (code, root, cache) = (repo(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Old files: their hashes go to the cache, so the second ship reads them from it.
    for path in ["train.py", "run.sh", "pkg/a.py", "pkg/same.py", "pkg/deep/er/c.py"] {
        let file = std::fs::File::options().write(true).open(code.path().join(path)).unwrap();
        file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600)).unwrap();
    }
    ship_local(request(code.path(), root.path(), "r1", Materialize::Link, Some(cache.path()))).await.unwrap();
    let victim = root.path().join("p/g/n/r1/pkg/a.py");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&victim, "A = 2  # tampered\n").unwrap();
    let second =
        ship_local(request(code.path(), root.path(), "r2", Materialize::Link, Some(cache.path()))).await.unwrap();
    assert_eq!(second.objects_sent, 1, "the tampered object is replaced");
    assert_eq!(std::fs::read_to_string(root.path().join("p/g/n/r2/pkg/a.py")).unwrap(), "A = 1\n");
    assert_eq!(std::fs::read_to_string(root.path().join("p/g/n/r2/pkg/same.py")).unwrap(), "A = 1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_local_ships_of_the_same_objects_both_succeed() {
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    let (a, b) = tokio::join!(
        ship_local(request(code.path(), root.path(), "r1", Materialize::Link, None)),
        ship_local(request(code.path(), root.path(), "r2", Materialize::Link, None)),
    );
    a.unwrap();
    b.unwrap();
    assert_same_tree(code.path(), &root.path().join("p/g/n/r1"));
    assert_same_tree(code.path(), &root.path().join("p/g/n/r2"));
    no_leftovers(root.path());
}

#[tokio::test]
async fn an_existing_run_dir_or_a_vanished_file_fails_and_leaves_nothing() {
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    ship_local(request(code.path(), root.path(), "r1", Materialize::Link, None)).await.unwrap();
    let err = ship_local(request(code.path(), root.path(), "r1", Materialize::Link, None)).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");

    let req = request(code.path(), root.path(), "r2", Materialize::Link, None);
    std::fs::remove_file(code.path().join("pkg/deep/er/c.py")).unwrap();
    let err = ship_local(req).await.unwrap_err();
    assert!(err.to_string().contains("c.py"), "{err}");
    assert!(!root.path().join("p/g/n/r2").exists());
    no_leftovers(root.path());
}

#[tokio::test]
async fn a_clean_snapshot_ships_the_commits_files_through_the_cache() {
    let (code, root, cache) = (repo(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    git(code.path(), &["init", "-q"]);
    git(code.path(), &["add", "-A"]);
    git(code.path(), &["commit", "-q", "-m", "init"]);
    // Not committed: a clean snapshot ships HEAD's content.
    write(&code.path().join("train.py"), "print('uncommitted')\n", 0o644);
    let clean = |run: &str| {
        let mut snapshot = Snapshot::collect(code.path(), SnapshotMode::Clean).unwrap();
        snapshot.hash_cache = Some(cache.path().to_owned());
        ShipRequest { snapshot, ..request(code.path(), root.path(), run, Materialize::Link, None) }
    };
    let first = ship_local(clean("r1")).await.unwrap();
    assert_eq!((first.files, first.objects_sent), (5, 4));
    let run = root.path().join("p/g/n/r1");
    assert_eq!(std::fs::read_to_string(run.join("train.py")).unwrap(), "print('hi')\n");
    assert_eq!(std::fs::read_link(run.join("link.py")).unwrap(), Path::new("pkg/a.py"));
    assert_eq!(std::fs::metadata(run.join("run.sh")).unwrap().mode() & 0o111, 0o111);
    let second = ship_local(clean("r2")).await.unwrap();
    assert_eq!((second.files_present, second.objects_sent), (5, 0));
    no_leftovers(root.path());
}

#[tokio::test]
async fn without_a_hash_cache_runs_still_share_the_stores_objects() {
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    let first = ship_local(request(code.path(), root.path(), "r1", Materialize::Link, None)).await.unwrap();
    assert_eq!((first.files_present, first.objects_sent), (0, 4));
    // Every file is read again (no cache): each is written, then swapped for the store's link.
    let second = ship_local(request(code.path(), root.path(), "r2", Materialize::Link, None)).await.unwrap();
    assert_eq!((second.files_present, second.objects_sent, second.bytes_sent), (5, 0, 0));
    assert_same_tree(code.path(), &root.path().join("p/g/n/r2"));
    let ino = |p: &str| std::fs::metadata(root.path().join(p)).unwrap().ino();
    let shared = ino("p/g/n/r1/pkg/a.py");
    assert_eq!(ino("p/g/n/r1/pkg/same.py"), shared, "one object for one content within a ship");
    assert_eq!(ino("p/g/n/r2/pkg/a.py"), shared);
    assert_eq!(ino("p/g/n/r2/pkg/same.py"), shared);
    assert_eq!(ino("p/g/n/r2/run.sh"), ino("p/g/n/r1/run.sh"));
    no_leftovers(root.path());
}

#[tokio::test]
async fn an_object_written_in_place_is_published_again_by_a_ship_without_a_cache() {
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    ship_local(request(code.path(), root.path(), "r1", Materialize::Link, None)).await.unwrap();
    let victim = root.path().join("p/g/n/r1/train.py");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&victim, "print('tampered')\n").unwrap();
    let second = ship_local(request(code.path(), root.path(), "r2", Materialize::Link, None)).await.unwrap();
    assert_eq!((second.files_present, second.objects_sent), (4, 1));
    let fresh = root.path().join("p/g/n/r2/train.py");
    assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "print('hi')\n");
    let meta = std::fs::metadata(&fresh).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.mtime()), (0o444, 0), "the new object is read-only, mtime 0");
    // Later ships link the sound object, not the tampered one.
    let third = ship_local(request(code.path(), root.path(), "r3", Materialize::Link, None)).await.unwrap();
    assert_eq!(third.objects_sent, 0);
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&root.path().join("p/g/n/r3/train.py")), ino(&fresh));
    no_leftovers(root.path());
}
