//! [`ExecShell`]: the store protocol's [`Shell`] over a pod's exec websocket (the code-shipping
//! helper, which mounts the PVC), with busybox tools only.
//!
//! `v4.channel.k8s.io` cannot close stdin, so no script may wait for stdin EOF. A call whose
//! stdin length is known in advance ([`ScriptCall::stdin_len`]: the store's object and run-dir
//! archives) streams it once, straight into `sh -c SCRIPT theseus-store ARGS...`: the script
//! reads exactly that many bytes and checks them itself, and the pump still holds back the last
//! chunk until the producer ended cleanly at that length. Every other call with a stdin (a
//! query, a sync's file list) is run in two passes, as the full ship does ([`crate::ship`]): a counting pass gives
//! the stdin's exact length and sha256, then `sh -c` [`EXEC_WRAPPER`] `theseus-exec LEN SHA256
//! TMP -- SCRIPT ARGS...` stores exactly `LEN` bytes (`head -c`) in a private dir `TMP` of the
//! store's `incoming` area, checks length and sha256, opens the file as stdin, removes the dir
//! (the open file lives on until the script ends), and `exec`s `sh -c SCRIPT theseus-store
//! ARGS...`. A wrapper killed while it receives leaves `TMP` behind, which `reclaim` removes
//! like any stale upload dir. The last chunk of stdin is held back until the second
//! pass matched the first, so a stdin that changed in between never runs a script. A call
//! without stdin runs the script directly with no stdin stream.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use theseus_core::store::{ScriptCall, Shell, ShellError};

use crate::exec::{self, Counted, ExecFailure, FRAME_BYTES, HashingSink, PumpError};

/// The wrapper run as `sh -c EXEC_WRAPPER theseus-exec LEN SHA256 TMP -- SCRIPT ARGS...`
/// (busybox `sh`, `head`, `wc`, `sha256sum`, `mkdir`, `rm`). Its own failures exit
/// [`EXIT_SHORT`], [`EXIT_MISMATCH`] or [`EXIT_WRAPPER`] with a `theseus-exec:` message, or 40
/// (the store's "no tool") naming a missing tool; otherwise the script's exit status is its own.
pub const EXEC_WRAPPER: &str = r#"set -u
export LC_ALL=C
fail() { code=$1; shift; printf 'theseus-exec: %s\n' "$*" >&2; exit "$code"; }
[ "$#" -ge 5 ] && [ "$4" = -- ] || fail 52 "usage: theseus-exec LEN SHA256 TMP -- SCRIPT ARGS..."
len=$1 want=$2 tmp=$3 script=$5
shift 5
for tool in head wc sha256sum mkdir rm; do
  command -v "$tool" >/dev/null 2>&1 || fail 40 "$tool"
done
trap 'rm -rf -- "$tmp"' EXIT
trap 'exit 129' HUP
trap 'exit 141' PIPE
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p -- "$tmp" || fail 52 "cannot create $tmp"
head -c "$len" > "$tmp/stdin" || fail 52 "cannot store the input in $tmp"
got=$(wc -c < "$tmp/stdin") || fail 52 "cannot read $tmp/stdin"
got=$((got + 0))
[ "$got" -eq "$len" ] || fail 50 "received $got of $len bytes of input"
sum=$(sha256sum < "$tmp/stdin") || fail 52 "cannot hash $tmp/stdin"
sum=${sum%% *}
[ "$sum" = "$want" ] || fail 51 "the input's sha256 is $sum, expected $want"
exec < "$tmp/stdin"
rm -rf -- "$tmp"
trap - EXIT HUP PIPE INT TERM
exec sh -c "$script" theseus-store "$@"
"#;

/// [`EXEC_WRAPPER`]: fewer bytes of stdin arrived than announced.
pub const EXIT_SHORT: i32 = 50;
/// [`EXEC_WRAPPER`]: the stdin that arrived does not hash to the announced sha256.
pub const EXIT_MISMATCH: i32 = 51;
/// [`EXEC_WRAPPER`]: it could not store its stdin (disk full, read-only volume) or was misused.
pub const EXIT_WRAPPER: i32 = 52;

/// Stdout kept (the store's answers: 68 bytes per missing object); more is an error.
const STDOUT_CAP: usize = 32 << 20;
/// Stderr kept for messages.
const STDERR_CAP: usize = 16 << 10;

/// Called whenever a call makes progress (it starts, a chunk of stdin is accepted, it ends):
/// the submit's watchdog on a stalled exec.
pub type ActivityFn = Arc<dyn Fn() + Send + Sync>;

/// Runs store scripts in a pod through exec.
#[derive(Clone)]
pub struct ExecShell {
    pods: Api<Pod>,
    pod: String,
    container: Option<String>,
    incoming: String,
    activity: Option<ActivityFn>,
    open_timeout: std::time::Duration,
}

