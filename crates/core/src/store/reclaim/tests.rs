//! The reclaim and usage scripts on real trees made by [`super::super::ship`], with the system's
//! `sh` ([`LocalShell`]) and with busybox alone (a `PATH` of busybox applets, as in the Volcano
//! helper pod).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::snapshot::{Snapshot, SnapshotMode};
use crate::store::tests::{BUSYBOX, BusyboxShell};
use crate::store::{LocalShell, Materialize, ShipRequest, archive, ship};

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Sets the mtime of `path` and everything under it to two hours ago.
fn age(path: &Path) {
    let status = std::process::Command::new("find")
        .arg(path)
        .args(["-exec", "touch", "-h", "-d", "2 hours ago", "{}", "+"])
        .status()
        .unwrap();
    assert!(status.success());
}

/// A cluster's work root with two runs of job `p/g/n` shipped through the store: `old` from the
/// first version of the code, `live` from a second one that changed `train.py`.
struct Tree {
    _code: tempfile::TempDir,
    root: tempfile::TempDir,
}

impl Tree {
    async fn new() -> Tree {
        let code = tempfile::tempdir().unwrap();
        write(&code.path().join("train.py"), "print('v1')\n");
        write(&code.path().join("lib/shared.py"), "SHARED = 1\n");
        let root = tempfile::tempdir().unwrap();
        let tree = Tree { _code: code, root };
        tree.ship("old").await;
        write(&tree._code.path().join("train.py"), "print('v2')\n");
        tree.ship("live").await;
        write(&tree.work().join("logs/p/g/n/old.log"), "old run's output\n");
        write(&tree.work().join("logs/p/g/n/live.log"), "live run's output\n");
        tree
    }

    async fn ship(&self, run: &str) {
        let request = ShipRequest {
            snapshot: Snapshot::collect(self._code.path(), SnapshotMode::Dirty).unwrap(),
            root: self.work().to_str().unwrap().to_owned(),
            dest: self.work().join("p/g/n").join(run).to_str().unwrap().to_owned(),
            mode: Materialize::Link,
            extra: vec![archive::ExtraFile {
                path: ".theseus/bootstrap.sh".into(),
                contents: b"echo hi\n".to_vec(),
                mode: 0o755,
            }],
            progress: None,
            status: None,
        };
        ship(&LocalShell, request).await.unwrap();
    }

    fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    fn run(&self, run: &str) -> PathBuf {
        self.work().join("p/g/n").join(run)
    }

    fn target(&self) -> ReclaimTarget {
        let work = self.work().to_str().unwrap().to_owned();
        ReclaimTarget { log_dir: Some(format!("{work}/logs")), skip: vec![format!("{work}/logs")], work }
    }

    /// The store's object files with their link counts.
    fn objects(&self) -> Vec<(PathBuf, u64)> {
        let mut out = Vec::new();
        let objects = self.work().join(".theseus/objects");
        for prefix in std::fs::read_dir(&objects).unwrap() {
            for object in std::fs::read_dir(prefix.unwrap().path()).unwrap() {
                let path = object.unwrap().path();
                let links = std::fs::metadata(&path).unwrap().nlink();
                out.push((path, links));
            }
        }
        out.sort();
        out
    }
}

fn options(older_than: Duration, live: &[&str], dry_run: bool) -> ReclaimOptions {
    ReclaimOptions {
        older_than,
        live: live.iter().map(|r| format!("p/g/n/{r}")).collect(),
        abandoned: Default::default(),
        dry_run,
    }
}

fn shells() -> Vec<Box<dyn Shell>> {
    let mut shells: Vec<Box<dyn Shell>> = vec![Box::new(LocalShell)];
    match BusyboxShell::new() {
        Some(b) => shells.push(Box::new(b)),
        None => eprintln!("NOT RUN under busybox: {BUSYBOX} is missing"),
    }
    shells
}

