//! Whether a job runs the batch-size search of the original (its AUTO_BATCH, issue 28): a job
//! config whose `training.per_device_batch_size` is `-1` asks for it, and the bootstrap then
//! runs the job through `.theseus/batch_search.py`, which probes candidate sizes
//! (`THESEUS_DISPATCH_BATCH_SIZE`) and runs the job with the largest that fits.
//!
//! As in the original, `THESEUS_DISPATCH_BATCH_SIZE` in the job's environment names the size and
//! turns the search off. Unlike the original, a job that cannot search is refused before it
//! starts instead of reaching its code with `-1`: on a `tpu` host (the original skipped the
//! search there), and with more than one process (the original probed each Volcano pod on its
//! own, where the probes' `jax.distributed.initialize` could wait for each other forever).
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use crate::job::{EnvVar, Experiment};
use crate::plan::{HostKind, Plan};
use crate::{Error, Result};

/// The config key of a job config that asks for the search with `-1`.
pub const KEY: &str = "training.per_device_batch_size";

/// The candidate sizes when `THESEUS_DISPATCH_BATCH_CANDIDATES` does not name them (the original's).
pub const DEFAULT_CANDIDATES: &str = "1024 512 256 128 64 32 16 10 8 4 3 2 1";

/// The environment variable that names the size (and turns the search off).
pub const SIZE_VARIABLE: &str = "THESEUS_DISPATCH_BATCH_SIZE";

/// Whether a job config asks for the search: its `training.per_device_batch_size` is `-1`.
/// The loader of job configs sets [`Experiment::batch_search`] from it, after `KEY=VALUE`
/// overrides.
pub fn asks_for_search(config: &serde_json::Value) -> bool {
    config.pointer("/training/per_device_batch_size").and_then(serde_json::Value::as_i64) == Some(-1)
}

/// Whether the job of `experiment`, with environment `env`, planned as `plan`, runs the
/// search: `Some(note)` for `plan` and `--dry-run` when it does, `None` when it does not ask or
/// `THESEUS_DISPATCH_BATCH_SIZE` names the size.
///
/// # Errors
/// [`Error::InvalidConfig`] naming the key and the fix, when the job asks on a `tpu` host or
/// with more than one process.
pub fn decide(experiment: &Experiment, env: &[EnvVar], plan: &Plan) -> Result<Option<String>> {
    if !experiment.batch_search {
        return Ok(None);
    }
    if env.iter().any(|v| v.name == SIZE_VARIABLE) {
        return Ok(None);
    }
    let asked = if asks_for_search(&experiment.config) {
        format!("{KEY}: -1 asks for a batch-size search")
    } else {
        "batch_search: true asks for a batch-size search".to_owned()
    };
    let fix =
        format!("set {KEY} to a number (e.g. `{KEY}=32` on the command line), or pass `--env {SIZE_VARIABLE}=32`");
    if plan.kind == HostKind::named("tpu") {
        return Err(Error::InvalidConfig(format!(
            "{asked}, which does not run on TPU hosts (host {}: its workers must start jax.distributed together, \
             and probes run on their own, as in the original); {fix}",
            plan.host
        )));
    }
    let processes = plan.processes();
    if processes > 1 {
        return Err(Error::InvalidConfig(format!(
            "{asked}, which runs in one process, and this job has {processes} (on {}): each probe would start \
             jax.distributed on its own; {fix}",
            plan.host
        )));
    }
    let candidates = env
        .iter()
        .find(|v| v.name == "THESEUS_DISPATCH_BATCH_CANDIDATES")
        .map_or(DEFAULT_CANDIDATES.to_owned(), |v| v.value.replace(',', " "));
    Ok(Some(format!(
        "batch-size search: probes at {candidates} (largest first) until one fits, then the job runs with the \
         largest size found; progress in batch-search.json beside metadata.json and in `theseus status`"
    )))
}

/// One line for `status` from a run's `batch-search.json`: `batch search: 1024 oom, 512 oom,
/// 256 stable -> 256 (running)`. `None` when the document is not one.
pub fn summary(doc: &serde_json::Value) -> Option<String> {
    let probes = doc.get("probes")?.as_array()?;
    let mut parts: Vec<String> = probes
        .iter()
        .filter_map(|p| {
            let size = p.get("size")?.as_u64()?;
            let outcome = p.get("outcome")?.as_str()?;
            let seconds = p.get("seconds").and_then(serde_json::Value::as_f64);
            Some(match seconds {
                Some(s) => format!("{size} {outcome} ({s:.0}s)"),
                None => format!("{size} {outcome}"),
            })
        })
        .collect();
    if parts.is_empty() {
        parts.push("no probe yet".to_owned());
    }
    let phase = doc.get("phase").and_then(serde_json::Value::as_str).unwrap_or("scan");
    let chosen = doc.get("chosen").and_then(serde_json::Value::as_u64);
    let reused = doc.get("reused").and_then(serde_json::Value::as_bool) == Some(true);
    let end = match (chosen, phase) {
        (Some(c), "done") => {
            let code = doc.pointer("/run/exit_code").and_then(serde_json::Value::as_i64);
            format!(" -> {c} (the run exited {})", code.map_or("?".to_owned(), |c| c.to_string()))
        }
        (Some(c), _) if reused => format!(" -> {c} (chosen by an earlier start of this run)"),
        (Some(c), "stopped") => format!(" -> {c} (stopped)"),
        (Some(c), _) => format!(" -> {c}"),
        (None, "failed") => {
            let code = doc.get("exit_code").and_then(serde_json::Value::as_i64);
            format!(" -> no size (search failed{})", code.map(|c| format!(", exit code {c}")).unwrap_or_default())
        }
        (None, "stopped") => " -> stopped".to_owned(),
        (None, _) => " ...".to_owned(),
    };
    Some(format!("batch search: {}{end}", parts.join(", ")))
}

#[cfg(test)]
mod tests;
