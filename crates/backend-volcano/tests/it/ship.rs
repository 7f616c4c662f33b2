//! Shipping over the exec protocol: `ship_snapshot` against the simulator's standalone
//! `ExecServer`, which runs the real script with this machine's `sh`, `head`, `sha256sum` and GNU
//! `tar`, on both protocol variants.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use sha2::{Digest, Sha256};
use theseus_backend_volcano::ship::{
    ExtraFile, RemoteStep, ShipError, ShipReport, ShipTarget, TEMP_ARCHIVE, ship_snapshot,
};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_kube_sim::exec::{ExecServer, ExecServerOptions, Protocols};

const BOTH: [Protocols; 2] = [Protocols::V5AndV4, Protocols::V4Only];

/// A pod (the server's root dir) and a target dir in it.
struct FakePod {
    _root: tempfile::TempDir,
    _server: ExecServer,
    target: ShipTarget,
}

impl FakePod {
    async fn start(options: ExecServerOptions) -> FakePod {
        let root = tempfile::tempdir().unwrap();
        let server = ExecServer::start(root.path(), options).await.unwrap();
        let mut config = kube::Config::new(server.url().parse().unwrap());
        config.root_cert = Some(vec![server.ca_der()]);
        let client = Client::try_from(config).unwrap();
        let pods: Api<Pod> = Api::namespaced(client, "team");
        let dest = root.path().join("workspace/run-1").to_str().unwrap().to_owned();
        let target = ShipTarget { pods, pod: "theseus-ship-run-1".into(), container: None, dest };
        FakePod { _root: root, _server: server, target }
    }

    fn dest(&self) -> PathBuf {
        PathBuf::from(&self.target.dest)
    }
}

fn bootstrap() -> Vec<ExtraFile> {
    vec![
        ExtraFile { path: ".theseus/bootstrap.sh".into(), contents: b"#!/bin/bash\necho hi\n".to_vec(), mode: 0o755 },
        ExtraFile { path: ".theseus/config.json".into(), contents: b"{\"lr\": 0.1}\n".to_vec(), mode: 0o644 },
    ]
}

/// Path → (mode, content hash or symlink target) for every entry under `dir`, skipping
/// `.theseus`.
fn tree(dir: &Path) -> BTreeMap<String, (u32, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().to_str().unwrap().to_owned();
            if rel == ".theseus" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, (0, format!("-> {}", target.display())));
            } else if meta.is_dir() {
                stack.push(path);
            } else {
                let mut hasher = Sha256::new();
                let mut file = std::fs::File::open(&path).unwrap();
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let n = file.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                }
                out.insert(rel, (mode, hex::encode(hasher.finalize())));
            }
        }
    }
    out
}

async fn ship(pod: &FakePod, repo: &Path, extras: &[ExtraFile]) -> Result<ShipReport, ShipError> {
    let snapshot = Snapshot::collect(repo, SnapshotMode::Dirty).unwrap();
    ship_snapshot(&pod.target, &snapshot, extras, None).await
}

/// Ships `repo` on both protocols and checks the extracted tree and the bootstrap.
async fn check_round_trip(repo: &Path) {
    check_round_trip_with(repo, Vec::new()).await;
}

async fn check_round_trip_with(repo: &Path, env: Vec<(String, String)>) {
    for protocols in BOTH {
        let pod = FakePod::start(ExecServerOptions { protocols, env: env.clone(), ..Default::default() }).await;
        let report = ship(&pod, repo, &bootstrap()).await.unwrap_or_else(|e| panic!("{protocols:?}: {e:?}"));
        assert_eq!(tree(&pod.dest()), tree(repo), "{protocols:?}");
        let snapshot = Snapshot::collect(repo, SnapshotMode::Dirty).unwrap();
        assert_eq!(report.files, snapshot.file_count() + 2);
        assert_eq!(report.manifest.entries.len(), snapshot.file_count());
        let boot = pod.dest().join(".theseus/bootstrap.sh");
        assert_eq!(std::fs::read(&boot).unwrap(), b"#!/bin/bash\necho hi\n");
        assert_eq!(std::fs::metadata(&boot).unwrap().permissions().mode() & 0o777, 0o755);
        assert_eq!(std::fs::read(pod.dest().join(".theseus/config.json")).unwrap(), b"{\"lr\": 0.1}\n");
        assert!(!pod.dest().join(TEMP_ARCHIVE).exists());
    }
}

