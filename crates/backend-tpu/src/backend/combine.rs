//! The run's state from its workers' states, and the age of a run from its id. Pure.

use std::time::Duration;

use theseus_core::backend::{JobState, JobStatus, RankStatus};

/// One status for the run from each worker's (`(index, address, status)`): running while any
/// worker runs; else failed when any failed (the first non-zero exit code), preempted, cancelled;
/// completed when all completed.
pub(crate) fn combine(workers: &[(u32, String, JobStatus)]) -> JobStatus {
    let any = |s: JobState| workers.iter().any(|(_, _, w)| w.state == s);
    let state = if any(JobState::Running) {
        JobState::Running
    } else if any(JobState::Failed) {
        JobState::Failed
    } else if any(JobState::Preempted) {
        JobState::Preempted
    } else if any(JobState::Cancelled) {
        JobState::Cancelled
    } else if !workers.is_empty() && workers.iter().all(|(_, _, w)| w.state == JobState::Completed) {
        JobState::Completed
    } else if any(JobState::Submitting) {
        JobState::Submitting
    } else if any(JobState::Pending) {
        JobState::Pending
    } else {
        JobState::Unknown
    };
    let exit_code = if state.is_terminal() {
        workers
            .iter()
            .filter_map(|(_, _, w)| w.exit_code)
            .find(|&c| c != 0)
            .or_else(|| workers.iter().find_map(|(_, _, w)| w.exit_code))
    } else {
        None
    };
    let messages: Vec<String> = workers
        .iter()
        .filter(|(_, _, w)| w.state != JobState::Completed && w.state != JobState::Running)
        .filter_map(|(i, _, w)| w.message.as_ref().map(|m| format!("worker {i}: {m}")))
        .collect();
    let ranks = workers
        .iter()
        .map(|(i, address, w)| RankStatus {
            rank: *i,
            state: w.state,
            exit_code: w.exit_code,
            location: Some(format!("worker-{i} ({address})")),
            restarts: None,
        })
        .collect();
    JobStatus { state, exit_code, message: (!messages.is_empty()).then(|| messages.join("; ")), ranks, attempt: None }
}

/// Whether run `run` (id `YYYYMMDD-HHMMSS-xxxxxx`, lowercase) started more than `age` ago by
/// the clock `now_unix` (seconds). A run id of another form counts as old.
pub(crate) fn started_before(run: &str, age: Duration, now_unix: u64) -> bool {
    match run_start_unix(run) {
        Some(start) => now_unix.saturating_sub(start) >= age.as_secs(),
        None => true,
    }
}

/// Seconds since the epoch (UTC) at which the run of id `run` started.
fn run_start_unix(run: &str) -> Option<u64> {
    let b = run.as_bytes();
    if b.len() < 15 || b[8] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> { run.get(r)?.parse().ok() };
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 || y < 1970 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(state: JobState, code: Option<i32>) -> JobStatus {
        JobStatus { state, exit_code: code, message: None, ranks: vec![], attempt: None }
    }

    #[test]
    fn the_run_runs_while_any_worker_does_and_fails_with_the_first_nonzero_code() {
        let w = |i, s| (i, format!("10.0.0.{i}"), s);
        let s = combine(&[w(0, st(JobState::Completed, Some(0))), w(1, st(JobState::Running, None))]);
        assert_eq!(s.state, JobState::Running);
        let s = combine(&[w(0, st(JobState::Completed, Some(0))), w(1, st(JobState::Failed, Some(3)))]);
        assert_eq!((s.state, s.exit_code), (JobState::Failed, Some(3)));
        assert_eq!(s.ranks[1].location.as_deref(), Some("worker-1 (10.0.0.1)"));
        let s = combine(&[w(0, st(JobState::Completed, Some(0))), w(1, st(JobState::Completed, Some(0)))]);
        assert_eq!((s.state, s.exit_code), (JobState::Completed, Some(0)));
        assert_eq!(combine(&[]).state, JobState::Unknown);
    }

    #[test]
    fn a_run_id_gives_its_start() {
        // 2026-11-27T19:30:56Z
        assert_eq!(run_start_unix("20261127-193056-fb6123"), Some(1_795_807_856));
        assert_eq!(run_start_unix("19700101-000000-000000"), Some(0));
        assert!(started_before("20261127-193056-fb6123", Duration::from_secs(60), 1_795_807_856 + 61));
        assert!(!started_before("20261127-193056-fb6123", Duration::from_secs(60), 1_795_807_856 + 59));
        assert!(started_before("not-a-run", Duration::from_secs(60), 0));
    }
}
