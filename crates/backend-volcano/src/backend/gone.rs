//! The IO half of `gone.rs` and `kept_files.rs`: reading what a run left on the PVC (the
//! metadata files and log file of a run whose vcjob is gone, an ended run's own files) through
//! a short-lived helper pod that mounts the PVC ([`VolcanoBackend::with_store_helper`]: deleted
//! on every path, an interrupt included), one exec each.

use k8s_openapi::jiff::Timestamp;
use theseus_core::backend::{JobStatus, LogLine, LogStream};
use theseus_core::store::{ScriptCall, Shell as _, ShellError};

use super::VolcanoBackend;
use crate::gone::{LOG_TAIL_BYTES, READ_LOG, READ_METADATA, ended_from, gone_what, gone_why};
use crate::handle::HandleData;
use crate::kept_files::{READ_FILES, parse_files};

/// How long the helper that reads a gone run's files may take to start, at most: well within
/// core's bound on [`theseus_core::backend::Backend::remains`] (300 s), so that the helper is
/// always deleted by this process, never left to a task that the end of the command would cut.
const GONE_HELPER_START: std::time::Duration = std::time::Duration::from_secs(90);

impl VolcanoBackend {
    fn gone_helper_start(&self) -> std::time::Duration {
        self.settings.helper_start_timeout.min(GONE_HELPER_START)
    }

    /// The run's status dir on the PVC: the handle's, else (older handles) the log file's path
    /// moved from the cluster's log dir to its status dir.
    pub(super) fn run_dir_of(&self, data: &HandleData) -> Option<String> {
        if let Some(dir) = &data.run_dir {
            return Some(dir.clone());
        }
        let log_dir = self.cluster_config.log_dir();
        let rel = data.log_file.as_deref()?.strip_prefix(log_dir.trim_end_matches('/'))?.strip_suffix(".log")?;
        if !rel.starts_with('/') || rel.split('/').any(|part| part == "..") {
            return None;
        }
        Some(format!("{}{rel}", self.cluster_config.status_dir().trim_end_matches('/')))
    }

    /// How the run of `data`, whose vcjob is gone, ended: from its metadata files on the PVC,
    /// said together with why the vcjob is gone. `None` when the handle does not say where they are.
    pub(crate) async fn ended_on_pvc(&self, data: &HandleData) -> theseus_core::Result<Option<JobStatus>> {
        let Some(dir) = self.run_dir_of(data) else { return Ok(None) };
        let out = self
            .read_on_pvc("status", READ_METADATA, vec![dir.clone()], "the run's metadata files")
            .await
            .map_err(|e| self.unread(data, "status", &e))?;
        let (mut status, ended) = ended_from(&String::from_utf8_lossy(&out), &dir);
        let why = gone_why(data, ended, Timestamp::now());
        status.message = Some(format!("{why}; {}", status.message.unwrap_or_default()));
        Ok(Some(status))
    }

    /// The files `names` of the run of `data` as they are in its status dir on the PVC (see
    /// [`theseus_core::backend::Backend::ended_run_files`]); a name that is no plain file name
    /// reads as missing. `None` when the handle does not say where the run's dir is.
    pub(crate) async fn files_on_pvc(
        &self,
        data: &HandleData,
        names: &[&str],
    ) -> theseus_core::Result<Option<Vec<Option<Vec<u8>>>>> {
        let Some(dir) = self.run_dir_of(data) else { return Ok(None) };
        let asked: Vec<&str> = names.iter().copied().filter(|n| theseus_core::backend::is_run_file_name(n)).collect();
        let mut args = vec![dir, theseus_core::backend::RUN_FILE_LIMIT.to_string()];
        args.extend(asked.iter().map(|n| (*n).to_owned()));
        let out = self.read_on_pvc("files", READ_FILES, args, "the run's files").await?;
        let read = parse_files(&out, &asked).map_err(|e| {
            theseus_core::Error::backend(self, format!("the run's files on the PVC were not read whole: {e}"))
        })?;
        let mut read = asked.into_iter().zip(read).collect::<std::collections::HashMap<_, _>>();
        Ok(Some(names.iter().map(|n| read.remove(n).flatten()).collect()))
    }

    /// Runs `script` with `args` in a short-lived helper pod that mounts the PVC and returns its
    /// stdout. An exec refused or cut on its way (an API server's hiccup, not the files') is
    /// tried once more.
    async fn read_on_pvc(
        &self,
        purpose: &str,
        script: &'static str,
        args: Vec<String>,
        label: &'static str,
    ) -> theseus_core::Result<Vec<u8>> {
        self.with_store_helper_within(purpose, self.gone_helper_start(), move |shell| async move {
            let call =
                || ScriptCall { script, args: args.clone(), stdin: None, stdin_len: None, progress: None, label };
            let out = match shell.run(call()).await {
                Err(ShellError::Transport(e)) => {
                    tracing::debug!("reading {label} in {} failed ({e}); once more", shell.describe());
                    shell.run(call()).await
                }
                other => other,
            };
            out.map_err(|e| {
                theseus_core::Error::backend("volcano", format!("reading {label} in {}: {e}", shell.describe()))
            })
        })
        .await
    }

