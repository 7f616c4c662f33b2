//! A run whose vcjob is gone: Volcano's garbage collector deleted it (with its pods, and so
//! their logs) `ttlSecondsAfterFinished` after it finished, or someone deleted it. What is left
//! is on the PVC: the bootstrap's `metadata.json` (and `metadata.rank-<i>.json`) in the run's
//! status dir, which say how each rank ended and when, and the run's log file, which every pod's
//! script appended its output to (`render::pod_script`, through `tee -a`: the ranks' lines
//! interleaved, without their pod's name). Both are read through a short-lived helper pod that
//! mounts the PVC (`backend/gone.rs`, which runs the scripts here). This module is pure:
//! [`gone_what`] and [`gone_why`] word what happened to the job, [`ended_from`] turns the
//! metadata files into the run's end.

use k8s_openapi::jiff::Timestamp;
use theseus_core::backend::{JobState, JobStatus, RankStatus};

use crate::handle::HandleData;

/// The most of a log file `logs` prints of a run whose vcjob is gone: its end, when longer.
pub(crate) const LOG_TAIL_BYTES: u64 = 16 << 20;

/// Prints each metadata file of a run dir as `==> NAME` and its text (busybox `sh`); nothing
/// when the dir does not exist.
pub(crate) const READ_METADATA: &str = r#"set -u
dir=$1
# No run dir: no rank ever started its bootstrap (nothing to print).
[ -d "$dir" ] || exit 0
for f in "$dir"/metadata.json "$dir"/metadata.rank-*.json; do
  [ -f "$f" ] || continue
  printf '==> %s\n' "${f##*/}"
  cat -- "$f"
  printf '\n'
done
"#;

/// Prints the size of a log file, a newline, then its last `$2` bytes (busybox `sh`).
pub(crate) const READ_LOG: &str = r#"set -u
f=$1
[ -f "$f" ] || { echo "theseus: no log file $f on the PVC" >&2; exit 3; }
wc -c < "$f"
tail -c "$2" -- "$f"
"#;

/// `ttl` seconds in words: `1 d`, `12 h`, `90 s`.
fn human(ttl: u32) -> String {
    match ttl {
        t if t >= 86_400 && t % 86_400 == 0 => format!("{} d", t / 86_400),
        t if t >= 3600 && t % 3600 == 0 => format!("{} h", t / 3600),
        t if t >= 60 && t % 60 == 0 => format!("{} min", t / 60),
        t => format!("{t} s"),
    }
}

/// `ttl` seconds, in words too when that says more: `86400 s (1 d)`, `90 s`.
fn seconds(ttl: u32) -> String {
    match human(ttl) {
        words if words == format!("{ttl} s") => words,
        words => format!("{ttl} s ({words})"),
    }
}

/// The job that no longer exists and the likely reason, for `NotFound` (core's sentence reads
/// "... no longer exists").
pub(crate) fn gone_what(data: &HandleData) -> String {
    let why = match data.ttl_seconds_after_finished {
        Some(ttl) => format!(
            "Volcano collects a finished vcjob after its ttlSecondsAfterFinished, here {}, unless it is \
             deleted sooner",
            seconds(ttl)
        ),
        None => "deleted, or collected after its ttlSecondsAfterFinished".to_owned(),
    };
    format!("vcjob `{}` in namespace `{}` ({why})", data.job, data.namespace)
}

/// Why the vcjob of a run that ended at `ended` is gone, as of `now`: collected after its TTL
/// when that had passed, else deleted.
pub(crate) fn gone_why(data: &HandleData, ended: Option<Timestamp>, now: Timestamp) -> String {
    let job = format!("vcjob `{}`", data.job);
    match (data.ttl_seconds_after_finished, ended) {
        (Some(ttl), Some(ended)) if ended.as_second().saturating_add(i64::from(ttl)) <= now.as_second() => {
            format!("{job} is gone: collected {} after it finished (ttlSecondsAfterFinished {ttl})", human(ttl))
        }
        (Some(ttl), Some(_)) => format!("{job} is gone: deleted before its ttlSecondsAfterFinished ({ttl}) passed"),
        (Some(ttl), None) => {
            format!("{job} is gone: collected after its ttlSecondsAfterFinished ({ttl}), or deleted")
        }
        (None, _) => format!("{job} is gone (deleted, or collected after a ttlSecondsAfterFinished)"),
    }
}

