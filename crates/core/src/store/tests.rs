//! The store protocol end to end with real `sh`, `tar` and `sha256sum` on this machine.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use super::*;
use crate::snapshot::{Snapshot, SnapshotMode};

/// Writes `content` to `path` (making its dirs) with `mode` (also used by `native_tests`).
pub(super) fn write(path: &Path, content: &str, mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs the scripts with `busybox sh` and nothing but busybox applets on `PATH`, or (see
/// [`BusyboxShell::with_tools`]) with this machine's `sh` and a dir of stand-in tools first on
/// `PATH`.
pub(crate) struct BusyboxShell {
    bin: tempfile::TempDir,
    /// The shell: `busybox sh`, or `sh`.
    sh: &'static [&'static str],
    /// `PATH`: the dir of applets, or the stand-ins before this process's `PATH`.
    path: std::ffi::OsString,
}

pub(crate) const BUSYBOX: &str = "/usr/bin/busybox";

impl BusyboxShell {
    pub(crate) fn new() -> Option<BusyboxShell> {
        if !Path::new(BUSYBOX).exists() {
            return None;
        }
        let bin = tempfile::tempdir().unwrap();
        let list = std::process::Command::new(BUSYBOX).arg("--list").output().unwrap();
        for applet in String::from_utf8_lossy(&list.stdout).lines() {
            std::os::unix::fs::symlink(BUSYBOX, bin.path().join(applet)).unwrap();
        }
        let path = bin.path().as_os_str().to_owned();
        Some(BusyboxShell { bin, sh: &[BUSYBOX, "sh"], path })
    }

    /// This machine's `sh` and tools, with `tools` (name, script body) found first on `PATH`.
    fn with_tools(tools: &[(&str, &str)]) -> BusyboxShell {
        let bin = tempfile::tempdir().unwrap();
        for (name, body) in tools {
            write(&bin.path().join(name), &format!("#!/bin/sh\n{body}\n"), 0o755);
        }
        let mut dirs = vec![bin.path().to_path_buf()];
        dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
        let path = std::env::join_paths(dirs).unwrap();
        BusyboxShell { bin, sh: &["sh"], path }
    }
}

#[async_trait]
impl Shell for BusyboxShell {
    async fn run(&self, call: ScriptCall) -> std::result::Result<Vec<u8>, ShellError> {
        let mut input = Vec::new();
        if let Some(produce) = &call.stdin {
            produce(&mut input).unwrap();
        }
        let mut child = tokio::process::Command::new(self.sh[0])
            .args(&self.sh[1..])
            .args(["-c", call.script, "theseus-store"])
            .args(&call.args)
            .env_clear()
            .env("PATH", &self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&input).await.unwrap();
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        if !out.status.success() {
            return Err(ShellError::Exit {
                code: out.status.code().unwrap_or(128),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(out.stdout)
    }

    fn describe(&self) -> String {
        format!("{} with PATH={}", self.sh.join(" "), self.bin.path().display())
    }
}

pub(super) fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("train.py"), "print('hi')\n", 0o644);
    write(&dir.path().join("run.sh"), "#!/bin/sh\necho run\n", 0o755);
    write(&dir.path().join("pkg/a.py"), "A = 1\n", 0o644);
    write(&dir.path().join("pkg/same.py"), "A = 1\n", 0o644);
    std::os::unix::fs::symlink("pkg/a.py", dir.path().join("link.py")).unwrap();
    dir
}

pub(super) fn request(code: &Path, root: &Path, run: &str, mode: Materialize) -> ShipRequest {
    ShipRequest {
        snapshot: Snapshot::collect(code, SnapshotMode::Dirty).unwrap(),
        root: root.to_str().unwrap().to_owned(),
        dest: root.join("p/g/n").join(run).to_str().unwrap().to_owned(),
        mode,
        extra: vec![archive::ExtraFile {
            path: ".theseus/bootstrap.sh".into(),
            contents: b"echo\n".to_vec(),
            mode: 0o755,
        }],
        progress: None,
        status: None,
    }
}

/// Every file of `code` is in `run` with the same bytes, mode bits and symlink targets.
pub(super) fn assert_same_tree(code: &Path, run: &Path) {
    let snapshot = Snapshot::collect(code, SnapshotMode::Dirty).unwrap();
    for file in &snapshot.files {
        let (a, b) = (code.join(&file.path), run.join(&file.path));
        let (ma, mb) = (std::fs::symlink_metadata(&a).unwrap(), std::fs::symlink_metadata(&b).unwrap());
        assert_eq!(ma.file_type().is_symlink(), mb.file_type().is_symlink(), "{}", file.path);
        if ma.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(&a).unwrap(), std::fs::read_link(&b).unwrap());
            continue;
        }
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "{}", file.path);
        assert_eq!(ma.permissions().mode() & 0o111 != 0, mb.permissions().mode() & 0o111 != 0, "{}", file.path);
    }
    let shipped = walk(run).into_iter().filter(|p| !p.starts_with(".theseus/")).count();
    assert_eq!(shipped, snapshot.files.len(), "no extra files in the run dir");
}

