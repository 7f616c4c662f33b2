//! [`SshError`]: what can go wrong between us and a host, naming the host and the command.

use std::time::Duration;

/// Failures of the transport. Each names the host and, for commands, the command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SshError {
    /// No connection could be made.
    #[error("failed to connect to `{host}` ({attempts} attempt(s))")]
    Connect {
        /// Destination.
        host: String,
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error.
        #[source]
        source: openssh::Error,
    },
    /// The connection broke while the command ran (or it could not be started on it).
    #[error("connection to `{host}` broke while running {command}")]
    Disconnected {
        /// Destination.
        host: String,
        /// The command.
        command: String,
        /// What openssh reported.
        #[source]
        source: Option<openssh::Error>,
    },
    /// The command ran and exited non-zero (or was killed).
    #[error("{command} failed on `{host}` with {}: {stderr}", code.map_or("a signal".to_owned(), |c| format!("exit code {c}")))]
    Failed {
        /// Destination.
        host: String,
        /// The command.
        command: String,
        /// Exit code, `None` for a signal.
        code: Option<i32>,
        /// Its stderr (the end of it, trimmed).
        stderr: String,
    },
    /// The command did not finish in time.
    #[error("{command} on `{host}` did not finish within {after:?}")]
    Timeout {
        /// Destination.
        host: String,
        /// The command.
        command: String,
        /// The timeout.
        after: Duration,
    },
    /// The user's login shell did not run the command (no `/bin/sh` or `base64` on the host, or
    /// rc files that swallow it); the reason names the cause and the fix.
    #[error("{reason}")]
    Shell {
        /// Destination.
        host: String,
        /// The command.
        command: String,
        /// Cause and fix, one line.
        reason: String,
    },
    /// Running the command failed for another reason (openssh, or local IO of its pipes).
    #[error("failed to run {command} on `{host}`")]
    Run {
        /// Destination.
        host: String,
        /// The command.
        command: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl SshError {
    /// Whether the error came from the connection rather than from the remote command.
    pub fn is_connection(&self) -> bool {
        matches!(self, SshError::Connect { .. } | SshError::Disconnected { .. })
    }
}

impl From<SshError> for theseus_core::Error {
    fn from(e: SshError) -> Self {
        let backend = match &e {
            SshError::Connect { host, .. }
            | SshError::Disconnected { host, .. }
            | SshError::Failed { host, .. }
            | SshError::Timeout { host, .. }
            | SshError::Shell { host, .. }
            | SshError::Run { host, .. } => format!("ssh({host})"),
        };
        theseus_core::Error::Backend { backend, message: "remote operation failed".into(), source: Some(Box::new(e)) }
    }
}

/// When `err` is a connection refused for the server's host key: what happened and how to fix
/// it, in one sentence (the host cannot be used until the user acts; it is not "unknown").
pub fn host_key_problem(err: &SshError) -> Option<String> {
    let SshError::Connect { host, source, .. } = err else { return None };
    let text = super::error_chain(source);
    let changed = text.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || (text.contains("Host key for") && text.contains("has changed"));
    if changed {
        return Some(format!(
            "host key verification failed for `{host}`: its key differs from the one in known_hosts; \
             if the change is expected, remove the old key with `ssh-keygen -R` and connect once with `ssh {host}`"
        ));
    }
    let unknown = text.contains("Host key verification failed") || text.contains("host key is known");
    unknown.then(|| {
        format!(
            "host key verification failed for `{host}`: no known_hosts file trusts its key; connect once with \
             `ssh {host}` to record it, or set `known_hosts: accept-new` on the host"
        )
    })
}
