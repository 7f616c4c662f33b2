//! The remote scripts of the Slurm backend (run on the login node) and the pure reading of
//! what they print.
//!
//! Every script is a constant run as `sh -c SCRIPT sh ARGS...` (`bash -c` where bash is
//! needed): values arrive as positional parameters, never as shell text. Every process of a
//! run carries the marker variable [`MARKER_VAR`](theseus_core::local::process::MARKER_VAR)
//! (exported before `sbatch`, which passes the environment on to the job); [`LEFT`] finds them
//! in `/proc` of the machine it runs on.

use theseus_core::backend::LogLine;

/// `WORK_DIR SCRIPT RUN_DIR LOG_FILE RUN_ID` (bash), secrets on stdin as NUL-terminated
/// `NAME=VALUE` records: creates the run and log dirs (Slurm does not create the output
/// file's dir), exports the secrets and the run's marker, and submits the batch script from
/// the work dir. Prints `sbatch --parsable` output (`JOBID[;CLUSTER]`).
pub(crate) const SUBMIT: &str = r#"set -e
work=$1; script=$2; run_dir=$3; log=$4
mkdir -p -- "$run_dir" "$(dirname -- "$log")"
while IFS= read -r -d '' kv; do export "$kv"; done
export THESEUS_LOCAL_RUN="$5"
cd -- "$work"
exec sbatch --parsable "$script"
"#;

/// `RUN_DIR`: what the run left in its status dir: `exists=0|1`, `cancelled=1`, then for each
/// rank's metadata file (`metadata.json`, `metadata.rank-N.json`) a `--- FILE` line and its
/// content.
pub(crate) const RUN_STATE: &str = r#"run_dir=$1
if [ ! -d "$run_dir" ]; then echo "exists=0"; exit 0; fi
echo "exists=1"
[ -e "$run_dir/cancelled" ] && echo "cancelled=1"
for f in "$run_dir"/metadata.json "$run_dir"/metadata.rank-*.json; do
  [ -r "$f" ] || continue
  echo "--- ${f##*/}"
  cat -- "$f"
  echo
done
exit 0
"#;

/// `RUN_DIR JOB_ID`: records that the user cancelled the run, then `scancel`s the job.
pub(crate) const CANCEL: &str = r#"set -e
[ -d "$1" ] && date -u +%Y-%m-%dT%H:%M:%SZ > "$1/cancelled"
exec scancel "$2"
"#;

/// `RUN_ID`: prints `left=<pids>`, the live processes carrying the run's marker.
pub(crate) const LEFT: &str = r#"pids=""
for f in $(grep -lzxF -- "THESEUS_LOCAL_RUN=$1" /proc/[0-9]*/environ 2>/dev/null); do
  p=${f#/proc/}; p=${p%/environ}
  [ "$p" = "$$" ] && continue
  s=$(sed -n 's/.*) \(.\).*/\1/p' "/proc/$p/stat" 2>/dev/null)
  [ -n "$s" ] && [ "$s" != Z ] && pids="$pids $p"
done
echo "left=$pids"
"#;

/// `LOG_FILE`: the log so far (nothing when it does not exist yet).
pub(crate) const CAT_LOG: &str = r#"[ -e "$1" ] || exit 0
exec cat -- "$1"
"#;

/// `LOG_FILE JOB_ID`: the log from the start, then new bytes as they are written, until Slurm
/// reports the job finished (a final state, or the job is no longer known). The end is decided
/// *before* each read, so everything written before the job ended is sent; Slurm leaves the
/// `COMPLETING` state only once every step's output is written.
pub(crate) const FOLLOW_LOG: &str = r#"log=$1; job=$2; off=0; k=0
finished() {
  out=$(squeue --noheader --states=all --format=%T --jobs "$job" 2>&1) && rc=0 || rc=$?
  if [ "$rc" -ne 0 ]; then
    case "$out" in *"Invalid job id"*) return 0 ;; *) return 1 ;; esac
  fi
  case "$out" in
    ""|PENDING|RUNNING|COMPLETING|CONFIGURING|SUSPENDED|REQUEUED|REQUEUE_HOLD|REQUEUE_FED|RESV_DEL_HOLD|RESIZING|SIGNALING|STAGE_OUT|STOPPED) return 1 ;;
    *) return 0 ;;
  esac
}
while :; do
  over=0
  if [ $((k % 5)) -eq 0 ] && finished; then over=1; fi
  k=$((k + 1))
  size=$(stat -c %s -- "$log" 2>/dev/null || echo 0)
  if [ "$size" -gt "$off" ]; then
    tail -c +$((off + 1)) -- "$log" | head -c $((size - off))
    off=$size
  fi
  [ "$over" = 1 ] && exit 0
  sleep 0.2
done
"#;

/// One rank's `metadata.json`, as the bootstrap last wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RankRecord {
    pub(crate) rank: u32,
    /// `running`, `completed`, `failed` or `preempted`.
    pub(crate) status: String,
    pub(crate) exit_code: Option<i32>,
}

/// What [`RUN_STATE`] printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RunState {
    pub(crate) exists: bool,
    pub(crate) cancelled: bool,
    /// Ranks that wrote metadata, by rank.
    pub(crate) ranks: Vec<RankRecord>,
}

impl RunState {
    /// The rank record of `rank`.
    pub(crate) fn rank(&self, rank: u32) -> Option<&RankRecord> {
        self.ranks.iter().find(|r| r.rank == rank)
    }

