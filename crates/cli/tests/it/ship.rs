//! Shipping code to the local host through the content-addressed store, through the binary: run
//! dirs hold exactly the snapshot, a one-line edit sends one object, `materialize: copy` keeps
//! runs apart, and an object a job wrote in place never reaches the next run.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{TestContext, text};

/// A code dir: plain and executable files, a nested one, a symlink, and an experiment whose
/// job runs `command` in its run dir.
fn code(command: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, content: &str, mode: u32| {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(&full, content).unwrap();
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    write("train.py", "print('one')\nprint('two')\n", 0o644);
    write("tools/run.sh", "#!/bin/sh\necho run\n", 0o755);
    write("pkg/deep/model.py", "LAYERS = 4\n", 0o644);
    write("pkg/same.py", "LAYERS = 4\n", 0o644);
    write("data.txt", "original\n", 0o644);
    std::os::unix::fs::symlink("pkg/deep/model.py", dir.path().join("model.py")).unwrap();
    let exp = format!("entrypoint: {}\nrequest: {{chip: cpu}}\n", serde_json::to_string(command).unwrap());
    write("exp.yaml", &exp, 0o644);
    dir
}

/// `theseus submit NAME exp.yaml --code DIR --output json [extra]`: the JSON result and stderr.
fn submit(ctx: &TestContext, code: &Path, name: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let exp = code.join("exp.yaml");
    let mut args = vec!["submit", name, exp.to_str().unwrap(), "--code", code.to_str().unwrap(), "--output", "json"];
    args.extend_from_slice(extra);
    let out = ctx.run(&args);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json = if extra.contains(&"--follow") {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&out.stdout).unwrap()
    };
    (json, stderr)
}

fn work_dir(json: &serde_json::Value) -> PathBuf {
    PathBuf::from(json["handle"]["data"]["work_dir"].as_str().unwrap())
}

/// The run dir of the only run of `name`.
fn only_run(ctx: &TestContext, name: &str) -> PathBuf {
    let dir = ctx.home().join(".local/share/theseus/work/general/default").join(name);
    let runs: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs.into_iter().next().unwrap()
}

/// Relative paths of every file and symlink under `dir`.
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
    out.sort();
    out
}

/// `run` holds exactly the files of `code` (bytes, executable bits, symlink targets), plus only
/// bootstrap files under `.theseus/`.
fn assert_exact_copy(code: &Path, run: &Path) {
    let expected = walk(code, "");
    let found = walk(run, "");
    let (shipped, extra): (Vec<String>, Vec<String>) = found.into_iter().partition(|p| !p.starts_with(".theseus/"));
    assert_eq!(shipped, expected);
    assert!(extra.iter().any(|p| p == ".theseus/bootstrap.sh"), "{extra:?}");
    for path in &expected {
        let (a, b) = (code.join(path), run.join(path));
        let (ma, mb) = (std::fs::symlink_metadata(&a).unwrap(), std::fs::symlink_metadata(&b).unwrap());
        assert_eq!(ma.file_type().is_symlink(), mb.file_type().is_symlink(), "{path}");
        if ma.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(&a).unwrap(), std::fs::read_link(&b).unwrap(), "{path}");
            continue;
        }
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "{path}");
        assert_eq!(ma.mode() & 0o111 != 0, mb.mode() & 0o111 != 0, "executable bit of {path}");
    }
}

