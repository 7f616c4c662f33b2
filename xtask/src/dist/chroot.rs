//! `cargo xtask dist --old-glibc`: the manylinux wheel installed and run in an older userland
//! than this machine's, proving the portability claim instead of asserting it.
//!
//! A Debian bullseye root (glibc 2.31, with python3 and python3-venv) is made once with
//! `debootstrap --variant=minbase` from deb.debian.org under `target/dist-chroot/bullseye`
//! (a marker file says it is complete; debootstrap is installed with apt-get when missing).
//! For each check, the wheel and a copy of `examples/hello` go into `/check` inside it; `/proc`
//! and `/dev` are mounted (the local backend reads `/proc`), and a script run with `chroot`
//! makes a venv, installs the wheel with `pip --no-index`, prints the glibc and `theseus
//! --version`, and runs the bundled example with `--follow`. The mounts are undone on every
//! path. Root only.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

const SUITE: &str = "bullseye";
const MIRROR: &str = "http://deb.debian.org/debian";

/// Mounts undone on drop (innermost first).
struct Mounts(Vec<PathBuf>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for target in self.0.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(target).status();
        }
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed ({status})");
    Ok(())
}

/// The bullseye root, made when missing.
fn ensure_root(dir: &Path) -> Result<PathBuf> {
    let root = dir.join(SUITE);
    let marker = dir.join(format!("{SUITE}.complete"));
    if marker.exists() && root.join("usr/bin/python3").exists() {
        return Ok(root);
    }
    if Command::new("debootstrap").arg("--version").output().is_err() {
        eprintln!("dist: installing debootstrap with apt-get");
        run(Command::new("apt-get")
            .args(["install", "-y", "-qq", "debootstrap"])
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(dir)?;
    eprintln!("dist: making a Debian {SUITE} root in {} (debootstrap, a few minutes)", root.display());
    run(Command::new("debootstrap")
        .args(["--variant=minbase", "--include=python3,python3-venv,ca-certificates", SUITE])
        .arg(&root)
        .arg(MIRROR))?;
    std::fs::write(&marker, SUITE)?;
    Ok(root)
}

const SCRIPT: &str = r#"set -eu
export HOME=/check/home PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 NO_COLOR=1
mkdir -p "$HOME"
echo "dist: inside: $(ldd --version | head -n 1)"
rm -rf /check/venv
python3 -m venv /check/venv
/check/venv/bin/pip install --quiet --disable-pip-version-check --no-index /check/"$1"
/check/venv/bin/theseus --version
cd /check/repo
/check/venv/bin/theseus submit hello examples/hello/experiment.yaml --follow
"#;

/// Installs `wheel` in the bullseye root and runs the bundled example with it.
pub(crate) fn check(root: &Path, wheel: &Path) -> Result<()> {
    if !is_root() {
        bail!("--old-glibc enters a chroot, which needs root");
    }
    let chroot = ensure_root(&crate::target_dir(root).join("dist-chroot"))?;
    let check = chroot.join("check");
    let _ = std::fs::remove_dir_all(&check);
    std::fs::create_dir_all(check.join("repo/examples"))?;
    let name = wheel.file_name().context("the wheel has a name")?.to_string_lossy().into_owned();
    std::fs::copy(wheel, check.join(&name))?;
    run(Command::new("cp").arg("-r").arg(root.join("examples/hello")).arg(check.join("repo/examples/")))?;
    std::fs::write(check.join("run.sh"), SCRIPT)?;
    let mut mounts = Mounts(Vec::new());
    for (what, how) in [("proc", &["-t", "proc", "proc"][..]), ("dev", &["--bind", "/dev"][..])] {
        let target = chroot.join(what);
        std::fs::create_dir_all(&target)?;
        run(Command::new("mount").args(how).arg(&target))?;
        mounts.0.push(target);
    }
    eprintln!("dist: installing {name} in Debian {SUITE} and running the bundled example there");
    let out = Command::new("chroot")
        .arg(&chroot)
        .args(["/bin/sh", "/check/run.sh", &name])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .context("cannot run chroot")?;
    drop(mounts);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "the wheel failed in Debian {SUITE} ({}):\n{stdout}{stderr}", out.status);
    ensure!(stdout.contains("hello from theseus"), "the bundled example printed:\n{stdout}{stderr}");
    let glibc = stderr.lines().chain(stdout.lines()).find(|l| l.contains("inside:")).unwrap_or("").to_owned();
    println!("dist --old-glibc: {name} installed and ran the bundled example in Debian {SUITE} ({glibc})");
    Ok(())
}