pub(super) fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&entry.path()).into_iter().map(|p| format!("{name}/{p}")));
        } else {
            out.push(name);
        }
    }
    out
}

#[tokio::test]
async fn a_second_ship_sends_only_what_changed_and_links_the_rest() {
    let code = repo();
    let root = tempfile::tempdir().unwrap();
    let first = ship(&LocalShell, request(code.path(), root.path(), "r1", Materialize::Link)).await.unwrap();
    assert_eq!((first.files, first.files_present, first.objects_sent), (4, 0, 3), "same.py shares a.py's object");
    assert_same_tree(code.path(), &root.path().join("p/g/n/r1"));
    assert!(root.path().join("p/g/n/r1/.theseus/bootstrap.sh").exists());
    assert!(!root.path().join("p/g/n/r1/.theseus/ship-complete").exists());

    write(&code.path().join("train.py"), "print('changed')\n", 0o644);
    let second = ship(&LocalShell, request(code.path(), root.path(), "r2", Materialize::Link)).await.unwrap();
    assert_eq!((second.files_present, second.objects_sent), (3, 1));
    assert_eq!(second.bytes_sent, "print('changed')\n".len() as u64);
    assert_same_tree(code.path(), &root.path().join("p/g/n/r2"));
    // The unchanged file is the same inode in both runs; the objects are read-only.
    let ino = |p: &str| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(root.path().join(p)).unwrap());
    assert_eq!(ino("p/g/n/r1/pkg/a.py"), ino("p/g/n/r2/pkg/a.py"));
    let mode = std::fs::metadata(root.path().join("p/g/n/r2/pkg/a.py")).unwrap().permissions().mode();
    assert_eq!(mode & 0o222, 0, "objects are read-only");
    assert_eq!(std::fs::read_to_string(root.path().join("p/g/n/r1/train.py")).unwrap(), "print('hi')\n");
}

/// The code manifests of `runs` (under `root/p/g/n`) are one read-only object of the store,
/// named by their sha256, with mtime 0 as every object has.
pub(super) fn assert_manifest_shared(root: &Path, runs: &[&str]) {
    use sha2::Digest;
    use std::os::unix::fs::MetadataExt;
    let path = |run: &str| root.join("p/g/n").join(run).join(sync::MANIFEST);
    let bytes = std::fs::read(path(runs[0])).unwrap();
    let hex = hex::encode(sha2::Sha256::digest(&bytes));
    let object = std::fs::metadata(root.join(OBJECTS_DIR).join(&hex[..2]).join(&hex[2..])).unwrap();
    for run in runs {
        let meta = std::fs::metadata(path(run)).unwrap();
        assert_eq!(meta.ino(), object.ino(), "run {run}'s manifest is the store's object {hex}");
    }
    assert_eq!(object.nlink(), runs.len() as u64 + 1, "linked from each run and the store only");
    assert_eq!(object.mode() & 0o777, 0o444);
    assert_eq!(object.mtime(), 0);
}

