//! `#SBATCH` directives as typed data, and the batch script that runs the bootstrap on every
//! node of the allocation with `srun`.
//!
//! sbatch reads directive lines itself (they are comments to bash) and splits them on
//! whitespace, so directive values cannot be shell-quoted: a value with whitespace, quotes,
//! a backslash or a control character is rejected instead. Values in the script body go through
//! [`shell::quote`].

use crate::config::SlurmHost;
use crate::placement::SlurmPlacement;
use theseus_core::shell;
use theseus_core::solver::Plan;
use thiserror::Error;

/// Memory per node when the host sets none (the original's default).
pub const DEFAULT_MEM: &str = "64G";

/// A directive that cannot be written safely.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SbatchError {
    /// A value sbatch would misread (empty, whitespace, quotes, backslash, control characters).
    #[error("invalid value {value:?} for `#SBATCH --{option}`: {problem}")]
    InvalidValue {
        /// The option (`job-name`).
        option: &'static str,
        /// The value.
        value: String,
        /// Why.
        problem: &'static str,
    },
    /// An `extra_directives` entry that is not one `--option[=value]` line.
    #[error("invalid extra directive {0:?}: it must start with `--` and be one line")]
    InvalidExtra(String),
    /// An `extra_directives` entry that sets what theseus sets itself.
    #[error(
        "extra directive {0:?} sets what theseus sets itself (the job's --comment is how it finds the job when \
         sbatch's answer cannot be read): remove it from the host's extra_directives"
    )]
    ReservedExtra(String),
    /// A plan with no nodes.
    #[error("a slurm job needs at least one node")]
    NoNodes,
}

/// Where the batch script points Slurm and the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbatchPaths {
    /// The bootstrap script every node runs.
    pub bootstrap: String,
    /// `--output` (may contain Slurm patterns such as `%j`).
    pub output: String,
    /// `--error`; `None` sends stderr to `output`.
    pub error: Option<String>,
}