/// One rank's metadata file.
#[derive(Debug, Clone, PartialEq)]
struct RankEnd {
    rank: u32,
    status: String,
    exit_code: Option<i32>,
    host: Option<String>,
    last: Option<Timestamp>,
}

/// Parses [`READ_METADATA`]'s output; files that do not parse are skipped (a rank killed while
/// it wrote one leaves only its temp file, never a half file: the bootstrap renames it in).
fn parse_metadata(out: &str) -> Vec<RankEnd> {
    let mut ends = Vec::new();
    for part in out.split("==> ").filter(|p| !p.trim().is_empty()) {
        let Some((_, body)) = part.split_once('\n') else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(body.trim()) else { continue };
        let text = |key: &str| v.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
        ends.push(RankEnd {
            rank: v.get("rank").and_then(serde_json::Value::as_u64).and_then(|r| u32::try_from(r).ok()).unwrap_or(0),
            status: text("status").unwrap_or_default(),
            exit_code: v.get("exit_code").and_then(serde_json::Value::as_i64).and_then(|c| i32::try_from(c).ok()),
            host: text("hostname"),
            last: text("last_heartbeat").and_then(|t| t.parse().ok()),
        });
    }
    ends.sort_by_key(|e| e.rank);
    ends
}

fn state_of(status: &str) -> JobState {
    match status {
        "completed" => JobState::Completed,
        "failed" => JobState::Failed,
        "preempted" => JobState::Preempted,
        _ => JobState::Unknown,
    }
}

