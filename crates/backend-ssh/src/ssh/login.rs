//! The login environment of a host's user, read once per [`SshHost`] ([`frame::capture_script`]),
//! and the unframing of a command's output at its marker ([`frame::after_marker`]).

use std::sync::Arc;
use std::time::Duration;

use openssh::Session;

use super::{Output, RemoteCommand, SshError, SshHost, frame, run_line};

/// How long reading the login environment may take when the command has no timeout of its own
/// (a login shell that loads modules takes seconds).
const LOGIN_ENV_TIMEOUT: Duration = Duration::from_secs(60);

impl SshHost {
    /// The `export` lines of the user's login environment (empty with `login_env: false`), read
    /// over `session` on first use and kept for the host's lifetime. A login shell that cannot
    /// be read is reported once and commands run without it; a broken connection is an error.
    pub(super) async fn login_env(&self, cmd: &RemoteCommand, session: &Arc<Session>) -> Result<String, SshError> {
        if !self.options.login_env {
            return Ok(String::new());
        }
        self.login_env
            .get_or_try_init(|| async {
                let markers = [frame::new_marker(), frame::new_marker(), frame::new_marker()];
                let markers = [markers[0].as_str(), markers[1].as_str(), markers[2].as_str()];
                let capture = RemoteCommand::script(&frame::capture_script(markers), [""; 0])
                    .label("the read of the login environment (`$SHELL -l`)");
                let outer = frame::new_marker();
                let line = frame::line(&capture.command_line(), frame::Env::None, Some(&outer));
                let after = cmd.get_timeout().unwrap_or(LOGIN_ENV_TIMEOUT);
                let started = std::time::Instant::now();
                let out = tokio::time::timeout(after, run_line(session, &line, b""))
                    .await
                    .map_err(|_| self.timeout(&capture, after))?;
                let out = match out {
                    Ok(out) => out,
                    Err(e) if session.check().await.is_err() => {
                        return Err(SshError::Disconnected {
                            host: self.to_string(),
                            command: capture.describe(),
                            source: Some(e),
                        });
                    }
                    Err(e) => return Err(self.run_error(&capture, e)),
                };
                let out = self.unframe(&capture, out, &outer)?;
                match frame::login_prelude(&out.stdout, markers) {
                    Ok(prelude) => {
                        tracing::debug!(host = %self, took = ?started.elapsed(), vars = prelude.lines().count(), "read the login environment");
                        Ok(prelude)
                    }
                    Err(why) => {
                        tracing::warn!(
                            "the login environment of `{self}` could not be read ({why}); commands run without it \
                             (set `login_env: false` on the host to stop trying)"
                        );
                        Ok(String::new())
                    }
                }
            })
            .await
            .cloned()
    }

    /// The output of `cmd` after its marker; a marker that never came is explained in one line.
    pub(super) fn unframe(&self, cmd: &RemoteCommand, out: Output, marker: &str) -> Result<Output, SshError> {
        let Some(stdout) = frame::after_marker(&out.stdout, marker) else {
            // Killed before it printed anything: nothing to explain.
            if out.code.is_none() && out.stdout.is_empty() {
                return Ok(out);
            }
            return Err(no_marker(self.to_string(), cmd.describe(), out.code, &out.stderr));
        };
        let stderr = frame::after_marker(&out.stderr, marker).unwrap_or(&out.stderr);
        Ok(Output { code: out.code, stdout: stdout.to_vec(), stderr: stderr.to_vec() })
    }
}

/// The error of a command whose marker never came: [`SshError::Shell`] when the host cannot run
/// commands at all (no `/bin/sh`, no `base64`, rc files that swallow the command), and
/// [`SshError::Failed`] with the same one-line reason when something exited non-zero before the
/// command began (a forced command that refuses it, an rc file that exits 1), so callers that
/// act on a failure's exit code still can.
pub(super) fn no_marker(host: String, command: String, code: Option<i32>, stderr: &[u8]) -> SshError {
    let reason = frame::no_marker(&host, code, &String::from_utf8_lossy(stderr));
    match code {
        Some(c) if c != 0 && c != 127 => SshError::Failed { host, command, code, stderr: reason },
        _ => SshError::Shell { host, command, reason },
    }
}