/// The `#SBATCH` directives of one job, validated. Every job is requeue-able and appends to its
/// log ([`Directives::lines`]); a host's `extra_directives` come last, so its `--no-requeue`
/// wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directives {
    /// `--job-name`.
    pub job_name: String,
    /// `--comment`: what finds the job when sbatch's answer cannot be read
    /// ([`Directives::with_comment`]).
    pub comment: Option<String>,
    /// `--partition`.
    pub partition: Option<String>,
    /// `--nodes`; one task per node.
    pub nodes: u32,
    /// `--gres` per node (`gpu:h100:4` or `gpu:4`), `None` for CPU jobs.
    pub gres: Option<String>,
    /// `--mem` per node.
    pub mem: String,
    /// `--time`: the host's `time:`, else [`crate::config::DEFAULT_SLURM_TIME`].
    pub time: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--qos`.
    pub qos: Option<String>,
    /// `--exclude`, joined with commas.
    pub exclude: Vec<String>,
    /// `--constraint`.
    pub constraint: Option<String>,
    /// `--output`.
    pub output: String,
    /// `--error`.
    pub error: String,
    /// Extra lines, each `--option[=value]`.
    pub extra: Vec<String>,
}

impl Directives {
    /// The directives for `plan` on `host`. The partition's own constraint wins over the
    /// host's. Every value is checked here, so [`Directives::lines`] cannot fail.
    pub fn new(host: &SlurmHost, plan: &Plan, job_name: &str, paths: &SbatchPaths) -> Result<Self, SbatchError> {
        if plan.nodes == 0 {
            return Err(SbatchError::NoNodes);
        }
        let placement = SlurmPlacement::of(plan);
        let gres = (plan.chips_per_node > 0).then(|| match &placement.gres_type {
            Some(ty) => format!("gpu:{ty}:{}", plan.chips_per_node),
            None => format!("gpu:{}", plan.chips_per_node),
        });
        let partition_constraint = placement
            .partition
            .as_deref()
            .and_then(|p| host.partitions.iter().find(|c| c.name() == p))
            .and_then(|c| c.constraint());
        let d = Directives {
            job_name: job_name.to_owned(),
            comment: None,
            partition: placement.partition.clone(),
            nodes: plan.nodes,
            gres,
            mem: host.mem.clone().unwrap_or_else(|| DEFAULT_MEM.to_owned()),
            time: Some(host.time_limit().to_owned()),
            account: host.account.clone(),
            qos: host.qos.clone(),
            exclude: host.exclude.clone(),
            constraint: partition_constraint.map(str::to_owned).or_else(|| host.constraint.clone()),
            output: paths.output.clone(),
            error: paths.error.clone().unwrap_or_else(|| paths.output.clone()),
            extra: host.extra_directives.clone(),
        };
        d.validate()?;
        Ok(d)
    }

    /// The same directives with `--comment=COMMENT`, checked like every value.
    pub fn with_comment(mut self, comment: &str) -> Result<Self, SbatchError> {
        check("comment", comment)?;
        self.comment = Some(comment.to_owned());
        self.validate()?;
        Ok(self)
    }

    /// The directive lines, in the original's order, each starting with `#SBATCH `.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!("--job-name={}", self.job_name)];
        if let Some(c) = &self.comment {
            out.push(format!("--comment={c}"));
        }
        if let Some(p) = &self.partition {
            out.push(format!("--partition={p}"));
        }
        out.push(format!("--nodes={}", self.nodes));
        out.push("--ntasks-per-node=1".to_owned());
        if let Some(g) = &self.gres {
            out.push(format!("--gres={g}"));
        }
        out.push(format!("--mem={}", self.mem));
        if let Some(t) = &self.time {
            out.push(format!("--time={t}"));
        }
        out.push(format!("--output={}", self.output));
        out.push(format!("--error={}", self.error));
        // Requeue-able, so that a preempted job (PreemptMode=REQUEUE) comes back instead of
        // being cancelled: sites often set JobRequeue=0, which makes jobs that do not ask
        // non-requeue-able. The log of the run is one file for all its attempts: without
        // append Slurm truncates it when a requeued job starts again (JobFileAppend=0, the
        // default), and the first attempt's lines and Slurm's "CANCELLED AT ... DUE TO
        // PREEMPTION" go with it.
        out.push("--requeue".to_owned());
        out.push("--open-mode=append".to_owned());
        if let Some(c) = &self.constraint {
            out.push(format!("--constraint={c}"));
        }
        if let Some(a) = &self.account {
            out.push(format!("--account={a}"));
        }
        if let Some(q) = &self.qos {
            out.push(format!("--qos={q}"));
        }
        if !self.exclude.is_empty() {
            out.push(format!("--exclude={}", self.exclude.join(",")));
        }
        out.extend(self.extra.iter().cloned());
        out.into_iter().map(|l| format!("#SBATCH {l}")).collect()
    }

    fn validate(&self) -> Result<(), SbatchError> {
        check("job-name", &self.job_name)?;
        let optional = [
            ("partition", &self.partition),
            ("gres", &self.gres),
            ("time", &self.time),
            ("comment", &self.comment),
            ("account", &self.account),
            ("qos", &self.qos),
            ("constraint", &self.constraint),
        ];
        for (option, value) in optional {
            if let Some(v) = value {
                check(option, v)?;
            }
        }
        check("mem", &self.mem)?;
        check("output", &self.output)?;
        check("error", &self.error)?;
        for node in &self.exclude {
            check("exclude", node)?;
            if node.contains(',') {
                // A comma inside one entry would silently exclude more nodes than it names.
                return Err(invalid("exclude", node, "one node per entry"));
            }
        }
        for line in &self.extra {
            if !line.starts_with("--") || line.len() == 2 || line.chars().any(char::is_control) {
                return Err(SbatchError::InvalidExtra(line.clone()));
            }
            if self.comment.is_some() && (line == "--comment" || line.starts_with("--comment=")) {
                return Err(SbatchError::ReservedExtra(line.clone()));
            }
        }
        Ok(())
    }
}

/// The batch script: the directives, then `srun` running `bash <bootstrap>` once per node.
/// `--kill-on-bad-exit=1` stops every node when one fails, and the script exits with srun's
/// status.
pub fn render(directives: &Directives, bootstrap: &str) -> String {
    let mut s = String::from("#!/bin/bash\n");
    for line in directives.lines() {
        s.push_str(&line);
        s.push('\n');
    }
    s.push_str("# Generated by theseus. One task per node; the bootstrap wires up ranks itself.\n");
    s.push_str("set -euo pipefail\n");
    s.push_str(&format!("exec srun --kill-on-bad-exit=1 bash {}\n", shell::quote(bootstrap)));
    s
}

