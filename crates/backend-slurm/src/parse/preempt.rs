//! Why a Slurm job lost an attempt, in one line with numbers: `preempted at <time> (partition
//! urgent job 3 of alice); requeued, attempt 2`.
//!
//! What Slurm 22.05 really reports (recorded from the lab, `test_data/recorded/preempt_*`):
//! - a job requeued by preemption (`PreemptMode=REQUEUE`, requeue-able) is PENDING again with
//!   `restart_cnt` (`Restarts=` in `scontrol`) one higher, `submit_time` reset to the moment of
//!   the requeue, `preempt_time` back to 0 and `Reason=BeginTime` until its credential lifetime
//!   has passed; nothing of it names the preemptor;
//! - a preempted job that is not requeue-able ends PREEMPTED with `preempt_time` set;
//! - slurmstepd writes `*** JOB 1 ON node1 CANCELLED AT 2026-11-27T17:54:51 DUE TO PREEMPTION
//!   ***` into the job's output (the node's local time; `DUE TO JOB REQUEUE` for `scontrol
//!   requeue`, `DUE TO NODE FAILURE`, `DUE TO TIME LIMIT`): the only record of the cause when the
//!   cluster keeps no accounting;
//! - the preemptor is a job that started at that very second (its `start_time`), in another
//!   partition: theseus infers it from the same `squeue --json --states=all` answer, which in
//!   22.05 lists every job (other users' too, unless the site's `PrivateData` hides them).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::ParseError;

/// How far apart (seconds) the preemption and the preemptor's start may be: slurmctld starts
/// the preemptor in the same scheduling pass, and the two times are whole seconds.
const SAME_PASS: i64 = 2;

/// A job that started when ours was preempted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemptor {
    /// Its job id.
    pub job_id: String,
    /// Its partition.
    pub partition: String,
    /// Its user, when listed.
    pub user: Option<String>,
}

/// What Slurm's records say about a job's earlier attempts and its last interruption.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct History {
    /// Slurm's state of the job now (`PENDING`, `RUNNING`, `PREEMPTED`).
    pub state: String,
    /// `restart_cnt`: how often the job was requeued.
    pub restarts: u32,
    /// When (Unix seconds) the job was last requeued (`submit_time` once requeued) or, for a
    /// PREEMPTED job, preempted (`preempt_time`).
    pub interrupted_at: Option<i64>,
    /// The job's partition.
    pub partition: Option<String>,
    /// Still running, preempted: within its partition's GraceTime, after which Slurm requeues
    /// it (or cancels it, when it is not requeue-able).
    pub in_grace: bool,
    /// Whether the job is requeue-able (`requeue`).
    pub requeue: bool,
    /// Jobs of other partitions that started at that second.
    pub preemptors: Vec<Preemptor>,
}

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    jobs: Vec<Value>,
}

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A time field: a number (22.05) or a later `{set, infinite, number}` wrapper; 0 is unset.
fn seconds(v: Option<&Value>) -> Option<i64> {
    let n = match v? {
        Value::Number(n) => n.as_i64(),
        Value::Object(o) if o.get("set").and_then(Value::as_bool) != Some(false) => {
            o.get("number").and_then(Value::as_i64)
        }
        _ => None,
    }?;
    (n > 0).then_some(n)
}

fn state_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "),
        other => text(other).unwrap_or_default(),
    }
}

