//! Tests of [`Snapshot::digests`] and its persistent hash cache.

use std::path::Path;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::hash_cache::{CacheKind, HashCache};
use super::tests::git;
use super::*;

/// Files modified an hour ago: older than the racy window, so their hashes are cached.
fn write_old(dir: &Path, path: &str, content: &[u8]) {
    let full = dir.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(&full, content).unwrap();
    set_mtime(&full, SystemTime::now() - Duration::from_secs(3600));
}

fn set_mtime(path: &Path, mtime: SystemTime) {
    std::fs::File::options().write(true).open(path).unwrap().set_modified(mtime).unwrap();
}

/// A plain dir of `n` files spread over a few subdirs, and a symlink.
fn many_files(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        write_old(dir.path(), &format!("d{}/f{i}.txt", i % 7), format!("content of file {i}\n").as_bytes());
    }
    std::os::unix::fs::symlink("d0/f0.txt", dir.path().join("link")).unwrap();
    dir
}

fn sha(bytes: &[u8]) -> Sha256Digest {
    Sha256::digest(bytes).into()
}

/// Every digest is the sha256 of the file's current content (of its target for symlinks).
fn assert_true_digests(snapshot: &Snapshot, digests: &[Sha256Digest]) {
    for (file, digest) in snapshot.files.iter().zip(digests) {
        let expected = match &file.symlink {
            Some(target) => sha(target.as_bytes()),
            None => sha(&std::fs::read(snapshot.root.join(&file.path)).unwrap()),
        };
        assert_eq!(*digest, expected, "{}", file.path);
    }
}

#[test]
fn after_editing_one_file_of_many_only_that_file_is_hashed_again() {
    let code = many_files(300);
    let cache = tempfile::tempdir().unwrap();
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    let (first, stats) = snapshot.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!(stats, DigestStats { hashed: 300, cached: 0 });
    assert_true_digests(&snapshot, &first);

    let (again, stats) = snapshot.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!(stats, DigestStats { hashed: 0, cached: 300 });
    assert_eq!(again, first);

    std::fs::write(code.path().join("d3/f10.txt"), "edited\n").unwrap();
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    let (edited, stats) = snapshot.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!(stats, DigestStats { hashed: 1, cached: 299 });
    assert_true_digests(&snapshot, &edited);
    assert_eq!(edited.iter().zip(&first).filter(|(a, b)| a != b).count(), 1);

    // Without a cache, everything is hashed, to the same digests.
    let (uncached, stats) = snapshot.digests_with_stats(None).unwrap();
    assert_eq!((stats.hashed, uncached), (300, edited));
}

#[test]
fn an_edit_that_keeps_size_and_mtime_is_still_seen_through_ctime_and_inode() {
    let code = tempfile::tempdir().unwrap();
    write_old(code.path(), "a.txt", b"aaaa\n");
    write_old(code.path(), "b.txt", b"bbbb\n");
    let cache = tempfile::tempdir().unwrap();
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    snapshot.digests_with_stats(Some(cache.path())).unwrap();
    let path = code.path().join("a.txt");
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    // The kernel's file clock is coarse: let it move on, so the ctime differs.
    std::thread::sleep(Duration::from_millis(50));

    // In place: same inode, same size, mtime put back; only the ctime tells.
    std::fs::write(&path, b"AAAA\n").unwrap();
    set_mtime(&path, mtime);
    let (digests, stats) = snapshot.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!(stats, DigestStats { hashed: 1, cached: 1 });
    assert_eq!(digests[0], sha(b"AAAA\n"));

    // Replaced by a rename (an editor's save): a new inode with the old size and mtime.
    let new = code.path().join("a.txt.new");
    std::fs::write(&new, b"aAaA\n").unwrap();
    set_mtime(&new, mtime);
    std::fs::rename(&new, &path).unwrap();
    let (digests, stats) = snapshot.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!(stats.hashed, 1);
    assert_eq!(digests[0], sha(b"aAaA\n"));
}

#[test]
fn a_just_modified_file_is_not_trusted_to_the_cache() {
    let code = tempfile::tempdir().unwrap();
    write_old(code.path(), "old.txt", b"old\n");
    std::fs::write(code.path().join("new.txt"), b"new\n").unwrap();
    let cache = tempfile::tempdir().unwrap();
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    snapshot.digests_with_stats(Some(cache.path())).unwrap();
    let (_, stats) = snapshot.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!(stats, DigestStats { hashed: 1, cached: 1 }, "the racily clean file is hashed again");
}

#[test]
fn a_corrupt_cache_is_ignored_and_the_cache_holds_only_the_snapshots_files() {
    let code = many_files(40);
    let cache = tempfile::tempdir().unwrap();
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    let (first, _) = snapshot.digests_with_stats(Some(cache.path())).unwrap();
    for entry in std::fs::read_dir(cache.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let (digests, stats) = snapshot.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!((stats.hashed, digests), (40, first));

    for i in 0..30 {
        std::fs::remove_file(code.path().join(format!("d{}/f{i}.txt", i % 7))).unwrap();
    }
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    let (_, stats) = snapshot.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!(stats, DigestStats { hashed: 0, cached: 10 });
    let kept = HashCache::load(cache.path(), &snapshot.root, CacheKind::Stat);
    assert_eq!(kept.entries.len(), 10, "entries of deleted files are dropped");

    // A cache dir that cannot be written (a file in its place) is no error either.
    let blocked = cache.path().join("not-a-dir");
    std::fs::write(&blocked, b"x").unwrap();
    assert_eq!(snapshot.digests_with_stats(Some(&blocked)).unwrap().1.hashed, 10);
}

#[test]
fn a_commits_files_are_cached_by_blob_id() {
    let code = many_files(100);
    git(code.path(), &["init", "-q"]);
    git(code.path(), &["add", "-A"]);
    git(code.path(), &["commit", "-q", "-m", "init"]);
    let cache = tempfile::tempdir().unwrap();
    let clean = Snapshot::collect(code.path(), SnapshotMode::Clean).unwrap();
    let (first, stats) = clean.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!(stats, DigestStats { hashed: 100, cached: 0 });
    assert_true_digests(&clean, &first);
    let (again, stats) = clean.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!((again, stats), (first.clone(), DigestStats { hashed: 0, cached: 100 }));

    // A new commit changing one file: one blob is new.
    std::fs::write(code.path().join("d1/f1.txt"), "changed\n").unwrap();
    git(code.path(), &["commit", "-q", "-a", "-m", "edit"]);
    let clean = Snapshot::collect(code.path(), SnapshotMode::Clean).unwrap();
    let (digests, stats) = clean.digests_with_stats(Some(cache.path())).unwrap();
    assert_eq!(stats, DigestStats { hashed: 1, cached: 99 });
    assert_true_digests(&clean, &digests);
}
