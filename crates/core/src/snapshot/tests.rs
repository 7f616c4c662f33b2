//! Tests of snapshots against real `git` repositories in temp dirs.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::Command;

use sha2::{Digest, Sha256};

use super::*;

/// Runs git in `dir` with a clean, fixed identity and no user config (also used by the store's
/// tests).
pub(crate) fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn write(dir: &Path, path: &str, content: &str) {
    let full = dir.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, content).unwrap();
}

fn make_executable(dir: &Path, path: &str) {
    std::fs::set_permissions(dir.join(path), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A repo with a committed tree: `a.txt`, `sub/b.txt`, `run.sh` (executable), `link` -> `a.txt`,
/// `gone.txt`, and a `.gitignore` ignoring `*.log`.
fn repo() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    git(dir, &["init", "-q"]);
    write(dir, "a.txt", "committed a\n");
    write(dir, "sub/b.txt", "committed b\n");
    write(dir, "run.sh", "#!/bin/sh\necho hi\n");
    make_executable(dir, "run.sh");
    write(dir, "gone.txt", "to be deleted\n");
    write(dir, ".gitignore", "*.log\n");
    symlink("a.txt", dir.join("link")).unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "init"]);
    // Working-tree changes on top of the commit.
    write(dir, "a.txt", "modified a, longer than before\n");
    write(dir, "untracked.txt", "new file\n");
    write(dir, "debug.log", "ignored\n");
    write(dir, "sub/ignored.log", "ignored too\n");
    std::fs::remove_file(dir.join("gone.txt")).unwrap();
    tmp
}

/// An unpacked archive entry.
#[derive(Debug, PartialEq, Eq)]
enum Unpacked {
    File { mode: u32, bytes: Vec<u8> },
    Link(String),
}

/// Writes `snapshot` as a tar, checks the manifest against the contents and the progress
/// reports, and returns the unpacked entries by path.
fn unpack(snapshot: &Snapshot) -> BTreeMap<String, Unpacked> {
    let mut out = Vec::new();
    let mut last = 0;
    let manifest = snapshot.write_tar(&mut out, &mut |n| last = n).unwrap();
    assert_eq!(last, out.len() as u64, "the last progress report is the archive size");
    let mut entries = BTreeMap::new();
    let mut archive = tar::Archive::new(out.as_slice());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let header = entry.header().clone();
        assert_eq!(header.mtime().unwrap(), 0);
        assert_eq!((header.uid().unwrap(), header.gid().unwrap()), (0, 0));
        let path = entry.path().unwrap().to_str().unwrap().to_owned();
        let value = if header.entry_type() == tar::EntryType::Symlink {
            Unpacked::Link(entry.link_name().unwrap().unwrap().to_str().unwrap().to_owned())
        } else {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            Unpacked::File { mode: header.mode().unwrap(), bytes }
        };
        entries.insert(path, value);
    }
    let paths: Vec<_> = manifest.entries.iter().map(|e| e.path.clone()).collect();
    assert_eq!(paths, entries.keys().cloned().collect::<Vec<_>>(), "manifest lists the archive in order");
    for entry in &manifest.entries {
        let content = match &entries[&entry.path] {
            Unpacked::File { bytes, .. } => bytes.clone(),
            Unpacked::Link(target) => target.clone().into_bytes(),
        };
        assert_eq!(entry.size, content.len() as u64, "{}", entry.path);
        assert_eq!(entry.sha256, hex::encode(Sha256::digest(&content)), "{}", entry.path);
    }
    entries
}

fn file(mode: u32, content: &str) -> Unpacked {
    Unpacked::File { mode, bytes: content.as_bytes().to_vec() }
}

#[test]
fn dirty_ships_the_working_tree() {
    let tmp = repo();
    let snapshot = Snapshot::collect(tmp.path(), SnapshotMode::Dirty).unwrap();
    assert_eq!(snapshot.source, SnapshotSource::GitWorktree);
    let entries = unpack(&snapshot);
    let expected = BTreeMap::from([
        (".gitignore".to_owned(), file(0o644, "*.log\n")),
        ("a.txt".to_owned(), file(0o644, "modified a, longer than before\n")),
        ("link".to_owned(), Unpacked::Link("a.txt".into())),
        ("run.sh".to_owned(), file(0o755, "#!/bin/sh\necho hi\n")),
        ("sub/b.txt".to_owned(), file(0o644, "committed b\n")),
        ("untracked.txt".to_owned(), file(0o644, "new file\n")),
    ]);
    assert_eq!(entries, expected);
    let link = snapshot.files.iter().find(|f| f.path == "link").unwrap();
    assert_eq!(link.symlink.as_deref(), Some("a.txt"));
    assert!(snapshot.files.iter().find(|f| f.path == "run.sh").unwrap().executable);
    assert_eq!(snapshot.file_count(), 6);
}