/// The history of job `job_id` from `squeue --json --states=all` output; `Ok(None)` when the
/// job is not listed.
pub fn history(squeue_json: &str, job_id: &str) -> Result<Option<History>, ParseError> {
    let res: Response =
        serde_json::from_str(squeue_json).map_err(|source| ParseError::Json { command: "squeue", source })?;
    let Some(job) = res.jobs.iter().find(|j| text(j.get("job_id")).as_deref() == Some(job_id)) else {
        return Ok(None);
    };
    let state = state_text(job.get("job_state"));
    let restarts = job.get("restart_cnt").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    let partition = text(job.get("partition"));
    let preempt_time = seconds(job.get("preempt_time"));
    let in_grace = preempt_time.is_some() && (state.starts_with("RUNNING") || state.starts_with("COMPLETING"));
    let requeue = job.get("requeue").and_then(Value::as_bool).unwrap_or(false);
    let interrupted_at = match preempt_time {
        Some(at) => Some(at),
        None if restarts > 0 => seconds(job.get("submit_time")),
        None => None,
    };
    let preemptors = interrupted_at
        .map(|at| {
            res.jobs
                .iter()
                .filter(|j| text(j.get("job_id")).as_deref() != Some(job_id))
                .filter(|j| text(j.get("partition")) != partition)
                .filter(|j| {
                    // Started then (preempted without grace, or requeued at the grace's end), or
                    // submitted or eligible then (it waits, or waited, for the grace to end).
                    ["start_time", "submit_time", "eligible_time"]
                        .iter()
                        .any(|k| seconds(j.get(*k)).is_some_and(|s| (s - at).abs() <= SAME_PASS))
                })
                .filter_map(|j| {
                    Some(Preemptor {
                        job_id: text(j.get("job_id"))?,
                        partition: text(j.get("partition")).unwrap_or_else(|| "?".into()),
                        user: text(j.get("user_name")),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(History { state, restarts, interrupted_at, partition, in_grace, requeue, preemptors }))
}

/// The last `CANCELLED AT <time> DUE TO <cause>` of slurmstepd in `log` (lines of the job's
/// output): `(time, cause)`, the cause in lower case (`preemption`, `job requeue`).
pub fn last_cancel(log: &str) -> Option<(String, String)> {
    log.lines().rev().find_map(|line| {
        let rest = &line[line.find(" CANCELLED AT ")? + " CANCELLED AT ".len()..];
        let (time, rest) = rest.split_once(' ')?;
        let cause = rest.strip_prefix("DUE TO ")?;
        let cause = cause.split(" ***").next()?.trim();
        (!cause.is_empty()).then(|| (time.to_owned(), cause.to_ascii_lowercase()))
    })
}

/// Every partition with its `PriorityTier`, hidden ones (another team's) included: which
/// partitions can preempt which ([`partition_tiers`]).
pub const PARTITIONS_COMMAND: &str = "scontrol --all show partition -o";

/// `PriorityTier` of each partition in [`PARTITIONS_COMMAND`] output.
pub fn partition_tiers(text: &str) -> BTreeMap<String, u32> {
    text.lines()
        .filter_map(|line| {
            let field = |key: &str| line.split_whitespace().find_map(|w| w.strip_prefix(key));
            Some((field("PartitionName=")?.to_owned(), field("PriorityTier=")?.parse().ok()?))
        })
        .collect()
}

/// `2026-11-27T17:54:51Z` for Unix seconds `at`.
pub fn utc(at: i64) -> String {
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    time::OffsetDateTime::from_unix_timestamp(at)
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_else(|| format!("@{at}"))
}

impl History {
    /// Keeps, of the jobs that started (or were submitted) at the preemption, those whose
    /// partition has a higher `PriorityTier` than the job's: with `preempt/partition_prio` only
    /// they can have preempted it, and another partition's job of the same second is a
    /// coincidence. Where no partition has a higher tier (preemption by QOS) or the tiers are
    /// unknown, the candidates stay.
    pub fn keep_higher_tiers(&mut self, tiers: &BTreeMap<String, u32>) {
        let Some(ours) = self.partition.as_ref().and_then(|p| tiers.get(p)) else { return };
        if !tiers.values().any(|t| t > ours) {
            return;
        }
        self.preemptors.retain(|p| tiers.get(&p.partition).is_some_and(|t| t > ours));
    }

    /// Whether the job lost an attempt (requeued, or ended PREEMPTED).
    pub fn interrupted(&self) -> bool {
        self.restarts > 0 || self.in_grace || self.ended_in_grace() || self.state.starts_with("PREEMPTED")
    }

    /// Preempted with a grace, and ended within it by itself: Slurm records it FAILED (or
    /// COMPLETED) and does not requeue it.
    fn ended_in_grace(&self) -> bool {
        !self.in_grace
            && !self.state.starts_with("PREEMPTED")
            && self.restarts == 0
            && self.interrupted_at.is_some()
            && ["FAILED", "COMPLETED", "CANCELLED"].iter().any(|s| self.state.starts_with(s))
    }

    /// The one line, or `None` for a job that never lost an attempt. `cancel` is
    /// [`last_cancel`] of the job's log, when it could be read; `reason` the pending reason.
    pub fn line(&self, cancel: Option<&(String, String)>, reason: Option<&str>) -> Option<String> {
        if !self.interrupted() {
            return None;
        }
        let at = self.interrupted_at.map(utc);
        let preempted = cancel.map(|(_, c)| c == "preemption").unwrap_or(!self.preemptors.is_empty())
            || self.in_grace
            || self.ended_in_grace()
            || self.state.starts_with("PREEMPTED");
        let what = if preempted {
            let when = at.or_else(|| cancel.map(|(t, _)| t.clone())).map(|t| format!(" at {t}")).unwrap_or_default();
            let by = if self.preemptors.is_empty() {
                " (Slurm lists no job that started then: the preemptor is not visible)".to_owned()
            } else {
                let jobs: Vec<String> = self
                    .preemptors
                    .iter()
                    .map(|p| {
                        let user = p.user.as_deref().map(|u| format!(" of {u}")).unwrap_or_default();
                        format!("partition {} job {}{user}", p.partition, p.job_id)
                    })
                    .collect();
                format!(" ({})", jobs.join(", "))
            };
            format!("preempted{when}{by}")
        } else {
            let when = at.map(|t| format!(" at {t}")).unwrap_or_default();
            match cancel {
                Some((_, cause)) => format!("requeued{when} ({cause})"),
                None => format!("requeued{when} (Slurm does not say why)"),
            }
        };
        let next = if self.in_grace {
            let then = if self.requeue {
                format!("requeued as attempt {}", self.restarts + 2)
            } else {
                "cancelled (the job is not requeue-able)".to_owned()
            };
            format!("; stopping within its partition's GraceTime, then {then}")
        } else if self.ended_in_grace() {
            "; it ended within its partition's GraceTime, so Slurm did not requeue it (a job must run on until \
             Slurm ends it)"
                .to_owned()
        } else if self.state.starts_with("PREEMPTED") {
            "; not requeued (the job is not requeue-able, or the site's PreemptMode cancels)".to_owned()
        } else {
            let pending = self.state.starts_with("PENDING");
            let wait = match reason.filter(|r| !r.is_empty() && *r != "None") {
                Some(r) if pending => format!(", waiting to start ({r})"),
                _ if pending => ", waiting to start".to_owned(),
                _ => String::new(),
            };
            let prefix = if preempted { "; requeued," } else { ";" };
            format!("{prefix} attempt {}{wait}", self.restarts + 1)
        };
        Some(format!("{what}{next}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cancel_line_of_slurmstepd() {
        let log = "0: step 10\nslurmstepd-node1: error: *** JOB 1 ON node1 CANCELLED AT 2026-11-27T17:54:51 DUE TO \
                   PREEMPTION ***\n0: resumed\n";
        assert_eq!(last_cancel(log), Some(("2026-11-27T17:54:51".into(), "preemption".into())));
        let two = format!(
            "{log}slurmstepd-node2: error: *** JOB 1 ON node2 CANCELLED AT 2026-11-27T18:00:00 DUE TO JOB REQUEUE ***\n"
        );
        assert_eq!(last_cancel(&two), Some(("2026-11-27T18:00:00".into(), "job requeue".into())));
        assert_eq!(last_cancel("CANCELLED AT x\nno\n"), None);
        assert_eq!(last_cancel(""), None);
    }

    fn job(id: u32, state: &str, partition: &str, start: i64, extra: &str) -> String {
        format!(
            r#"{{"job_id":{id},"job_state":"{state}","partition":"{partition}","start_time":{start},"user_name":"u{id}"{extra}}}"#
        )
    }

    #[test]
    fn lines_for_each_shape() {
        let out = format!(
            r#"{{"jobs":[{},{},{},{}]}}"#,
            job(1, "RUNNING", "gpu", 1_795_802_240, r#","restart_cnt":1,"submit_time":1795802091"#),
            job(3, "COMPLETED", "urgent", 1_795_802_091, ""),
            job(4, "RUNNING", "gpu", 1_795_802_091, ""),
            job(2, "PREEMPTED", "gpu", 1_795_802_000, r#","preempt_time":1795802091"#),
        );
        let h = history(&out, "1").unwrap().unwrap();
        assert_eq!(h.restarts, 1);
        assert_eq!(h.preemptors.iter().map(|p| p.job_id.as_str()).collect::<Vec<_>>(), ["3"]);
        let cancel = ("2026-11-27T17:54:51".to_owned(), "preemption".to_owned());
        assert_eq!(
            h.line(Some(&cancel), None).unwrap(),
            "preempted at 2026-11-27T17:54:51Z (partition urgent job 3 of u3); requeued, attempt 2"
        );
        let pending = History { state: "PENDING".into(), ..h.clone() };
        assert_eq!(
            pending.line(Some(&cancel), Some("BeginTime")).unwrap(),
            "preempted at 2026-11-27T17:54:51Z (partition urgent job 3 of u3); requeued, attempt 2, waiting to start \
             (BeginTime)"
        );
        // An admin's requeue is not a preemption, whatever else started then.
        let admin = ("2026-11-27T17:54:51".to_owned(), "job requeue".to_owned());
        assert_eq!(h.line(Some(&admin), None).unwrap(), "requeued at 2026-11-27T17:54:51Z (job requeue); attempt 2");
        let not_requeued = history(&out, "2").unwrap().unwrap();
        assert_eq!(
            not_requeued.line(None, None).unwrap(),
            "preempted at 2026-11-27T17:54:51Z (partition urgent job 3 of u3); not requeued (the job is not \
             requeue-able, or the site's PreemptMode cancels)"
        );
        // Within its grace (still RUNNING, preempt_time set): what comes next.
        let grace = format!(
            r#"{{"jobs":[{},{}]}}"#,
            job(5, "RUNNING", "gpu", 1_795_802_000, r#","preempt_time":1795802091,"requeue":true"#),
            job(3, "RUNNING", "urgent", 1_795_802_091, ""),
        );
        assert_eq!(
            history(&grace, "5").unwrap().unwrap().line(None, None).unwrap(),
            "preempted at 2026-11-27T17:54:51Z (partition urgent job 3 of u3); stopping within its partition's \
             GraceTime, then requeued as attempt 2"
        );
        // Never interrupted: no line.
        assert_eq!(history(&out, "3").unwrap().unwrap().line(None, None), None);
        assert_eq!(history(&out, "9").unwrap(), None);
    }
}
