//! Following a job that has not started yet: why it waits, said once per change, and when to
//! give up. A pod that cannot start (image pull, `CrashLoopBackOff`, a missing Secret or PVC)
//! or a gang that is not admitted never produces a log line, so the follow loop asks the
//! backend's `status` while the job is pending and prints its reason; after the backend's start
//! timeout ([`crate::backend::Backend::start_timeout`]) `submit --follow` cancels the job
//! with that reason. This is the decision logic only (no clock, no IO): [`super::follow()`] feeds it.

use std::time::Duration;

use crate::backend::{JobState, JobStatus};

/// What the follow loop does after one look at the job's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartStep {
    /// Nothing new.
    Nothing,
    /// Print this reason (it changed).
    Say(String),
    /// The job has started (or ended): stop looking.
    Started,
    /// Still not started after the timeout: cancel the job with this reason.
    TimedOut(String),
}

/// The state of watching one job start.
#[derive(Debug)]
pub struct StartProgress {
    timeout: Option<Duration>,
    last: Option<String>,
    started: bool,
}

impl StartProgress {
    /// Watching a job that gives up after `timeout` (`None`: never).
    pub fn new(timeout: Option<Duration>) -> Self {
        StartProgress { timeout, last: None, started: false }
    }

    /// Whether the job has started, so its status need not be asked any more.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Marks the job as started (a log line arrived).
    pub fn mark_started(&mut self) {
        self.started = true;
    }

    /// The timeout, for messages.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// What to do about `status`, seen `elapsed` after following began.
    pub fn observe(&mut self, status: &JobStatus, elapsed: Duration) -> StartStep {
        if self.started {
            return StartStep::Nothing;
        }
        if !matches!(status.state, JobState::Pending | JobState::Submitting | JobState::Unknown) {
            self.started = true;
            return StartStep::Started;
        }
        let reason = status.message.clone().unwrap_or_else(|| format!("the job is {}", status.state));
        if self.timeout.is_some_and(|t| elapsed >= t) {
            return StartStep::TimedOut(reason);
        }
        if self.last.as_deref() == Some(reason.as_str()) {
            return StartStep::Nothing;
        }
        self.last = Some(reason.clone());
        StartStep::Say(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: JobState, message: &str) -> JobStatus {
        JobStatus { state, exit_code: None, message: Some(message.to_owned()), ranks: Vec::new(), attempt: None }
    }

    #[test]
    fn says_each_reason_once_then_stops_when_started() {
        let mut p = StartProgress::new(Some(Duration::from_secs(60)));
        let pull = status(JobState::Pending, "pod j-worker-0 cannot start: ImagePullBackOff");
        assert_eq!(p.observe(&pull, Duration::ZERO), StartStep::Say(pull.message.clone().unwrap()));
        assert_eq!(p.observe(&pull, Duration::from_secs(2)), StartStep::Nothing);
        let queue =
            status(JobState::Pending, "waiting for queue q: queue resource quota insufficient: insufficient cpu");
        assert_eq!(p.observe(&queue, Duration::from_secs(4)), StartStep::Say(queue.message.clone().unwrap()));
        assert_eq!(
            p.observe(&status(JobState::Running, "1/1 pods running"), Duration::from_secs(6)),
            StartStep::Started
        );
        assert!(p.started());
        assert_eq!(p.observe(&pull, Duration::from_secs(8)), StartStep::Nothing);
    }

    #[test]
    fn gives_up_after_the_timeout_with_the_last_reason() {
        let mut p = StartProgress::new(Some(Duration::from_secs(10)));
        let crash = status(JobState::Pending, "pod j-worker-1 cannot start: CrashLoopBackOff");
        assert!(matches!(p.observe(&crash, Duration::from_secs(9)), StartStep::Say(_)));
        assert_eq!(p.observe(&crash, Duration::from_secs(10)), StartStep::TimedOut(crash.message.unwrap()));
        let mut forever = StartProgress::new(None);
        let pending = status(JobState::Pending, "waiting");
        forever.observe(&pending, Duration::ZERO);
        assert_eq!(forever.observe(&pending, Duration::from_secs(1 << 40)), StartStep::Nothing);
    }

    #[test]
    fn a_job_that_already_ended_counts_as_started() {
        let mut p = StartProgress::new(Some(Duration::from_secs(1)));
        assert_eq!(
            p.observe(&status(JobState::Failed, "rank 0 exited with code 1"), Duration::from_secs(5)),
            StartStep::Started
        );
    }
}
