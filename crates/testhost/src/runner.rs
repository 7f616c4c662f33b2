//! The runner script of a sandbox run: it records its PID (it is the leader of the run's
//! session), starts the ranks of the bootstrap with their output appended to
//! one log, and writes each rank's exit code and the job's. Files are written under a temporary
//! name and renamed, so a reader never sees half of one.

use theseus_core::shell::quote;

/// Files of a run dir.
pub(crate) mod files {
    /// The runner's PID (also its session id), written before any rank starts.
    pub(crate) const PID: &str = "pid";
    /// The job's exit code, written last.
    pub(crate) const EXIT_CODE: &str = "exit_code";
    /// Written by `cancel` before it signals the run's processes.
    pub(crate) const CANCELLED: &str = "cancelled";
    /// The output of every rank.
    pub(crate) const LOG: &str = "output.log";
    /// The runner script itself.
    pub(crate) const RUNNER: &str = "runner.sh";

    /// Exit code of rank `i`.
    pub(crate) fn rank_exit(i: u32) -> String {
        format!("rank-{i}.exit")
    }
}

/// The runner of a run whose status dir is `run_dir`, starting `processes` ranks of the
/// bootstrap `bootstrap` (absolute paths).
pub(crate) fn render(bootstrap: &str, run_dir: &str, processes: u32) -> String {
    format!(
        r#"#!/usr/bin/env bash
# theseus sandbox runner: starts {n} rank(s) of one run and records their exit codes.
set -u
trap '' HUP
run_dir={run_dir}
echo "$$" > "$run_dir/{pid}.tmp" && mv -f "$run_dir/{pid}.tmp" "$run_dir/{pid}"
n={n}
for ((i = 0; i < n; i++)); do
  ( THESEUS_LOCAL_RANK="$i" THESEUS_LOCAL_WORLD_SIZE="$n" bash {boot} < /dev/null >> "$run_dir/{log}" 2>&1
    echo "$?" > "$run_dir/rank-$i.exit.tmp" && mv -f "$run_dir/rank-$i.exit.tmp" "$run_dir/rank-$i.exit" ) &
done
wait
code=0
for ((i = 0; i < n; i++)); do
  c=$(cat "$run_dir/rank-$i.exit" 2>/dev/null || echo 255)
  if [ "$code" -eq 0 ] && [ "$c" -ne 0 ]; then code=$c; fi
done
echo "$code" > "$run_dir/{exit}.tmp" && mv -f "$run_dir/{exit}.tmp" "$run_dir/{exit}"
"#,
        n = processes.max(1),
        run_dir = quote(run_dir),
        boot = quote(bootstrap),
        pid = files::PID,
        log = files::LOG,
        exit = files::EXIT_CODE,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_valid_bash_with_quoted_paths() {
        let script = super::render("/tmp/it's/$(x)/b.sh", "/tmp/r d", 2);
        assert!(script.contains(r"'/tmp/it'\''s/$(x)/b.sh'"), "{script}");
        let out = std::process::Command::new("bash").args(["-n", "-c", &script]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
