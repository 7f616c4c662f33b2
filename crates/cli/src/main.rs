//! The `theseus` binary: the command line of [`theseus_cli`] with the built-in host types.

use std::process::ExitCode;

fn main() -> ExitCode {
    theseus_cli::main(theseus_cli::HOST_TYPES)
}
