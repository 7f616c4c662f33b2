//! The backend-agnostic error type shared by every part of the core and by every backend.

use std::path::PathBuf;

/// The source of a backend error after which the host holds nothing of the run (its config,
/// connection, credentials or a check before anything was made failed): the dispatcher's caller
/// forgets such a submit instead of recording a failed run. Any backend may mark its error so
/// (as the `source` of an [`Error::Backend`]); [`Error::nothing_created`] asks.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("nothing was created on the host")]
pub struct NothingCreated;

impl Error {
    /// Whether the error is marked [`NothingCreated`]: the host holds nothing of the run.
    pub fn nothing_created(&self) -> bool {
        std::error::Error::source(self).is_some_and(|s| s.is::<NothingCreated>())
    }
}

/// Result with the core [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of the core and of backends, independent of the kind of cluster.
///
/// Backends keep their own detailed errors and convert them into [`Error::Backend`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The dispatch config (or an experiment file) is invalid. The message names the source and key.
    #[error("{0}")]
    InvalidConfig(String),
    /// A request that no host can satisfy, or a bad request.
    #[error("{0}")]
    Unsatisfiable(String),
    /// A job, run or host was not found.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for, e.g. "job `hello`".
        what: String,
    },
    /// Something with that name already exists.
    #[error("{what} already exists")]
    AlreadyExists {
        /// What exists already.
        what: String,
    },
    /// The backend does not implement this operation.
    #[error("{operation} is not supported by {backend}")]
    NotSupported {
        /// The operation, e.g. "logs".
        operation: &'static str,
        /// The backend's display name.
        backend: String,
    },
    /// Reading or writing a local file failed.
    #[error("failed to {action} `{}`", path.display())]
    Io {
        /// What was being done, e.g. "read".
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Running a local command failed.
    #[error("failed to run `{command}`: {message}")]
    Command {
        /// The command line.
        command: String,
        /// What went wrong (stderr or the IO error).
        message: String,
    },
    /// The job ledger failed.
    #[error("job ledger: {message}")]
    Ledger {
        /// What failed.
        message: String,
        /// The cause.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A submit whose outcome the backend could not learn: its last step may or may not have
    /// started the job (the answer was lost with the connection, and asking again failed). The
    /// run is recorded as `unknown`, not failed: `status` or `cancel` settle it once the host
    /// answers, from what the backend left on it.
    #[error("{backend}: {message}")]
    OutcomeUnknown {
        /// The backend's display name.
        backend: String,
        /// What happened, and how to settle it.
        message: String,
        /// The cause.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A backend-specific failure.
    #[error("{backend}: {message}")]
    Backend {
        /// The backend's display name.
        backend: String,
        /// What failed.
        message: String,
        /// The cause.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl Error {
    /// Builds an [`Error::Io`].
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { action, path: path.into(), source }
    }

    /// Builds an [`Error::Backend`] without a source.
    pub fn backend(backend: impl std::fmt::Display, message: impl Into<String>) -> Self {
        Error::Backend { backend: backend.to_string(), message: message.into(), source: None }
    }
}
