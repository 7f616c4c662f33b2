//! [`SshShell`]: the store protocol's [`Shell`] over an SSH connection, for the plain and Slurm
//! backends. Each script runs as `sh -c SCRIPT theseus-store ARGS...` with its arguments quoted
//! once by the transport, and its stdin streamed from a blocking writer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use theseus_core::store::{ScriptCall, Shell, ShellError};

use crate::ssh::{RemoteCommand, SshError, SshHost};

/// Runs store scripts on the machine behind `ssh`.
#[derive(Debug, Clone)]
pub struct SshShell {
    ssh: Arc<SshHost>,
    broke: Arc<AtomicBool>,
}

impl SshShell {
    /// A shell over `ssh`.
    pub fn new(ssh: Arc<SshHost>) -> Self {
        SshShell { ssh, broke: Arc::default() }
    }

    /// Whether a script of this shell failed because the connection broke (the store protocol
    /// is idempotent, so the caller may ship again on a fresh connection).
    pub fn connection_broke(&self) -> bool {
        self.broke.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Shell for SshShell {
    async fn run(&self, call: ScriptCall) -> Result<Vec<u8>, ShellError> {
        let cmd = RemoteCommand::new("sh")
            .arg("-c")
            .arg(call.script)
            .arg("theseus-store")
            .args(call.args.iter().cloned())
            .label(call.label);
        let produce = call.stdin.clone();
        let progress =
            call.progress.clone().map(|p| -> Arc<dyn Fn(u64) + Send + Sync> { Arc::new(move |n| p(n, None)) });
        let out = self
            .ssh
            .run_with_writer(
                &cmd,
                move |w| match produce {
                    Some(produce) => produce(w),
                    None => Ok(()),
                },
                progress,
            )
            .await;
        match out {
            Ok(out) => Ok(out.stdout),
            Err(SshError::Failed { code: Some(code), stderr, .. }) => Err(ShellError::Exit { code, stderr }),
            Err(e) => {
                if matches!(e, SshError::Disconnected { .. }) {
                    self.broke.store(true, Ordering::SeqCst);
                }
                Err(ShellError::Transport(Box::new(e)))
            }
        }
    }

    fn describe(&self) -> String {
        format!("`{}`", self.ssh.options().destination)
    }
}
