//! Shipping a run's code to a host over SSH, shared by the plain and Slurm backends.
//!
//! [`ship_run`] ships through the cluster's content-addressed store
//! ([`theseus_core::store`], over [`SshShell`]): only the objects the store lacks are sent, and
//! the run dir is materialised from it (hard links or copies) under `.partial` and renamed into
//! place. A remote without a tool the store needs gets the whole code instead ([`ship_whole`]),
//! said once. Either way a broken connection gets one more attempt on a fresh connection: the
//! store's uploads stage in a private dir and its run dir appears only with its token, and the
//! whole ship's archive ends in a token too, so a cut-off transfer is never used.

use std::fmt::Display;
use std::io::Write;
use std::sync::Arc;

use theseus_core::backend::{PreparedJob, SubmitOptions};
use theseus_core::store::{self, ExtraFile, Materialize, ShipRequest, StoreError};
use theseus_core::{Error, Result};

use crate::ssh::{RemoteCommand, SshError, SshHost};
use crate::store_shell::SshShell;

/// Where a run's code goes.
pub(crate) struct Target<'a> {
    /// The cluster's work root on the host (absolute): the store is under it.
    pub(crate) root: &'a str,
    /// The run's code dir (absolute, under `root`).
    pub(crate) work_dir: &'a str,
    /// Links or copies.
    pub(crate) mode: Materialize,
}

/// Ships the snapshot and `extra` into `target.work_dir` on `ssh` through the store, or whole
/// when the host lacks a tool the store needs; reports what the store shipped. `backend` names
/// the backend in errors.
pub(crate) async fn ship_run(
    ssh: &Arc<SshHost>,
    backend: &(dyn Display + Sync),
    job: &PreparedJob,
    target: &Target<'_>,
    extra: Vec<ExtraFile>,
    options: &SubmitOptions,
) -> Result<()> {
    let host = ssh.options().destination.clone();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let shell = SshShell::new(Arc::clone(ssh));
        let request = ShipRequest {
            snapshot: job.snapshot.clone(),
            root: target.root.to_owned(),
            dest: target.work_dir.to_owned(),
            mode: target.mode,
            extra: extra.clone(),
            progress: options.progress.clone(),
            status: options.status.clone(),
        };
        match store::ship(&shell, request).await {
            Ok(report) => {
                options.report_shipped(&report);
                return Ok(());
            }
            Err(StoreError::NoTool { tool, machine }) => {
                options.note(&format!(
                    "{machine} has no `{tool}` on its PATH: shipping the whole code instead of only what changed"
                ));
                return ship_whole(ssh, backend, job, target.work_dir, extra, options).await;
            }
            Err(StoreError::Failed(e @ Error::AlreadyExists { .. })) => return Err(e),
            Err(StoreError::Failed(e)) if shell.connection_broke() && attempt < 2 => {
                options.note("the connection broke while shipping the code; trying again");
                tracing::warn!(backend = %backend, error = %e, "shipping failed; retrying");
            }
            Err(StoreError::Failed(e)) => {
                return Err(Error::Backend {
                    backend: backend.to_string(),
                    message: format!("failed to ship the code to `{}` on `{host}`", target.work_dir),
                    source: Some(Box::new(e)),
                });
            }
        }
    }
}

/// Exit code of [`SHIP`] when the work dir exists already.
pub(crate) const SHIP_EXISTS: i32 = 17;

/// `WORK_DIR TOKEN`, archive on stdin: unpacks into `WORK_DIR.partial` and renames it into
/// place only when the sentinel with `TOKEN` arrived, so a cut-off transfer is never used.
/// `-i` reads the snapshot and the bootstrap archives sent back to back.
pub(crate) const SHIP: &str = r#"set -e
dest=$1; token=$2; partial="$1.partial"
if [ -e "$dest" ]; then echo "run dir $dest already exists" >&2; exit 17; fi
rm -rf -- "$partial"
mkdir -p -- "$partial"
tar -x -i -m -f - -C "$partial"
if [ "$(cat -- "$partial/.theseus/ship-complete" 2>/dev/null)" != "$token" ]; then
  rm -rf -- "$partial"
  echo "the code archive arrived incomplete" >&2
  exit 3
