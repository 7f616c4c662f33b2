//! `cargo xtask dist [--check] [--old-glibc]`: the Python wheels of the CLI.
//!
//! Builds, with maturin (`python/pyproject.toml`: `bindings = "bin"`, the package `theseus-dispatch`
//! with the module `theseus_dispatch`), a manylinux2014 (glibc 2.17) x86_64 wheel through zig
//! (`maturin build --zig`; maturin and the `ziglang` package come from PyPI into
//! `target/dist-tools/`), and an sdist, into `target/dist/`, in the `dist` profile (LTO, one
//! codegen unit, stripped); prints their sizes and `auditwheel show`'s verdict on the tag.
//!
//! - `--check`: installs the wheel into a fresh venv (`target/dist/check-venv`, no Rust on its
//!   PATH), checks `theseus --version` and `python -m theseus_dispatch --version` against the
//!   workspace version, and runs the README's first command with it (the bundled example on the
//!   local backend, `--follow`, exit 0).
//! - `--old-glibc`: does the same in a Debian bullseye userland (glibc 2.31, older than this
//!   machine's) made with `debootstrap` from Debian's packages under `target/dist-chroot/`
//!   (kept between runs) and entered with `chroot` (root only).
//!
//! Only x86_64 glibc wheels are built: the machine's toolchain has no other target's standard
//! library (`rustup target list --installed`), and none can be fetched here.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

/// maturin and zig, pinned.
const TOOLS: &[&str] = &["maturin==1.16.0", "ziglang==0.15.1", "auditwheel==6.4.2"];

/// The only target these machines can build.
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// The manylinux policy of the wheel (glibc 2.17).
const COMPATIBILITY: &str = "manylinux2014";

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let (mut check, mut old_glibc) = (false, false);
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            "--old-glibc" => old_glibc = true,
            other => bail!("unknown argument `{other}`: cargo xtask dist [--check] [--old-glibc]"),
        }
    }
    let built = build(root)?;
    if check {
        check_in_venv(root, &built)?;
    }
    if old_glibc {
        check_in_chroot(root, &built)?;
    }
    Ok(())
}

/// What [`build`] made.
pub(crate) struct Built {
    pub(crate) wheel: PathBuf,
}

/// The workspace version (`[workspace.package] version`).
pub(crate) fn workspace_version(root: &Path) -> Result<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).context("cannot read Cargo.toml")?;
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[workspace.package]";
        } else if in_package && let Some(rest) = line.strip_prefix("version") {
            let value = rest.trim_start().trim_start_matches('=').trim().trim_matches('"');
            return Ok(value.to_owned());
        }
    }
    bail!("no version in [workspace.package] of Cargo.toml")
}

/// The venv with maturin, zig and auditwheel; returns its bin dir.
fn tools(root: &Path) -> Result<PathBuf> {
    let venv = crate::target_dir(root).join("dist-tools");
    let bin = venv.join("bin");
    let marker = venv.join(".theseus-complete");
    let pins = TOOLS.join(" ");
    if bin.join("maturin").exists() && std::fs::read_to_string(&marker).is_ok_and(|m| m == pins) {
        return Ok(bin);
    }
    eprintln!("dist: installing {pins} into {}", venv.display());
    let _ = std::fs::remove_dir_all(&venv);
    exec(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    exec(
        Command::new(bin.join("python"))
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            .args(TOOLS),
    )?;
    std::fs::write(&marker, pins)?;
    Ok(bin)
}

fn exec(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed ({status})");
    Ok(())
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("cannot run {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn size(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?.len())
}

/// The newest file in `dir` whose name ends with `suffix`.
fn newest(dir: &Path, suffix: &str) -> Result<PathBuf> {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p).with_context(|| format!("no `*{suffix}` in {}", dir.display()))
}

/// Builds the wheel and the sdist into `target/dist/`.
pub(crate) fn build(root: &Path) -> Result<Built> {
    let bin = tools(root)?;
    let target = crate::target_dir(root);
    let out = target.join("dist");
    std::fs::create_dir_all(&out)?;
    for entry in std::fs::read_dir(&out)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".whl") || name.ends_with(".tar.gz") {
            std::fs::remove_file(entry.path())?;
        }
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    eprintln!("dist: building the {COMPATIBILITY} wheel (profile dist: LTO, stripped; through zig)");
    let started = std::time::Instant::now();
    exec(
        Command::new(bin.join("maturin"))
            .current_dir(root.join("python"))
            .args(["build", "--zig", "--compatibility", COMPATIBILITY, "--target", TRIPLE, "--out"])
            .arg(&out)
            .env("PATH", &path)
            .env("CARGO_TARGET_DIR", &target),
    )?;
    eprintln!("dist: wheel built in {:.0} s", started.elapsed().as_secs_f64());
    exec(
        Command::new(bin.join("maturin"))
            .current_dir(root.join("python"))
            .args(["sdist", "--out"])
            .arg(&out)
            .env("PATH", &path),
    )?;
    let wheel = newest(&out, ".whl")?;
    let sdist = newest(&out, ".tar.gz")?;
    let binary = target.join(TRIPLE).join("dist").join("theseus");
    let shown = output(Command::new(bin.join("auditwheel")).arg("show").arg(&wheel))?;
    let verdict = shown.split_whitespace().collect::<Vec<_>>().join(" ");
    ensure!(
        verdict.contains("manylinux_2_17_x86_64"),
        "auditwheel does not find the wheel consistent with manylinux_2_17_x86_64:\n{shown}"
    );
    println!("{:<60} {:>10}", "wheel (".to_owned() + &file_name(&wheel) + ")", mib(size(&wheel)?));
    println!("{:<60} {:>10}", "sdist (".to_owned() + &file_name(&sdist) + ")", mib(size(&sdist)?));
    println!("{:<60} {:>10}", "binary in the wheel (profile dist)", mib(size(&binary)?));
    println!("auditwheel: {}", verdict.split(". ").find(|s| s.contains("manylinux_2_17")).unwrap_or(&verdict));
    Ok(Built { wheel })
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The venv the wheel is installed into by `--check` (kept for `cargo xtask bench`).
pub(crate) fn check_venv(root: &Path) -> PathBuf {
    crate::target_dir(root).join("dist").join("check-venv")
}

/// PATH without any dir that holds `cargo` or `rustc`.
fn path_without_rust() -> String {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|dir| !Path::new(dir).join("cargo").exists() && !Path::new(dir).join("rustc").exists())
        .collect::<Vec<_>>()
        .join(":")
}

