//! The `theseus` command line: parses arguments, resolves settings and runs one command.
//!
//! stdout carries data (run ids, tables, job output, `--output json`); stderr carries logs and
//! progress. Exit codes: 0 success, 1 the job failed (or `--follow` saw it fail), 2 an error.

mod args;
mod backends;
mod commands;
mod context;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    init_tracing(&cli.global);
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(2)
        }
    }
}

/// Log lines of theseus's own crates only, at `warn` (`-v`: theirs at debug and libraries' warnings,
/// `-vv`: everything at debug; `RUST_LOG` overrides). No colour unless stderr is a terminal and
/// `NO_COLOR` is unset (<https://no-color.org>).
fn init_tracing(global: &args::GlobalArgs) {
    const OURS: &[&str] = &["theseus", "theseus_cli", "theseus_core", "theseus_backend_volcano", "theseus_backend_slurm"];
    let ours = |level: &str| OURS.iter().map(|c| format!("{c}={level}")).collect::<Vec<_>>().join(",");
    let default = if global.quiet {
        format!("off,{}", ours("error"))
    } else {
        match global.verbose {
            0 => format!("off,{}", ours("warn")),
            1 => format!("warn,{}", ours("debug")),
            _ => "debug".to_owned(),
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let color = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(color)
        .without_time()
        .init();
}
