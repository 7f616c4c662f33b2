//! Parsers for the text and JSON the Slurm and plain backends read from remote commands. Each
//! submodule names the exact command it expects as a constant; the parsers never run anything.

use thiserror::Error;

pub mod nvidia_smi;
pub mod sacct;
pub mod sinfo;
pub mod squeue;

/// Output of a remote command that could not be read.
#[derive(Debug, Error)]
pub enum ParseError {
    /// A line that does not have the expected shape.
    #[error("failed to parse `{command}` output line {line_no}: {problem}: `{line}`")]
    Line {
        /// Command whose output it was (`sinfo`, `squeue`, ...).
        command: &'static str,
        /// 1-based line number.
        line_no: usize,
        /// The line.
        line: String,
        /// What is wrong with it.
        problem: String,
    },
    /// JSON output that does not match the expected shape.
    #[error("failed to parse `{command}` JSON output")]
    Json {
        /// Command whose output it was.
        command: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

impl ParseError {
    pub(crate) fn line(command: &'static str, line_no: usize, line: &str, problem: impl Into<String>) -> Self {
        ParseError::Line { command, line_no, line: line.to_owned(), problem: problem.into() }
    }
}

/// The code of a `sacct`/`squeue` exit code field `CODE:SIGNAL` (`2:0` is 2, `0:9` is 128 + 9 as
/// a shell reports a signal death). `None` when unparseable.
pub(crate) fn parse_exit_code(s: &str) -> Option<i32> {
    let s = s.trim();
    let (code, signal) = s.split_once(':').unwrap_or((s, "0"));
    let code: i32 = code.parse().ok()?;
    let signal: i32 = signal.parse().ok()?;
    Some(if code == 0 && signal > 0 { 128 + signal } else { code })
}