    /// The error of a gone run whose files could not be read: what is gone, what failed, and
    /// that the run is left as it was.
    fn unread(&self, data: &HandleData, command: &str, e: &theseus_core::Error) -> theseus_core::Error {
        theseus_core::Error::backend(
            self,
            format!(
                "{} no longer exists, and its files on the PVC could not be read: {e}; the run is left as \
                 it was (`theseus {command}` tries again)",
                gone_what(data)
            ),
        )
    }

    /// The output of the run of `data`, whose vcjob (and so its pods' logs) is gone: its log
    /// file on the PVC, the ranks' lines as they were appended (without their pod), its last
    /// [`LOG_TAIL_BYTES`] when longer. The first line says so.
    pub(crate) async fn logs_on_pvc(&self, data: &HandleData, rank: Option<u32>) -> theseus_core::Result<LogStream> {
        let gone = gone_what(data);
        let Some(file) = data.log_file.clone() else {
            return Err(theseus_core::Error::NotFound { what: format!("{gone}, and its handle names no log file") });
        };
        if let Some(rank) = rank {
            return Err(theseus_core::Error::backend(
                self,
                format!(
                    "{gone} is gone with its pods' logs; its log file `{file}` on the PVC holds every rank's \
                     lines without their rank: run `theseus logs` without --rank {rank} to read it"
                ),
            ));
        }
        let args = vec![file.clone(), LOG_TAIL_BYTES.to_string()];
        let out = self
            .read_on_pvc("logs", READ_LOG, args, "the run's log file")
            .await
            .map_err(|e| self.unread(data, "logs", &e))?;
        let text = String::from_utf8_lossy(&out);
        let (size, body) = text.split_once('\n').unwrap_or((&text, ""));
        let size: u64 = size.trim().parse().unwrap_or(0);
        let mut lines = vec![note(format!("{gone} no longer exists; its log file on the PVC, `{file}`, follows"))];
        let mut body = body;
        if size > LOG_TAIL_BYTES {
            lines.push(note(format!("the log is {size} bytes; its last {LOG_TAIL_BYTES} follow")));
            // The first line is cut: start at the next whole one.
            body = body.split_once('\n').map_or("", |(_, rest)| rest);
        }
        lines.extend(body.lines().map(|l| Ok(LogLine { rank: None, text: l.to_owned(), source: None })));
        Ok(Box::pin(futures::stream::iter(lines)))
    }
}

/// A `[theseus]` line of the stream.
fn note(text: String) -> theseus_core::Result<LogLine> {
    Ok(LogLine { rank: None, text, source: Some("theseus".into()) })
}

#[cfg(test)]
mod tests {
    use theseus_core::config::ClusterConfig;

    use super::*;

    #[test]
    fn an_older_handle_finds_the_run_dir_from_its_log_file() {
        let host: crate::config::VolcanoHost =
            serde_json::from_value(serde_json::json!({"cluster": "k", "image": "i", "pvc_name": "p"})).unwrap();
        let cluster = ClusterConfig {
            root: "/ws".into(),
            work: "/ws/work".into(),
            log: Some("/ws/logs/".into()),
            status: Some("/ws/status".into()),
            ..ClusterConfig::default()
        };
        let backend = VolcanoBackend::new("k", host, cluster);
        let data = |log: &str, run_dir: Option<&str>| -> HandleData {
            serde_json::from_value(
                serde_json::json!({"namespace": "n", "job": "j", "log_file": log, "run_dir": run_dir}),
            )
            .unwrap()
        };
        assert_eq!(backend.run_dir_of(&data("/ws/logs/p/g/n/r1.log", None)).as_deref(), Some("/ws/status/p/g/n/r1"));
        assert_eq!(backend.run_dir_of(&data("/ws/logs/p/g/n/r1.log", Some("/else/r1"))).as_deref(), Some("/else/r1"));
        assert_eq!(backend.run_dir_of(&data("/ws/logs2/p/r1.log", None)), None, "not under the log dir");
        assert_eq!(backend.run_dir_of(&data("/ws/logs/../x/r1.log", None)), None);
        assert_eq!(backend.run_dir_of(&data("/ws/logs/p/r1.txt", None)), None);
    }
}
