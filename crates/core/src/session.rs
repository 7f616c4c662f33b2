//! What crosses the [`crate::backend::Backend`] trait for `theseus shell`: the request (rank,
//! command, terminal) and how the backend answers it, either a program of this machine to run
//! on the user's terminal (`ssh -t`, `ssh … srun --pty`, a local `sh`) or a process attached
//! through the backend's own API (a Kubernetes exec), whose streams the CLI pumps.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// A terminal's size in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// What `theseus shell` asks of a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellRequest {
    /// The rank whose node, pod or process environment the shell enters.
    pub rank: u32,
    /// The command to run; empty for an interactive shell.
    pub command: Vec<String>,
    /// A terminal of this size for the remote process (`None`: plain pipes, e.g. for a command
    /// whose output a script reads).
    pub tty: Option<TtySize>,
}

/// How a backend runs a [`ShellRequest`].
pub enum ShellSession {
    /// Run this program here with the user's stdin, stdout and stderr; its exit code is the
    /// remote command's.
    Program(ShellProgram),
    /// A remote process attached through the backend.
    Attached(AttachedShell),
}

/// A program of this machine (see [`ShellSession::Program`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellProgram {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to its environment.
    pub env: Vec<(String, String)>,
    /// Its working dir.
    pub cwd: Option<PathBuf>,
}

/// A remote process attached through the backend (see [`ShellSession::Attached`]).
pub struct AttachedShell {
    /// Its stdin; dropping it closes the remote stdin.
    pub stdin: Pin<Box<dyn AsyncWrite + Send>>,
    /// Its stdout (with a TTY, stdout and stderr together).
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    /// Its stderr, without a TTY.
    pub stderr: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// Where new terminal sizes go, with a TTY.
    pub resize: Option<tokio::sync::mpsc::Sender<TtySize>>,
    /// Resolves to the exit code once the process ended.
    pub exit: Pin<Box<dyn Future<Output = crate::Result<i32>> + Send>>,
}

impl std::fmt::Debug for ShellSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShellSession::Program(p) => f.debug_tuple("Program").field(p).finish(),
            ShellSession::Attached(a) => {
                f.debug_struct("Attached").field("tty", &a.resize.is_some()).finish_non_exhaustive()
            }
        }
    }
}