fn check_in_venv(root: &Path, built: &Built) -> Result<()> {
    let venv = check_venv(root);
    let _ = std::fs::remove_dir_all(&venv);
    let path = path_without_rust();
    eprintln!("dist: installing {} into a fresh venv, no Rust on PATH", file_name(&built.wheel));
    exec(Command::new("python3").args(["-m", "venv"]).arg(&venv).env("PATH", &path))?;
    exec(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "--no-index"])
            .arg(&built.wheel)
            .env("PATH", &path),
    )?;
    let version = workspace_version(root)?;
    let path = format!("{}:{path}", venv.join("bin").display());
    let home = tempfile_dir("theseus-dist-home")?;
    let theseus = |args: &[&str]| {
        let mut cmd = Command::new("theseus");
        cmd.args(args)
            .current_dir(root)
            .env_clear()
            .env("PATH", &path)
            .env("HOME", &home)
            .env("LANG", "C.UTF-8")
            .env("NO_COLOR", "1");
        cmd
    };
    let shown = output(&mut theseus(&["--version"]))?;
    ensure!(shown.trim() == format!("theseus {version}"), "the installed theseus says {shown:?}, not {version}");
    let module = output(Command::new(venv.join("bin/python")).args(["-m", "theseus_dispatch", "--version"]))?;
    ensure!(module.trim() == shown.trim(), "python -m theseus_dispatch says {module:?}");
    eprintln!("dist: running the README's first command with the installed theseus");
    let ran = output(&mut theseus(&["submit", "hello", "examples/hello/experiment.yaml", "--follow"]))?;
    ensure!(ran.contains("hello from theseus"), "the bundled example printed:\n{ran}");
    let _ = std::fs::remove_dir_all(&home);
    println!(
        "dist --check: {} installs without Rust; `theseus --version` = {}; the bundled example ran",
        file_name(&built.wheel),
        shown.trim()
    );
    Ok(())
}

fn tempfile_dir(prefix: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn check_in_chroot(root: &Path, built: &Built) -> Result<()> {
    crate::dist_chroot::check(root, &built.wheel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wheel_version_is_the_workspace_version_and_no_pyproject_sits_at_the_top() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        assert_eq!(workspace_version(root).unwrap(), env!("CARGO_PKG_VERSION"));
        // At the top, a pyproject.toml would make the repository a Python project to the
        // bootstrap, which would build this package (with maturin, from PyPI) before running
        // the README's first command.
        assert!(!root.join("pyproject.toml").exists());
        let pyproject = std::fs::read_to_string(root.join("python/pyproject.toml")).unwrap();
        assert!(pyproject.contains("dynamic = [\"version\"]") && pyproject.contains("bindings = \"bin\""));
    }
}
