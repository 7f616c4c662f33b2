//! The store protocol (`theseus_core::store::ship`) under busybox, as in the helper image: a
//! test `Shell` runs every script with `busybox sh` and a PATH that holds only symlinks to
//! busybox applets, so no GNU tool can stand in.

use std::io::Read as _;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use async_trait::async_trait;
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::store::{self, ExtraFile, Materialize, ScriptCall, Shell, ShellError, ShipRequest};

use crate::store_tree::{assert_run_dir_matches, awkward_repo, objects_all_hash_to_their_names, write};

/// A temp dir of symlinks to every busybox applet, or `None` (said loudly) without busybox.
pub(crate) fn busybox_bin() -> Option<tempfile::TempDir> {
    let Some(busybox) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("busybox"))
        .find(|path| path.is_file())
    else {
        // `cargo xtask test` installs busybox with the lab, so CI requires these tests.
        let msg = "NOT RUN: busybox store tests need `busybox` on PATH (apt-get install busybox)";
        if std::env::var("THESEUSTEST_REQUIRE_ALL").is_ok_and(|v| v == "1") {
            panic!("{msg}");
        }
        eprintln!("{msg}");
        return None;
    };
    let list = std::process::Command::new(&busybox).arg("--list").output().expect("busybox --list");
    let bin = tempfile::tempdir().unwrap();
    for applet in String::from_utf8_lossy(&list.stdout).lines().map(str::trim).filter(|a| !a.is_empty()) {
        symlink(&busybox, bin.path().join(applet)).unwrap();
    }
    Some(bin)
}

/// Runs store scripts as `busybox sh -c SCRIPT theseus-store ARGS...` with PATH = `bin` only.
struct BusyboxShell {
    bin: PathBuf,
}

#[async_trait]
impl Shell for BusyboxShell {
    async fn run(&self, call: ScriptCall) -> Result<Vec<u8>, ShellError> {
        let bin = self.bin.clone();
        tokio::task::spawn_blocking(move || {
            let transport = |e: std::io::Error| ShellError::Transport(Box::new(e));
            let mut child = std::process::Command::new(bin.join("sh"))
                .arg("-c")
                .arg(call.script)
                .arg("theseus-store")
                .args(&call.args)
                .env_clear()
                .env("PATH", &bin)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(transport)?;
            let mut stdin = child.stdin.take().expect("piped");
            let produce = call.stdin.clone();
            let writer = std::thread::spawn(move || match produce {
                Some(produce) => produce(&mut stdin),
                None => Ok(()),
            });
            let mut stderr = child.stderr.take().expect("piped");
            let err_reader = std::thread::spawn(move || {
                let mut buf = String::new();
                let _ = stderr.read_to_string(&mut buf);
                buf
            });
            let mut out = Vec::new();
            child.stdout.take().expect("piped").read_to_end(&mut out).map_err(transport)?;
            let status = child.wait().map_err(transport)?;
            let written = writer.join().expect("stdin writer");
            let stderr = err_reader.join().expect("stderr reader");
            if !status.success() {
                return Err(ShellError::Exit { code: status.code().unwrap_or(128), stderr });
            }
            if let Err(e) = written
                && e.kind() != std::io::ErrorKind::BrokenPipe
            {
                return Err(transport(e));
            }
            Ok(out)
        })
        .await
        .expect("busybox shell task")
    }

    fn describe(&self) -> String {
        "busybox".into()
    }
}

fn request(code: &Path, root: &Path, run: &str, mode: Materialize) -> ShipRequest {
    ShipRequest {
        snapshot: Snapshot::collect(code, SnapshotMode::Dirty).unwrap(),
        root: root.to_str().unwrap().to_owned(),
        dest: root.join("proj/grp/name").join(run).to_str().unwrap().to_owned(),
        mode,
        extra: vec![ExtraFile { path: ".theseus/bootstrap.sh".into(), contents: b"echo hi\n".to_vec(), mode: 0o755 }],
        progress: None,
        status: None,
    }
}

/// Ship, one-line edit, ship again (exactly one object sent), in both materialise modes; the
/// run dirs hold the snapshot exactly, every stored object hashes to its name, and no upload
/// or `.partial` dir is left.
#[tokio::test]
async fn the_store_protocol_runs_under_busybox_alone() {
    let Some(bin) = busybox_bin() else { return };
    let shell = BusyboxShell { bin: bin.path().to_path_buf() };
    for mode in [Materialize::Link, Materialize::Copy] {
        let code = awkward_repo();
        let root = tempfile::tempdir().unwrap();
        let first = store::ship(&shell, request(code.path(), root.path(), "r1", mode))
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(first.files_present, 0, "{mode}");
        assert!(first.objects_sent > 0, "{mode}");
        let run1 = root.path().join("proj/grp/name/r1");
        assert_run_dir_matches(code.path(), &run1, mode);
        assert_eq!(std::fs::read(run1.join(".theseus/bootstrap.sh")).unwrap(), b"echo hi\n");

        write(&code.path().join("bin/run"), b"#!/bin/sh\nexit 1\n", 0o755);
        let second = store::ship(&shell, request(code.path(), root.path(), "r2", mode)).await.unwrap();
        assert_eq!(second.objects_sent, 1, "{mode}: one edited file, one object");
        assert_eq!(second.files_present, second.files - 1, "{mode}");
        assert_run_dir_matches(code.path(), &root.path().join("proj/grp/name/r2"), mode);
        assert_eq!(std::fs::read(run1.join("bin/run")).unwrap(), b"#!/bin/sh\nexit 0\n", "{mode}: run 1 unchanged");
        objects_all_hash_to_their_names(root.path());
        let left: Vec<_> =
            std::fs::read_dir(root.path().join("proj/grp/name")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "{mode}: only the two run dirs: {left:?}");
        let incoming = root.path().join(".theseus/incoming");
        assert!(
            std::fs::read_dir(&incoming).map(|mut d| d.next().is_none()).unwrap_or(true),
            "{mode}: upload dir left"
        );
    }
}