#[tokio::test]
async fn a_finished_runs_code_dir_and_its_unused_objects_go_a_live_run_and_logs_stay() {
    for shell in shells() {
        let tree = Tree::new().await;
        let before = tree.objects();
        assert_eq!(before.len(), 5, "train.py v1 and v2, shared.py, each run's code manifest: {before:?}");
        let old_manifest = manifest_len(&tree.run("old"));
        // Both runs are old; only `old` is finished.
        age(&tree.run("old"));
        age(&tree.run("live"));
        age(&tree.work().join("logs"));

        let report = reclaim(shell.as_ref(), &tree.target(), &options(Duration::ZERO, &["live"], false)).await.unwrap();
        let run_dirs: Vec<_> = report.items.iter().filter(|i| i.kind == ReclaimKind::RunDir).collect();
        assert_eq!(run_dirs.len(), 1, "{} {report:?}", shell.describe());
        assert_eq!(run_dirs[0].path, tree.run("old").to_str().unwrap());
        assert!(!tree.run("old").exists());
        assert_eq!(std::fs::read_to_string(tree.work().join("logs/p/g/n/old.log")).unwrap(), "old run's output\n");
        // The live run is whole, and every object it links is still in the store.
        assert_eq!(std::fs::read_to_string(tree.run("live").join("train.py")).unwrap(), "print('v2')\n");
        assert_eq!(std::fs::read_to_string(tree.run("live").join("lib/shared.py")).unwrap(), "SHARED = 1\n");
        let after = tree.objects();
        assert_eq!(after.len(), 3, "only train.py v1's object and the old run's manifest went: {after:?}");
        assert!(after.iter().all(|(_, links)| *links == 2), "each object left is linked by the live run: {after:?}");
        let mut objects: Vec<_> =
            report.items.iter().filter(|i| i.kind == ReclaimKind::Object).map(|i| i.bytes).collect();
        objects.sort();
        let mut expected = vec!["print('v1')\n".len() as u64, old_manifest];
        expected.sort();
        assert_eq!(objects, expected, "{report:?}");
        assert_eq!(report.freed_bytes, report.items.iter().map(|i| i.bytes).sum::<u64>());
        assert!(report.failed.is_empty(), "{report:?}");
    }
}

#[tokio::test]
async fn a_live_run_is_never_touched_however_old() {
    for shell in shells() {
        let tree = Tree::new().await;
        age(&tree.work());
        let report =
            reclaim(shell.as_ref(), &tree.target(), &options(Duration::ZERO, &["old", "live"], false)).await.unwrap();
        assert!(report.items.is_empty(), "{} {report:?}", shell.describe());
        assert!(tree.run("old").join("train.py").exists() && tree.run("live").join("train.py").exists());
        assert_eq!(tree.objects().len(), 5);
    }
}

#[tokio::test]
async fn only_runs_unchanged_for_older_than_go_and_a_recent_log_keeps_a_run() {
    for shell in shells() {
        let tree = Tree::new().await;
        let hour = Duration::from_secs(3600);
        // Shipped just now: not old.
        let report = reclaim(shell.as_ref(), &tree.target(), &options(hour, &[], false)).await.unwrap();
        assert!(report.items.is_empty(), "{} {report:?}", shell.describe());
        // An old code dir whose log was written just now is still in use.
        age(&tree.run("old"));
        let report = reclaim(shell.as_ref(), &tree.target(), &options(hour, &[], false)).await.unwrap();
        assert!(report.items.is_empty(), "{report:?}");
        age(&tree.work().join("logs/p/g/n/old.log"));
        let report = reclaim(shell.as_ref(), &tree.target(), &options(hour, &[], false)).await.unwrap();
        let paths: Vec<_> = report.items.iter().map(|i| (i.kind, i.path.clone())).collect();
        assert_eq!(paths, [(ReclaimKind::RunDir, tree.run("old").to_str().unwrap().to_owned())]);
        // The objects it unlinked changed their ctime just now: not old either.
        assert_eq!(tree.objects().len(), 5);
        assert!(tree.run("live").exists());
    }
}

#[tokio::test]
async fn an_unlinked_object_goes_only_once_older_than_allows() {
    for shell in shells() {
        let tree = Tree::new().await;
        let old_manifest = manifest_len(&tree.run("old"));
        std::fs::remove_dir_all(tree.run("old")).unwrap();
        let hour = Duration::from_secs(3600);
        let report = reclaim(shell.as_ref(), &tree.target(), &options(hour, &["live"], false)).await.unwrap();
        assert!(report.items.is_empty(), "{} {report:?}", shell.describe());
        assert_eq!(tree.objects().len(), 5);
        let report = reclaim(shell.as_ref(), &tree.target(), &options(Duration::ZERO, &["live"], false)).await.unwrap();
        let v1 = "print('v1')\n".len() as u64;
        assert_eq!(report.total(ReclaimKind::Object), (2, v1 + old_manifest), "{report:?}");
        assert_eq!(tree.objects().len(), 3);
    }
}

