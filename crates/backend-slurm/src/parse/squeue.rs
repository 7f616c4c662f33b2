//! `squeue` output for one job → [`SlurmJob`]: `squeue --json` (Slurm 22.05, openapi v0.0.38)
//! first, the `|`-separated text format as a fallback.

use serde::Deserialize;
use serde_json::Value;

use super::{ParseError, SlurmJob, parse_exit_code};

/// `squeue --json` for one job; append the quoted job id. Finished jobs stay listed for
/// `MinJobAge` (300 s by default), then vanish: use `sacct` for them.
pub const SQUEUE_JSON_COMMAND: &str = "squeue --json --states=all --jobs";

/// Text fallback for one job; append the quoted job id.
pub const SQUEUE_TEXT_COMMAND: &str = "squeue --noheader --states=all --format='%i|%T|%r|%N' --jobs";

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    jobs: Vec<JsonJob>,
}

#[derive(Deserialize)]
struct JsonJob {
    job_id: Value,
    #[serde(default)]
    job_state: Value,
    #[serde(default)]
    state_reason: Option<String>,
    #[serde(default)]
    nodes: Option<String>,
    #[serde(default)]
    exit_code: Value,
}

/// Finds `job_id` in `squeue --json` output. `Ok(None)` when Slurm no longer lists it.
/// `job_state` is a string in 22.05 and a list of strings in later versions; `exit_code` is a
/// raw wait status in 22.05 and `{status, return_code, signal}` later; both are accepted.
pub fn parse_json(output: &str, job_id: &str) -> Result<Option<SlurmJob>, ParseError> {
    let res: Response =
        serde_json::from_str(output).map_err(|source| ParseError::Json { command: "squeue", source })?;
    let Some(job) = res.jobs.into_iter().find(|j| value_text(&j.job_id).as_deref() == Some(job_id)) else {
        return Ok(None);
    };
    let state = match &job.job_state {
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "),
        other => value_text(other).unwrap_or_default(),
    };
    Ok(Some(SlurmJob::new(
        job_id,
        &state,
        job.state_reason.as_deref(),
        json_exit_code(&job.exit_code),
        job.nodes.as_deref(),
    )))
}

/// Parses [`SQUEUE_TEXT_COMMAND`] output and finds `job_id`. `Ok(None)` when it is not listed
/// (squeue prints nothing, or only other jobs).
pub fn parse_text(output: &str, job_id: &str) -> Result<Option<SlurmJob>, ParseError> {
    for (idx, raw) in output.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.splitn(4, '|').map(str::trim).collect();
        let [id, state, reason, nodes] = fields[..] else {
            return Err(ParseError::line("squeue", idx + 1, raw, "expected 4 `|`-separated fields"));
        };
        if id == job_id {
            return Ok(Some(SlurmJob::new(id, state, Some(reason), None, Some(nodes))));
        }
    }
    Ok(None)
}

/// A JSON number or string as text.
fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The exit code in a 22.05 raw wait status (`256` is exit 1, `9` is SIGKILL) or a later
/// `{return_code, signal: {signal_id}}` object.
fn json_exit_code(v: &Value) -> Option<i32> {
    match v {
        Value::Number(n) => {
            let status = i32::try_from(n.as_i64()?).ok()?;
            let signal = status & 0x7f;
            Some(if signal != 0 { 128 + signal } else { (status >> 8) & 0xff })
        }
        Value::String(s) => parse_exit_code(s),
        Value::Object(o) => {
            let signal = o.get("signal").and_then(|s| s.get("signal_id")).and_then(number);
            let code = o.get("return_code").and_then(number);
            match (code, signal) {
                (Some(0) | None, Some(sig)) if sig > 0 => Some(128 + sig),
                (code, _) => code,
            }
        }
        _ => None,
    }
}

/// A number, or a later openapi `{set, infinite, number}` wrapper.
fn number(v: &Value) -> Option<i32> {
    match v {
        Value::Number(n) => i32::try_from(n.as_i64()?).ok(),
        Value::Object(o) if o.get("set").and_then(Value::as_bool) != Some(false) => o.get("number").and_then(number),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use theseus_core::backend::JobState;

    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!("{}/test_data/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn json_22_05_running_pending_and_finished() {
        let out = fixture("squeue_22.05.json");
        let running = parse_json(&out, "41").unwrap().unwrap();
        assert_eq!((running.state, running.exit_code), (JobState::Running, None));
        assert_eq!(running.nodes.as_deref(), Some("node[1-2]"));
        assert_eq!(running.message, None);
        let pending = parse_json(&out, "42").unwrap().unwrap();
        assert_eq!(pending.state, JobState::Pending);
        assert_eq!(
            pending.message.as_deref(),
            Some("pending (Resources): waiting for the nodes it asked for to be free")
        );
        assert_eq!(pending.nodes, None);
        let failed = parse_json(&out, "43").unwrap().unwrap();
        assert_eq!((failed.state, failed.exit_code), (JobState::Failed, Some(3)));
        assert_eq!(failed.message.as_deref(), Some("failed (NonZeroExitCode)"));
        let timeout = parse_json(&out, "44").unwrap().unwrap();
        assert_eq!((timeout.state, timeout.slurm_state.as_str()), (JobState::Failed, "TIMEOUT"));
        assert_eq!(timeout.message.as_deref(), Some("time limit reached (TimeLimit)"));
        assert_eq!(timeout.exit_code, Some(128 + 15));
        assert_eq!(parse_json(&out, "99").unwrap(), None);
    }

    #[test]
    fn json_later_shapes() {
        let out = r#"{"jobs":[{"job_id":7,"job_state":["COMPLETED"],"state_reason":"None","nodes":"n1",
            "exit_code":{"status":["SUCCESS"],"return_code":{"set":true,"infinite":false,"number":0}}},
            {"job_id":8,"job_state":["FAILED"],"exit_code":{"return_code":0,"signal":{"signal_id":9}}}]}"#;
        let done = parse_json(out, "7").unwrap().unwrap();
        assert_eq!((done.state, done.exit_code), (JobState::Completed, Some(0)));
        let killed = parse_json(out, "8").unwrap().unwrap();
        assert_eq!((killed.state, killed.exit_code), (JobState::Failed, Some(137)));
        assert_eq!(parse_json(r#"{"jobs":[]}"#, "7").unwrap(), None);
        assert!(parse_json("not json", "7").is_err());
    }

    #[test]
    fn text_fallback() {
        let out = "12|RUNNING|None|node01\n13|PENDING|Priority|\n14|CANCELLED|None|gpu[1-2]\n";
        let running = parse_text(out, "12").unwrap().unwrap();
        assert_eq!((running.state, running.nodes.as_deref()), (JobState::Running, Some("node01")));
        let pending = parse_text(out, "13").unwrap().unwrap();
        assert_eq!(
            (pending.state, pending.message.as_deref()),
            (JobState::Pending, Some("pending (Priority): jobs of higher priority are ahead of it in the queue"))
        );
        assert_eq!(parse_text(out, "14").unwrap().unwrap().state, JobState::Cancelled);
        assert_eq!(parse_text("", "12").unwrap(), None);
        assert!(parse_text("12 RUNNING", "12").is_err());
    }
}
