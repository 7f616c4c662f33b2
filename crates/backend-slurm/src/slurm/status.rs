//! A Slurm job's status from what is still known about it, in order: `squeue` (JSON, or the
//! text form on Slurms without JSON support), `sacct` (when the cluster keeps accounting), and
//! what the run left in its status dir (the bootstrap's `metadata.json`, the `cancelled` mark).
//! A job that lost an attempt (requeued, or ended PREEMPTED) says why in its message, in one line
//! ([`preempt`]: the requeue from `squeue --json`, the cause from slurmstepd's line in the log,
//! the preemptor inferred from the jobs that started then).
//!
//! Slurm 22.05 ignores `--jobs` with `--json` and lists every job: the parser picks ours by id.
//! The text form exits 1 (`Invalid job id specified`) for jobs it no longer knows; `sacct`
//! without accounting exits 1 (`Slurm accounting storage is disabled`).

use theseus_core::backend::{JobState, JobStatus, RankStatus};
use theseus_core::{Error, Result};

use super::scripts::{self, RunState};
use super::{SlurmBackend, SlurmHandleData};
use crate::nodelist;
use crate::parse::preempt;
use crate::parse::sacct::{self, SACCT_COMMAND};
use crate::parse::squeue::{self, SQUEUE_JSON_COMMAND, SQUEUE_TEXT_COMMAND};
use crate::parse::{ParseError, SlurmJob};
use theseus_backend_ssh::ssh::RemoteCommand;

/// `command` (a constant of [`crate::parse`]) with `job_id` appended as one more word, run
/// without the site's output settings ([`crate::parse::clean_env`]).
fn command(backend: &SlurmBackend, line: &str, job_id: &str) -> RemoteCommand {
    let argv = theseus_core::shell::split(line).expect("the parse module's commands are valid words");
    RemoteCommand::new("env")
        .args(crate::parse::clean_env().into_iter().skip(1))
        .args(argv)
        .arg(job_id)
        .retry_safe()
        .timeout(backend.remote.settings.command_timeout)
}

fn parse_error(backend: &SlurmBackend, e: ParseError) -> Error {
    Error::Backend { backend: backend.to_string(), message: e.to_string(), source: Some(Box::new(e)) }
}

/// What `squeue` says about the job; `None` when it no longer lists it.
pub(crate) async fn from_squeue(backend: &SlurmBackend, job_id: &str) -> Result<Option<SlurmJob>> {
    Ok(squeue_job(backend, job_id).await?.map(|(job, _)| job))
}

/// What `squeue` says about the job, with its earlier attempts when the JSON form answered
/// ([`preempt::history`]); `None` when it no longer lists it.
async fn squeue_job(backend: &SlurmBackend, job_id: &str) -> Result<Option<(SlurmJob, Option<preempt::History>)>> {
    let ssh = &backend.remote.ssh;
    let json = ssh
        .output(&command(backend, SQUEUE_JSON_COMMAND, job_id))
        .await
        .map_err(|e| backend.remote.ssh_error("ask squeue about the job", e))?;
    if json.success() {
        let text = json.stdout_text();
        let Some(job) = squeue::parse_json(&text, job_id).map_err(|e| parse_error(backend, e))? else {
            return Ok(None);
        };
        let history = preempt::history(&text, job_id).map_err(|e| parse_error(backend, e))?;
        return Ok(Some((job, history)));
    }
    // No JSON support (built without it, or older than 21.08): the text form.
    let text = ssh
        .output(&command(backend, SQUEUE_TEXT_COMMAND, job_id))
        .await
        .map_err(|e| backend.remote.ssh_error("ask squeue about the job", e))?;
    if text.success() {
        let job = squeue::parse_text(&text.stdout_text(), job_id).map_err(|e| parse_error(backend, e))?;
        return Ok(job.map(|job| (job, None)));
    }
    let stderr = text.stderr_text();
    if stderr.contains("Invalid job id") {
        return Ok(None);
    }
    Err(Error::backend(backend, format!("squeue failed: {}", stderr.trim())))
}