#[tokio::test]
async fn leftovers_of_crashed_submits_go_after_the_grace_and_recent_ones_stay() {
    for shell in shells() {
        let tree = Tree::new().await;
        let work = tree.work();
        for dir in [
            "p/g/n/crashed.partial",
            "p/g/n/crashed.partial.copy",
            "p/g/n/shipping.partial",
            "p/g/n/slow.partial",
            ".theseus/incoming/0123abcd",
            ".theseus/incoming/4567ef01",
        ] {
            write(&work.join(dir).join("lib/x.py"), "1234567890");
        }
        // Unchanged for two hours, but its run is being submitted (live): it stays.
        age(&work.join("p/g/n/slow.partial"));
        age(&work.join("p/g/n/crashed.partial"));
        age(&work.join("p/g/n/crashed.partial.copy"));
        age(&work.join(".theseus/incoming/0123abcd"));
        let report = reclaim(shell.as_ref(), &tree.target(), &options(Duration::ZERO, &["old", "live", "slow"], false))
            .await
            .unwrap();
        let mut got: Vec<_> = report.items.iter().map(|i| (i.kind, i.path.clone(), i.bytes)).collect();
        got.sort();
        let path = |p: &str| work.join(p).to_str().unwrap().to_owned();
        assert_eq!(
            got,
            [
                (ReclaimKind::Partial, path("p/g/n/crashed.partial"), 10),
                (ReclaimKind::Partial, path("p/g/n/crashed.partial.copy"), 10),
                (ReclaimKind::Incoming, path(".theseus/incoming/0123abcd"), 10),
            ],
            "{}",
            shell.describe()
        );
        assert!(work.join("p/g/n/shipping.partial/lib/x.py").exists());
        assert!(work.join("p/g/n/slow.partial/lib/x.py").exists());
        assert!(work.join(".theseus/incoming/4567ef01/lib/x.py").exists());
        assert!(!work.join("p/g/n/crashed.partial").exists());
    }
}

#[tokio::test]
async fn what_an_abandoned_submit_left_goes_at_once() {
    // The client of run `killed` died mid-submit (the CLI knows: its submit lock is free): its
    // fresh partial dirs and upload dir go now; another run's fresh ones stay for the grace.
    for shell in shells() {
        let tree = Tree::new().await;
        let work = tree.work();
        for dir in [
            "p/g/n/killed.partial",
            "p/g/n/killed.partial.copy",
            "p/g/n/other.partial",
            ".theseus/incoming/killed.0123abcd",
            ".theseus/incoming/other.4567ef01",
        ] {
            write(&work.join(dir).join("lib/x.py"), "1234567890");
        }
        let options = ReclaimOptions {
            abandoned: ["p/g/n/killed".to_owned()].into(),
            ..options(Duration::from_secs(3600), &[], false)
        };
        let report = reclaim(shell.as_ref(), &tree.target(), &options).await.unwrap();
        let mut got: Vec<_> = report.items.iter().map(|i| (i.kind, i.path.clone())).collect();
        got.sort();
        let path = |p: &str| work.join(p).to_str().unwrap().to_owned();
        assert_eq!(
            got,
            [
                (ReclaimKind::Partial, path("p/g/n/killed.partial")),
                (ReclaimKind::Partial, path("p/g/n/killed.partial.copy")),
                (ReclaimKind::Incoming, path(".theseus/incoming/killed.0123abcd")),
            ],
            "{}",
            shell.describe()
        );
        assert!(work.join("p/g/n/other.partial/lib/x.py").exists());
        assert!(work.join(".theseus/incoming/other.4567ef01/lib/x.py").exists());
    }
}

