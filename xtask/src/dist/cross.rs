//! `cargo xtask dist --check` for the wheels this machine cannot install with pip: the
//! `theseus` binary is taken out of the wheel and runs the README's first command.
//!
//! - musl: the binary must be static (its ELF has no program interpreter) for x86_64, and runs
//!   here directly.
//! - aarch64: the binary must be an aarch64 ELF, and runs under `qemu-aarch64` (user-mode
//!   emulation, Debian's `qemu-user`) with Debian's arm64 glibc (`libc6-arm64-cross`, glibc
//!   2.36) as its root for the loader; both are installed with apt-get when missing (root
//!   only). The job it starts (bash, python) runs natively: qemu-user hands `execve` of a
//!   host binary to the kernel.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use super::{Built, exec, file_name, output, path_without_rust, run_the_readme_command};

/// ELF `e_machine` values.
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
/// The program header type of a program interpreter (a dynamically linked executable's loader).
const PT_INTERP: u32 = 3;

/// Where Debian's arm64 glibc for cross use lives.
const ARM64_ROOT: &str = "/usr/aarch64-linux-gnu";

pub(crate) fn check(root: &Path, built: &Built) -> Result<()> {
    let dir = crate::target_dir(root).join("dist").join(format!("check-{}", built.target.name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let binary = extract_binary(&built.wheel, &dir)?;
    let elf = Elf::read(&binary)?;
    let path = format!("{}:{}", dir.display(), path_without_rust());
    match built.target.name {
        "musl" => {
            ensure!(elf.machine == EM_X86_64, "the musl wheel's binary is not x86_64 (e_machine {})", elf.machine);
            ensure!(!elf.has_interpreter, "the musl wheel's binary is not static: it names a program interpreter");
            std::fs::rename(&binary, dir.join("theseus"))?;
        }
        "aarch64" => {
            ensure!(elf.machine == EM_AARCH64, "the aarch64 wheel's binary is not aarch64 (e_machine {})", elf.machine);
            let qemu = arm64_emulation()?;
            let wrapper = dir.join("theseus");
            let script = format!(
                "#!/bin/sh\nexec {} -L {} {} \"$@\"\n",
                sh_quote(&qemu.to_string_lossy()),
                sh_quote(ARM64_ROOT),
                sh_quote(&binary.to_string_lossy())
            );
            std::fs::write(&wrapper, script)?;
            exec(Command::new("chmod").arg("+x").arg(&wrapper))?;
        }
        other => bail!("no check for the {other} wheel"),
    }
    let shown = run_the_readme_command(root, &path)?;
    let how = if built.target.name == "aarch64" { " under qemu-aarch64" } else { ", a static binary," };
    println!("dist --check: the binary of {}{how} says `{shown}` and ran the bundled example", file_name(&built.wheel));
    Ok(())
}

/// Copies the wheel's `*.data/scripts/theseus` to `dir/theseus-binary` (executable).
fn extract_binary(wheel: &Path, dir: &Path) -> Result<PathBuf> {
    let out = dir.join("theseus-binary");
    let script = "import shutil, sys, zipfile\n\
                  z = zipfile.ZipFile(sys.argv[1])\n\
                  names = [n for n in z.namelist() if n.endswith('.data/scripts/theseus')]\n\
                  assert len(names) == 1, z.namelist()\n\
                  with z.open(names[0]) as src, open(sys.argv[2], 'wb') as dst:\n    shutil.copyfileobj(src, dst)\n";
    exec(Command::new("python3").args(["-c", script]).arg(wheel).arg(&out))?;
    exec(Command::new("chmod").arg("+x").arg(&out))?;
    Ok(out)
}

/// What [`check`] needs of an ELF header.
struct Elf {
    machine: u16,
    has_interpreter: bool,
}

impl Elf {
    /// Reads a 64-bit little-endian ELF's machine and program headers.
    fn read(path: &Path) -> Result<Elf> {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Elf::parse(&bytes).with_context(|| format!("{} is not a 64-bit little-endian ELF", path.display()))
    }

    fn parse(b: &[u8]) -> Option<Elf> {
        let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
        if b.get(..6)? != b"\x7fELF\x02\x01" {
            return None;
        }
        let machine = u16_at(18)?;
        let phoff = usize::try_from(u64_at(32)?).ok()?;
        let (phentsize, phnum) = (usize::from(u16_at(54)?), usize::from(u16_at(56)?));
        let mut has_interpreter = false;
        for i in 0..phnum {
            has_interpreter |= u32_at(phoff.checked_add(i.checked_mul(phentsize)?)?)? == PT_INTERP;
        }
        Some(Elf { machine, has_interpreter })
    }
}

/// `qemu-aarch64` and the arm64 glibc, installed with apt-get when missing; the emulator's path.
fn arm64_emulation() -> Result<PathBuf> {
    let loader = Path::new(ARM64_ROOT).join("lib/ld-linux-aarch64.so.1");
    let find = || {
        std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .map(|d| Path::new(d).join("qemu-aarch64"))
            .find(|p| p.is_file())
    };
    if let Some(qemu) = find().filter(|_| loader.exists()) {
        return Ok(qemu);
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    ensure!(
        root,
        "the aarch64 check needs qemu-aarch64 and {}: apt-get install qemu-user libc6-arm64-cross",
        loader.display()
    );
    eprintln!("dist: apt-get install qemu-user libc6-arm64-cross (to run the aarch64 binary)");
    exec(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends", "qemu-user", "libc6-arm64-cross"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    let qemu = find().context("apt-get installed qemu-user, but no qemu-aarch64 is on PATH")?;
    ensure!(loader.exists(), "apt-get installed libc6-arm64-cross, but {} is missing", loader.display());
    let _ = output(Command::new(&qemu).arg("--version"))?;
    Ok(qemu)
}

/// `s` in single quotes for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_elf_check_tells_static_from_dynamic_and_reads_the_machine() {
        // This very test binary: x86_64 or aarch64, linked dynamically against glibc.
        let me = Elf::read(&std::env::current_exe().unwrap()).unwrap();
        assert!(me.has_interpreter);
        assert!(me.machine == EM_X86_64 || me.machine == EM_AARCH64, "{}", me.machine);
        assert!(Elf::parse(b"#!/bin/sh\n").is_none());
        assert!(Elf::parse(b"\x7fELF\x02\x01\x01").is_none(), "a truncated header is refused, not read past");
        // A header with no program headers at all: static for this check.
        let mut header = vec![0u8; 64];
        header[..6].copy_from_slice(b"\x7fELF\x02\x01");
        header[18..20].copy_from_slice(&EM_AARCH64.to_le_bytes());
        let elf = Elf::parse(&header).unwrap();
        assert_eq!((elf.machine, elf.has_interpreter), (EM_AARCH64, false));
    }

    #[test]
    fn sh_quote_survives_a_quote() {
        assert_eq!(sh_quote("/a b/it's"), r"'/a b/it'\''s'");
    }
}