/// What `sacct` says; `None` without accounting or when it does not know the job.
async fn from_sacct(backend: &SlurmBackend, job_id: &str) -> Result<Option<SlurmJob>> {
    let out = backend
        .remote
        .ssh
        .output(&command(backend, SACCT_COMMAND, job_id))
        .await
        .map_err(|e| backend.remote.ssh_error("ask sacct about the job", e))?;
    if !out.success() {
        tracing::debug!(backend = %backend, stderr = %out.stderr_text().trim(), "sacct failed; not using it");
        return Ok(None);
    }
    sacct::parse(&out.stdout_text(), job_id).map_err(|e| parse_error(backend, e))
}

pub(super) async fn run_state(backend: &SlurmBackend, data: &SlurmHandleData) -> Result<RunState> {
    let cmd = RemoteCommand::script(scripts::RUN_STATE, [data.run_dir.clone()])
        .retry_safe()
        .timeout(backend.remote.settings.command_timeout);
    let out =
        backend.remote.ssh.run(&cmd).await.map_err(|e| backend.remote.ssh_error("read the run's status dir", e))?;
    Ok(scripts::parse_run_state(&out.stdout_text()))
}

/// slurmstepd's last `CANCELLED AT ... DUE TO ...` line in the run's log (read only for a job
/// that lost an attempt: the log is the one record of the cause without accounting).
async fn last_cancel(backend: &SlurmBackend, data: &SlurmHandleData) -> Option<(String, String)> {
    let cmd = RemoteCommand::script(scripts::LAST_CANCEL, [data.log_file.clone()])
        .retry_safe()
        .timeout(backend.remote.settings.command_timeout);
    match backend.remote.ssh.run(&cmd).await {
        Ok(out) => preempt::last_cancel(&out.stdout_text()),
        Err(e) => {
            tracing::debug!(backend = %backend, error = %e, "cannot read the log for the cause of a requeue");
            None
        }
    }
}

/// Each partition's `PriorityTier` ([`preempt::PARTITIONS_COMMAND`]); empty when `scontrol`
/// does not say.
async fn partition_tiers(backend: &SlurmBackend) -> std::collections::BTreeMap<String, u32> {
    let argv = theseus_core::shell::split(preempt::PARTITIONS_COMMAND).expect("a valid command");
    let cmd = RemoteCommand::new("env")
        .args(crate::parse::clean_env().into_iter().skip(1))
        .args(argv)
        .retry_safe()
        .timeout(backend.remote.settings.command_timeout);
    match backend.remote.ssh.output(&cmd).await {
        Ok(out) if out.success() => preempt::partition_tiers(&out.stdout_text()),
        _ => Default::default(),
    }
}

/// The job's status.
pub(super) async fn status(backend: &SlurmBackend, job_id: &str, data: &SlurmHandleData) -> Result<JobStatus> {
    let (job, history) = match squeue_job(backend, job_id).await? {
        Some((job, history)) => (Some(job), history),
        None => (from_sacct(backend, job_id).await?, None),
    };
    if let Some(job) = job {
        let mut status = job.to_status();
        // Slurm's restart count: a requeued job's next start is attempt restarts + 1, as
        // THESEUS_ATTEMPT says in the job (the bootstrap maps SLURM_RESTART_COUNT).
        status.attempt = history.as_ref().map(|h| h.restarts + 1);
        if let Some(mut history) = history.filter(preempt::History::interrupted) {
            let cancel = last_cancel(backend, data).await;
            if !history.preemptors.is_empty() {
                history.keep_higher_tiers(&partition_tiers(backend).await);
            }
            if let Some(line) = history.line(cancel.as_ref(), job.reason.as_deref()) {
                status.message = Some(after_requeue(line, history.restarts, status.state, status.message.take()));
            }
        }
        let run = if status.state.is_terminal() { Some(run_state(backend, data).await?) } else { None };
        if let Some(run) = &run
            && status.state == JobState::Failed
            && let Some(code) = run.exit_code()
        {
            // srun exits with the highest code of its tasks, which is often a rank stopped
            // because another failed: the bootstrap's records say which rank failed first.
            status.exit_code = Some(code);
        } else if let Some(run) = &run
            && status.exit_code.is_none()
        {
            // The text form has no exit code.
            status.exit_code = run.exit_code();
        }
        status.ranks = ranks(&job, status.state, data.nodes, run.as_ref());
        return Ok(status);
    }
    let run = run_state(backend, data).await?;
    if !run.exists {
        return Err(Error::NotFound {
            what: format!("slurm job `{job_id}` (neither Slurm nor the run dir `{}` knows it)", data.run_dir),
        });
    }
    let mut status = from_run_dir(&run);
    status.ranks = (0..data.nodes.max(1))
        .map(|i| RankStatus {
            rank: i,
            state: rank_state(run.rank(i), status.state),
            exit_code: run.rank(i).and_then(|r| r.exit_code),
            location: None,
            restarts: None,
        })
        .collect();
    Ok(status)
}

