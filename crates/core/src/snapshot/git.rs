//! The git side of snapshots: finding the top level, listing the working tree or a commit with
//! the `git` CLI, and streaming blobs out of `git cat-file --batch` one at a time.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::{Error, Result};

/// Mode of a symlink in a git tree.
const MODE_SYMLINK: &str = "120000";
/// Mode of an executable file in a git tree.
const MODE_EXECUTABLE: &str = "100755";
/// Mode of a submodule (gitlink) in a git tree.
const MODE_GITLINK: &str = "160000";

/// The top level of the git working tree containing `dir`, or `None` when `dir` is not inside
/// one (or git is not installed).
pub(super) fn toplevel(dir: &Path) -> Option<PathBuf> {
    let out =
        Command::new("git").arg("-C").arg(dir).args(["rev-parse", "--show-toplevel"]).stderr(Stdio::null()).output();
    match out {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8(out.stdout).ok()?;
            let top = text.trim_end_matches('\n');
            (!top.is_empty()).then(|| PathBuf::from(top))
        }
        Ok(_) => None,
        Err(err) => {
            tracing::warn!("cannot run git ({err}); treating `{}` as a plain directory", dir.display());
            None
        }
    }
}

/// Whether git ignores `dir` (e.g. a scratch dir under an ignored `target/`): such a dir is not
/// part of its repository and is shipped as a plain directory.
pub(super) fn is_ignored(dir: &Path) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["check-ignore", "-q", "."])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `git -C <top> <args>` and returns its stdout.
pub(super) fn run(top: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let command = format!("git {}", args.join(" "));
    let out = Command::new("git")
        .arg("-C")
        .arg(top)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Command { command: command.clone(), message: e.to_string() })?;
    if !out.status.success() {
        let message = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(Error::Command { command, message });
    }
    Ok(out.stdout)
}

/// Paths of the working tree: tracked plus untracked-not-ignored, as `/`-separated strings,
/// sorted and without duplicates (conflicted files are listed once per stage by git), each
/// with whether git tracks it.
pub(super) fn worktree_paths(top: &Path) -> Result<Vec<(String, bool)>> {
    let list = |args: &[&str]| -> Result<Vec<String>> {
        let out = run(top, args)?;
        out.split(|&b| b == 0).filter(|p| !p.is_empty()).map(utf8_path).collect()
    };
    let tracked: std::collections::BTreeSet<String> = list(&["ls-files", "-z", "--cached"])?.into_iter().collect();
    let untracked = list(&["ls-files", "-z", "--others", "--exclude-standard"])?;
    let mut paths: Vec<(String, bool)> = tracked.iter().map(|p| (p.clone(), true)).collect();
    paths.extend(untracked.into_iter().filter(|p| !tracked.contains(p)).map(|p| (p, false)));
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// One entry of `git ls-tree -r -l`.
#[derive(Debug)]
pub(super) struct TreeEntry {
    /// Path relative to the top level.
    pub(super) path: String,
    /// Blob id.
    pub(super) oid: String,
    /// Blob size.
    pub(super) size: u64,
    /// Mode `100755`.
    pub(super) executable: bool,
    /// Mode `120000`.
    pub(super) symlink: bool,
}

/// The blobs of `commit`, sorted by path. Submodules are skipped with a warning.
pub(super) fn tree_entries(top: &Path, commit: &str) -> Result<Vec<TreeEntry>> {
    let out = run(top, &["ls-tree", "-r", "-z", "--full-tree", "-l", commit])?;
    let mut entries = Vec::new();
    for record in out.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let bad = || Error::Command {
            command: format!("git ls-tree -r -z --full-tree -l {commit}"),
            message: format!("unexpected output line {:?}", String::from_utf8_lossy(record)),
        };
        let tab = record.iter().position(|&b| b == b'\t').ok_or_else(bad)?;
        let meta = std::str::from_utf8(&record[..tab]).map_err(|_| bad())?;
        let path = utf8_path(&record[tab + 1..])?;
        let fields: Vec<&str> = meta.split_whitespace().collect();
        let [mode, kind, oid, size] = fields[..] else { return Err(bad()) };
        if mode == MODE_GITLINK || kind == "commit" {
            tracing::warn!("skipping submodule `{path}`: submodules are not shipped");
            continue;
        }
        if kind != "blob" {
            continue;
        }
        entries.push(TreeEntry {
            path,
            oid: oid.to_owned(),
            size: size.parse().map_err(|_| bad())?,
            executable: mode == MODE_EXECUTABLE,
            symlink: mode == MODE_SYMLINK,
        });
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(entries)
}

/// Map from path to blob id for `commit`.
pub(super) fn blob_ids(top: &Path, commit: &str) -> Result<HashMap<String, String>> {
    Ok(tree_entries(top, commit)?.into_iter().map(|e| (e.path, e.oid)).collect())
}

/// A running `git cat-file --batch`: asks for one blob at a time and streams its content.
pub(super) struct BlobReader {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl BlobReader {
    /// Starts `git cat-file --batch` in `top`.
    pub(super) fn start(top: &Path) -> Result<BlobReader> {
        let mut child = Command::new("git")
            .arg("-C")
            .arg(top)
            .args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::Command { command: "git cat-file --batch".into(), message: e.to_string() })?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        Ok(BlobReader { child, stdin, stdout })
    }

    /// Asks for blob `oid`; returns its size and a reader of exactly that many bytes. The reader
    /// must be read to the end, and [`BlobReader::finish_blob`] called, before the next blob.
    pub(super) fn open(&mut self, oid: &str) -> Result<(u64, impl Read + '_)> {
        let err = |message: String| Error::Command { command: "git cat-file --batch".into(), message };
        let stdin = self.stdin.as_mut().ok_or_else(|| err("already closed".into()))?;
        writeln!(stdin, "{oid}").and_then(|()| stdin.flush()).map_err(|e| err(e.to_string()))?;
        let mut header = String::new();
        self.stdout.read_line(&mut header).map_err(|e| err(e.to_string()))?;
        let fields: Vec<&str> = header.split_whitespace().collect();
        let size = match fields[..] {
            [_, "blob", size] => size.parse::<u64>().map_err(|_| err(format!("bad header {header:?}")))?,
            _ => return Err(err(format!("cannot read object {oid}: {}", header.trim()))),
        };
        Ok((size, (&mut self.stdout).take(size)))
    }

    /// Reads the newline git writes after each blob's content.
    pub(super) fn finish_blob(&mut self) -> Result<()> {
        let mut lf = [0u8; 1];
        self.stdout
            .read_exact(&mut lf)
            .map_err(|e| Error::Command { command: "git cat-file --batch".into(), message: e.to_string() })
    }

    /// Reads a whole (small) blob, e.g. a symlink target.
    pub(super) fn read_small(&mut self, oid: &str) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        {
            let (_, mut reader) = self.open(oid)?;
            reader
                .read_to_end(&mut buf)
                .map_err(|e| Error::Command { command: "git cat-file --batch".into(), message: e.to_string() })?;
        }
        self.finish_blob()?;
        Ok(buf)
    }
}

impl Drop for BlobReader {
    fn drop(&mut self) {
        // Closing stdin makes git exit; wait so no zombie is left.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A git path as UTF-8, or an error naming it.
fn utf8_path(bytes: &[u8]) -> Result<String> {
    std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| {
        Error::InvalidConfig(format!(
            "cannot ship `{}`: the path is not valid UTF-8",
            Path::new(OsStr::from_bytes(bytes)).display()
        ))
    })
}
