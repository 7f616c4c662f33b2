//! Parsers for the text and JSON the Slurm backend reads from remote commands. Each submodule
//! names the exact command it expects as a constant; the parsers never run anything.

pub use theseus_backend_ssh::parse::ParseError;
use theseus_core::backend::{JobState, JobStatus};

pub mod preempt;
pub mod reason;
pub mod sacct;
pub mod sinfo;
pub mod squeue;

/// Shell variables a site (or a user's profile) may set that change what `squeue`, `sinfo`,
/// `sacct` and `scontrol` print or which jobs and nodes they list (`SQUEUE_FORMAT`,
/// `SLURM_TIME_FORMAT=relative`, ...): every Slurm query of the backends runs without them
/// ([`clean_env`], and `unset` in the remote scripts). Explicit formats win over most of them,
/// but not over the filters (`SQUEUE_PARTITION`, `SINFO_PARTITION`, `SQUEUE_USERS`).
macro_rules! slurm_env_vars {
    () => {
        "SQUEUE_FORMAT SQUEUE_FORMAT2 SQUEUE_SORT SQUEUE_STATES SQUEUE_PARTITION SQUEUE_USERS SQUEUE_ACCOUNT \
         SQUEUE_QOS SQUEUE_NAMES SINFO_FORMAT SINFO_PARTITION SINFO_SORT SACCT_FORMAT SLURM_TIME_FORMAT"
    };
}
pub(crate) use slurm_env_vars;

/// `env -u VAR ...` for each variable of the crate's `slurm_env_vars!` (Slurm's own `SQUEUE_*`,
/// `SINFO_*`, `SACCT_FORMAT` and `SLURM_TIME_FORMAT`): the start of the argv of every Slurm query
/// run as a plain command (its constant's words follow).
pub fn clean_env() -> Vec<String> {
    let mut argv = vec!["env".to_owned()];
    for var in slurm_env_vars!().split_whitespace() {
        argv.extend(["-u".to_owned(), var.to_owned()]);
    }
    argv
}

/// One Slurm job as `squeue` or `sacct` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    /// Job id as Slurm prints it (`123`, `123_4` for an array task).
    pub job_id: String,
    /// Slurm's state name (`RUNNING`, `OUT_OF_MEMORY`), without `by <uid>` details.
    pub slurm_state: String,
    /// What that state means to theseus.
    pub state: JobState,
    /// Exit code, for finished jobs whose code is known.
    pub exit_code: Option<i32>,
    /// Why the job is in its state (Slurm's reason, or what a failure state means).
    pub message: Option<String>,
    /// Allocated nodes as a Slurm host list (see [`crate::nodelist::expand`]), when known.
    pub nodes: Option<String>,
    /// Slurm's reason code (`Resources`, `PartitionNodeLimit`), when it gave one.
    pub reason: Option<String>,
}

impl SlurmJob {
    /// Builds a job from Slurm's state text (`CANCELLED by 1000`, `R`), reason and exit code.
    pub(crate) fn new(
        job_id: &str,
        state_text: &str,
        reason: Option<&str>,
        exit_code: Option<i32>,
        nodes: Option<&str>,
    ) -> Self {
        let mut words = state_text.split_whitespace();
        let slurm_state = words.next().unwrap_or("").to_ascii_uppercase();
        let detail: Vec<&str> = words.collect();
        let state = map_state(&slurm_state);
        let reason = reason.map(str::trim).filter(|r| !r.is_empty() && !matches!(*r, "None" | "(null)"));
        let mut message = match state {
            JobState::Unknown => Some(format!("unknown slurm state `{slurm_state}`")),
            _ => describe(&slurm_state).map(str::to_owned),
        };
        if !detail.is_empty() {
            // `CANCELLED by 1000`: who cancelled it.
            message =
                Some(format!("{} {}", message.unwrap_or_else(|| slurm_state.to_ascii_lowercase()), detail.join(" ")));
        }
        if let Some(r) = reason {
            message = Some(match message {
                Some(m) => format!("{m} ({r})"),
                None => format!("{} ({r})", slurm_state.to_ascii_lowercase()),
            });
            // A pending job's reason in plain words too: the one sentence a user reads.
            if let (JobState::Pending, Some(words), Some(m)) = (state, self::reason::explain(r), message.as_mut()) {
                m.push_str(": ");
                m.push_str(words);
            }
        }
        // A finished job always has a code; a COMPLETED job whose code Slurm did not print is 0.
        let exit_code = match state {
            JobState::Completed => Some(exit_code.unwrap_or(0)),
            s if s.is_terminal() => exit_code,
            _ => None,
        };
        let nodes = nodes.map(str::trim).filter(|n| !n.is_empty() && *n != "(null)" && *n != "None assigned");
        SlurmJob {
            job_id: job_id.to_owned(),
            slurm_state,
            state,
            exit_code,
            message,
            nodes: nodes.map(str::to_owned),
            reason: reason.map(str::to_owned),
        }
    }