/// The interruption line, and how a requeued job ended when it did not complete (a cancel of the
/// waiting job, a failure of its next attempt): `preempted at ...; requeued, attempt 2; then
/// cancelled`.
fn after_requeue(line: String, restarts: u32, state: JobState, message: Option<String>) -> String {
    match message {
        Some(m) if restarts > 0 && matches!(state, JobState::Cancelled | JobState::Failed) => {
            format!("{line}; then {m}")
        }
        _ => line,
    }
}

/// The status of a run that has no Slurm job yet: cancelled, still being submitted (a fresh
/// claim), or never submitted (its submit stopped `stale_after` seconds or more ago).
pub(super) fn unsubmitted(run: &RunState, stale_after: u64, nodes: u32) -> JobStatus {
    let (state, message) = match run.claimed_age {
        _ if run.cancelled => (JobState::Cancelled, "cancelled before it was submitted to Slurm".to_owned()),
        Some(age) if age < stale_after => {
            (JobState::Submitting, format!("being submitted: its code is being shipped (claimed {age} s ago)"))
        }
        Some(age) => (
            JobState::Failed,
            format!("never submitted to Slurm: its submit stopped {age} s ago before sbatch (was the client killed?)"),
        ),
        None => (JobState::Unknown, "the run dir has no Slurm job id and no claim".to_owned()),
    };
    let ranks = (0..nodes.max(1))
        .map(|i| RankStatus { rank: i, state, exit_code: None, location: None, restarts: None })
        .collect();
    JobStatus { state, exit_code: None, message: Some(message), ranks, attempt: None }
}

/// Per-node ranks: rank `i` runs on the `i`-th node of the allocation (one task per node);
/// finished ranks take their state and code from their metadata.
fn ranks(job: &SlurmJob, state: JobState, nodes: u32, run: Option<&RunState>) -> Vec<RankStatus> {
    let names = job.nodes.as_deref().and_then(|n| nodelist::expand(n).ok()).unwrap_or_default();
    (0..nodes.max(1))
        .map(|i| {
            let record = run.and_then(|r| r.rank(i));
            RankStatus {
                rank: i,
                state: rank_state(record, state),
                exit_code: record.and_then(|r| r.exit_code),
                location: names.get(i as usize).cloned(),
                restarts: None,
            }
        })
        .collect()
}

/// A rank's state from its record, else the job's.
fn rank_state(record: Option<&scripts::RankRecord>, job: JobState) -> JobState {
    match record.map(|r| r.status.as_str()) {
        _ if job == JobState::Cancelled => JobState::Cancelled,
        Some("completed") => JobState::Completed,
        Some("failed") => JobState::Failed,
        Some("preempted") => JobState::Preempted,
        _ => job,
    }
}

