//! Pure parts of the transport: the argv-based [`RemoteCommand`], the remote command line it
//! becomes, which failures are worth a retry, and the backoff between attempts.
//!
//! The remote login shell parses the command line `ssh` sends, so every word is quoted exactly
//! once here with [`theseus_core::shell::quote`] and handed to openssh as a *raw* argument
//! (openssh's `arg` would quote it a second time). Scripts are constants that take their values
//! as positional parameters (`sh -c SCRIPT sh VALUE...`); no value is ever pasted into shell text.

use std::time::Duration;

use theseus_core::shell;

/// One command to run on a host, as argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteCommand {
    argv: Vec<String>,
    retry_safe: bool,
    probe: bool,
    timeout: Option<Duration>,
    label: Option<String>,
}

impl RemoteCommand {
    /// `program` with no arguments yet.
    pub fn new(program: impl Into<String>) -> Self {
        RemoteCommand { argv: vec![program.into()], retry_safe: false, probe: false, timeout: None, label: None }
    }

    /// `sh -c SCRIPT sh ARGS...`: a constant script whose values arrive as `"$1"`, `"$2"`, ...
    pub fn script<I, S>(script: &str, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RemoteCommand::new("sh").arg("-c").arg(script).arg("sh").args(args)
    }

    /// Appends one argument (passed byte for byte to the remote program).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.argv.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// Marks the command as safe to run twice: when the connection breaks under it, the
    /// transport reconnects and runs it again. Off by default (a launch must not run twice).
    pub fn retry_safe(mut self) -> Self {
        self.retry_safe = true;
        self
    }

    /// Marks the command as part of an availability probe, which answers within its budget or
    /// says "unknown": a connection it has to open is tried once (a refused port or an unknown
    /// name fails at once, with no backoff), and it is not run again when the connection breaks.
    /// Submit, ship and every other command keep their retries.
    pub fn probe(mut self) -> Self {
        self.probe = true;
        self
    }

    /// Fails the command when it takes longer than `timeout` (the remote side is not killed
    /// beyond closing its channel).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Names the command in messages instead of its command line (e.g. "code upload").
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The words.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// Whether [`RemoteCommand::retry_safe`] was set.
    pub fn is_retry_safe(&self) -> bool {
        self.retry_safe
    }

    /// Whether [`RemoteCommand::probe`] was set.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// The timeout, if any.
    pub fn get_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The command line the remote shell parses back into [`RemoteCommand::argv`].
    pub fn command_line(&self) -> String {
        shell::join(&self.argv)
    }

    /// A short form for messages: the label, else the program and, for scripts, their first
    /// line.
    pub fn describe(&self) -> String {
        if let Some(label) = &self.label {
            return label.clone();
        }
        match self.argv.as_slice() {
            [sh, c, script, ..] if sh == "sh" && c == "-c" => {
                let first = script.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#'));
                format!("sh -c `{}`", first.unwrap_or(""))
            }
            _ => {
                let line = self.command_line();
                if line.chars().count() > 120 {
                    format!("{}...", line.chars().take(120).collect::<String>())
                } else {
                    line
                }
            }
        }
    }
}

/// Texts (lowercase) in an `ssh` error that mean "try again": the network or the server
/// dropped us, not a refusal of who we are.
const TRANSIENT: &[&str] = &[
    "connection refused",
    "connection reset",
    "connection closed",
    "connection timed out",
    "operation timed out",
    "timed out",
    "kex_exchange",
    "no route to host",
    "network is unreachable",
    "broken pipe",
    "connection aborted",
];

/// Texts that mean retrying cannot help, checked before [`TRANSIENT`].
const PERMANENT: &[&str] = &[
    "permission denied",
    "host key verification failed",
    "could not resolve",
    "no such file",
    "bad configuration",
    "too many authentication failures",
];

/// Whether a failed connection attempt with this message (and io error kind) is worth a retry.
pub fn is_transient(kind: std::io::ErrorKind, message: &str) -> bool {
    use std::io::ErrorKind as K;
    let text = message.to_ascii_lowercase();
    if PERMANENT.iter().any(|p| text.contains(p)) {
        return false;
    }
    matches!(kind, K::ConnectionRefused | K::ConnectionReset | K::ConnectionAborted | K::TimedOut | K::BrokenPipe)
        || TRANSIENT.iter().any(|t| text.contains(t))
}

/// Exponential backoff: `initial`, doubled per attempt, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay before the second attempt.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Attempts in all (at least 1).
    pub attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(500), max: Duration::from_secs(10), attempts: 5 }
    }
}

impl Backoff {
    /// Delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_quotes_each_word_once() {
        let cmd = RemoteCommand::new("printf").arg("%s\n").arg("it's $(x) `y`").arg("");
        assert_eq!(
            cmd.command_line(),
            r"printf '%s
' 'it'\''s $(x) `y`' ''"
        );
        assert_eq!(theseus_core::shell::split(&cmd.command_line()).unwrap(), cmd.argv());
    }

    #[test]
    fn scripts_take_values_as_parameters() {
        let cmd = RemoteCommand::script("mkdir -p \"$1\"", ["/tmp/a b"]);
        assert_eq!(cmd.argv(), ["sh", "-c", "mkdir -p \"$1\"", "sh", "/tmp/a b"]);
        assert_eq!(cmd.describe(), "sh -c `mkdir -p \"$1\"`");
        assert!(!cmd.is_retry_safe());
        assert!(cmd.clone().retry_safe().is_retry_safe());
        assert!(!cmd.is_probe() && cmd.clone().probe().is_probe());
        assert_eq!(cmd.label("mkdir of the run dir").describe(), "mkdir of the run dir");
    }

    #[test]
    fn transient_failures() {
        use std::io::ErrorKind as K;
        assert!(is_transient(K::ConnectionRefused, "connect to host 127.0.0.1 port 1: Connection refused"));
        assert!(is_transient(K::Other, "kex_exchange_identification: Connection closed by remote host"));
        assert!(is_transient(K::Other, "Connection reset by peer"));
        assert!(!is_transient(K::ConnectionAborted, "root@127.0.0.1: Permission denied (publickey)."));
        assert!(!is_transient(K::Other, "Host key verification failed."));
        assert!(!is_transient(K::Other, "Could not resolve hostname nope: Name or service not known"));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let b = Backoff { initial: Duration::from_millis(100), max: Duration::from_millis(500), attempts: 9 };
        let delays: Vec<_> = (1..=5).map(|a| b.delay(a).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 500, 500]);
        assert_eq!(b.delay(60), Duration::from_millis(500));
    }
}