#[test]
fn a_run_dir_is_the_snapshot_and_a_one_line_edit_sends_one_object() {
    let ctx = TestContext::new();
    let code = code("true");
    let (first, stderr) = submit(&ctx, code.path(), "ship-a", &[]);
    assert_exact_copy(code.path(), &work_dir(&first));
    // 6 regular files (exp.yaml included), 5 distinct contents.
    assert_eq!(
        first["ship"],
        serde_json::json!({"files": 6, "files_present": 0, "objects_sent": 5, "bytes_sent": first["ship"]["bytes_sent"]})
    );
    assert!(stderr.contains("0 of 6 files already there; sending"), "{stderr}");
    assert!(stderr.contains("sent 5 objects"), "{stderr}");
    let objects = ctx.home().join(".local/share/theseus/work/.theseus/objects");
    assert!(objects.is_dir(), "the store is under the work root");
    let cache = ctx.home().join("state/theseus/hash-cache");
    assert_eq!(std::fs::read_dir(&cache).map(Iterator::count).unwrap_or(0), 1, "one hash cache file in the state dir");

    std::fs::write(code.path().join("train.py"), "print('one')\nprint('TWO')\n").unwrap();
    let (second, stderr) = submit(&ctx, code.path(), "ship-b", &[]);
    assert_eq!(second["ship"]["objects_sent"], 1, "{second}");
    assert_eq!(second["ship"]["files_present"], 5, "{second}");
    assert_eq!(second["ship"]["bytes_sent"], "print('one')\nprint('TWO')\n".len(), "{second}");
    assert!(stderr.contains("5 of 6 files already there"), "{stderr}");
    assert!(stderr.contains("sent 1 object ("), "{stderr}");
    assert_exact_copy(code.path(), &work_dir(&second));
    let ino = |run: &Path, path: &str| std::fs::metadata(run.join(path)).unwrap().ino();
    assert_eq!(
        ino(&work_dir(&first), "pkg/deep/model.py"),
        ino(&work_dir(&second), "pkg/deep/model.py"),
        "linked, not copied"
    );
    assert_eq!(std::fs::read_to_string(work_dir(&first).join("train.py")).unwrap(), "print('one')\nprint('two')\n");
}

#[test]
fn with_materialize_copy_a_job_that_rewrites_its_file_leaves_other_runs_alone() {
    let ctx = TestContext::new();
    std::fs::write(ctx.home().join(".theseus.yaml"), "clusters:\n  local:\n    materialize: copy\n").unwrap();
    let code = code("sh -c 'printf rewritten >> data.txt'");
    let plain = self::code("true");
    let (other, _) = submit(&ctx, plain.path(), "copy-other", &[]);
    let (_, stderr) = submit(&ctx, code.path(), "copy-writer", &["--follow"]);
    let writer = only_run(&ctx, "copy-writer");
    assert_eq!(std::fs::read_to_string(writer.join("data.txt")).unwrap(), "original\nrewritten", "{stderr}");
    assert_eq!(std::fs::metadata(writer.join("data.txt")).unwrap().nlink(), 1, "a private copy");
    assert_eq!(std::fs::read_to_string(work_dir(&other).join("data.txt")).unwrap(), "original\n");
    let (next, _) = submit(&ctx, plain.path(), "copy-next", &[]);
    assert_eq!(next["ship"]["objects_sent"], 0, "{next}");
    assert_eq!(std::fs::read_to_string(work_dir(&next).join("data.txt")).unwrap(), "original\n");
}

#[test]
fn in_link_mode_an_object_a_job_wrote_in_place_is_not_linked_into_the_next_run() {
    let ctx = TestContext::new();
    // What a job running as root (or one that chmods its file first) can do to a hard link.
    let code = code("sh -c 'chmod u+w data.txt && printf tampered > data.txt'");
    let (_, stderr) = submit(&ctx, code.path(), "link-writer", &["--follow"]);
    let writer = only_run(&ctx, "link-writer");
    assert_eq!(std::fs::read_to_string(writer.join("data.txt")).unwrap(), "tampered", "{stderr}");
    let plain = self::code("true");
    let (next, _) = submit(&ctx, plain.path(), "link-next", &[]);
    assert_eq!(std::fs::read_to_string(work_dir(&next).join("data.txt")).unwrap(), "original\n");
    assert_eq!(next["ship"]["objects_sent"], 2, "the tampered object and the new exp.yaml: {next}");
    let mode = std::fs::metadata(work_dir(&next).join("data.txt")).unwrap().mode();
    assert_eq!(mode & 0o222, 0, "objects are read-only");
}