/// The status of a job Slurm no longer knows, from what the run left behind.
fn from_run_dir(run: &RunState) -> JobStatus {
    let note = "Slurm no longer lists the job";
    let rank0 = run.rank(0).map(|r| r.status.as_str());
    let code = run.exit_code();
    let (state, exit_code, message) = match (rank0, code) {
        (_, code) if run.cancelled => (JobState::Cancelled, code, format!("cancelled by the user ({note})")),
        (_, Some(0)) => (JobState::Completed, Some(0), format!("completed ({note})")),
        (_, Some(code)) if run.ranks.iter().any(|r| r.status == "failed") => {
            (JobState::Failed, Some(code), format!("exited with code {code} ({note}; from the ranks' metadata.json)"))
        }
        (Some("preempted"), code) => {
            (JobState::Preempted, code, format!("stopped by a signal ({note}; from the run's metadata.json)"))
        }
        (Some(other), code) => (
            JobState::Unknown,
            code,
            format!("{note} and the run's last recorded status is `{other}` (was it killed before it could finish?)"),
        ),
        (None, _) => (JobState::Unknown, None, format!("{note} and the run never started (no metadata.json)")),
    };
    JobStatus { state, exit_code, message: Some(message), ranks: Vec::new(), attempt: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: Option<&str>, code: Option<i32>, cancelled: bool) -> RunState {
        let ranks = status
            .map(|s| vec![scripts::RankRecord { rank: 0, status: s.to_owned(), exit_code: code }])
            .unwrap_or_default();
        RunState { exists: true, cancelled, ranks, ..RunState::default() }
    }

    #[test]
    fn statuses_from_the_run_dir() {
        let s = |r: RunState| {
            let s = from_run_dir(&r);
            (s.state, s.exit_code)
        };
        assert_eq!(s(run(Some("completed"), Some(0), false)), (JobState::Completed, Some(0)));
        assert_eq!(s(run(Some("failed"), Some(7), false)), (JobState::Failed, Some(7)));
        assert_eq!(s(run(Some("preempted"), Some(143), false)), (JobState::Preempted, Some(143)));
        assert_eq!(s(run(Some("preempted"), Some(143), true)), (JobState::Cancelled, Some(143)));
        assert_eq!(s(run(Some("running"), None, false)), (JobState::Unknown, None));
        assert_eq!(s(run(None, None, false)), (JobState::Unknown, None));
    }

    #[test]
    fn runs_without_a_slurm_job() {
        let s = |cancelled, claimed_age| {
            unsubmitted(&RunState { exists: true, cancelled, claimed_age, ..RunState::default() }, 600, 1).state
        };
        assert_eq!(s(false, Some(5)), JobState::Submitting);
        assert_eq!(s(false, Some(601)), JobState::Failed);
        assert_eq!(s(true, Some(5)), JobState::Cancelled);
        assert_eq!(s(false, None), JobState::Unknown);
    }

    /// Found by cancelling a requeued job while it waited: the line alone said "requeued,
    /// attempt 2" of a cancelled job.
    #[test]
    fn a_requeued_job_that_did_not_complete_says_how_it_ended() {
        let line = || "preempted at T (partition urgent job 3); requeued, attempt 2".to_owned();
        let cancelled = after_requeue(line(), 1, JobState::Cancelled, Some("cancelled by 1001".into()));
        assert_eq!(cancelled, "preempted at T (partition urgent job 3); requeued, attempt 2; then cancelled by 1001");
        assert_eq!(after_requeue(line(), 1, JobState::Completed, None), line());
        assert_eq!(after_requeue(line(), 1, JobState::Running, Some("x".into())), line());
        // Not requeued: the line says the end itself.
        assert_eq!(after_requeue(line(), 0, JobState::Failed, Some("failed (NonZeroExitCode)".into())), line());
    }

    #[test]
    fn ranks_follow_the_node_list() {
        let job = SlurmJob::new("5", "RUNNING", None, None, Some("node[1-2]"));
        let r = ranks(&job, JobState::Running, 2, None);
        assert_eq!(r.iter().map(|r| r.location.clone().unwrap()).collect::<Vec<_>>(), ["node1", "node2"]);
    }
}