    /// The job's exit code by the ranks' records: the first rank that failed by itself (not
    /// one stopped by a signal because another failed), else the first non-zero code, else 0
    /// when every rank completed.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        let nonzero = |r: &&RankRecord| r.exit_code.is_some_and(|c| c != 0);
        self.ranks
            .iter()
            .filter(nonzero)
            .find(|r| r.status == "failed")
            .or_else(|| self.ranks.iter().find(nonzero))
            .and_then(|r| r.exit_code)
            .or_else(|| (!self.ranks.is_empty() && self.ranks.iter().all(|r| r.status == "completed")).then_some(0))
    }
}

/// Reads [`RUN_STATE`] output; a malformed metadata file counts as absent.
pub(crate) fn parse_run_state(text: &str) -> RunState {
    let mut r = RunState::default();
    let mut blocks = text.split("\n--- ");
    let head = blocks.next().unwrap_or("");
    for line in head.lines() {
        match line.trim() {
            "exists=1" => r.exists = true,
            "cancelled=1" => r.cancelled = true,
            _ => {}
        }
    }
    for block in blocks {
        let json = block.split_once('\n').map_or("", |(_, rest)| rest);
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else { continue };
        let rank = v.get("rank").and_then(serde_json::Value::as_u64).and_then(|n| u32::try_from(n).ok());
        let status = v.get("status").and_then(|s| s.as_str());
        if let (Some(rank), Some(status)) = (rank, status) {
            let exit_code = v.get("exit_code").and_then(serde_json::Value::as_i64).and_then(|c| i32::try_from(c).ok());
            r.ranks.push(RankRecord { rank, status: status.to_owned(), exit_code });
        }
    }
    r.ranks.sort_by_key(|x| x.rank);
    r
}

/// Parses the `left=` line of [`LEFT`] into PIDs.
pub(crate) fn parse_left(text: &str) -> Vec<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("left="))
        .map(|pids| pids.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// Splits `srun --label`'s `<rank>: ` prefix (space-padded for wide jobs) off a line.
pub(crate) fn parse_line(line: &str) -> LogLine {
    let trimmed = line.trim_start_matches(' ');
    if let Some((n, text)) = trimmed.split_once(": ")
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && let Ok(rank) = n.parse()
    {
        return LogLine { rank: Some(rank), text: text.to_owned(), source: None };
    }
    if let Some(n) = trimmed.strip_suffix(':')
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && let Ok(rank) = n.parse()
    {
        // An empty line of a rank.
        return LogLine { rank: Some(rank), text: String::new(), source: None };
    }
    LogLine { rank: None, text: line.to_owned(), source: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_valid_shell() {
        for (name, script, shell) in [
            ("submit", SUBMIT, "bash"),
            ("run state", RUN_STATE, "sh"),
            ("cancel", CANCEL, "sh"),
            ("left", LEFT, "sh"),
            ("cat", CAT_LOG, "sh"),
            ("follow", FOLLOW_LOG, "sh"),
        ] {
            let out = std::process::Command::new(shell).arg("-n").arg("-c").arg(script).output().unwrap();
            assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }

    #[test]
    fn run_states() {
        assert_eq!(parse_run_state("exists=0\n"), RunState::default());
        let text = "exists=1\ncancelled=1\n--- metadata.json\n{\n  \"rank\": 0,\n  \"status\": \"preempted\",\n  \
                    \"exit_code\": 143\n}\n\n--- metadata.rank-1.json\n{\"rank\": 1, \"status\": \"failed\", \"exit_code\": 3}\n\n";
        let r = parse_run_state(text);
        assert!(r.exists && r.cancelled);
        assert_eq!(r.ranks.len(), 2);
        // The rank that failed by itself, not the one stopped because of it.
        assert_eq!(r.exit_code(), Some(3));
        let r = parse_run_state(
            "exists=1\n--- metadata.json\n{\"rank\": 0, \"status\": \"running\", \"exit_code\": null}\n",
        );
        assert_eq!((r.rank(0).unwrap().status.as_str(), r.exit_code()), ("running", None));
        let r = parse_run_state(
            "exists=1\n--- metadata.json\n{\"rank\": 0, \"status\": \"completed\", \"exit_code\": 0}\n",
        );
        assert_eq!(r.exit_code(), Some(0));
        // A half-written file is ignored, not an error.
        assert!(parse_run_state("exists=1\n--- metadata.json\n{\"status\": ").ranks.is_empty());
    }

    #[test]
    fn srun_labels() {
        let l = parse_line("0: conformance: ok hello");
        assert_eq!((l.rank, l.text.as_str()), (Some(0), "conformance: ok hello"));
        let l = parse_line(" 12: x");
        assert_eq!((l.rank, l.text.as_str()), (Some(12), "x"));
        assert_eq!(parse_line("1:").rank, Some(1));
        let l = parse_line("slurmstepd: error: *** JOB 5 CANCELLED ***");
        assert_eq!((l.rank, l.text.as_str()), (None, "slurmstepd: error: *** JOB 5 CANCELLED ***"));
        assert_eq!(parse_line("x1: y").rank, None);
    }

    #[test]
    fn left_pids() {
        assert_eq!(parse_left("left=\n"), Vec::<u32>::new());
        assert_eq!(parse_left("left= 12 13\n"), [12, 13]);
    }
}