#[tokio::test]
async fn a_dry_run_lists_with_sizes_and_removes_nothing() {
    for shell in shells() {
        let tree = Tree::new().await;
        let live_manifest = manifest_len(&tree.run("live"));
        std::fs::remove_dir_all(tree.run("live")).unwrap();
        write(&tree.work().join("p/g/n/crashed.partial/a"), "12345");
        age(&tree.work().join("p/g/n/crashed.partial"));
        let report = reclaim(shell.as_ref(), &tree.target(), &options(Duration::ZERO, &[], true)).await.unwrap();
        assert!(report.dry_run);
        let kinds: Vec<_> = report.items.iter().map(|i| i.kind).collect();
        assert!(
            kinds.contains(&ReclaimKind::RunDir) && kinds.contains(&ReclaimKind::Partial),
            "{} {report:?}",
            shell.describe()
        );
        let run = report.items.iter().find(|i| i.kind == ReclaimKind::RunDir).unwrap();
        let manifest = manifest_bytes(&tree.run("old"));
        assert_eq!(
            run.bytes,
            "echo hi\n".len() as u64 + manifest,
            "only the bootstrap is the run dir's own (its code manifest is an object): {report:?}"
        );
        assert_eq!(report.total(ReclaimKind::Partial), (1, 5));
        let v2 = "print('v2')\n".len() as u64;
        assert_eq!(report.total(ReclaimKind::Object), (2, v2 + live_manifest), "the unused objects are listed");
        assert!(tree.run("old").join("train.py").exists() && tree.work().join("p/g/n/crashed.partial/a").exists());
        assert_eq!(tree.objects().len(), 5);
    }
}

#[tokio::test]
async fn usage_counts_objects_once_and_what_only_run_dirs_hold() {
    for shell in shells() {
        let tree = Tree::new().await;
        write(&tree.run("old").join("out.txt"), "written by the job");
        write(&tree.work().join("p/g/n/crashed.partial/a"), "12345");
        let used = usage(shell.as_ref(), &tree.target()).await.unwrap();
        let object_bytes =
            ["print('v1')\n", "print('v2')\n", "SHARED = 1\n"].iter().map(|s| s.len() as u64).sum::<u64>()
                + manifest_len(&tree.run("old"))
                + manifest_len(&tree.run("live"));
        assert_eq!(
            used,
            StoreUsage {
                objects: 5,
                object_bytes,
                unused_objects: 0,
                unused_object_bytes: 0,
                run_dirs: 2,
                run_dir_bytes: ("written by the job".len() + 2 * "echo hi\n".len()) as u64
                    + manifest_bytes(&tree.run("old"))
                    + manifest_bytes(&tree.run("live")),
                leftovers: 1,
                leftover_bytes: 5,
            },
            "{}",
            shell.describe()
        );
        let empty =
            usage(shell.as_ref(), &ReclaimTarget { work: "/nonexistent/theseus-test".into(), ..Default::default() })
                .await;
        assert_eq!(empty.unwrap(), StoreUsage::default());
    }
}

#[test]
fn output_is_parsed_and_a_cut_output_refused() {
    let report = parse_reclaim(
        "run\t10\tp/g/n/r\nobject\t5\t.theseus/objects/ab/cd\nfailed\tp/g/n/x\tPermission denied\nend\n",
        "/w",
    )
    .unwrap();
    assert_eq!(report.freed_bytes, 15);
    assert_eq!(report.items[0], ReclaimedItem { kind: ReclaimKind::RunDir, path: "/w/p/g/n/r".into(), bytes: 10 });
    assert_eq!(report.failed, ["/w/p/g/n/x: Permission denied"]);
    assert!(parse_reclaim("run\t10\tp/g/n/r\n", "/w").unwrap_err().contains("ended early"));
    assert!(parse_reclaim("weird\t1\tx\nend\n", "/w").is_err());
    assert!(parse_usage("objects 1 2\nunused 0 0\nruns 1 1\n").is_err());
    assert!(parse_usage("objects 1 x\nunused 0 0\nruns 1 1\nleftovers 0 0\n").is_err());
}

#[test]
fn scripts_are_valid_shell() {
    for script in [RECLAIM, USAGE] {
        let out = std::process::Command::new("sh").arg("-n").arg("-c").arg(script).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Size of a run dir's code manifest.
fn manifest_len(run: &std::path::Path) -> u64 {
    std::fs::metadata(run.join(crate::store::sync::MANIFEST)).unwrap().len()
}

/// Size of a run dir's code manifest when it is the run's own file (a copy-mode run, or one
/// whose store could not take it): a linked one is an object of the store.
fn manifest_bytes(run: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(run.join(crate::store::sync::MANIFEST)).map_or(0, |m| if m.nlink() == 1 { m.len() } else { 0 })
}