    /// The job as a [`JobStatus`] (no per-rank detail).
    pub fn to_status(&self) -> JobStatus {
        JobStatus {
            state: self.state,
            exit_code: self.exit_code,
            message: self.message.clone(),
            ranks: Vec::new(),
            attempt: None,
        }
    }
}

/// Maps a Slurm state name or `squeue %t` code to a [`JobState`]. Unknown names map to
/// [`JobState::Unknown`].
pub fn map_state(name: &str) -> JobState {
    match name.trim().to_ascii_uppercase().trim_end_matches('+') {
        "PENDING" | "PD" | "CONFIGURING" | "CF" | "REQUEUED" | "RQ" | "REQUEUE_HOLD" | "RH" | "REQUEUE_FED" | "RF"
        | "RESV_DEL_HOLD" | "RD" | "SUSPENDED" | "S" | "RESIZING" | "RS" => JobState::Pending,
        "RUNNING" | "R" | "COMPLETING" | "CG" | "STAGE_OUT" | "SO" | "SIGNALING" | "SI" | "STOPPED" | "ST" => {
            JobState::Running
        }
        "COMPLETED" | "CD" => JobState::Completed,
        "FAILED" | "F" | "OUT_OF_MEMORY" | "OOM" | "NODE_FAIL" | "NF" | "BOOT_FAIL" | "BF" | "TIMEOUT" | "TO"
        | "DEADLINE" | "DL" | "SPECIAL_EXIT" | "SE" => JobState::Failed,
        "CANCELLED" | "CA" | "REVOKED" | "RV" => JobState::Cancelled,
        "PREEMPTED" | "PR" => JobState::Preempted,
        _ => JobState::Unknown,
    }
}

/// A plain sentence for the states whose name alone does not say what happened.
fn describe(slurm_state: &str) -> Option<&'static str> {
    Some(match slurm_state {
        "OUT_OF_MEMORY" | "OOM" => "out of memory",
        "NODE_FAIL" | "NF" => "a node of the job failed",
        "BOOT_FAIL" | "BF" => "a node failed to boot",
        "TIMEOUT" | "TO" => "time limit reached",
        "DEADLINE" | "DL" => "deadline reached",
        "PREEMPTED" | "PR" => "preempted by another job",
        "CANCELLED" | "CA" => "cancelled",
        "FAILED" | "F" => "failed",
        _ => return None,
    })
}

/// The code of a `sacct`/`squeue` exit code field `CODE:SIGNAL` (`2:0` is 2, `0:9` is 128 + 9 as
/// a shell reports a signal death). `None` when unparseable.
pub(crate) fn parse_exit_code(s: &str) -> Option<i32> {
    let s = s.trim();
    let (code, signal) = s.split_once(':').unwrap_or((s, "0"));
    let code: i32 = code.parse().ok()?;
    let signal: i32 = signal.parse().ok()?;
    Some(if code == 0 && signal > 0 { 128 + signal } else { code })
}
