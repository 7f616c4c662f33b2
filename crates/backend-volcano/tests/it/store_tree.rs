//! Shared checks of shipped trees: an awkward repo, "the run dir holds exactly the snapshot",
//! and "every object of a store hashes to its name".

use std::io::Read as _;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use sha2::{Digest, Sha256};
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::store::Materialize;

pub(crate) fn write(path: &Path, contents: &[u8], mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(path);
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Names with spaces, quotes, a newline, shell syntax, unicode and a >100-byte path; modes, a
/// symlink, two files with the same content, and an empty file.
pub(crate) fn awkward_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    write(&r.join("with space/it's \"quoted\".py"), b"print('q')\n", 0o644);
    write(&r.join("new\nline.txt"), b"nl\n", 0o644);
    write(&r.join("ünïcødé/日本語.md"), "héllo\n".as_bytes(), 0o644);
    write(&r.join("$(touch pwned)`id`;*.sh"), b"#!/bin/sh\n", 0o755);
    write(&r.join("back\\slash -dash"), b"", 0o644);
    write(&r.join(format!("{}/deep.txt", "d".repeat(120))), b"long path\n", 0o644);
    write(&r.join("bin/run"), b"#!/bin/sh\nexit 0\n", 0o755);
    write(&r.join("pkg/same.py"), b"print('q')\n", 0o644);
    symlink("bin/run", r.join("link to run")).unwrap();
    repo
}

fn sha256_file(path: &Path) -> String {
    let mut hasher = Sha256::new();
    let mut file = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    hex::encode(hasher.finalize())
}

/// Every file and symlink under `dir`, relative, `/`-separated.
pub(crate) fn entries(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().to_str().unwrap().to_owned());
            }
        }
    }
    out.sort();
    out
}

/// The run dir `run` holds exactly the files of `code`'s snapshot, byte for byte (symlinks by
/// target) and mode for mode (link mode: the read-only object's mode, with the file's execute
/// bit; copy mode: the file's own mode), plus only `.theseus/` files.
pub(crate) fn assert_run_dir_matches(code: &Path, run: &Path, mode: Materialize) {
    let snapshot = Snapshot::collect(code, SnapshotMode::Dirty).unwrap();
    for file in &snapshot.files {
        let (a, b) = (code.join(&file.path), run.join(&file.path));
        let (ma, mb) = (
            std::fs::symlink_metadata(&a).unwrap(),
            std::fs::symlink_metadata(&b).unwrap_or_else(|e| panic!("{}: {e}", b.display())),
        );
        assert_eq!(ma.file_type().is_symlink(), mb.file_type().is_symlink(), "{:?}", file.path);
        if ma.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(&a).unwrap(), std::fs::read_link(&b).unwrap(), "{:?}", file.path);
            continue;
        }
        assert_eq!(sha256_file(&a), sha256_file(&b), "{:?}", file.path);
        let (pa, pb) = (ma.permissions().mode() & 0o7777, mb.permissions().mode() & 0o7777);
        let want = match mode {
            Materialize::Link if pa & 0o111 != 0 => 0o555,
            Materialize::Link => 0o444,
            Materialize::Copy => pa,
        };
        assert_eq!(format!("{pb:o}"), format!("{want:o}"), "mode of {:?}", file.path);
    }
    let shipped: Vec<String> = entries(run).into_iter().filter(|p| !p.starts_with(".theseus/")).collect();
    let mut want: Vec<String> = snapshot.files.iter().map(|f| f.path.clone()).collect();
    want.sort();
    assert_eq!(shipped, want, "the run dir holds the snapshot's files and nothing else");
}

/// Every object under `root`'s store is read-only and hashes to its name.
pub(crate) fn objects_all_hash_to_their_names(root: &Path) -> usize {
    let objects = root.join(theseus_core::store::OBJECTS_DIR);
    let names = entries(&objects);
    for name in &names {
        let path = objects.join(name);
        let key = name.strip_suffix(".x").unwrap_or(name).replace('/', "");
        assert_eq!(sha256_file(&path), key, "object {name} does not hash to its name");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o222, 0, "object {name} is writable ({mode:o})");
    }
    names.len()
}
