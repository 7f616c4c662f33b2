//! The remote scripts of the Slurm backend (run on the login node) and the pure reading of
//! what they print.
//!
//! Every script is a constant run as `sh -c SCRIPT sh ARGS...` (`bash -c` where bash is
//! needed): values arrive as positional parameters, never as shell text. Every process of a
//! run carries the marker variable [`MARKER_VAR`](theseus_core::local::process::MARKER_VAR)
//! (exported before `sbatch`, which passes the environment on to the job), but nothing here
//! looks for processes: the login node cannot see the compute nodes, so whether a job still
//! runs is what Slurm says (its job state and its steps, [`STEPS`]).

use theseus_core::backend::LogLine;

/// Slurm states of a job that is not over (`squeue --format=%T`), as one `case` pattern.
macro_rules! live_states {
    () => {
        "PENDING|RUNNING|COMPLETING|CONFIGURING|SUSPENDED|REQUEUED|REQUEUE_HOLD|REQUEUE_FED|RESV_DEL_HOLD|RESIZING|SIGNALING|STAGE_OUT|STOPPED"
    };
}

/// Prefix of the `--comment` every theseus job carries, followed by its run id: what finds the
/// job when sbatch's answer cannot be read ([`SUBMIT`], [`CANCEL_UNSUBMITTED`]).
pub(crate) const COMMENT_PREFIX: &str = "theseus-run:";

/// The first line of the query scripts: the site's output settings
/// ([`crate::parse::slurm_env_vars!`]) unset.
macro_rules! unset_slurm_env {
    () => {
        concat!("unset ", crate::parse::slurm_env_vars!(), "\n")
    };
}

/// [`theseus_backend_ssh::run_dir::start_prologue!`] with the batch script as `PROGRAM` (bash):
/// under the name's lock, and only while the run still owns its name
/// ([`theseus_backend_ssh::claim`]), with the secrets and the run's marker exported, submits the
/// batch script from the work dir, finds its job id and records it in `RUN_DIR/slurm_job`;
/// prints `slurm_job=ID`.
///
/// Sites wrap `sbatch` (quota and accounting notices before and after its answer, on stdout and
/// stderr), so the id is the line of the answer (`ID` or `ID;CLUSTER`) that Slurm lists with this
/// run's `--comment` ([`COMMENT_PREFIX`]); when no line is, the job of that comment; when sbatch
/// failed, only a live one (a wrapper may fail after submitting, but Slurm also lists a job it
/// rejected, as FAILED); on a Slurm that keeps no comments, the only id-shaped line. With none,
/// sbatch's exit code, or [`EXIT_NO_JOB_ID`] when it was 0 (no job of this run exists then).
/// The job itself keeps the user's environment: the site's output settings are unset for the
/// queries only.
pub(crate) const SUBMIT: &str = concat!(
    theseus_backend_ssh::run_dir::start_prologue!(),
    r#"comment="theseus-run:$me"
rc=0
out=$(sbatch --parsable "$prog" 9>&-) || rc=$?
q() { (
  "#,
    unset_slurm_env!(),
    r#"  exec squeue --noheader --states=all "$@"
) 9>&-; }
ids=$(printf '%s\n' "$out" | sed -n 's/^[[:space:]]*\([0-9][0-9]*\(_[0-9][0-9]*\)\{0,1\}\)\(;[^[:space:]]*\)\{0,1\}[[:space:]]*$/\1/p')
job=
for i in $ids; do
  if [ "$(q --format=%k --jobs "$i" 2>/dev/null)" = "$comment" ]; then job=$i; break; fi
done
if [ -z "$job" ]; then
  job=$(q --user="$(id -un)" --format='%i|%k' 2>/dev/null | awk -F'|' -v c="$comment" '$2 == c { print $1; exit }') || job=
fi
if [ -n "$job" ] && [ "$rc" -ne 0 ]; then
  # Slurm lists a job it rejected (FAILED, BadConstraints) under a new id: only a live one
  # was submitted.
  case $(q --format=%T --jobs "$job" 2>/dev/null) in
    "#,
    live_states!(),
    r#") ;;
    *) job= ;;
  esac
fi
if [ -z "$job" ] && [ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$ids" | grep -c .)" -eq 1 ] \
  && ! q --user="$(id -un)" --format='%k' 2>/dev/null | grep -q "^theseus-run:"; then
  job=$ids