#[tokio::test]
async fn runs_of_one_tree_share_one_code_manifest_and_copy_mode_runs_have_their_own() {
    let code = repo();
    let root = tempfile::tempdir().unwrap();
    for run in ["r1", "r2"] {
        ship(&LocalShell, request(code.path(), root.path(), run, Materialize::Link)).await.unwrap();
    }
    match BusyboxShell::new() {
        Some(busybox) => {
            ship(&busybox, request(code.path(), root.path(), "r3", Materialize::Link)).await.unwrap();
            assert_manifest_shared(root.path(), &["r1", "r2", "r3"]);
        }
        None => {
            eprintln!("NOT RUN under busybox: {BUSYBOX} is missing");
            assert_manifest_shared(root.path(), &["r1", "r2"]);
        }
    }
    // Another tree, another manifest.
    write(&code.path().join("train.py"), "print('changed')\n", 0o644);
    ship(&LocalShell, request(code.path(), root.path(), "r4", Materialize::Link)).await.unwrap();
    assert_manifest_shared(root.path(), &["r4"]);
    // A `copy` run's manifest is its own file, like its code.
    ship(&LocalShell, request(code.path(), root.path(), "c1", Materialize::Copy)).await.unwrap();
    let meta = std::fs::metadata(root.path().join("p/g/n/c1").join(sync::MANIFEST)).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::nlink(&meta), 1);
}

#[tokio::test]
async fn copy_mode_gives_each_run_private_writable_files() {
    let code = repo();
    let root = tempfile::tempdir().unwrap();
    ship(&LocalShell, request(code.path(), root.path(), "r1", Materialize::Copy)).await.unwrap();
    ship(&LocalShell, request(code.path(), root.path(), "r2", Materialize::Copy)).await.unwrap();
    let run1 = root.path().join("p/g/n/r1");
    assert_same_tree(code.path(), &run1);
    assert!(!root.path().join("p/g/n/r1.partial.copy").exists());
    std::fs::write(run1.join("pkg/a.py"), "edited in place\n").unwrap();
    assert_eq!(std::fs::read_to_string(root.path().join("p/g/n/r2/pkg/a.py")).unwrap(), "A = 1\n");
    assert_eq!(std::fs::read_to_string(code.path().join("pkg/a.py")).unwrap(), "A = 1\n");
}

#[tokio::test]
async fn an_object_written_in_place_is_sent_again_not_linked() {
    let code = repo();
    let root = tempfile::tempdir().unwrap();
    ship(&LocalShell, request(code.path(), root.path(), "r1", Materialize::Link)).await.unwrap();
    // What a job running as root could do to a hard-linked file.
    let victim = root.path().join("p/g/n/r1/pkg/a.py");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&victim, "A = 2  # tampered\n").unwrap();
    let second = ship(&LocalShell, request(code.path(), root.path(), "r2", Materialize::Link)).await.unwrap();
    assert_eq!(second.objects_sent, 1, "the tampered object is replaced");
    assert_eq!(std::fs::read_to_string(root.path().join("p/g/n/r2/pkg/a.py")).unwrap(), "A = 1\n");
}

#[tokio::test]
async fn concurrent_ships_of_the_same_objects_both_succeed() {
    let code = repo();
    let root = tempfile::tempdir().unwrap();
    let (a, b) = tokio::join!(
        ship(&LocalShell, request(code.path(), root.path(), "r1", Materialize::Link)),
        ship(&LocalShell, request(code.path(), root.path(), "r2", Materialize::Link)),
    );
    a.unwrap();
    b.unwrap();
    assert_same_tree(code.path(), &root.path().join("p/g/n/r1"));
    assert_same_tree(code.path(), &root.path().join("p/g/n/r2"));
    assert!(std::fs::read_dir(root.path().join(".theseus/incoming")).unwrap().next().is_none(), "no upload dir left");
}

