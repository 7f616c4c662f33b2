//! `theseus shell NAME|RUN_ID [--rank N] [-- CMD…]`: a command, or an interactive shell, in a
//! running job's run dir with its variables, on rank N's host, node or pod
//! (`Backend::shell`). With a terminal on stdin and stdout the remote side gets one of the same
//! size (`-T` turns it off); the exit code is the remote command's.
//!
//! A backend answers with a program to run here on the user's terminal (`ssh -tt`, which does
//! its own raw mode and resizing) or with an attached process (a Kubernetes exec), for which
//! this module puts the terminal in raw mode, pumps the streams and sends size changes.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use theseus_core::session::{AttachedShell, ShellProgram, ShellRequest, ShellSession, TtySize};
use tokio::io::AsyncWriteExt as _;

use crate::args::ShellArgs;
use crate::context::Context;
use crate::signals;

pub(crate) async fn run(ctx: &Context, args: ShellArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger()?;
    let (record, backend) = crate::runs::find(ctx, &ledger, &args.job)?;
    let tty = !args.no_tty && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let request = ShellRequest {
        rank: args.rank,
        command: args.command,
        tty: tty.then(terminal_size).map(|s| s.unwrap_or(DEFAULT_SIZE)),
    };
    let session = backend.shell(&record.handle, &request).await?;
    let code = match session {
        ShellSession::Program(program) => run_program(program).await?,
        ShellSession::Attached(attached) => run_attached(attached, tty).await?,
    };
    // A read of stdin may still block a runtime thread: leave now, output flushed.
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// The size a terminal is assumed to have when it does not say.
const DEFAULT_SIZE: TtySize = TtySize { cols: 80, rows: 24 };

/// The size of the terminal on stdout, if it is one that knows its size.
fn terminal_size() -> Option<TtySize> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (size.ws_col > 0 && size.ws_row > 0).then_some(TtySize { cols: size.ws_col, rows: size.ws_row })
}

/// Runs the backend's program on this terminal. Ctrl-C is the program's; SIGTERM is passed on
/// to it (by PID: it is our child).
async fn run_program(program: ShellProgram) -> Result<i32> {
    let mut cmd = tokio::process::Command::new(&program.program);
    cmd.args(&program.args).envs(program.env.iter().map(|(k, v)| (k, v)));
    if let Some(dir) = &program.cwd {
        cmd.current_dir(dir);
    }
    signals::leave_sigint_to_child(true);
    let mut child = cmd.spawn().with_context(|| format!("cannot start `{}`", program.program))?;
    let status = tokio::select! {
        status = child.wait() => status?,
        signal = theseus_core::interrupt::wait() => {
            if let Some(pid) = child.id().and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait()).await;
            return Ok(signal.exit_code().into());
        }
    };
    signals::leave_sigint_to_child(false);
    use std::os::unix::process::ExitStatusExt as _;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Restores the terminal's settings when dropped.
struct RawMode(Option<rustix::termios::Termios>);

impl RawMode {
    fn enter(on: bool) -> RawMode {
        if !on {
            return RawMode(None);
        }
        let Ok(saved) = rustix::termios::tcgetattr(std::io::stdin()) else { return RawMode(None) };
        let mut raw = saved.clone();
        raw.make_raw();
        match rustix::termios::tcsetattr(std::io::stdin(), rustix::termios::OptionalActions::Now, &raw) {
            Ok(()) => RawMode(Some(saved)),
            Err(_) => RawMode(None),
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = rustix::termios::tcsetattr(std::io::stdin(), rustix::termios::OptionalActions::Now, saved);
        }
    }
}

/// Pumps an attached process's streams until it exits; with a TTY, raw mode and resizes.
async fn run_attached(attached: AttachedShell, tty: bool) -> Result<i32> {
    let AttachedShell { mut stdin, mut stdout, stderr, resize, exit } = attached;
    let _raw = RawMode::enter(tty);
    if tty {
        // Ctrl-C is a byte for the remote terminal now; a signal from elsewhere is still ours.
        signals::leave_sigint_to_child(true);
    }
    let input = async move {
        let mut local = tokio::io::stdin();
        let _ = tokio::io::copy(&mut local, &mut stdin).await;
        let _ = stdin.shutdown().await;
        // Keep the exec's stdin open until the end (closing it ends a v4 session).
        std::future::pending::<()>().await;
    };
    let output = async move {
        let out = async {
            let mut local = tokio::io::stdout();
            let _ = tokio::io::copy(&mut stdout, &mut local).await;
            let _ = local.flush().await;
        };
        let err = async {
            if let Some(mut stderr) = stderr {
                let mut local = tokio::io::stderr();
                let _ = tokio::io::copy(&mut stderr, &mut local).await;
            }
        };
        tokio::join!(out, err);
    };
    let resizes = async move {
        let Some(resize) = resize else { return std::future::pending::<()>().await };
        let Ok(mut winch) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()) else {
            return std::future::pending::<()>().await;
        };
        while winch.recv().await.is_some() {
            if let Some(size) = terminal_size()
                && resize.send(size).await.is_err()
            {
                break;
            }
        }
        std::future::pending::<()>().await
    };
    let mut exit = exit;
    let mut output = std::pin::pin!(output);
    let code = tokio::select! {
        code = &mut exit => {
            // The rest of the output is in flight: give it a moment.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), &mut output).await;
            code?
        }
        () = input => unreachable!("the input pump never ends"),
        () = resizes => unreachable!("the resize pump never ends"),
        signal = theseus_core::interrupt::wait() => signal.exit_code().into(),
    };
    Ok(code)
}