fi
if [ -z "$job" ]; then
  printf '%s\n' "$out" >&2
  if [ "$rc" -ne 0 ]; then exit "$rc"; fi
  echo "sbatch exited 0 but printed no job id that Slurm lists, and Slurm lists no job with --comment=$comment" >&2
  exit 6
fi
printf '%s\n' "$job" > "$run_dir/slurm_job"
if [ "$rc" -ne 0 ]; then echo "sbatch exited with $rc, but Slurm lists job $job of this run: adopted" >&2; fi
printf 'slurm_job=%s\n' "$job"
"#
);

/// Exit code of [`SUBMIT`] when sbatch exited 0 and no job of the run can be found.
pub(crate) const EXIT_NO_JOB_ID: i32 = 6;

/// `NAME_DIR RUN_ID STALE_SECONDS`: the claim of the job's name ([`theseus_backend_ssh::claim`]);
/// a run is live while Slurm lists its job in a state that is not over, or while it is claimed,
/// not yet submitted, not cancelled and its claim is fresh.
pub(crate) const CLAIM: &str = concat!(
    unset_slurm_env!(),
    r#"
live() {
  d="$dir/$1"
  [ -d "$d" ] || return 1
  if [ -s "$d/slurm_job" ]; then
    j=$(cat -- "$d/slurm_job")
    if ! out=$(squeue --noheader --states=all --format=%T --jobs "$j" 2>&1); then
      case "$out" in *"Invalid job id"*) return 1 ;; esac
      echo "squeue failed: $out" >&2
      exit 5
    fi
    case "$out" in
      ""|"#,
    live_states!(),
    r#") return 0 ;;
      *) return 1 ;;
    esac
  fi
  [ -e "$d/cancelled" ] && return 1
  fresh "$d"
}
"#,
    theseus_backend_ssh::claim::claim_body!()
);

/// `RUN_DIR`: what the run left in its status dir: `exists=0|1`, `cancelled=1`, `job=ID` (once
/// submitted), `claimed_age=SECONDS`, then for each rank's metadata file (`metadata.json`,
/// `metadata.rank-N.json`) a `--- FILE` line and its content.
pub(crate) const RUN_STATE: &str = r#"run_dir=$1
if [ ! -d "$run_dir" ]; then echo "exists=0"; exit 0; fi
echo "exists=1"
[ -e "$run_dir/cancelled" ] && echo "cancelled=1"
[ -s "$run_dir/slurm_job" ] && echo "job=$(cat -- "$run_dir/slurm_job")"
t=$(cat -- "$run_dir/claimed" 2>/dev/null || true)
case $t in ''|*[!0-9]*) ;; *) echo "claimed_age=$(( $(date +%s) - t ))" ;; esac
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

/// Exit code of [`CANCEL_UNSUBMITTED`] when the run dir does not exist.
pub(crate) const EXIT_NO_RUN_DIR: i32 = 4;

/// `NAME_DIR RUN_DIR`: cancels a run that has no Slurm job yet, under the name's lock so that
/// its submit cannot pass `sbatch` meanwhile: prints `job=ID` when it was submitted after all
/// (then it must be `scancel`ed): recorded in the run dir, or found by the run's `--comment`
/// (a submit cut off between sbatch and the record); else marks it cancelled (its submit then
/// never starts it) and prints `cancelled=1`.
pub(crate) const CANCEL_UNSUBMITTED: &str = concat!(
    unset_slurm_env!(),
    r#"namedir=$1; run_dir=$2
[ -d "$run_dir" ] || { echo "run dir $run_dir not found" >&2; exit 4; }
exec 9>>"$namedir/.lock"
flock -w 120 9 || { echo "waited 120 s for the lock $namedir/.lock" >&2; exit 5; }
if [ -s "$run_dir/slurm_job" ]; then echo "job=$(cat -- "$run_dir/slurm_job")"; exit 0; fi
comment="theseus-run:${run_dir##*/}"
job=$(squeue --noheader --states=all --user="$(id -un)" --format='%i|%k' 2>/dev/null \
  | awk -F'|' -v c="$comment" '$2 == c { print $1; exit }') || job=
if [ -n "$job" ]; then printf '%s\n' "$job" > "$run_dir/slurm_job"; echo "job=$job"; exit 0; fi
date -u +%Y-%m-%dT%H:%M:%SZ > "$run_dir/cancelled"
echo "cancelled=1"
"#
);