fn write(path: &Path, contents: &[u8], mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn empty_repo() {
    let repo = tempfile::tempdir().unwrap();
    check_round_trip(repo.path()).await;
}

#[tokio::test]
async fn awkward_names_modes_and_symlinks() {
    let repo = awkward_repo();
    check_round_trip(repo.path()).await;
}

/// The helper image is busybox: run the script with busybox's `sh`, `head`, `wc`, `sha256sum`,
/// `tar` and friends only (PATH holds nothing else).
#[tokio::test]
async fn busybox_tools_extract_the_same_tree() {
    let Some(busybox) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("busybox"))
        .find(|path| path.is_file())
    else {
        // `cargo xtask test` installs busybox with the lab, so CI requires this test.
        let msg = "NOT RUN: busybox_tools_extract_the_same_tree needs `busybox` on PATH (apt-get install busybox)";
        if std::env::var("THESEUSTEST_REQUIRE_ALL").is_ok_and(|v| v == "1") {
            panic!("{msg}");
        }
        eprintln!("{msg}");
        return;
    };
    let bin = tempfile::tempdir().unwrap();
    for tool in ["sh", "head", "wc", "sha256sum", "tar", "mkdir", "rm", "sync"] {
        symlink(&busybox, bin.path().join(tool)).unwrap();
    }
    let repo = awkward_repo();
    check_round_trip_with(repo.path(), vec![("PATH".into(), bin.path().to_str().unwrap().into())]).await;
}

/// Names with spaces, quotes, a newline, shell syntax, unicode and a >100-byte path; modes and a
/// symlink.
fn awkward_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    write(&r.join("with space/it's \"quoted\".py"), b"print('q')\n", 0o644);
    write(&r.join("new\nline.txt"), b"nl\n", 0o644);
    write(&r.join("ünïcødé/日本語.md"), "héllo\n".as_bytes(), 0o644);
    write(&r.join("$(touch pwned)`id`;*.sh"), b"#!/bin/sh\n", 0o755);
    write(&r.join("back\\slash -dash"), b"", 0o644);
    write(&r.join(format!("{}/deep.txt", "d".repeat(120))), b"long path\n", 0o644);
    write(&r.join("bin/run"), b"#!/bin/sh\nexit 0\n", 0o755);
    symlink("bin/run", r.join("link to run")).unwrap();
    repo
}

/// Reads `VmRSS`/`VmHWM` of this process, in KiB.
fn vm(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// ~100 MB of incompressible files: the extracted tree is identical and the peak RSS of this
/// process (client, server and the pumps all live in it) grows by far less than the archive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_repo_ships_in_flat_memory() {
    let repo = tempfile::tempdir().unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut block = vec![0u8; 1 << 20];
    for file_idx in 0..25 {
        let mut file = std::fs::File::create(repo.path().join(format!("blob-{file_idx:02}.bin"))).unwrap();
        for _ in 0..4 {
            for byte in block.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *byte = state as u8;
            }
            file.write_all(&block).unwrap();
        }
    }
    drop(block);
    for protocols in BOTH {
        let pod = FakePod::start(ExecServerOptions { protocols, ..Default::default() }).await;
        let snapshot = Snapshot::collect(repo.path(), SnapshotMode::Dirty).unwrap();
        // Reset the high-water mark (Linux ≥ 4.0) so earlier work does not count.
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let before = vm("VmRSS:");
        let calls = Arc::new(AtomicU64::new(0));
        let last = Arc::new(AtomicU64::new(0));
        let progress: theseus_core::backend::ProgressFn = {
            let (calls, last) = (calls.clone(), last.clone());
            Arc::new(move |done, total| {
                calls.fetch_add(1, Ordering::Relaxed);
                assert!(done <= total.unwrap());
                last.store(done, Ordering::Relaxed);
            })
        };
        let started = Instant::now();
        let report = ship_snapshot(&pod.target, &snapshot, &bootstrap(), Some(progress)).await.unwrap();
        let elapsed = started.elapsed();
        let growth_mib = vm("VmHWM:").saturating_sub(before) / 1024;
        eprintln!(
            "{protocols:?}: shipped {} MiB in {elapsed:.2?} ({:.0} MiB/s, pod-side hashing and tar included), \
             peak RSS growth {growth_mib} MiB",
            report.bytes >> 20,
            report.bytes as f64 / 1048576.0 / elapsed.as_secs_f64(),
        );
        assert!(report.bytes > 100_000_000);
        assert_eq!(last.load(Ordering::Relaxed), report.bytes);
        assert!(calls.load(Ordering::Relaxed) > 100);
        assert!(growth_mib < 40, "{protocols:?}: peak RSS grew by {growth_mib} MiB");
        assert_eq!(tree(&pod.dest()), tree(repo.path()), "{protocols:?}");
    }
}

