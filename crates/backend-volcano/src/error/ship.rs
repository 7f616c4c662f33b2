//! Why shipping code into a pod failed ([`ShipError`]), and which step of the shipping script
//! failed ([`RemoteStep`]); [`crate::ship`] raises them, [`super::VolcanoError`] carries them.

use std::io;

/// A step of [`SHIP_SCRIPT`](crate::ship::SHIP_SCRIPT) that failed in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteStep {
    /// The command did not start (no `sh` in the image, container gone).
    Start,
    /// Creating or entering dest.
    Prepare,
    /// Storing the received archive (disk full, read-only volume).
    Store,
    /// `tar -x`.
    Extract,
    /// Checking the extracted extra files.
    Verify,
    /// `sync`.
    Sync,
    /// An exit code the script does not use.
    Unknown,
}

impl std::fmt::Display for RemoteStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RemoteStep::Start => "start the shipping command",
            RemoteStep::Prepare => "create the destination",
            RemoteStep::Store => "store the archive",
            RemoteStep::Extract => "extract the archive",
            RemoteStep::Verify => "check the extracted files",
            RemoteStep::Sync => "sync the filesystem",
            RemoteStep::Unknown => "run the shipping command",
        })
    }
}

/// Why shipping failed. [`ShipError::is_retryable`] says whether trying again may help.
#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    /// Listing or reading the local files failed.
    #[error("failed to read the code snapshot")]
    Snapshot(#[source] theseus_core::Error),
    /// An extra file has an unusable path.
    #[error("cannot ship extra file `{path}`: the path must be relative, without `..`")]
    InvalidExtraFile {
        /// The path.
        path: String,
    },
    /// The exec request was refused (RBAC, pod not found or not running, apiserver down).
    #[error("failed to exec into pod `{pod}`")]
    Exec {
        /// The pod.
        pod: String,
        /// The apiserver's answer.
        #[source]
        source: kube::Error,
    },
    /// The connection ended before the pod confirmed the archive; nothing was extracted.
    #[error("transfer to pod `{pod}` was interrupted after {sent} of {total} bytes")]
    Interrupted {
        /// The pod.
        pod: String,
        /// Bytes handed to the connection.
        sent: u64,
        /// Bytes of the archive.
        total: u64,
        /// The websocket error, when there was one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The files changed between the counting pass and the transfer; nothing was extracted.
    #[error("files changed while shipping; retry")]
    Changed {
        /// The error that cut the second pass short, if any.
        #[source]
        source: Option<theseus_core::Error>,
    },
    /// What the pod received or wrote does not hash to what was sent.
    #[error("{what} in pod `{pod}` has sha256 {actual}, expected {expected}")]
    HashMismatch {
        /// The pod.
        pod: String,
        /// `the archive` or `file <path>`.
        what: String,
        /// Local hash (for files: size and hash).
        expected: String,
        /// The pod's.
        actual: String,
    },
    /// A step of the script failed; `stderr` is its (and `tar`'s) error output.
    #[error("failed to {step} in pod `{pod}` (exit code {}): {stderr}", exit_code.map_or("none".into(), |c| c.to_string()))]
    Remote {
        /// The pod.
        pod: String,
        /// Which step.
        step: RemoteStep,
        /// The script's exit code.
        exit_code: Option<i32>,
        /// Its stderr (or the status message), trimmed.
        stderr: String,
    },
    /// The script's output or status made no sense.
    #[error("unexpected answer from the shipping command in pod `{pod}`: {detail}")]
    Protocol {
        /// The pod.
        pod: String,
        /// What was wrong.
        detail: String,
    },
    /// Local plumbing (a task panicked, a pipe failed).
    #[error("local IO failed while shipping")]
    Io(#[source] io::Error),
}

impl ShipError {
    /// Whether the same ship may succeed if tried again.
    pub fn is_retryable(&self) -> bool {
        match self {
            ShipError::Interrupted { .. } | ShipError::Changed { .. } | ShipError::HashMismatch { .. } => true,
            ShipError::Exec { source, .. } => match source {
                kube::Error::Api(status) => status.code >= 500 || status.code == 429 || status.code == 408,
                _ => true,
            },
            _ => false,
        }
    }
}
