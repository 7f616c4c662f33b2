//! Parsers for the text the SSH backends read from remote commands, and their error. Each
//! submodule names the exact command it expects as a constant; the parsers never run anything.

use thiserror::Error;

pub mod nvidia_smi;

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
    /// A [`ParseError::Line`] of `command`'s output.
    pub fn line(command: &'static str, line_no: usize, line: &str, problem: impl Into<String>) -> Self {
        ParseError::Line { command, line_no, line: line.to_owned(), problem: problem.into() }
    }
}