impl std::fmt::Debug for ExecShell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecShell").field("pod", &self.pod).field("container", &self.container).finish_non_exhaustive()
    }
}

impl ExecShell {
    /// A shell in `pod` (container `container`) whose stdin files go to
    /// `<work_root>/.theseus/incoming` (`work_root` as the pod sees it).
    pub fn new(pods: Api<Pod>, pod: &str, container: Option<&str>, work_root: &str) -> Self {
        ExecShell {
            pods,
            pod: pod.to_owned(),
            container: container.map(str::to_owned),
            incoming: format!("{}/.theseus/incoming", work_root.trim_end_matches('/')),
            activity: None,
            open_timeout: exec::OPEN_TIMEOUT,
        }
    }

    /// How long the API server has to answer each exec request (default the crate's
    /// `exec::OPEN_TIMEOUT`; the backend passes its cluster's `watch_silence`).
    #[must_use]
    pub fn with_open_timeout(mut self, open_timeout: std::time::Duration) -> Self {
        self.open_timeout = open_timeout;
        self
    }

    /// Reports progress of every call to `activity`.
    #[must_use]
    pub fn with_activity(mut self, activity: ActivityFn) -> Self {
        self.activity = Some(activity);
        self
    }

    fn tick(&self) {
        if let Some(activity) = &self.activity {
            activity();
        }
    }

    fn transport(&self, label: &str, message: impl std::fmt::Display) -> ShellError {
        ShellError::Transport(format!("{label} in pod `{}`: {message}", self.pod).into())
    }
}

#[async_trait]
impl Shell for ExecShell {
    async fn run(&self, call: ScriptCall) -> Result<Vec<u8>, ShellError> {
        self.tick();
        let label = call.label;
        let result = match call.stdin.clone() {
            None => {
                let command = ["sh", "-c", call.script, "theseus-store"].into_iter().map(str::to_owned);
                let command = command.chain(call.args.iter().cloned()).collect();
                self.exec(label, command, None::<(tokio::io::Empty, _)>, None)
                    .await
                    .map_err(|f| f.into_shell(self, label))
            }
            Some(produce) => match call.stdin_len {
                Some(len) => self.run_streamed(&call, produce, len).await,
                None => self.run_with_stdin(&call, produce).await,
            },
        };
        self.tick();
        result
    }

    fn describe(&self) -> String {
        format!("pod `{}`", self.pod)
    }
}

impl ExecShell {
    /// A stdin of known length, which the script reads with `head -c` and checks itself:
    /// streamed once, straight into the script (no counting pass, no wrapper, no temp copy).
    /// A producer that fails (a file changed since it was hashed) ends the stream short, and
    /// the last chunk is never sent ([`exec::pump`]).
    async fn run_streamed(
        &self,
        call: &ScriptCall,
        produce: theseus_core::store::StdinFn,
        len: u64,
    ) -> Result<Vec<u8>, ShellError> {
        let label = call.label;
        let mut command: Vec<String> =
            ["sh", "-c", call.script, "theseus-store"].into_iter().map(str::to_owned).collect();
        command.extend(call.args.iter().cloned());
        let (reader, writer) = tokio::io::duplex(FRAME_BYTES);
        let mut bridge = tokio_util::io::SyncIoBridge::new(writer);
        let producer = tokio::task::spawn_blocking(move || exec::write_framed(&mut bridge, |w| produce(w)));
        let counted = Counted::length(len);
        let result = self.exec(label, command, Some((reader, &counted)), call.progress.clone()).await;
        let produced = producer.await.map_err(|e| self.transport(label, format!("the input task failed: {e}")))?;
        match (result, produced) {
            (Err(Failure::Changed), Err(e)) => Err(ShellError::Transport(Box::new(e))),
            (result, _) => result.map_err(|f| f.into_shell(self, label)),
        }
    }

