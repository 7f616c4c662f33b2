//! `cargo xtask dist [--check] [--old-glibc] [--target=NAME,..]`: the Python wheels of the CLI.
//!
//! Builds, with maturin (`python/pyproject.toml`: `bindings = "bin"`, the package `theseus-dispatch`
//! with the module `theseus_dispatch`), one wheel per target through zig (`maturin build --zig`;
//! maturin and the `ziglang` package come from PyPI into `target/dist-tools/`), and an sdist,
//! into `target/dist/`, in the `dist` profile (LTO, one codegen unit, stripped); prints their
//! sizes and `auditwheel show`'s verdict on each wheel's tag. Targets ([`TARGETS`]):
//! `x86_64` (manylinux2014, glibc 2.17; the default), `aarch64` (manylinux2014) and `musl`
//! (x86_64, musllinux_1_2, a static binary); `--target=all` builds the three. A target whose
//! standard library the toolchain lacks is added with `rustup target add` (from
//! static.rust-lang.org, which a machine with only the package registries may not reach: then
//! the error says so, and the default target needs nothing).
//!
//! - `--check`: the x86_64 wheel is installed into a fresh venv (`target/dist/check-venv`, no
//!   Rust on its PATH); `theseus --version` and `python -m theseus_dispatch --version` must
//!   say the workspace version, and the README's first command (the bundled example on the
//!   local backend, `--follow`) must exit 0. The binaries of the other wheels are taken out of
//!   them and run the same command ([`cross`]): the musl one after checking that it
//!   is static, the aarch64 one under `qemu-aarch64`.
//! - `--old-glibc`: does the same with the x86_64 wheel in a Debian bullseye userland (glibc
//!   2.31, older than this machine's) made with `debootstrap` from Debian's packages under
//!   `target/dist-chroot/` (kept between runs) and entered with `chroot` (root only).

mod chroot;
mod cross;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

/// maturin and zig, pinned.
const TOOLS: &[&str] = &["maturin==1.16.0", "ziglang==0.15.1", "auditwheel==6.4.2"];

/// A platform a wheel is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    /// The name `--target` takes.
    pub(crate) name: &'static str,
    pub(crate) triple: &'static str,
    /// maturin's `--compatibility`.
    compatibility: &'static str,
    /// The platform tag `auditwheel show` must find the wheel consistent with (and the end of
    /// the wheel's file name).
    pub(crate) tag: &'static str,
}

/// Every target `dist` knows; the first is the default and the one `--check` installs.
pub(crate) const TARGETS: &[Target] = &[
    Target {
        name: "x86_64",
        triple: "x86_64-unknown-linux-gnu",
        compatibility: "manylinux2014",
        tag: "manylinux_2_17_x86_64",
    },
    Target {
        name: "aarch64",
        triple: "aarch64-unknown-linux-gnu",
        compatibility: "manylinux2014",
        tag: "manylinux_2_17_aarch64",
    },
    Target {
        name: "musl",
        triple: "x86_64-unknown-linux-musl",
        compatibility: "musllinux_1_2",
        tag: "musllinux_1_2_x86_64",
    },
];

const USAGE: &str = "cargo xtask dist [--check] [--old-glibc] [--target=x86_64,aarch64,musl|all]";

/// The targets named by `--target=` values (comma-separated, repeatable), in [`TARGETS`] order.
fn parse_targets(values: &[&str]) -> Result<Vec<Target>> {
    if values.is_empty() {
        return Ok(vec![TARGETS[0]]);
    }
    let mut chosen = Vec::new();
    for name in values.iter().flat_map(|v| v.split(',')).map(str::trim) {
        if name == "all" {
            chosen.extend_from_slice(TARGETS);
            continue;
        }
        let Some(target) = TARGETS.iter().find(|t| t.name == name || t.triple == name) else {
            let names: Vec<_> = TARGETS.iter().map(|t| t.name).collect();
            bail!("unknown target `{name}`: the targets are {} (or all)", names.join(", "));
        };
        chosen.push(*target);
    }
    Ok(TARGETS.iter().filter(|t| chosen.contains(t)).copied().collect())
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let (mut check, mut old_glibc, mut names) = (false, false, Vec::new());
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            "--old-glibc" => old_glibc = true,
            other => match other.strip_prefix("--target=") {
                Some(value) => names.push(value),
                None => bail!("unknown argument `{other}`: {USAGE}"),
            },
        }
    }
    let targets = parse_targets(&names)?;
    // Before the minutes of building: `--old-glibc` needs the x86_64 wheel.
    ensure!(
        !old_glibc || targets.contains(&TARGETS[0]),
        "--old-glibc checks the x86_64 wheel: add x86_64 to --target (or drop --target)"
    );
    let built = build(root, &targets)?;
    let host = built.iter().find(|b| b.target == TARGETS[0]);
    if check {
        if let Some(host) = host {
            check_in_venv(root, host)?;
        }
        for other in built.iter().filter(|b| b.target != TARGETS[0]) {
            cross::check(root, other)?;
        }
    }
    if old_glibc {
        let host = host.context("the x86_64 wheel was not built")?;
        check_in_chroot(root, host)?;
    }
    Ok(())
}

