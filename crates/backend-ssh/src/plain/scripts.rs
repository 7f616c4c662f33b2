//! The remote scripts of the plain backend and the pure reading of what they print.
//!
//! Every script is a constant run as `sh -c SCRIPT sh ARGS...` (or `bash -c` where bash is
//! needed): values arrive as positional parameters, never as shell text. The processes of a run
//! are those of the supervisor's session and those carrying the local backend's marker variable
//! [`MARKER_VAR`](theseus_core::local::process::MARKER_VAR) in `/proc/<pid>/environ` (see
//! `job_pids`).

use theseus_core::backend::{JobState, JobStatus, RankStatus};
use theseus_core::local::supervisor::files;

/// Shell function `job_pids RUN_ID RUN_DIR`: live (non-zombie) PIDs of the run, one per line:
/// every process whose environment carries the run's marker, and every process of the
/// supervisor's session (recorded as `SID STARTTIME` in `RUN_DIR/session` at launch). The union
/// catches children that cleared their environment (`env -i`) and children that left the session
/// (`setsid`); only a child doing both escapes, which takes a cgroup to catch. The session counts
/// only while its leader is gone or still the process that was recorded (same start time): a
/// session id cannot be reused while any member lives, so its members are the run's.
macro_rules! job_pids_fn {
    () => {
        r#"
run_sid() {
  read -r sid start < "$1/session" 2>/dev/null || return 0
  case $sid in ''|*[!0-9]*) return 0 ;; esac
  if [ -r "/proc/$sid/stat" ]; then
    line=; read -r line < "/proc/$sid/stat" 2>/dev/null || true
    set -f; set -- ${line##*) }; set +f
    [ -n "$line" ] && [ "${20}" != "$start" ] && return 0
  fi
  echo "$sid"
}
job_pids() {
  sid=$(run_sid "$2")
  {
    grep -lzxF -- "THESEUS_LOCAL_RUN=$1" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/||; s|/environ$||'
    if [ -n "$sid" ]; then
      for f in /proc/[0-9]*/stat; do
        line=; read -r line < "$f" 2>/dev/null || continue
        set -f; set -- ${line##*) }; set +f
        [ "$4" = "$sid" ] && { p=${f#/proc/}; echo "${p%/stat}"; }
      done
    fi
  } | sort -un | while read -r p; do
    [ "$p" = "$$" ] && continue
    line=; read -r line < "/proc/$p/stat" 2>/dev/null || continue
    set -f; set -- ${line##*) }; set +f
    [ "$1" != Z ] && echo "$p"
  done
  return 0
}
"#
    };
}

/// [`crate::run_dir::start_prologue!`] with the supervisor as `PROGRAM` (bash): under the
/// name's lock, and only while the run still owns its name ([`crate::claim`]), starts the
/// supervisor detached in its own session, with the run's marker and the secrets in its
/// environment only; records the session (`SID STARTTIME`) and prints the supervisor's PID (=
/// its session and process group id).
pub(crate) const LAUNCH: &str = concat!(
    crate::run_dir::start_prologue!(),
    r#"setsid nohup bash -- "$prog" > /dev/null 2>&1 < /dev/null 9>&- &
i=0
while [ ! -s "$run_dir/supervisor.pid" ]; do
  i=$((i + 1))
  if [ "$i" -gt 200 ]; then echo "the supervisor did not start within 20 s" >&2; exit 1; fi
  sleep 0.1
done
pid=$(cat -- "$run_dir/supervisor.pid")
line=$(cat -- "/proc/$pid/stat" 2>/dev/null || true)
set -f; set -- ${line##*) }; set +f
echo "$pid ${20:--}" > "$run_dir/session"
echo "$pid"
"#
);

/// `NAME_DIR RUN_ID STALE_SECONDS`: the claim of the job's name ([`crate::claim`]); a run is
/// live while a process of it is, or while it is claimed, not started, not cancelled and its
/// claim is fresh.
pub(crate) const CLAIM: &str = concat!(
    job_pids_fn!(),
    r#"
live() {
  d="$dir/$1"
  [ -d "$d" ] || return 1
  [ -e "$d/exit_code" ] && return 1
  [ -n "$(job_pids "$1" "$d")" ] && return 0
  [ -e "$d/supervisor.pid" ] && return 1
  [ -e "$d/cancelled" ] && return 1
  fresh "$d"
}
"#,
    crate::claim::claim_body!()
);

/// `RUN_DIR RUN_ID PROCESSES`: prints `key=value` lines read by [`parse_report`]. The run's
/// processes are counted after its files are read, so that a run started in between counts as
/// alive; a count of none then reads what a run ends with (exit codes, the cancel mark, the
/// preemption) once more, since a run that ended in between wrote them before its last process
/// exited (the supervisor writes `exit_code`, then exits): later lines win.
pub(crate) const STATUS: &str = concat!(
    job_pids_fn!(),
    r#"
run_dir=$1; n=$3
if [ ! -d "$run_dir" ]; then echo "exists=0"; exit 0; fi
ended() {
  [ -e "$run_dir/cancelled" ] && echo "cancelled=1"
  [ -r "$run_dir/exit_code" ] && echo "exit=$(cat -- "$run_dir/exit_code")"
  i=0
  while [ "$i" -lt "$n" ]; do
    [ -r "$run_dir/rank-$i.exit" ] && echo "rank.$i=$(cat -- "$run_dir/rank-$i.exit")"
    i=$((i + 1))
  done
  grep -q '"preempted"' "$run_dir/metadata.json" 2>/dev/null && echo "preempted=1"
  return 0
}
echo "exists=1"
ended
[ -e "$run_dir/supervisor.pid" ] && echo "started=1"
t=$(cat -- "$run_dir/claimed" 2>/dev/null || true)
case $t in ''|*[!0-9]*) ;; *) echo "claimed_age=$(( $(date +%s) - t ))" ;; esac
alive=$(( $(job_pids "$2" "$run_dir" | wc -l) ))
echo "alive=$alive"
if [ "$alive" -eq 0 ]; then ended; fi
"#
);

/// `RUN_DIR RUN_ID GRACE_SECONDS`: marks the run cancelled (under its name's lock), sends TERM to every process of the
/// run (its session and its marker, see `job_pids`), KILL after the grace (again until none is
/// left, for children forked in between), and prints `left=<pids>` (empty when none).
pub(crate) const CANCEL: &str = concat!(
    job_pids_fn!(),
    r#"
run_dir=$1; run=$2; grace=$3
if [ ! -d "$run_dir" ]; then echo "run dir $run_dir not found" >&2; exit 4; fi
# Marked under the name's lock (see crate::claim): a launch either finished before (its
# supervisor runs and is found below) or sees the mark and starts nothing.
exec 9>>"${run_dir%/*}/.lock"
flock -w 120 9 || { echo "waited 120 s for the lock ${run_dir%/*}/.lock" >&2; exit 5; }
date -u +%Y-%m-%dT%H:%M:%SZ > "$run_dir/cancelled"
exec 9>&-
signal() {
  pids=$(job_pids "$run" "$run_dir")
  if [ -n "$pids" ]; then kill "-$1" $pids 2>/dev/null || true; fi
}
wait_gone() {
  i=0
  while [ -n "$(job_pids "$run" "$run_dir")" ] && [ "$i" -lt "$1" ]; do sleep 0.1; i=$((i + 1)); done
}
signal TERM
wait_gone $((grace * 10))
i=0
while [ -n "$(job_pids "$run" "$run_dir")" ] && [ "$i" -lt 50 ]; do
  signal KILL
  sleep 0.1
  i=$((i + 1))
done
echo "left=$(job_pids "$run" "$run_dir" | tr '\n' ' ')"
"#
);

/// `LOG_FILE RUN_DIR RUN_ID` (bash): the log from the start, then new bytes as they are
/// written, until the run is over: it left an exit code (the supervisor writes it once every
/// rank's output is in the log; watched in the run dir), or (looked at once a second) no
/// process of it is left ([`crate::run_dir::follow_loop!`]).
pub(crate) const FOLLOW_LOG: &str = concat!(
    job_pids_fn!(),
    r#"
log=$1; run_dir=$2; run=$3; watch=$run_dir
finished() {
  [ -e "$run_dir/exit_code" ] && return 0
  [ "$1" = 1 ] && [ -z "$(job_pids "$run" "$run_dir")" ]
}
"#,
    crate::run_dir::follow_loop!()
);

/// What [`STATUS`] printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) exists: bool,
    pub(crate) cancelled: bool,
    pub(crate) exit_code: Option<i32>,
    pub(crate) rank_exits: Vec<(u32, i32)>,
    pub(crate) preempted: bool,
    pub(crate) alive: usize,
    /// The supervisor was started (`supervisor.pid` exists).
    pub(crate) started: bool,
    /// Seconds since the run claimed its name, when it did.
    pub(crate) claimed_age: Option<u64>,
}

/// Reads the output of [`STATUS`]; unknown or malformed lines are ignored.
pub(crate) fn parse_report(text: &str) -> Report {
    let mut r = Report::default();
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once('=') else { continue };
        match key {
            "exists" => r.exists = value == "1",
            "cancelled" => r.cancelled = value == "1",
            "preempted" => r.preempted = value == "1",
            "exit" => r.exit_code = value.trim().parse().ok(),
            "alive" => r.alive = value.trim().parse().unwrap_or(0),
            "started" => r.started = value == "1",
            "claimed_age" => r.claimed_age = value.trim().parse().ok(),
            _ => {
                if let Some(rank) = key.strip_prefix("rank.").and_then(|n| n.parse().ok())
                    && let Ok(code) = value.trim().parse()
                {
                    // A later line of the same rank (read again) wins.
                    r.rank_exits.retain(|(r, _)| *r != rank);
                    r.rank_exits.push((rank, code));
                }
            }
        }
    }
    r
}

/// The job's status from a [`Report`] (the same rules as the local backend's). A run that
/// claimed its name but was never started is `submitting` while its claim is younger than
/// `stale_after` seconds, then `failed` (its submit stopped before starting it).
pub(crate) fn status_from(report: &Report, processes: u32, location: &str, stale_after: u64) -> JobStatus {
    let alive = report.alive > 0;
    if !alive
        && !report.started
        && !report.cancelled
        && report.exit_code.is_none()
        && let Some(age) = report.claimed_age
    {
        let (state, message) = if age < stale_after {
            (JobState::Submitting, format!("being submitted: its code is being shipped (claimed {age} s ago)"))
        } else {
            (
                JobState::Failed,
                format!("never started: its submit stopped {age} s ago before starting it (was the client killed?)"),
            )
        };
        let ranks = (0..processes.max(1))
            .map(|i| RankStatus {
                rank: i,
                state,
                exit_code: None,
                location: Some(location.to_owned()),
                restarts: None,
            })
            .collect();
        return JobStatus { state, exit_code: None, message: Some(message), ranks, attempt: None };
    }
    let ranks = (0..processes.max(1))
        .map(|i| {
            let code = report.rank_exits.iter().find(|(r, _)| *r == i).map(|(_, c)| *c);
            let state = match code {
                Some(0) => JobState::Completed,
                Some(_) if report.cancelled => JobState::Cancelled,
                Some(_) => JobState::Failed,
                None if alive => JobState::Running,
                None if report.cancelled => JobState::Cancelled,
                None => JobState::Unknown,
            };
            RankStatus { rank: i, state, exit_code: code, location: Some(location.to_owned()), restarts: None }
        })
        .collect();
    let (state, exit_code, message) = match report.exit_code {
        _ if report.cancelled && !alive => {
            (JobState::Cancelled, report.exit_code, Some("cancelled by the user".into()))
        }
        Some(0) => (JobState::Completed, Some(0), None),
        Some(c) if report.preempted => {
            (JobState::Preempted, Some(c), Some(format!("stopped by a signal (exit code {c})")))
        }
        Some(c) => (JobState::Failed, Some(c), Some(format!("exited with code {c}"))),
        None if alive => (JobState::Running, None, None),
        None => (
            JobState::Unknown,
            None,
            Some("no process of the run is alive and it left no exit code (was the machine restarted?)".into()),
        ),
    };
    JobStatus { state, exit_code, message, ranks, attempt: None }
}

/// Parses the `left=` line of [`CANCEL`] into PIDs.
pub(crate) fn parse_left(text: &str) -> Vec<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("left="))
        .map(|pids| pids.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// Names of the files the supervisor writes, checked against the literals in the scripts.
const _: () = {
    assert!(matches!(files::EXIT_CODE.as_bytes(), b"exit_code"));
    assert!(matches!(files::CANCELLED.as_bytes(), b"cancelled"));
    assert!(matches!(files::SUPERVISOR_PID.as_bytes(), b"supervisor.pid"));
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_become_statuses() {
        let check = |text: &str| {
            let s = status_from(&parse_report(text), 1, "gpu1", 600);
            (s.state, s.exit_code)
        };
        assert_eq!(check("exists=1\nalive=3\n"), (JobState::Running, None));
        assert_eq!(check("exists=1\nexit=0\nrank.0=0\nalive=0\n"), (JobState::Completed, Some(0)));
        assert_eq!(check("exists=1\nexit=7\nrank.0=7\nalive=0\n"), (JobState::Failed, Some(7)));
        assert_eq!(check("exists=1\nexit=143\npreempted=1\nalive=0\n"), (JobState::Preempted, Some(143)));
        assert_eq!(check("exists=1\ncancelled=1\nalive=0\n"), (JobState::Cancelled, None));
        // Cancelling but a process is still alive: not cancelled yet.
        assert_eq!(check("exists=1\ncancelled=1\nalive=1\n"), (JobState::Running, None));
        assert_eq!(check("exists=1\nalive=0\n"), (JobState::Unknown, None));
        assert_eq!(check("garbage\nexit=x\n").0, JobState::Unknown);
        // Claimed, not started: submitting while fresh, then failed.
        assert_eq!(check("exists=1\nclaimed_age=5\nalive=0\n"), (JobState::Submitting, None));
        assert_eq!(check("exists=1\nclaimed_age=601\nalive=0\n"), (JobState::Failed, None));
        assert_eq!(check("exists=1\nclaimed_age=5\nstarted=1\nalive=0\n"), (JobState::Unknown, None));
        assert_eq!(check("exists=1\nclaimed_age=5\ncancelled=1\nalive=0\n"), (JobState::Cancelled, None));
        let s = status_from(&parse_report("exists=1\nrank.1=3\nrank.0=0\nalive=1"), 2, "h", 600);
        assert_eq!(s.ranks.iter().map(|r| r.state).collect::<Vec<_>>(), [JobState::Completed, JobState::Failed]);
    }

    /// The race of a status taken while the run ends: its files are read (no exit code yet),
    /// the supervisor writes `exit_code` and exits, then its processes are counted (none). A
    /// fake `wc` (the count's last step) plays the supervisor's end, deterministically.
    #[test]
    fn a_run_that_ends_between_the_reads_and_the_count_is_completed_not_unknown() {
        let tmp = tempfile::tempdir().unwrap();
        let (bin, run_dir) = (tmp.path().join("bin"), tmp.path().join("run"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&run_dir).unwrap();
        std::fs::write(run_dir.join("supervisor.pid"), "1\n").unwrap();
        let fake_wc =
            "#!/bin/sh\ncat > /dev/null\necho 0 > \"$END_DIR/rank-0.exit\"\necho 0 > \"$END_DIR/exit_code\"\necho 0\n";
        std::fs::write(bin.join("wc"), fake_wc).unwrap();
        std::fs::set_permissions(bin.join("wc"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", STATUS, "sh"])
            .arg(&run_dir)
            .args(["20260101-000000-abcdef", "1"])
            .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()))
            .env("END_DIR", &run_dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let status = status_from(&parse_report(&text), 1, "h", 600);
        assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{text}");
        assert_eq!(status.ranks[0].state, JobState::Completed, "{text}");
    }

    #[test]
    fn left_pids() {
        assert_eq!(parse_left("left=\n"), Vec::<u32>::new());
        assert_eq!(parse_left("noise\nleft=12 13 \n"), [12, 13]);
        assert_eq!(parse_left(""), Vec::<u32>::new());
    }
}