#[tokio::test]
async fn a_corrupt_object_is_refused_and_nothing_is_stored() {
    let root = tempfile::tempdir().unwrap();
    let objects = root.path().join(OBJECTS_DIR);
    let key: ObjectKey = format!("ab/{}", "c".repeat(62)).parse().unwrap();
    let stdin: StdinFn = std::sync::Arc::new(move |w| {
        let mut builder = tar::Builder::new(w);
        let mut header = tar::Header::new_gnu();
        header.set_size(5);
        header.set_mode(0o444);
        builder.append_data(&mut header, key.path(), &b"wrong"[..])?;
        builder.finish()
    });
    let len = super::archive::counted_len(|w| stdin(w)).unwrap();
    let err = LocalShell
        .run(ScriptCall {
            script: scripts::UPLOAD,
            args: vec![
                objects.to_str().unwrap().into(),
                root.path().join("in/1").to_str().unwrap().into(),
                "1".into(),
                len.to_string(),
            ],
            stdin: Some(stdin),
            stdin_len: Some(len),
            progress: None,
            label: "test",
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ShellError::Exit { code: EXIT_CORRUPT, stderr } if stderr.contains("arrived corrupt")),
        "{err}"
    );
    assert!(!objects.join(key.path()).exists());
    assert!(!root.path().join("in/1").exists());
}

#[test]
fn keys_round_trip_and_refuse_junk() {
    let key = ObjectKey { sha256: [0xab; 32], executable: true };
    assert_eq!(key.path().parse::<ObjectKey>().unwrap(), key);
    assert!(key.path().ends_with(".x"));
    for junk in ["", "ab", "../../etc/passwd", &format!("AB/{}", "C".repeat(62)), &format!("ab/{}", "c".repeat(61))] {
        assert!(junk.parse::<ObjectKey>().is_err(), "{junk:?}");
    }
}

#[tokio::test]
async fn awkward_names_and_long_paths_survive_the_scripts() {
    let code = tempfile::tempdir().unwrap();
    let long = format!("{}/{}.py", "d".repeat(90), "f".repeat(120));
    for (path, mode) in [
        ("with space.py", 0o644),
        ("-leading-dash.sh", 0o755),
        ("new\nline.txt", 0o644),
        ("ünïcode/ファイル.py", 0o644),
        ("quote'and\"dollar$HOME.txt", 0o644),
        (long.as_str(), 0o644),
        ("empty", 0o644),
    ] {
        write(&code.path().join(path), if path == "empty" { "" } else { path }, mode);
    }
    std::os::unix::fs::symlink(format!("../{}", "t".repeat(150)), code.path().join("long-link")).unwrap();
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().join("work root with space");
    let report = ship(&LocalShell, request(code.path(), &root_path, "r1", Materialize::Link)).await.unwrap();
    assert_eq!(report.files, 7);
    assert_same_tree(code.path(), &root_path.join("p/g/n/r1"));
    ship(&LocalShell, request(code.path(), &root_path, "r2", Materialize::Copy)).await.unwrap();
    assert_same_tree(code.path(), &root_path.join("p/g/n/r2"));
}

#[test]
fn the_run_dir_archive_is_the_same_bytes_every_time_it_is_written() {
    // A transport that cannot close stdin (kube exec v4) writes stdin twice and refuses a
    // second pass that differs; a clock read inside the writer made that fail at second
    // boundaries.
    let code = repo();
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    let plan = StorePlan::new(&snapshot, &snapshot.digests(None).unwrap());
    let extra =
        [archive::ExtraFile { path: ".theseus/bootstrap.sh".into(), contents: b"echo\n".to_vec(), mode: 0o755 }];
    let write = || {
        let mut out = Vec::new();
        archive::write_materialize(&plan, "/w", "p/g/n/r", Materialize::Link, &extra, "tok", 1_700_000_000, &mut out)
            .unwrap();
        out
    };
    let first = write();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(first, write());
}