/// One wheel [`build`] made.
pub(crate) struct Built {
    pub(crate) target: Target,
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

pub(crate) fn exec(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed ({status})");
    Ok(())
}

pub(crate) fn output(cmd: &mut Command) -> Result<String> {
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

/// Builds a wheel per target and the sdist into `target/dist/`.
pub(crate) fn build(root: &Path, targets: &[Target]) -> Result<Vec<Built>> {
    let bin = tools(root)?;
    let target_dir = crate::target_dir(root);
    let out = target_dir.join("dist");
    std::fs::create_dir_all(&out)?;
    for entry in std::fs::read_dir(&out)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".whl") || name.ends_with(".tar.gz") {
            std::fs::remove_file(entry.path())?;
        }
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut built = Vec::new();
    for target in targets {
        ensure_std(target)?;
        eprintln!(
            "dist: building the {} {} wheel (profile dist: LTO, stripped; through zig)",
            target.name, target.compatibility
        );
        let started = std::time::Instant::now();
        let before: Vec<PathBuf> = wheels(&out)?;
        exec(
            Command::new(bin.join("maturin"))
                .current_dir(root.join("python"))
                .args(["build", "--zig", "--compatibility", target.compatibility, "--target", target.triple, "--out"])
                .arg(&out)
                .env("PATH", &path)
                .env("CARGO_TARGET_DIR", &target_dir),
        )?;
        eprintln!("dist: {} wheel built in {:.0} s", target.name, started.elapsed().as_secs_f64());
        let wheel = wheels(&out)?
            .into_iter()
            .find(|w| !before.contains(w))
            .with_context(|| format!("maturin made no new wheel in {}", out.display()))?;
        let shown = output(Command::new(bin.join("auditwheel")).arg("show").arg(&wheel))?;
        let verdict = shown.split_whitespace().collect::<Vec<_>>().join(" ");
        ensure!(
            verdict.contains(target.tag),
            "auditwheel does not find the wheel consistent with {}:\n{shown}",
            target.tag
        );
        let binary = target_dir.join(target.triple).join("dist").join("theseus");
        println!("{:<64} {:>10}", format!("wheel ({})", file_name(&wheel)), mib(size(&wheel)?));
        println!("{:<64} {:>10}", format!("binary in the {} wheel (profile dist)", target.name), mib(size(&binary)?));
        println!("auditwheel: {}", verdict.split(". ").find(|s| s.contains(target.tag)).unwrap_or(&verdict));
        built.push(Built { target: *target, wheel });
    }
    exec(
        Command::new(bin.join("maturin"))
            .current_dir(root.join("python"))
            .args(["sdist", "--out"])
            .arg(&out)
            .env("PATH", &path),
    )?;
    let sdist = newest(&out, ".tar.gz")?;
    println!("{:<64} {:>10}", format!("sdist ({})", file_name(&sdist)), mib(size(&sdist)?));
    Ok(built)
}

/// The wheels in `dir`.
fn wheels(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect())
}

/// Makes sure the toolchain has `target`'s standard library, adding it with rustup if not.
fn ensure_std(target: &Target) -> Result<()> {
    let sysroot = output(Command::new("rustc").args(["--print", "sysroot"]))?;
    if Path::new(sysroot.trim()).join("lib/rustlib").join(target.triple).join("lib").is_dir() {
        return Ok(());
    }
    eprintln!("dist: the toolchain has no standard library for {}; rustup target add {0}", target.triple);
    let status = Command::new("rustup").args(["target", "add", target.triple]).status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => bail!(
            "`rustup target add {}` failed ({s}); the {} wheel needs that target's standard library, \
             which rustup fetches from static.rust-lang.org: build the default target alone \
             (`cargo xtask dist`) on a machine that cannot reach it",
            target.triple,
            target.name
        ),
        Err(e) => {
            bail!("cannot run rustup ({e}); the {} wheel needs `rustup target add {}`", target.name, target.triple)
        }
    }
}

