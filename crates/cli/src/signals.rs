//! SIGINT and SIGTERM, the same in every phase of every command.
//!
//! [`install`] listens for both once, at start, and triggers [`theseus_core::interrupt`]; no
//! other code installs a handler. A command that created something takes it back (bounded by
//! [`CLEANUP_BOUND`]) and returns [`Interrupted`], which `main` prints as one line,
//! `theseus: interrupted (SIGTERM); <what was cleaned up>`, before exiting 130 (SIGINT) or 143
//! (SIGTERM), the status a shell reports for a program those signals stopped. A second signal
//! exits at once.

use std::time::Duration;

use theseus_core::interrupt::{self, InterruptSignal};

/// How long a command may clean up after the first signal before the program exits anyway.
pub(crate) const CLEANUP_BOUND: Duration = Duration::from_secs(30);

/// A command stopped by a signal: what it cleaned up, or left as it was.
#[derive(Debug)]
pub(crate) struct Interrupted {
    pub(crate) signal: InterruptSignal,
    pub(crate) what: String,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted ({}); {}", self.signal.name(), self.what)
    }
}

impl std::error::Error for Interrupted {}

/// While set, SIGINT is left to the program `theseus shell` runs on the terminal (Ctrl-C
/// belongs to the remote shell, and reaches this process too, being in the same foreground
/// process group).
static SIGINT_TO_CHILD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Leaves SIGINT to a child on the terminal (see [`SIGINT_TO_CHILD`]).
pub(crate) fn leave_sigint_to_child(on: bool) {
    SIGINT_TO_CHILD.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// Set by a command whose normal end is a signal (`ui`, which serves until one).
static ENDS_ON_SIGNAL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says that the running command's normal end is a signal: it exits with its own code then.
pub(crate) fn end_on_signal() {
    ENDS_ON_SIGNAL.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether the running command ends on a signal as its normal end (see [`end_on_signal`]).
pub(crate) fn ends_on_signal() -> bool {
    ENDS_ON_SIGNAL.load(std::sync::atomic::Ordering::SeqCst)
}

/// Listens for SIGINT and SIGTERM for the rest of the program. Call once, inside the runtime.
pub(crate) fn install() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        loop {
            let received = tokio::select! {
                _ = int.recv() => InterruptSignal::Int,
                _ = term.recv() => InterruptSignal::Term,
            };
            if received == InterruptSignal::Int && SIGINT_TO_CHILD.load(std::sync::atomic::Ordering::SeqCst) {
                continue;
            }
            if let Some(first) = interrupt::triggered() {
                eprintln!("theseus: {} again; exiting without waiting for the cleanup", received.name());
                std::process::exit(first.exit_code().into());
            }
            interrupt::trigger(received);
            tokio::spawn(async move {
                tokio::time::sleep(CLEANUP_BOUND).await;
                eprintln!(
                    "theseus: interrupted ({}); the cleanup did not finish within {}s, exiting",
                    received.name(),
                    CLEANUP_BOUND.as_secs()
                );
                std::process::exit(received.exit_code().into());
            });
        }
    });
    Ok(())
}

/// Runs `work` unless the program is interrupted first; then `Interrupted` with "nothing to
/// clean up" (for steps that create nothing).
pub(crate) async fn or_interrupted<T>(work: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::select! {
        biased;
        signal = interrupt::wait() => Err(Interrupted { signal, what: "nothing to clean up".into() }.into()),
        result = work => result,
    }
}