#[test]
fn the_object_archive_is_as_long_as_announced_before_a_byte_is_read() {
    // The exec transport announces the object archive's length up front (the scripts read
    // exactly that many bytes): a wrong sum would hang or cut the upload.
    let code = tempfile::tempdir().unwrap();
    for (name, size) in [("empty", 0), ("one", 1), ("block", 512), ("block1", 513), ("big", 70_000)] {
        std::fs::write(code.path().join(name), vec![b'x' + (size % 7) as u8; size]).unwrap();
    }
    std::fs::write(code.path().join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(code.path().join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let snapshot = Snapshot::collect(code.path(), SnapshotMode::Dirty).unwrap();
    let plan = StorePlan::new(&snapshot, &snapshot.digests(None).unwrap());
    let keys: Vec<ObjectKey> = plan.objects.keys().copied().collect();
    for keys in [&keys[..], &keys[..1], &[]] {
        let mut out = Vec::new();
        archive::write_objects(&snapshot, &plan, keys, &mut out).unwrap();
        assert_eq!(out.len() as u64, archive::objects_len(&plan, keys));
    }
}

/// Edits `train.py` in place (same size) just before the upload, then runs the scripts locally.
struct EditsBeforeUpload {
    file: std::path::PathBuf,
}

#[async_trait]
impl Shell for EditsBeforeUpload {
    async fn run(&self, call: ScriptCall) -> std::result::Result<Vec<u8>, ShellError> {
        if call.script == scripts::UPLOAD {
            std::fs::write(&self.file, "print('HI')\n").unwrap();
        }
        LocalShell.run(call).await
    }

    fn describe(&self) -> String {
        "local".into()
    }
}

#[tokio::test]
async fn a_file_edited_after_it_was_hashed_fails_the_ship_naming_it_and_stores_nothing() {
    // The object archive is not hashed again on the way out: the store's check of each object
    // against its name is what catches the edit, and the error names the file.
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    let shell = EditsBeforeUpload { file: code.path().join("train.py") };
    let err = ship(&shell, request(code.path(), root.path(), "r1", Materialize::Link)).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("train.py") && message.contains("changed while it was being shipped"), "{message}");
    assert!(!root.path().join("p/g/n/r1").exists(), "no run dir");
    let stored = walk(&root.path().join(OBJECTS_DIR));
    assert!(stored.is_empty(), "nothing stored: {stored:?}");
}

/// The upload checks each object with the fastest sha256 tool that works: an `openssl` that
/// does not answer as `openssl dgst -sha256 -r` does (here: one that prints nothing useful) is
/// passed over for `sha256sum`, and the ship succeeds.
#[tokio::test]
async fn an_openssl_that_does_not_answer_as_expected_is_passed_over_for_sha256sum() {
    let shell = BusyboxShell::with_tools(&[("openssl", "echo 'OpenSSL 0.9.8 (stand-in)'")]);
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    ship(&shell, request(code.path(), root.path(), "r1", Materialize::Link)).await.unwrap();
    assert_same_tree(code.path(), &root.path().join("p/g/n/r1"));
}

/// What the chosen tool says is what is checked: an `openssl` that answers the probe (the hash
/// of nothing) rightly but gives every file the same wrong hash makes the upload refuse its
/// objects and store none.
#[tokio::test]
async fn the_chosen_hash_tool_is_what_each_object_is_checked_against() {
    let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let lying = format!(
        "[ \"$#\" -eq 3 ] && {{ cat >/dev/null; echo '{empty} *stdin'; exit 0; }}\n\
         shift 3; for f; do echo \"{} *$f\"; done",
        "0".repeat(64)
    );
    let shell = BusyboxShell::with_tools(&[("openssl", &lying)]);
    let (code, root) = (repo(), tempfile::tempdir().unwrap());
    let err = ship(&shell, request(code.path(), root.path(), "r1", Materialize::Link)).await.unwrap_err();
    // The store names the object whose hash differs; the ship names its file.
    assert!(err.to_string().contains("changed while it was being shipped"), "{err}");
    assert_eq!(walk(&root.path().join(OBJECTS_DIR)), Vec::<String>::new(), "no object of a refused upload is stored");
}