pub(crate) fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The venv the wheel is installed into by `--check` (kept for `cargo xtask bench`).
pub(crate) fn check_venv(root: &Path) -> PathBuf {
    crate::target_dir(root).join("dist").join("check-venv")
}

/// PATH without any dir that holds `cargo` or `rustc`.
pub(crate) fn path_without_rust() -> String {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|dir| !Path::new(dir).join("cargo").exists() && !Path::new(dir).join("rustc").exists())
        .collect::<Vec<_>>()
        .join(":")
}

fn check_in_venv(root: &Path, built: &Built) -> Result<()> {
    debug_assert_eq!(built.target, TARGETS[0]);
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
    let path = format!("{}:{path}", venv.join("bin").display());
    let shown = run_the_readme_command(root, &path)?;
    let module = output(Command::new(venv.join("bin/python")).args(["-m", "theseus_dispatch", "--version"]))?;
    ensure!(module.trim() == shown, "python -m theseus_dispatch says {module:?}");
    println!(
        "dist --check: {} installs without Rust; `theseus --version` = {shown}; the bundled example ran",
        file_name(&built.wheel),
    );
    Ok(())
}

/// With `path` as the whole PATH (it must find a `theseus`), checks `theseus --version`
/// against the workspace version and runs the README's first command (the bundled example on
/// the local backend, `--follow`) in a fresh HOME, then `list`, `status`, `ui --help` and
/// `chips`; returns what `--version` said.
pub(crate) fn run_the_readme_command(root: &Path, path: &str) -> Result<String> {
    let version = workspace_version(root)?;
    let home = tempfile_dir("theseus-dist-home")?;
    let theseus = |args: &[&str]| {
        let mut cmd = Command::new("theseus");
        cmd.args(args)
            .current_dir(root)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &home)
            .env("LANG", "C.UTF-8")
            .env("NO_COLOR", "1");
        cmd
    };
    let shown = output(&mut theseus(&["--version"]))?;
    ensure!(shown.trim() == format!("theseus {version}"), "the theseus on {path} says {shown:?}, not {version}");
    eprintln!("dist: running the README's first command with the theseus on {path}");
    let ran = output(&mut theseus(&["submit", "hello", "examples/hello/experiment.yaml", "--follow"]))?;
    ensure!(ran.contains("hello from theseus"), "the bundled example printed:\n{ran}");
    // Commands that solve nothing parse the command line differently (the host types' flags
    // belong to the solving ones only), and a release build checks less of clap than the tests'
    // debug builds: run one of each kind.
    for args in [&["list"][..], &["status", "hello"], &["ui", "--help"], &["chips"]] {
        let said = output(&mut theseus(args))?;
        ensure!(!said.trim().is_empty(), "`theseus {}` printed nothing", args.join(" "));
    }
    let _ = std::fs::remove_dir_all(&home);
    Ok(shown.trim().to_owned())
}

pub(crate) fn tempfile_dir(prefix: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn check_in_chroot(root: &Path, built: &Built) -> Result<()> {
    chroot::check(root, &built.wheel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_named_one_by_one_or_all_and_unknown_ones_are_refused() {
        let names = |v: &[&str]| parse_targets(v).map(|t| t.iter().map(|t| t.name).collect::<Vec<_>>());
        assert_eq!(names(&[]).unwrap(), ["x86_64"]);
        assert_eq!(names(&["musl,x86_64"]).unwrap(), ["x86_64", "musl"]);
        assert_eq!(names(&["aarch64", "aarch64-unknown-linux-gnu"]).unwrap(), ["aarch64"]);
        assert_eq!(names(&["all"]).unwrap(), ["x86_64", "aarch64", "musl"]);
        let err = names(&["riscv"]).unwrap_err().to_string();
        assert!(err.contains("`riscv`") && err.contains("x86_64, aarch64, musl"), "{err}");
    }

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