/// A connection dropped mid-transfer is a retryable error, nothing is extracted and no
/// bootstrap is written; a retry into the same dest succeeds.
#[tokio::test]
async fn dropped_connection_is_retryable_and_extracts_nothing() {
    let repo = tempfile::tempdir().unwrap();
    for idx in 0..8 {
        write(&repo.path().join(format!("f{idx}.bin")), &vec![idx as u8; 300_000], 0o644);
    }
    for protocols in BOTH {
        let options = ExecServerOptions { protocols, drop_after_stdin_bytes: Some(1_000_000), ..Default::default() };
        let pod = FakePod::start(options).await;
        let err = ship(&pod, repo.path(), &bootstrap()).await.expect_err("the connection drops");
        assert!(matches!(err, ShipError::Interrupted { .. }), "{protocols:?}: {err:?}");
        assert!(err.is_retryable());
        assert!(err.to_string().contains("interrupted"), "{err}");
        let left: Vec<_> = std::fs::read_dir(pod.dest()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.iter().all(|name| name == TEMP_ARCHIVE), "{protocols:?}: partial tree {left:?}");
        assert!(!pod.dest().join(".theseus").exists());

        // Retry into the same dest through a healthy connection.
        let healthy = FakePod::start(ExecServerOptions { protocols, ..Default::default() }).await;
        let retry = ShipTarget { dest: pod.target.dest.clone(), ..healthy.target.clone() };
        let snapshot = Snapshot::collect(repo.path(), SnapshotMode::Dirty).unwrap();
        ship_snapshot(&retry, &snapshot, &bootstrap(), None).await.unwrap();
        assert_eq!(tree(&pod.dest()), tree(repo.path()));
        assert!(pod.dest().join(".theseus/bootstrap.sh").exists());
    }
}

/// `tar` failing in the pod (a directory where the archive has a file) is an extraction error
/// that quotes tar's stderr, and the bootstrap is not written.
#[tokio::test]
async fn tar_failure_quotes_stderr() {
    let repo = tempfile::tempdir().unwrap();
    write(&repo.path().join("x"), b"a file\n", 0o644);
    for protocols in BOTH {
        let pod = FakePod::start(ExecServerOptions { protocols, ..Default::default() }).await;
        std::fs::create_dir_all(pod.dest().join("x/y")).unwrap();
        let err = ship(&pod, repo.path(), &bootstrap()).await.expect_err("tar fails");
        match &err {
            ShipError::Remote { step: RemoteStep::Extract, exit_code: Some(12), stderr, .. } => {
                assert!(stderr.contains("x: Cannot open"), "{stderr}");
            }
            other => panic!("{protocols:?}: expected an extraction error, got {other:?}"),
        }
        assert!(!err.is_retryable());
        assert!(err.to_string().starts_with("failed to extract the archive in pod `theseus-ship-run-1`"), "{err}");
        assert!(!pod.dest().join(".theseus").exists());
    }
}

/// A refused exec (here: a 404 from a server that has no such route) is an `Exec` error.
#[tokio::test]
async fn refused_exec_is_an_exec_error() {
    let pod = FakePod::start(ExecServerOptions::default()).await;
    let pods: Api<Pod> = Api::all(pod.target.pods.clone().into_client());
    let target = ShipTarget { pods, ..pod.target.clone() };
    let repo = tempfile::tempdir().unwrap();
    let snapshot = Snapshot::collect(repo.path(), SnapshotMode::Dirty).unwrap();
    let err = ship_snapshot(&target, &snapshot, &[], None).await.expect_err("no such route");
    assert!(matches!(err, ShipError::Exec { .. }), "{err:?}");
    assert!(!err.is_retryable(), "a 404 will not go away");
}
