//! What several commands print the same way on stdout: JSON, a run's status, a line of a run's
//! output.

use anyhow::Result;
use serde_json::json;
use theseus_core::backend::{JobStatus, LogLine};
use theseus_core::ledger::Record;

use crate::args::OutputFormat;
use crate::context::Context;

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints the state of `record`'s run (`status`, `cancel`): JSON, or a line with its message
/// and, for several ranks, one line per rank.
///
/// `resume` is what the run was submitted to resume from (`--restore`, `--fresh`), as the
/// ledger keeps it; the attempt is shown when the backend counts more than one start.
/// `batch_search` is the run's `batch-search.json` when it has one (shown as one line of its
/// probes, see [`theseus_core::batch_search::summary`]).
pub(crate) fn print_status(
    ctx: &Context,
    record: &Record,
    status: &JobStatus,
    resume: Option<&serde_json::Value>,
    batch_search: Option<&serde_json::Value>,
) -> Result<()> {
    if ctx.output == OutputFormat::Json {
        let mut shown = json!({"name": record.identity.name, "run_id": record.identity.run_id, "host": record.host, "status": status});
        if let Some(resume) = resume {
            shown["resume"] = resume.clone();
        }
        if let Some(search) = batch_search {
            shown["batch_search"] = search.clone();
        }
        return print_json(&shown);
    }
    let code = status.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
    // Said once: a backend's interruption line ("restarting, attempt 2 of 4") already names it.
    let said = status.message.as_deref().is_some_and(|m| m.contains("attempt "));
    let attempt = status.attempt.filter(|a| *a > 1 && !said).map(|a| format!(", attempt {a}")).unwrap_or_default();
    println!("{} {} on {}: {}{attempt}{code}", record.identity.name, record.identity.run_id, record.host, status.state);
    if let Some(m) = &status.message {
        println!("  {m}");
    }
    if let Some(line) = batch_search.and_then(theseus_core::batch_search::summary) {
        println!("  {line}");
    }
    if status.ranks.len() > 1 {
        for r in &status.ranks {
            let code = r.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
            let place = r.location.as_deref().map(|l| format!(" on {l}")).unwrap_or_default();
            let restarts = match r.restarts {
                Some(1) => ", restarted once".to_owned(),
                Some(n) if n > 1 => format!(", restarted {n} times"),
                _ => String::new(),
            };
            println!("  rank {}: {}{place}{code}{restarts}", r.rank, r.state);
        }
    }
    Ok(())
}

/// Prints a line of a run's output, prefixed with where it came from when that is known.
pub(crate) fn print_line(line: &LogLine) {
    match (&line.source, line.rank) {
        (Some(source), _) => println!("[{source}] {}", line.text),
        (None, Some(r)) => println!("[rank-{r}] {}", line.text),
        (None, None) => println!("{}", line.text),
    }
}

/// The `uv sync --group` names of a job, for `plan` and `--dry-run`: `a, b`, or `none`.
pub(crate) fn uv_groups(groups: &[String]) -> String {
    if groups.is_empty() { "none".to_owned() } else { groups.join(", ") }
}
