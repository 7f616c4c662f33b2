//! `theseus sync` on all four backends through the real binary: after editing one file, adding
//! one and deleting one locally, the running job's code dir changes in exactly those paths
//! (seen from inside the job with `theseus shell`); an unchanged file keeps its inode and a
//! file the job wrote stays.

use crate::targets::{Kind, Target};
use crate::text;

fn write(dir: &std::path::Path, rel: &str, content: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// `theseus shell JOB -T -- sh -c SCRIPT`'s stdout; panics unless it exits 0.
fn inside(target: &Target, script: &str) -> String {
    let out = target.run(&["shell", "synced", "-T", "--", "sh", "-c", script]);
    assert!(out.status.success(), "{:?}: {script}: {}", target.kind, text(&out.stderr));
    text(&out.stdout)
}

fn sync_on(kind: Kind) {
    let Some(target) = Target::new(kind, "sync") else { return };
    let code = tempfile::tempdir().unwrap();
    let c = code.path();
    write(c, "exp.yaml", "entrypoint: sleep 600\nrequest: {chip: cpu}\n");
    write(c, "train.py", "print('v1')\n");
    write(c, "gone.py", "bye\n");
    write(c, "pkg/kept.py", "K = 1\n");
    target.submit("synced", c.join("exp.yaml").to_str().unwrap(), c);
    target.wait_running("synced");
    let kept_before = inside(&target, "ls -i pkg/kept.py");
    inside(&target, "echo from-the-job > job-output.txt");

    write(c, "train.py", "print('v2')\n");
    write(c, "pkg/new.py", "N = 2\n");
    std::fs::remove_file(c.join("gone.py")).unwrap();
    let out = target.run(&["sync", "synced", "--code", c.to_str().unwrap()]);
    assert!(out.status.success(), "{kind:?}: {}", text(&out.stderr));
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(lines, ["A pkg/new.py", "D gone.py", "M train.py"], "{kind:?}: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("1 added, 1 changed, 1 deleted"), "{kind:?}: {}", text(&out.stderr));

    let seen = inside(&target, "cat train.py pkg/new.py job-output.txt; ls gone.py 2>&1 || true");
    assert!(seen.contains("print('v2')\nN = 2\nfrom-the-job\n"), "{kind:?}: {seen}");
    assert!(seen.contains("No such file"), "{kind:?}: the deleted file is gone: {seen}");
    assert_eq!(inside(&target, "ls -i pkg/kept.py"), kept_before, "{kind:?}: an unchanged file is not touched");

    // Nothing changed since: nothing moves, and JSON says so.
    let out = target.run(&["sync", "synced", "--code", c.to_str().unwrap(), "--output", "json"]);
    assert!(out.status.success(), "{kind:?}: {}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["objects_sent"], 0, "{kind:?}: {report}");
    assert_eq!(report["changed"].as_array().map(Vec::len), Some(0), "{kind:?}: {report}");

    assert!(target.run(&["cancel", "synced"]).status.success());
    let out = target.run(&["sync", "synced", "--code", c.to_str().unwrap()]);
    assert!(!out.status.success(), "{kind:?}: a sync into an ended job");
}

#[test]
fn sync_changes_exactly_the_edited_files_of_a_local_job() {
    sync_on(Kind::Local);
}

#[test]
fn sync_changes_exactly_the_edited_files_on_a_plain_host() {
    sync_on(Kind::Plain);
}

#[test]
fn sync_changes_exactly_the_edited_files_of_a_slurm_job() {
    sync_on(Kind::Slurm);
}

#[test]
fn sync_changes_exactly_the_edited_files_of_a_volcano_job() {
    sync_on(Kind::Volcano);
}

/// `sync --watch` pushes an edit made while it runs, once the burst of edits is over, and
/// SIGTERM stops only the watch.
#[test]
fn sync_watch_pushes_an_edit_made_while_it_runs() {
    use std::io::BufRead as _;
    let target = Target::new(Kind::Local, "sync --watch").unwrap();
    let code = tempfile::tempdir().unwrap();
    let c = code.path();
    write(c, "exp.yaml", "entrypoint: sleep 600\nrequest: {chip: cpu}\n");
    write(c, "train.py", "print('v1')\n");
    target.submit("synced", c.join("exp.yaml").to_str().unwrap(), c);
    target.wait_running("synced");
    let mut child = target
        .cmd(&["sync", "synced", "--code", c.to_str().unwrap(), "--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The first sync (nothing to do) prints nothing; then an edit.
    std::thread::sleep(std::time::Duration::from_secs(2));
    write(c, "train.py", "print('v2')\n");
    let line = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the watch synced the edit");
    assert_eq!(line, "M train.py");
    assert_eq!(inside(&target, "cat train.py"), "print('v2')\n");
    std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("stopped watching"), "{}", text(&out.stderr));
    assert!(target.run(&["cancel", "synced"]).status.success());
}