    /// The two passes over stdin, then the wrapper (see the module docs).
    async fn run_with_stdin(
        &self,
        call: &ScriptCall,
        produce: theseus_core::store::StdinFn,
    ) -> Result<Vec<u8>, ShellError> {
        let label = call.label;
        let counted = {
            let produce = produce.clone();
            tokio::task::spawn_blocking(move || {
                let mut sink = HashingSink::default();
                produce(&mut sink).map(|()| sink.finish())
            })
            .await
            .map_err(|e| self.transport(label, format!("the input task failed: {e}")))?
            .map_err(|e| ShellError::Transport(Box::new(e)))?
        };
        let tmp = format!("{}/exec-{:016x}", self.incoming, rand::random::<u64>());
        let mut command: Vec<String> =
            ["sh", "-c", EXEC_WRAPPER, "theseus-exec"].into_iter().map(str::to_owned).collect();
        command.extend([counted.len.to_string(), counted.hex(), tmp, "--".into(), call.script.into()]);
        command.extend(call.args.iter().cloned());

        let (reader, writer) = tokio::io::duplex(FRAME_BYTES);
        let mut bridge = tokio_util::io::SyncIoBridge::new(writer);
        let producer = tokio::task::spawn_blocking(move || exec::write_framed(&mut bridge, |w| produce(w)));
        let result = self.exec(label, command, Some((reader, &counted)), call.progress.clone()).await;
        let produced = producer.await.map_err(|e| self.transport(label, format!("the input task failed: {e}")))?;
        match (result, produced) {
            // The input ended early because producing it failed (a file changed or vanished):
            // that error says what happened.
            (Err(Failure::Changed), Err(e)) => Err(ShellError::Transport(Box::new(e))),
            (result, _) => result.map_err(|f| f.into_shell(self, label)),
        }
    }

    /// Runs `command` in the pod and maps its outcome.
    async fn exec<R: tokio::io::AsyncRead + Unpin>(
        &self,
        label: &str,
        command: Vec<String>,
        stdin: Option<(R, &Counted)>,
        progress: Option<theseus_core::backend::ProgressFn>,
    ) -> Result<Vec<u8>, Failure> {
        let total = stdin.as_ref().map_or(0, |(_, c)| c.len);
        let on_sent = |sent: u64| {
            self.tick();
            if let Some(progress) = &progress {
                progress(sent, None);
            }
        };
        let shell = |e: ShellError| Failure::Shell(e);
        let target = exec::ExecTarget {
            pods: &self.pods,
            pod: &self.pod,
            container: self.container.as_deref(),
            open_timeout: self.open_timeout,
        };
        let done = match exec::run(&target, command, stdin, STDOUT_CAP, &on_sent).await {
            Ok(done) => done,
            Err(ExecFailure::Pump(PumpError::Changed)) => return Err(Failure::Changed),
            Err(ExecFailure::Pump(PumpError::Source(e))) => return Err(shell(ShellError::Transport(Box::new(e)))),
            Err(ExecFailure::Refused(e)) => {
                return Err(shell(self.transport(label, format!("exec refused: {}", exec::refused_words(&e)))));
            }
            Err(ExecFailure::NoAnswer) => {
                let after = self.open_timeout.as_secs_f64();
                return Err(shell(
                    self.transport(label, format!("the API server did not answer the exec in {after:.0}s")),
                ));
            }
            Err(ExecFailure::Missing(what)) => {
                return Err(shell(self.transport(label, format!("kube-rs gave no {what}"))));
            }
        };
        let Some(status) = done.status else {
            let why = done.broken.map(|e| format!(": {e}")).unwrap_or_default();
            let message = format!("the exec connection broke after {} of {total} bytes of input{why}", done.sent);
            return Err(shell(self.transport(label, message)));
        };
        let mut stderr = String::from_utf8_lossy(&done.stderr).into_owned();
        if stderr.len() > STDERR_CAP {
            let cut = (0..=STDERR_CAP).rev().find(|&i| stderr.is_char_boundary(i)).unwrap_or(0);
            stderr.truncate(cut);
        }
        if status.status.as_deref() == Some("Success") {
            if done.stdout_truncated {
                return Err(shell(self.transport(label, format!("its output exceeded {} MiB", STDOUT_CAP >> 20))));
            }
            return Ok(done.stdout);
        }
        Err(shell(match exec::exit_code(&status) {
            Some(code @ (EXIT_SHORT | EXIT_MISMATCH | EXIT_WRAPPER)) if stderr.starts_with("theseus-exec:") => {
                self.transport(label, format!("exit status {code}: {}", stderr.trim()))
            }
            Some(code) => ShellError::Exit { code, stderr },
            None => {
                let message = if stderr.trim().is_empty() { status.message.unwrap_or_default() } else { stderr };
                self.transport(label, format!("the command did not run: {}", message.trim()))
            }
        }))
    }
}

/// How [`ExecShell::exec`] failed.
enum Failure {
    /// The input ended early or differed from its counting pass: the connection was dropped
    /// before the pod had all of it.
    Changed,
    /// Anything else.
    Shell(ShellError),
}

impl Failure {
    fn into_shell(self, shell: &ExecShell, label: &str) -> ShellError {
        match self {
            Failure::Changed => shell.transport(label, "the input changed while it was being sent; submit again"),
            Failure::Shell(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_is_valid_shell() {
        let out = std::process::Command::new("sh").arg("-n").arg("-c").arg(EXEC_WRAPPER).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