/// The first node's address for the JAX coordinator, computed in the batch script (which runs
/// on that node): its `NodeAddr` from `scontrol`, since node names need not resolve. An explicit
/// `THESEUS_COORDINATOR_ADDRESS` is left alone. `__PORT__` is replaced by the port.
const COORDINATOR_PROLOGUE: &str = r#"if [ -z "${THESEUS_COORDINATOR_ADDRESS:-}" ]; then
  theseus_first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1 || true)
  theseus_addr=$(scontrol show node "$theseus_first" -o 2>/dev/null | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p' | head -n1 || true)
  export THESEUS_COORDINATOR_ADDRESS="${theseus_addr:-$theseus_first}:__PORT__"
  export JAX_COORDINATOR_BIND_ADDRESS="$THESEUS_COORDINATOR_ADDRESS"
fi
"#;

/// Slurm KILLs what is left of a cancelled (or timed-out) job KillWait seconds after its TERM;
/// the bootstrap's grace ends before that (`THESEUS_KILL_DEADLINE_SECONDS`).
const KILL_DEADLINE: &str = r#"theseus_kill_wait=$(scontrol show config 2>/dev/null | sed -n 's/^KillWait *= *\([0-9][0-9]*\) sec.*/\1/p' || true)
export THESEUS_KILL_DEADLINE_SECONDS="${theseus_kill_wait:-}"
"#;

/// The script the bootstrap runs on a signal to learn whether Slurm preempts the job with a
/// grace (`THESEUS_PREEMPT_HOLD`, see `preempt_hold.sh`): shipped by the backend next to the
/// bootstrap, under this name.
pub const PREEMPT_HOLD_FILE: &str = "preempt-hold.sh";

/// The contents of [`PREEMPT_HOLD_FILE`].
pub const PREEMPT_HOLD: &str = include_str!("preempt_hold.sh");

/// The batch script of a theseus job: like [`render`], with `srun --label` (each line of
/// output starts with `<rank>: `) and, for multi-node jobs, the coordinator address of the
/// first node's `NodeAddr` on `coordinator_port`. `first_step` (argv, quoted here) runs once
/// per node as an `srun` step before the bootstrap (the copy of a node-local run dir).
pub fn render_job(
    directives: &Directives,
    bootstrap: &str,
    coordinator_port: Option<u16>,
    first_step: Option<&[String]>,
) -> String {
    let mut s = String::from("#!/bin/bash\n");
    for line in directives.lines() {
        s.push_str(&line);
        s.push('\n');
    }
    s.push_str("# Generated by theseus. One task per node; the bootstrap wires up ranks itself.\n");
    s.push_str("set -euo pipefail\n");
    s.push_str(KILL_DEADLINE);
    let hold = std::path::Path::new(bootstrap).with_file_name(PREEMPT_HOLD_FILE);
    s.push_str(&format!("export THESEUS_PREEMPT_HOLD={}\n", shell::quote(&hold.to_string_lossy())));
    if let Some(port) = coordinator_port {
        s.push_str(&COORDINATOR_PROLOGUE.replace("__PORT__", &port.to_string()));
    }
    if let Some(argv) = first_step {
        s.push_str(&format!("srun --ntasks-per-node=1 --kill-on-bad-exit=1 {}\n", shell::join(argv)));
    }
    s.push_str(&format!("exec srun --kill-on-bad-exit=1 --label bash {}\n", shell::quote(bootstrap)));
    s
}

/// [`Directives::new`] then [`render`].
pub fn build(host: &SlurmHost, plan: &Plan, job_name: &str, paths: &SbatchPaths) -> Result<String, SbatchError> {
    Ok(render(&Directives::new(host, plan, job_name, paths)?, &paths.bootstrap))
}

fn check(option: &'static str, value: &str) -> Result<(), SbatchError> {
    if value.is_empty() {
        return Err(invalid(option, value, "empty"));
    }
    if value.chars().any(|c| c.is_control()) {
        return Err(invalid(option, value, "contains a newline or control character"));
    }
    if value.chars().any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\')) {
        return Err(invalid(option, value, "sbatch cannot read whitespace, quotes or backslashes here"));
    }
    Ok(())
}

fn invalid(option: &'static str, value: &str, problem: &'static str) -> SbatchError {
    SbatchError::InvalidValue { option, value: value.to_owned(), problem }
}

#[cfg(test)]
mod tests;
