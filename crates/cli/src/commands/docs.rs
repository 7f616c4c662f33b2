//! `theseus completions SHELL` (clap_complete) and the hidden `theseus man --out DIR`
//! (clap_mangen), which `cargo xtask man` runs to write `docs/man/`: both from the one clap
//! definition in [`crate::args`] with the host types' flags ([`crate::host_flags`]), so they
//! list every subcommand and flag there is.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use theseus_core::config::HostTypes;

/// Prints the completion script of `shell` on stdout.
pub(crate) fn completions(shell: clap_complete::Shell, host_types: &HostTypes) -> Result<ExitCode> {
    let mut command = crate::host_flags::command(host_types);
    clap_complete::generate(shell, &mut command, "theseus", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// Writes `theseus.1` and `theseus-<sub>.1` for every visible subcommand (nested ones too)
/// into `out`, and prints the files written.
pub(crate) fn man(out: &Path, host_types: &HostTypes) -> Result<ExitCode> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut command = crate::host_flags::command(host_types);
    command.build();
    let mut written = Vec::new();
    write_pages(&command, "theseus", out, &mut written)?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn write_pages(command: &clap::Command, name: &str, out: &Path, written: &mut Vec<std::path::PathBuf>) -> Result<()> {
    let command = command.clone().name(name.to_owned()).bin_name(name.replace('-', " "));
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone()).render(&mut page)?;
    let path = out.join(format!("{name}.1"));
    std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    written.push(path);
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), out, written)?;
    }
    Ok(())
}