/// `JOB_ID`: the steps Slurm still lists for the job, `STEP NODES` per line (nothing once the
/// job and all its processes are gone, on every node). Slurm keeps a step until slurmstepd
/// reports all its processes ended, and the job `COMPLETING` until every step did.
pub(crate) const STEPS: &str = concat!(
    unset_slurm_env!(),
    r#"out=$(squeue --steps --noheader --format='%i %N' --jobs "$1" 2>&1) && rc=0 || rc=$?
if [ "$rc" -ne 0 ]; then
  case "$out" in *"Invalid job id"*) exit 0 ;; esac
  echo "squeue --steps failed: $out" >&2
  exit "$rc"
fi
printf '%s\n' "$out"
"#
);

/// slurmstepd's last `*** JOB N ON NODE CANCELLED AT TIME DUE TO CAUSE ***` line in the log
/// `$1` (nothing when there is none or the log is gone).
pub(crate) const LAST_CANCEL: &str = r#"grep -a ' CANCELLED AT [^ ]* DUE TO ' -- "$1" 2>/dev/null | tail -n 1; exit 0"#;

/// `NODE`: the node's `NodeAddr` as Slurm knows it (empty when `scontrol` does not say).
pub(crate) const NODE_ADDR: &str = r#"unset SLURM_TIME_FORMAT; scontrol show node "$1" -o 2>/dev/null | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p' | head -n1
"#;

/// `LOG_FILE JOB_ID RUN_DIR NODES` (bash): the log from the start, then new bytes as they are
/// written, until Slurm reports the job finished (a final state, or the job is no longer known)
/// ([`theseus_backend_ssh::run_dir::follow_loop!`]); Slurm leaves the `COMPLETING` state only
/// once every step's output is written, so its word is what ends the follow, also for a job
/// ended from outside (`scancel`, its time limit, a node's failure). Slurm is asked once a
/// second, and every 0.1 s (for 50 looks at most: a slow epilog) once every node's bootstrap
/// recorded its end in the run dir (`metadata*.json`): the job ends in moments then. The log is
/// written on the nodes, which inotify on the login node does not see on shared storage: a
/// round comes at least every 0.2 s.
pub(crate) const FOLLOW_LOG: &str = concat!(
    unset_slurm_env!(),
    r#"log=$1; job=$2; run_dir=$3; nodes=$4; watch=$run_dir; tick=0.2; hurried=0
ended() {
  n=$(grep -lE '"status": "(completed|failed|preempted)"' -- "$run_dir"/metadata.json "$run_dir"/metadata.rank-*.json 2>/dev/null | wc -l)
  [ "$n" -ge "$nodes" ]
}
finished() {
  if [ "$hurry" = 1 ]; then
    hurried=$((hurried + 1))
    [ "$hurried" -gt 50 ] && hurry=0
  elif [ "$hurried" = 0 ] && ended; then
    hurry=1
  fi
  [ "$1" = 1 ] || [ "$hurry" = 1 ] || return 1
  out=$(squeue --noheader --states=all --format=%T --jobs "$job" 2>&1) && rc=0 || rc=$?
  if [ "$rc" -ne 0 ]; then
    case "$out" in *"Invalid job id"*) return 0 ;; *) return 1 ;; esac
  fi
  case "$out" in
    ""|"#,
    live_states!(),
    r#") return 1 ;;
    *) return 0 ;;
  esac
}
"#,
    theseus_backend_ssh::run_dir::follow_loop!()
);

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
    /// The Slurm job id, once submitted.
    pub(crate) job: Option<String>,
    /// Seconds since the run claimed its name, when it did.
    pub(crate) claimed_age: Option<u64>,
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
        match line.trim().split_once('=') {
            Some(("exists", "1")) => r.exists = true,
            Some(("cancelled", "1")) => r.cancelled = true,
            Some(("job", id)) if !id.is_empty() => r.job = Some(id.to_owned()),
            Some(("claimed_age", age)) => r.claimed_age = age.parse().ok(),
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

/// A step [`STEPS`] listed: `(step id, nodes)`.
pub(crate) fn parse_steps(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let step = words.next()?;
            Some((step.to_owned(), words.next().unwrap_or("").to_owned()))
        })
        .collect()
}

