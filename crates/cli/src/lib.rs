//! The `theseus` command line as a library: [`main`] parses arguments, resolves settings and
//! runs one command with the host types it is given ([`HOST_TYPES`] for the `theseus` binary;
//! a test crate adds its own type to them).
//!
//! stdout carries data (run ids, tables, job output, `--output json`); stderr carries logs and
//! progress. Exit codes: 0 success, 1 the job failed (or `--follow` saw it fail), 2 an error.

mod args;
mod backends;
mod code_sync;
mod commands;
mod context;
mod creates;
mod dotenv;
mod follow;
mod host_flags;
mod hosts;
mod log_notes;
mod output;
mod prepare;
mod progress;
mod queue_wait;
mod runs;
mod signals;
mod tunnel;
mod ui_source;

use std::process::ExitCode;

use theseus_core::config::HostType;

pub use backends::{HOST_TYPES, registry};

/// Runs the command line of this process with the host types `host_types` (in the order
/// messages list them) and returns its exit code.
pub fn main(host_types: &[&'static dyn HostType]) -> ExitCode {
    // `./.env`, as the original's `load_dotenv()`: may run this program again with its variables.
    dotenv::load();
    quiet_on_closed_stdout();
    let registry = backends::registry(host_types);
    let cli = host_flags::parse(&registry);
    init_tracing(&cli.global);
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        signals::install().map_err(|e| anyhow::anyhow!("cannot listen for SIGINT and SIGTERM: {e}"))?;
        commands::run(cli, registry).await
    });
    // Work a signal cut short (a blocking copy) is not waited for.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        // The command finished its work before it looked at the signal again.
        Ok(_)
            if let Some(signal) = theseus_core::interrupt::triggered()
                && !signals::ends_on_signal() =>
        {
            eprintln!("theseus: interrupted ({}); it came after the command had done its work", signal.name());
            ExitCode::from(signal.exit_code())
        }
        Ok(code) => code,
        Err(ref err) if let Some(interrupted) = err.downcast_ref::<signals::Interrupted>() => {
            eprintln!("theseus: {interrupted}");
            ExitCode::from(interrupted.signal.exit_code())
        }
        // A command that failed because of the signal (a backend's interrupted step).
        Err(err) if let Some(signal) = theseus_core::interrupt::triggered() => {
            eprintln!("theseus: interrupted ({}); {err}", signal.name());
            ExitCode::from(signal.exit_code())
        }
        Err(err) => {
            eprintln!("error: {err}");
            for cause in causes(&err) {
                eprintln!("  caused by: {cause}");
            }
            for hint in hints(&err) {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(2)
        }
    }
}

/// The causes of `err` worth a line: one whose text the line before already holds (a
/// backend's error that repeats its cause with its name in front) is left out.
fn causes(err: &anyhow::Error) -> Vec<String> {
    let mut shown = err.to_string();
    let mut out = Vec::new();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !shown.contains(&text) {
            out.push(text.clone());
        }
        shown = text;
    }
    out
}

/// What to change so that the command works, from the errors of the chain that carry hints.
fn hints(err: &anyhow::Error) -> Vec<String> {
    err.chain()
        .find_map(|e| e.downcast_ref::<theseus_core::solver::SolveError>())
        .map(|e| e.hints.clone())
        .unwrap_or_default()
}

/// Log lines of theseus's own crates only, at `warn` (`-v`: theirs at debug and libraries' warnings,
/// `-vv`: everything at debug; `RUST_LOG` overrides). No colour unless stderr is a terminal and
/// `NO_COLOR` is unset (<https://no-color.org>).
fn init_tracing(global: &args::GlobalArgs) {
    const OURS: &[&str] = &[
        "theseus",
        "theseus_cli",
        "theseus_core",
        "theseus_backend_volcano",
        "theseus_backend_ssh",
        "theseus_backend_slurm",
    ];
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
    let color = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(color)
        .without_time()
        .with_filter(filter);
    // Whatever `-q` or `RUST_LOG` say of stderr: `theseus ui` shows these in its pages.
    tracing_subscriber::registry().with(lines).with(log_notes::layer()).init();
}

/// A closed stdout (`theseus list | head -1`) ends the program quietly with exit code 0, as
/// ripgrep does: the reader has all it wanted. Rust ignores SIGPIPE (so that a closed socket or
/// child pipe is an error, not death), so `print!` to a closed stdout panics with `BrokenPipe`;
/// that one panic, on any thread, exits 0 here. Other broken pipes (an SSH channel, a child's
/// stdin) stay errors. Commands write stdout only through `print!`/`println!`.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

#[cfg(test)]
mod tests {
    #[derive(Debug)]
    struct E(String, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn a_cause_the_line_before_already_says_is_not_repeated() {
        let inner = E("the remote process has terminated".into(), None);
        let middle = E("connection to `h` broke".into(), Some(Box::new(inner)));
        let top = E("plain(h): connection to `h` broke".into(), Some(Box::new(middle)));
        assert_eq!(super::causes(&anyhow::Error::new(top)), ["the remote process has terminated"]);
        let plain = E("cannot read x".into(), Some(Box::new(E("permission denied".into(), None))));
        assert_eq!(super::causes(&anyhow::Error::new(plain)), ["permission denied"]);
    }
}