#[test]
fn clean_ships_head_only() {
    let tmp = repo();
    let snapshot = Snapshot::collect(tmp.path(), SnapshotMode::Clean).unwrap();
    let SnapshotSource::GitCommit { commit } = &snapshot.source else { panic!("{:?}", snapshot.source) };
    assert_eq!(commit.len(), 40);
    let entries = unpack(&snapshot);
    let expected = BTreeMap::from([
        (".gitignore".to_owned(), file(0o644, "*.log\n")),
        ("a.txt".to_owned(), file(0o644, "committed a\n")),
        ("gone.txt".to_owned(), file(0o644, "to be deleted\n")),
        ("link".to_owned(), Unpacked::Link("a.txt".into())),
        ("run.sh".to_owned(), file(0o755, "#!/bin/sh\necho hi\n")),
        ("sub/b.txt".to_owned(), file(0o644, "committed b\n")),
    ]);
    assert_eq!(entries, expected);
    assert_eq!(snapshot.total_bytes(), entries_bytes(&expected));
}

fn entries_bytes(entries: &BTreeMap<String, Unpacked>) -> u64 {
    entries
        .values()
        .map(|e| match e {
            Unpacked::File { bytes, .. } => bytes.len() as u64,
            Unpacked::Link(t) => t.len() as u64,
        })
        .sum()
}

#[test]
fn a_subdirectory_ships_the_whole_repo() {
    let tmp = repo();
    for mode in [SnapshotMode::Dirty, SnapshotMode::Clean] {
        let snapshot = Snapshot::collect(&tmp.path().join("sub"), mode).unwrap();
        assert_eq!(snapshot.root.canonicalize().unwrap(), tmp.path().canonicalize().unwrap());
        let paths: Vec<_> = snapshot.files.iter().map(|f| f.path.as_str()).collect();
        assert!(paths.contains(&"a.txt") && paths.contains(&"sub/b.txt"), "{mode:?}: {paths:?}");
    }
}

#[test]
fn a_directory_git_ignores_ships_as_itself_not_as_the_repo() {
    let tmp = repo();
    // Like a scratch dir under an ignored `target/`: its files are not the repository's.
    write(tmp.path(), ".gitignore", "*.log\nscratch/\n");
    write(tmp.path(), "scratch/code/train.py", "print('hi')\n");
    let snapshot = Snapshot::collect(&tmp.path().join("scratch/code"), SnapshotMode::Dirty).unwrap();
    assert_eq!(snapshot.root.canonicalize().unwrap(), tmp.path().join("scratch/code").canonicalize().unwrap());
    let paths: Vec<_> = snapshot.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, vec!["train.py"]);
}

#[test]
fn a_plain_directory_honors_gitignore() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, ".gitignore", "*.log\nbuild/\n");
    write(dir, "main.py", "print('hi')\n");
    write(dir, "data/x.log", "ignored\n");
    write(dir, "build/out.bin", "ignored\n");
    write(dir, "data/nested/.gitignore", "secret.txt\n");
    write(dir, "data/nested/secret.txt", "ignored\n");
    write(dir, "data/nested/kept.txt", "kept\n");
    write(dir, ".git/HEAD", "not a real repo, but never shipped\n");
    write(dir, "tool", "#!/bin/sh\n");
    make_executable(dir, "tool");
    symlink("/etc/hostname", dir.join("abs-link")).unwrap();
    let snapshot = Snapshot::collect(dir, SnapshotMode::Dirty).unwrap();
    assert_eq!(snapshot.source, SnapshotSource::Directory);
    let entries = unpack(&snapshot);
    let expected = BTreeMap::from([
        (".gitignore".to_owned(), file(0o644, "*.log\nbuild/\n")),
        ("abs-link".to_owned(), Unpacked::Link("/etc/hostname".into())),
        ("data/nested/.gitignore".to_owned(), file(0o644, "secret.txt\n")),
        ("data/nested/kept.txt".to_owned(), file(0o644, "kept\n")),
        ("main.py".to_owned(), file(0o644, "print('hi')\n")),
        ("tool".to_owned(), file(0o755, "#!/bin/sh\n")),
    ]);
    assert_eq!(entries, expected);
}

#[test]
fn a_file_that_changed_size_keeps_a_valid_archive() {
    let tmp = repo();
    let snapshot = Snapshot::collect(tmp.path(), SnapshotMode::Dirty).unwrap();
    write(tmp.path(), "sub/b.txt", "now much longer than when it was listed\n");
    write(tmp.path(), "untracked.txt", "");
    let entries = unpack(&snapshot);
    assert_eq!(entries["sub/b.txt"], file(0o644, "now much longer than when it was listed\n"));
    assert_eq!(entries["untracked.txt"], file(0o644, ""));
}

