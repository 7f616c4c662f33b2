//! `theseus-testhost`: the `theseus` command line with the built-in host types and `sandbox`.

use std::process::ExitCode;

use theseus_core::config::HostType;

fn main() -> ExitCode {
    let types: Vec<&'static dyn HostType> =
        theseus_cli::HOST_TYPES.iter().copied().chain([&theseus_testhost::SandboxType as &dyn HostType]).collect();
    theseus_cli::main(&types)
}