/// The run's end from its metadata files ([`READ_METADATA`]'s output `out`, read from `dir`):
/// failed when a rank failed (its exit code), else preempted when one was stopped by a signal,
/// else completed when every rank completed; unknown when a rank never recorded its end (its pod
/// was killed at once) or no file is there. Also when the last rank ended.
pub(crate) fn ended_from(out: &str, dir: &str) -> (JobStatus, Option<Timestamp>) {
    let ends = parse_metadata(out);
    let ended = ends.iter().filter_map(|e| e.last).max();
    let ranks: Vec<RankStatus> = ends
        .iter()
        .map(|e| RankStatus {
            rank: e.rank,
            state: state_of(&e.status),
            exit_code: e.exit_code,
            location: e.host.clone(),
            restarts: None,
        })
        .collect();
    let failed = ranks.iter().find(|r| r.state == JobState::Failed);
    let (state, exit_code, said) = if ends.is_empty() {
        (JobState::Unknown, None, format!("no metadata.json in {dir}: the job never started its bootstrap"))
    } else if let Some(f) = failed {
        (JobState::Failed, f.exit_code, format!("rank {} failed, as {dir}/ says", f.rank))
    } else if let Some(p) = ranks.iter().find(|r| r.state == JobState::Preempted) {
        (JobState::Preempted, p.exit_code, format!("rank {} was stopped by a signal, as {dir}/ says", p.rank))
    } else if ranks.iter().all(|r| r.state == JobState::Completed) {
        (JobState::Completed, Some(0), format!("every rank completed, as {dir}/ says"))
    } else {
        let last = ends.iter().find(|e| state_of(&e.status) == JobState::Unknown);
        let rank = last.map_or(0, |e| e.rank);
        let seen = last.and_then(|e| e.last).map_or_else(|| "never".to_owned(), |t| t.to_string());
        (
            JobState::Unknown,
            None,
            format!("rank {rank} never recorded its end in {dir}/ (its last heartbeat: {seen}); its pod was killed"),
        )
    };
    let ended_at = ended.map(|t| format!(", last written {t}")).unwrap_or_default();
    (JobStatus { state, exit_code, message: Some(format!("{said}{ended_at}")), ranks, attempt: None }, ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(ttl: Option<u32>) -> HandleData {
        serde_json::from_value(serde_json::json!({"namespace": "ns", "job": "j", "ttl_seconds_after_finished": ttl}))
            .unwrap()
    }

    #[test]
    fn the_end_comes_from_every_rank_file() {
        let file = |rank: u32, status: &str, code: &str| {
            format!(
                "==> metadata{}.json\n{{\"rank\": {rank}, \"hostname\": \"j-worker-{rank}\", \"status\": \"{status}\", \
                 \"last_heartbeat\": \"2026-11-27T10:00:0{rank}Z\", \"exit_code\": {code}}}\n",
                if rank == 0 { String::new() } else { format!(".rank-{rank}") }
            )
        };
        let (s, ended) = ended_from(&(file(0, "completed", "0") + &file(1, "completed", "0")), "/w/status/r");
        assert_eq!((s.state, s.exit_code, s.ranks.len()), (JobState::Completed, Some(0), 2), "{s:?}");
        assert_eq!(ended.map(|t| t.to_string()).as_deref(), Some("2026-11-27T10:00:01Z"));
        let (s, _) = ended_from(&(file(0, "preempted", "143") + &file(1, "failed", "3")), "/d");
        assert_eq!((s.state, s.exit_code), (JobState::Failed, Some(3)), "a failed rank wins: {s:?}");
        assert!(s.message.as_deref().unwrap().contains("rank 1 failed"), "{s:?}");
        let (s, _) = ended_from(&(file(0, "preempted", "143") + &file(1, "completed", "0")), "/d");
        assert_eq!((s.state, s.exit_code), (JobState::Preempted, Some(143)));
        let (s, _) = ended_from(&(file(0, "running", "null") + &file(1, "completed", "0")), "/d");
        assert_eq!(s.state, JobState::Unknown, "{s:?}");
        assert!(s.message.as_deref().unwrap().contains("rank 0 never recorded its end"), "{s:?}");
        let (s, ended) = ended_from("", "/d");
        assert_eq!((s.state, ended), (JobState::Unknown, None));
        // A file that does not parse is skipped, not taken for a rank.
        let (s, _) = ended_from(&(file(0, "completed", "0") + "==> metadata.rank-1.json\n{\"rank\": 1,"), "/d");
        assert_eq!((s.state, s.ranks.len()), (JobState::Completed, 1));
    }

    #[test]
    fn the_job_is_said_collected_only_once_its_ttl_passed() {
        let ended: Timestamp = "2026-11-27T10:00:00Z".parse().unwrap();
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let why = gone_why(&data(Some(86_400)), Some(ended), at("2026-11-28T10:00:01Z"));
        assert!(why.contains("collected 1 d after it finished (ttlSecondsAfterFinished 86400)"), "{why}");
        let why = gone_why(&data(Some(86_400)), Some(ended), at("2026-11-27T11:00:00Z"));
        assert!(why.contains("deleted before its ttlSecondsAfterFinished"), "{why}");
        let why = gone_why(&data(None), Some(ended), at("2026-11-28T11:00:00Z"));
        assert!(why.contains("is gone (deleted, or collected"), "{why}");
        assert!(gone_what(&data(Some(600))).contains("ttlSecondsAfterFinished, here 600 s (10 min), unless"));
        assert!(gone_what(&data(Some(0))).contains("here 0 s, unless"));
        assert_eq!(human(90), "90 s");
        assert_eq!(human(7200), "2 h");
    }

    #[test]
    fn the_scripts_read_what_the_bootstrap_and_the_pods_wrote() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("metadata.json"), "{\"rank\": 0, \"status\": \"completed\", \"exit_code\": 0}")
            .unwrap();
        std::fs::write(
            dir.path().join("metadata.rank-1.json"),
            "{\"rank\": 1, \"status\": \"failed\", \"exit_code\": 2}",
        )
        .unwrap();
        std::fs::write(dir.path().join("metadata.json.tmp.7"), "{\"rank\": 0,").unwrap();
        let run = |script: &str, args: &[&str]| {
            std::process::Command::new("sh").args(["-c", script, "theseus-store"]).args(args).output().unwrap()
        };
        let out = run(READ_METADATA, &[dir.path().to_str().unwrap()]);
        assert!(out.status.success());
        let (s, _) = ended_from(&String::from_utf8_lossy(&out.stdout), "d");
        assert_eq!((s.state, s.exit_code, s.ranks.len()), (JobState::Failed, Some(2), 2), "{s:?}");
        let missing = run(READ_METADATA, &["/nonexistent/run"]);
        assert!(missing.status.success() && missing.stdout.is_empty(), "{missing:?}");
        let (s, _) = ended_from("", "/nonexistent/run");
        assert!(s.message.unwrap().contains("never started its bootstrap"));
        let log = dir.path().join("run.log");
        std::fs::write(&log, "one\ntwo\nthree\n").unwrap();
        let out = run(READ_LOG, &[log.to_str().unwrap(), "6"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim_start(), "14\nthree\n");
    }
}
