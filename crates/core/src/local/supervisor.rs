//! The supervisor script of a local run: starts the ranks, merges their output into one log
//! with rank prefixes (for more than one rank), and records each rank's exit code and the job's.
//!
//! Every value is shell-quoted; the script is the session leader of the run, so closing the
//! terminal that submitted the job does not stop it.
//!
//! Before it starts any rank, the supervisor records who it is, each file written to a
//! temporary name and renamed: `supervisor.json` (`{"pid", "sid", "pgid", "start_time"}`, read
//! from `/proc/$$/stat`; see [`crate::local::process::Session`]), then `supervisor.pid`. A run's
//! processes are those in that session plus those carrying the marker variable, so a child that
//! sheds its environment (`env -i`) or leaves the session (`setsid`) is still found.

use crate::shell::quote;

/// Files the supervisor writes in the run dir.
pub mod files {
    /// The job's exit code, written last.
    pub const EXIT_CODE: &str = "exit_code";
    /// Written by `cancel` before it stops the processes.
    pub const CANCELLED: &str = "cancelled";
    /// The supervisor's PID, written after [`SUPERVISOR_JSON`].
    pub const SUPERVISOR_PID: &str = "supervisor.pid";
    /// The supervisor's PID, session id, process group id and start time, as JSON
    /// ([`crate::local::process::Session`]); written before any rank starts.
    pub const SUPERVISOR_JSON: &str = "supervisor.json";
    /// Exit code of rank `i`.
    pub fn rank_exit(i: u32) -> String {
        format!("rank-{i}.exit")
    }
}

/// Inputs of [`render`].
#[derive(Debug, Clone)]
pub struct SupervisorInput<'a> {
    /// Absolute path of the bootstrap script.
    pub bootstrap: &'a str,
    /// Absolute run dir (exit files).
    pub run_dir: &'a str,
    /// Absolute log file.
    pub log_file: &'a str,
    /// Number of ranks.
    pub processes: u32,
}

/// Renders the supervisor script.
pub fn render(input: &SupervisorInput<'_>) -> String {
    let run_dir = quote(input.run_dir);
    let boot = quote(input.bootstrap);
    let log = quote(input.log_file);
    let n = input.processes.max(1);
    let prefix = if n > 1 {
        // Each line of a rank is prefixed with `[rank-i] ` so merged output stays readable.
        r#" | while IFS= read -r line || [ -n "$line" ]; do printf '[rank-%s] %s\n' "$i" "$line"; done"#
    } else {
        ""
    };
    format!(
        r#"#!/usr/bin/env bash
# theseus local supervisor: starts {n} rank(s) of one run and records their exit codes.
set -u
trap '' HUP
run_dir={run_dir}
# Who this supervisor is: session and process group (fields 6 and 5 of /proc/$$/stat) and start
# time (field 22), so that the run's processes can be found even without the marker variable.
stat=$(cat "/proc/$$/stat" 2>/dev/null || true)
set -f
set -- ${{stat##*) }}
set +f
printf '{{"pid":%s,"sid":%s,"pgid":%s,"start_time":%s}}\n' "$$" "${{4:-$$}}" "${{3:-$$}}" "${{20:-0}}" > "$run_dir/{json_file}.tmp"
mv -f "$run_dir/{json_file}.tmp" "$run_dir/{json_file}"
echo "$$" > "$run_dir/{pid_file}.tmp" && mv -f "$run_dir/{pid_file}.tmp" "$run_dir/{pid_file}"
set --
n={n}
for ((i = 0; i < n; i++)); do
  (
    ( THESEUS_LOCAL_RANK="$i" THESEUS_LOCAL_WORLD_SIZE="$n" bash {boot} < /dev/null 2>&1
      echo "$?" > "$run_dir/rank-$i.exit.tmp" && mv "$run_dir/rank-$i.exit.tmp" "$run_dir/rank-$i.exit" ){prefix}
  ) >> {log} 2>&1 &
done
wait
code=0
for ((i = 0; i < n; i++)); do
  c=$(cat "$run_dir/rank-$i.exit" 2>/dev/null || echo 255)
  if [ "$code" -eq 0 ] && [ "$c" -ne 0 ]; then code=$c; fi
done
echo "$code" > "$run_dir/{exit}.tmp" && mv "$run_dir/{exit}.tmp" "$run_dir/{exit}"
exit "$code"
"#,
        pid_file = files::SUPERVISOR_PID,
        json_file = files::SUPERVISOR_JSON,
        exit = files::EXIT_CODE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_valid_bash_with_quoted_paths() {
        let script = render(&SupervisorInput {
            bootstrap: "/tmp/it's here/$(x)/b.sh",
            run_dir: "/tmp/r d",
            log_file: "/tmp/l`x`.log",
            processes: 2,
        });
        assert!(script.contains(r"'/tmp/it'\''s here/$(x)/b.sh'"));
        let out = std::process::Command::new("bash").arg("-n").arg("-c").arg(&script).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn records_its_session_before_any_rank_starts() {
        let dir = tempfile::tempdir().unwrap();
        let boot = dir.path().join("boot.sh");
        std::fs::write(&boot, "test -s \"$RUN_DIR/supervisor.json\" && echo recorded-first\n").unwrap();
        let run_dir = dir.path().join("run");
        std::fs::create_dir(&run_dir).unwrap();
        let log = dir.path().join("log");
        let script = render(&SupervisorInput {
            bootstrap: boot.to_str().unwrap(),
            run_dir: run_dir.to_str().unwrap(),
            log_file: log.to_str().unwrap(),
            processes: 1,
        });
        let out = std::process::Command::new("setsid")
            .args(["--wait", "bash", "-c", &script])
            .env("RUN_DIR", &run_dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "recorded-first\n");
        let session: crate::local::process::Session =
            serde_json::from_slice(&std::fs::read(run_dir.join(files::SUPERVISOR_JSON)).unwrap()).unwrap();
        let pid: i32 = std::fs::read_to_string(run_dir.join(files::SUPERVISOR_PID)).unwrap().trim().parse().unwrap();
        assert_eq!((session.pid, session.sid, session.pgid), (pid, pid, pid), "{session:?}");
        assert!(session.start_time > 0, "{session:?}");
    }
}
