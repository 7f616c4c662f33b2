//! Generated code for the shipping benchmarks: a git repository of many small text files, and
//! a temp dir that removes itself ([`TempDir`]), so no generated repo outlives the bench.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};

use crate::e2e::text;

/// A dir under the system temp dir, removed (with everything in it) when dropped.
pub(super) struct TempDir(PathBuf);

impl TempDir {
    /// A fresh `<tmp>/theseus-bench-<name>-<pid>-<n>`, mode 0777 when `shared` (a lab user
    /// other than this one writes into it).
    pub(super) fn new(name: &str, shared: bool) -> Result<TempDir> {
        use std::os::unix::fs::PermissionsExt as _;
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("theseus-bench-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        if shared {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
        }
        Ok(TempDir(dir))
    }

    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Run dirs hold read-only files in read-only dirs at times: make them writable first.
        let _ = Command::new("chmod").args(["-R", "u+w"]).arg(&self.0).stderr(Stdio::null()).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The job every generated repo carries: `hello.yaml` runs `hello.py`, which prints one line.
pub(super) const EXPERIMENT: &str = "hello.yaml";

/// Writes a git repo of `files` text files of `file_bytes` each (pseudo-random printable lines,
/// 100 per dir) plus the job files, committed; returns the bytes of the files written.
pub(super) fn generate(dir: &Path, files: usize, file_bytes: usize) -> Result<u64> {
    std::fs::write(dir.join("hello.py"), "print('hello from the bench repo', flush=True)\n")?;
    std::fs::write(dir.join(EXPERIMENT), "entrypoint: python hello.py\n")?;
    let mut total = 0u64;
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut body = Vec::with_capacity(file_bytes);
    for i in 0..files {
        body.clear();
        while body.len() < file_bytes {
            // xorshift64 to printable characters, 63 per line.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let line_end = body.len() % 64 == 63;
            body.push(if line_end { b'\n' } else { b'!' + (state % 94) as u8 });
        }
        let path = file(dir, i);
        std::fs::create_dir_all(path.parent().expect("has a parent"))?;
        std::fs::write(&path, &body).with_context(|| format!("cannot write {}", path.display()))?;
        total += body.len() as u64;
    }
    git(dir, &["init", "-q"])?;
    git(dir, &["add", "-A"])?;
    git(dir, &["commit", "-q", "-m", "bench repo"])?;
    Ok(total)
}

/// The path of generated file `i`.
fn file(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("src/d{:03}/f{:03}.txt", i / 100, i % 100))
}

/// Edits one line of one file (appends a line to file 0): the working tree differs from HEAD
/// by one file.
pub(super) fn edit_one_file(dir: &Path, n: usize) -> Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().append(true).open(file(dir, 0))?;
    writeln!(f, "edit {n}")?;
    Ok(())
}

/// `git ARGS` in `dir`, with a fixed identity and no user config.
fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=theseus bench", "-c", "user.email=bench@theseus.invalid"])
        .args(args)
        .output()
        .context("cannot run git")?;
    ensure!(out.status.success(), "git {} failed: {}", args.join(" "), text(&out.stderr));
    Ok(())
}

/// Wall time of `git archive HEAD | tar -x -C into` in `repo`.
pub(super) fn archive_extract(repo: &Path, into: &Path) -> Result<f64> {
    let started = std::time::Instant::now();
    let mut archive = Command::new("git")
        .current_dir(repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["archive", "HEAD"])
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run git archive")?;
    let stdout = archive.stdout.take().context("no stdout")?;
    let tar = Command::new("tar").arg("-x").arg("-C").arg(into).stdin(stdout).status().context("cannot run tar")?;
    let archived = archive.wait()?;
    ensure!(archived.success() && tar.success(), "git archive HEAD | tar -x failed ({archived}, {tar})");
    Ok(started.elapsed().as_secs_f64())
}

/// Disk used under `dir` in bytes, hard links counted once (`du -s -B1`, GNU du's default).
pub(super) fn disk_used(dir: &Path) -> Result<u64> {
    let out = Command::new("du").arg("-s").arg("-B1").arg(dir).output().context("cannot run du")?;
    ensure!(out.status.success(), "du {} failed: {}", dir.display(), text(&out.stderr));
    let stdout = text(&out.stdout);
    let first = stdout.split_whitespace().next().unwrap_or_default();
    first.parse().with_context(|| format!("du printed {stdout:?}"))
}