fi
rm -f -- "$partial/.theseus/ship-complete"
mv -T -- "$partial" "$dest"
"#;

/// Ships the snapshot and `extra` whole into `<work_dir>.partial` on `ssh` and renames it into
/// place. `backend` names the backend in errors.
pub(crate) async fn ship_whole(
    ssh: &SshHost,
    backend: &(dyn Display + Sync),
    job: &PreparedJob,
    work_dir: &str,
    extra: Vec<ExtraFile>,
    options: &SubmitOptions,
) -> Result<()> {
    let token = format!("{}-{}", job.identity.run_id, std::process::id());
    let total = job.snapshot.estimated_tar_bytes();
    let progress: Option<Arc<dyn Fn(u64) + Send + Sync>> =
        options.progress.clone().map(|p| Arc::new(move |sent: u64| p(sent, Some(total))) as _);
    let cmd = RemoteCommand::script(SHIP, [work_dir.to_owned(), token.clone()])
        .label("the code upload (tar -x into the .partial dir)");
    let mut attempt = 0;
    loop {
        attempt += 1;
        let snapshot = job.snapshot.clone();
        let mut files = extra.clone();
        files.push(ExtraFile { path: store::SENTINEL.into(), contents: token.clone().into_bytes(), mode: 0o644 });
        let produce = move |out: &mut dyn Write| -> std::io::Result<()> {
            snapshot.write_tar(&mut *out, &mut |_| {}).map_err(std::io::Error::other)?;
            write_files(out, &files)
        };
        match ssh.run_with_writer(&cmd, produce, progress.clone()).await {
            Ok(_) => return Ok(()),
            Err(SshError::Failed { code: Some(SHIP_EXISTS), .. }) => {
                let host = &ssh.options().destination;
                return Err(Error::AlreadyExists { what: format!("run dir `{work_dir}` on `{host}`") });
            }
            // Connect failures were already retried by the transport; a cut transfer gets one more go.
            Err(e @ SshError::Disconnected { .. }) if attempt < 2 => {
                options.note("the connection broke while shipping the code; trying again");
                tracing::warn!(backend = %backend, error = %e, "shipping failed; retrying");
            }
            Err(e) => {
                return Err(Error::Backend {
                    backend: backend.to_string(),
                    message: format!("failed to ship the code to `{work_dir}` on `{}`", ssh.options().destination),
                    source: Some(Box::new(e)),
                });
            }
        }
    }
}

/// Writes `files` as a second tar archive (the remote `tar -i` reads past the first one's end).
pub(crate) fn write_files(out: &mut dyn Write, files: &[ExtraFile]) -> std::io::Result<()> {
    let mut builder = tar::Builder::new(out);
    let mtime = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for file in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(file.contents.len() as u64);
        header.set_mode(file.mode);
        header.set_mtime(mtime);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, &file.path, file.contents.as_slice())?;
    }
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_files_follow_a_finished_archive() {
        let mut buf = Vec::new();
        write_files(
            &mut buf,
            &[ExtraFile { path: ".theseus/a.sh".into(), contents: b"echo hi\n".to_vec(), mode: 0o755 }],
        )
        .unwrap();
        let mut archive = tar::Archive::new(buf.as_slice());
        let entries: Vec<_> =
            archive.entries().unwrap().map(|e| e.unwrap().path().unwrap().display().to_string()).collect();
        assert_eq!(entries, [".theseus/a.sh"]);
    }

    #[test]
    fn ship_script_is_valid_shell() {
        let out = std::process::Command::new("sh").arg("-n").arg("-c").arg(SHIP).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(SHIP.contains(store::SENTINEL));
        assert!(SHIP.contains(&format!("exit {SHIP_EXISTS}")));
    }
}