#[test]
fn a_file_that_disappeared_is_an_error_naming_it() {
    let tmp = repo();
    let snapshot = Snapshot::collect(tmp.path(), SnapshotMode::Dirty).unwrap();
    std::fs::remove_file(tmp.path().join("untracked.txt")).unwrap();
    let err = snapshot.write_tar(std::io::sink(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("untracked.txt"), "{err}");
}

#[test]
fn large_files_stream_with_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let big: String = "0123456789abcdef".repeat(300_000);
    write(tmp.path(), "big.bin", &big);
    let snapshot = Snapshot::collect(tmp.path(), SnapshotMode::Dirty).unwrap();
    let mut reports = Vec::new();
    let mut out = Vec::new();
    let manifest = snapshot.write_tar(&mut out, &mut |n| reports.push(n)).unwrap();
    assert!(reports.len() >= 4, "{reports:?}");
    assert!(reports.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(*reports.last().unwrap(), out.len() as u64);
    assert_eq!(manifest.entries[0].sha256, hex::encode(Sha256::digest(big.as_bytes())));
}

#[test]
fn archives_are_deterministic() {
    let tmp = repo();
    let snapshot = Snapshot::collect(tmp.path(), SnapshotMode::Clean).unwrap();
    let mut first = Vec::new();
    let mut second = Vec::new();
    snapshot.write_tar(&mut first, &mut |_| {}).unwrap();
    snapshot.write_tar(&mut second, &mut |_| {}).unwrap();
    assert_eq!(first, second);
}

#[test]
fn clean_without_a_commit_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    git(tmp.path(), &["init", "-q"]);
    let err = Snapshot::collect(tmp.path(), SnapshotMode::Clean).unwrap_err();
    assert!(err.to_string().contains("needs a commit"), "{err}");
}

#[test]
fn estimated_tar_size_matches_what_is_written() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), vec![b'a'; 1000]).unwrap();
    std::fs::write(dir.path().join("b.bin"), vec![7u8; 70_000]).unwrap();
    std::fs::create_dir_all(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/empty"), b"").unwrap();
    let snap = Snapshot::collect(dir.path(), SnapshotMode::Dirty).unwrap();
    let mut out = Vec::new();
    snap.write_tar(&mut out, &mut |_| {}).unwrap();
    assert_eq!(snap.estimated_tar_bytes(), out.len() as u64);
}

#[test]
fn the_subdir_a_job_starts_in_is_relative_to_the_repository_top() {
    let tmp = repo();
    assert_eq!(subdir_in_snapshot(&tmp.path().join("sub")).as_deref(), Some("sub"));
    assert_eq!(subdir_in_snapshot(tmp.path()), None);
    let plain = tempfile::tempdir().unwrap();
    assert_eq!(subdir_in_snapshot(plain.path()), None, "not a repository: it ships as itself");
}

/// An untracked dotenv file holds secrets: `--dirty` leaves it (and `.env.local`) behind, in a
/// repository and in a plain directory; a template and a dotenv file git tracks ship.
#[test]
fn untracked_dotenv_files_stay_behind() {
    let tmp = repo();
    write(tmp.path(), ".env", "WANDB_API_KEY=secret\n");
    write(tmp.path(), "sub/.env.local", "HF_TOKEN=secret\n");
    write(tmp.path(), ".env.example", "WANDB_API_KEY=\n");
    write(tmp.path(), ".envrc.txt", "not a dotenv file\n");
    let paths = |s: &Snapshot| s.files.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
    let shipped = paths(&Snapshot::collect(tmp.path(), SnapshotMode::Dirty).unwrap());
    assert!(!shipped.iter().any(|p| p == ".env" || p == "sub/.env.local"), "{shipped:?}");
    assert!(shipped.iter().any(|p| p == ".env.example") && shipped.iter().any(|p| p == ".envrc.txt"), "{shipped:?}");
    git(tmp.path(), &["add", ".env"]);
    let shipped = paths(&Snapshot::collect(tmp.path(), SnapshotMode::Dirty).unwrap());
    assert!(shipped.iter().any(|p| p == ".env"), "a tracked .env ships: {shipped:?}");

    let plain = tempfile::tempdir().unwrap();
    write(plain.path(), "train.py", "print(1)\n");
    write(plain.path(), ".env", "WANDB_API_KEY=secret\n");
    let shipped = paths(&Snapshot::collect(plain.path(), SnapshotMode::Dirty).unwrap());
    assert_eq!(shipped, vec!["train.py".to_owned()]);
}