/// The `job=` line of [`CANCEL_UNSUBMITTED`].
pub(crate) fn parse_job_line(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.trim().strip_prefix("job=")).filter(|v| !v.is_empty()).map(str::to_owned)
}

/// The job id of [`SUBMIT`]'s `slurm_job=ID` line.
pub(crate) fn parse_submitted(text: &str) -> Option<String> {
    text.lines().rev().find_map(|l| l.trim().strip_prefix("slurm_job=")).filter(|v| !v.is_empty()).map(str::to_owned)
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

/// The runs of the cluster that are live, for `reclaim` (run on the login node; see
/// [`theseus_backend_ssh::reclaim`]): a run whose `slurm_job` is one of the user's jobs `squeue`
/// lists, or that claimed its name, has not been submitted, and whose claim is fresh.
pub(crate) const RECLAIM_LIVE: &str = concat!(
    theseus_backend_ssh::reclaim::live_head!(),
    "unset ",
    crate::parse::slurm_env_vars!(),
    "\n",
    r#"jobs=$(squeue --noheader --user="$(id -un)" --format=%A 2>&1) || { echo "squeue failed: $jobs" >&2; exit 5; }
for rel in */*/*/*; do
  [ -d "$rel" ] || continue
  j=$(cat -- "$rel/slurm_job" 2>/dev/null || true)
  if [ -n "$j" ]; then
    case "
$jobs
" in *"
$j
"*) printf '%s\n' "$rel" ;; esac
  elif unstarted "$rel" slurm_job; then
    printf '%s\n' "$rel"
  fi
done
"#
);

#[cfg(test)]
mod tests {
    use super::*;

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
    fn submit_answers() {
        assert!(SUBMIT.contains(&format!("comment=\"{COMMENT_PREFIX}$me\"")));
        assert!(CANCEL_UNSUBMITTED.contains(&format!("comment=\"{COMMENT_PREFIX}${{run_dir##*/}}\"")));
        assert!(SUBMIT.contains(&format!("exit {EXIT_NO_JOB_ID}\n")));
        assert_eq!(parse_submitted("slurm_job=42\n").as_deref(), Some("42"));
        assert_eq!(parse_submitted("noise\nslurm_job=42_3\n").as_deref(), Some("42_3"));
        assert_eq!(parse_submitted("42\n"), None);
    }

    /// Every remote script of the Slurm backend parses (`sh -n`, `bash -n`).
    #[test]
    fn scripts_are_valid_shell() {
        for (name, script, shell) in [
            ("submit", SUBMIT, "bash"),
            ("run state", RUN_STATE, "sh"),
            ("cancel", CANCEL, "sh"),
            ("claim", CLAIM, "sh"),
            ("cancel unsubmitted", CANCEL_UNSUBMITTED, "sh"),
            ("steps", STEPS, "sh"),
            ("follow", FOLLOW_LOG, "bash"),
            ("reclaim live", RECLAIM_LIVE, "sh"),
        ] {
            let out = std::process::Command::new(shell).arg("-n").arg("-c").arg(script).output().unwrap();
            assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }

    /// Every Slurm query script starts without the site's output settings.
    #[test]
    fn queries_run_without_the_sites_output_settings() {
        for script in [CLAIM, STEPS, FOLLOW_LOG, CANCEL_UNSUBMITTED, RECLAIM_LIVE] {
            assert!(script.contains("unset SQUEUE_FORMAT SQUEUE_FORMAT2"), "{script}");
        }
        assert!(SUBMIT.contains("unset SQUEUE_FORMAT"));
        let env = crate::parse::clean_env();
        assert!(env.windows(2).any(|w| w == ["-u", "SLURM_TIME_FORMAT"]), "{env:?}");
    }

    #[test]
    fn steps_and_job_lines() {
        assert_eq!(
            parse_steps("4.0 node[1-2]\n4.batch node1\n\n"),
            [("4.0".to_owned(), "node[1-2]".to_owned()), ("4.batch".to_owned(), "node1".to_owned())]
        );
        assert!(parse_steps("\n").is_empty());
        assert_eq!(parse_job_line("job=12\n").as_deref(), Some("12"));
        assert_eq!(parse_job_line("cancelled=1\n"), None);
        let r = parse_run_state("exists=1\njob=12\nclaimed_age=7\n");
        assert_eq!((r.job.as_deref(), r.claimed_age), (Some("12"), Some(7)));
    }
}
