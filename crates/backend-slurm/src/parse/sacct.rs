//! `sacct` output for one job → [`SlurmJob`], for jobs `squeue` no longer lists.

use super::{ParseError, SlurmJob, parse_exit_code};

/// The command whose output [`parse`] reads; append the quoted job id. Without slurmdbd it
/// prints "Slurm accounting storage is disabled" and exits 1.
pub const SACCT_COMMAND: &str = "sacct --parsable2 --noheader --format=JobID,State,ExitCode,Reason --jobs";

/// Parses [`SACCT_COMMAND`] output and returns the allocation record of `job_id` (the line whose
/// JobID is exactly `job_id`; step lines such as `123.batch` only fill in a missing exit code).
/// `Ok(None)` when accounting has no record of it.
pub fn parse(output: &str, job_id: &str) -> Result<Option<SlurmJob>, ParseError> {
    let mut main: Option<(String, String, Option<i32>, String)> = None;
    let mut step_code: Option<i32> = None;
    for (idx, raw) in output.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.splitn(4, '|').map(str::trim).collect();
        let [id, state, exit_code, reason] = fields[..] else {
            return Err(ParseError::line("sacct", idx + 1, raw, "expected 4 `|`-separated fields"));
        };
        let code = if exit_code.is_empty() {
            None
        } else {
            Some(parse_exit_code(exit_code).ok_or_else(|| ParseError::line("sacct", idx + 1, raw, "bad ExitCode"))?)
        };
        if id == job_id {
            main.get_or_insert((id.to_owned(), state.to_owned(), code, reason.to_owned()));
        } else if id.strip_prefix(job_id).is_some_and(|rest| rest.starts_with('.')) && step_code.is_none_or(|c| c == 0)
        {
            step_code = code.or(step_code);
        }
    }
    Ok(main.map(|(id, state, code, reason)| {
        let code = match code {
            Some(0) | None => step_code.filter(|c| *c != 0).or(code),
            c => c,
        };
        SlurmJob::new(&id, &state, Some(&reason), code, None)
    }))
}

#[cfg(test)]
mod tests {
    use theseus_core::backend::JobState;

    use super::*;

    /// `(sacct output, expected state, exit code, message)` for job 7.
    #[test]
    fn table() {
        let cases: &[(&str, JobState, Option<i32>, Option<&str>)] = &[
            ("7|COMPLETED|0:0|None\n7.batch|COMPLETED|0:0|\n7.0|COMPLETED|0:0|\n", JobState::Completed, Some(0), None),
            (
                "7|FAILED|3:0|NonZeroExitCode\n7.batch|FAILED|3:0|\n",
                JobState::Failed,
                Some(3),
                Some("failed (NonZeroExitCode)"),
            ),
            ("7|FAILED|2:0|None\n", JobState::Failed, Some(2), Some("failed")),
            (
                "7|CANCELLED by 1000|0:0|None\n7.batch|CANCELLED|0:15|\n",
                JobState::Cancelled,
                Some(143),
                Some("cancelled by 1000"),
            ),
            (
                "7|OUT_OF_MEMORY|0:125|OutOfMemory\n7.batch|OUT_OF_MEMORY|0:125|\n",
                JobState::Failed,
                Some(253),
                Some("out of memory (OutOfMemory)"),
            ),
            ("7|NODE_FAIL|1:0|NodeDown\n", JobState::Failed, Some(1), Some("a node of the job failed (NodeDown)")),
            (
                "7|TIMEOUT|0:0|TimeLimit\n7.batch|CANCELLED|0:15|\n",
                JobState::Failed,
                Some(143),
                Some("time limit reached (TimeLimit)"),
            ),
            ("7|PREEMPTED|0:0|None\n", JobState::Preempted, Some(0), Some("preempted by another job")),
            ("7|RUNNING|0:0|None\n7.batch|RUNNING|0:0|\n", JobState::Running, None, None),
            (
                "7|PENDING|0:0|Resources\n",
                JobState::Pending,
                None,
                Some("pending (Resources): waiting for the nodes it asked for to be free"),
            ),
            ("7|FAILED|0:0|JobLaunchFailure\n", JobState::Failed, Some(0), Some("failed (JobLaunchFailure)")),
            (
                "77|COMPLETED|0:0|None\n7|SOMETHING_NEW|0:0|None\n",
                JobState::Unknown,
                None,
                Some("unknown slurm state `SOMETHING_NEW`"),
            ),
        ];
        for (out, state, code, message) in cases {
            let job = parse(out, "7").unwrap().unwrap_or_else(|| panic!("{out}"));
            assert_eq!((job.state, job.exit_code, job.message.as_deref()), (*state, *code, *message), "{out}");
            assert_eq!(job.job_id, "7");
        }
    }

    #[test]
    fn missing_and_malformed() {
        assert_eq!(parse("", "7").unwrap(), None);
        assert_eq!(parse("8|COMPLETED|0:0|None\n", "7").unwrap(), None);
        assert!(parse("7 COMPLETED 0:0", "7").is_err());
        assert!(parse("7|COMPLETED|x:0|None", "7").is_err());
    }
}
