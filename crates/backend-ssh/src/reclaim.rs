//! `reclaim` and `usage` of the backends reached over SSH: core's store scripts
//! ([`theseus_core::store::reclaim`]) over the SSH connection ([`SshShell`]), with the runs the
//! host sees live added to the caller's first.
//!
//! Which runs are live is one script per backend, run on the host right before the reclaim, that
//! prints the run paths (`<project>/<group>/<name>/<run>`) of the live runs under the status dir:
//! - plain ([`PLAIN_LIVE`]): a run with a process (one carrying its marker variable, or one in
//!   the session recorded in its `session` file: the same two ways `job_pids` finds a run's
//!   processes, here read once from `/proc` for all runs), and a run that started and has neither
//!   an exit code nor a cancel mark. The last rule matters when several plain hosts share a work
//!   root: this host cannot see another host's processes. Its price: a run whose machine died
//!   under it keeps its code dir until `theseus cancel` marks it;
//! - Slurm (its own script in `theseus-backend-slurm`, made with [`live_head!`]): a run whose
//!   `slurm_job` is one of the user's jobs `squeue` lists (without `--states`, squeue lists only
//!   jobs that are not over); a failing `squeue` fails the reclaim rather than taking every run
//!   for finished;
//! - both: a run that claimed its name and has not started (no `supervisor.pid` / `slurm_job`),
//!   is not cancelled and whose claim is younger than the claim's stale limit: its submit may
//!   still be shipping. The claim comes before the ship, so a run shipped between this script
//!   and the reclaim is already seen here.

use std::sync::Arc;
use std::time::Duration;

use theseus_core::backend::{ReclaimOptions, ReclaimReport, StoreUsage};
use theseus_core::store::reclaim::{self, ReclaimTarget};
use theseus_core::{Error, Result};

use crate::paths::RemoteDirs;
use crate::ssh::{RemoteCommand, SshHost};
use crate::store_shell::SshShell;

/// Shared head of the live scripts: `STATUS_DIR STALE_SECONDS`; `unstarted REL FILE` is true for
/// a run that claimed its name, has no `FILE` yet, is not cancelled and whose claim is fresh.
#[doc(hidden)]
#[macro_export]
macro_rules! __live_head {
    () => {
        r#"set -u
export LC_ALL=C
status=$1 stale=$2
[ -d "$status" ] || exit 0
cd -- "$status" || exit 20
now=$(date +%s) || exit 20
unstarted() {
  [ -e "$1/$2" ] && return 1
  [ -e "$1/cancelled" ] && return 1
  t=$(cat -- "$1/claimed" 2>/dev/null || true)
  case $t in ''|*[!0-9]*) return 1 ;; esac
  [ $((now - t)) -lt "$stale" ]
}
"#
    };
}
#[doc(inline)]
pub use __live_head as live_head;

/// Plain host: see the module docs.
pub const PLAIN_LIVE: &str = concat!(
    live_head!(),
    r#"tmp=$(mktemp -d) || exit 20
trap 'rm -rf -- "$tmp"' EXIT
grep -ahzx -- 'THESEUS_LOCAL_RUN=[A-Za-z0-9._-]*' /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' \
  | sed 's/^THESEUS_LOCAL_RUN=//' | sort -u > "$tmp/markers"
for f in /proc/[0-9]*/stat; do
  line=; read -r line < "$f" 2>/dev/null || continue
  set -f; set -- ${line##*) }; set +f
  [ "$1" != Z ] && echo "$4"
done | sort -u > "$tmp/sids"
for rel in */*/*/*; do
  [ -d "$rel" ] || continue
  run=${rel##*/}
  sid=; read -r sid rest < "$rel/session" 2>/dev/null || true
  if grep -qxF -- "$run" "$tmp/markers" \
    || { [ -n "$sid" ] && grep -qxF -- "$sid" "$tmp/sids"; } \
    || { [ -e "$rel/supervisor.pid" ] && [ ! -e "$rel/exit_code" ] && [ ! -e "$rel/cancelled" ]; } \
    || unstarted "$rel" supervisor.pid; then
    printf '%s\n' "$rel"
  fi
done
"#
);

/// Runs `live_script` then core's reclaim on the host behind `ssh`.
pub async fn reclaim(
    ssh: &Arc<SshHost>,
    dirs: &RemoteDirs<'_>,
    live_script: &'static str,
    claim_stale: Duration,
    timeout: Duration,
    options: &ReclaimOptions,
) -> Result<ReclaimReport> {
    let target = target(dirs)?;
    let status = dirs.resolve(&dirs.cluster.status_dir())?;
    let cmd = RemoteCommand::script(live_script, [status, claim_stale.as_secs().to_string()])
        .label("the list of live runs")
        .retry_safe()
        .timeout(timeout);
    let out = ssh.run(&cmd).await.map_err(|e| Error::Backend {
        backend: format!("{}({})", dirs.kind, dirs.host),
        message: "failed to list the live runs before reclaiming space".into(),
        source: Some(Box::new(e)),
    })?;
    let mut options = options.clone();
    options.live.extend(parse_live(&out.stdout_text()));
    reclaim::reclaim(&SshShell::new(ssh.clone()), &target, &options).await
}

/// Core's usage script on the host behind `ssh`.
pub async fn usage(ssh: &Arc<SshHost>, dirs: &RemoteDirs<'_>) -> Result<StoreUsage> {
    reclaim::usage(&SshShell::new(ssh.clone()), &target(dirs)?).await
}

fn target(dirs: &RemoteDirs<'_>) -> Result<ReclaimTarget> {
    ReclaimTarget::of_cluster(dirs.cluster, |p| dirs.resolve(p))
}

/// The run paths a live script printed (lines of four name components; others are ignored).
fn parse_live(out: &str) -> Vec<String> {
    out.lines()
        .map(str::trim)
        .filter(|l| l.split('/').count() == 4 && l.split('/').all(|c| !c.is_empty()))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_live_script_is_valid_shell_and_live_output_is_read() {
        let out = std::process::Command::new("sh").arg("-n").arg("-c").arg(PLAIN_LIVE).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(parse_live("p/g/n/r1\n\njunk\np/g/n/r2\n"), ["p/g/n/r1", "p/g/n/r2"]);
    }

    /// The plain live script on this machine: a process carrying a run's marker makes it live,
    /// and so do a started run without an exit code and a fresh unstarted claim; a finished run
    /// and a stale claim do not.
    #[test]
    fn the_plain_live_script_finds_runs_by_marker_and_by_fresh_claim() {
        let status = tempfile::tempdir().unwrap();
        for run in ["running", "finished", "claimed", "stale", "elsewhere"] {
            std::fs::create_dir_all(status.path().join("p/g/n").join(run)).unwrap();
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        std::fs::write(status.path().join("p/g/n/finished/supervisor.pid"), "1\n").unwrap();
        std::fs::write(status.path().join("p/g/n/finished/exit_code"), "0\n").unwrap();
        // Started, no exit code, no process here: running on another host of a shared root.
        std::fs::write(status.path().join("p/g/n/elsewhere/supervisor.pid"), "1\n").unwrap();
        std::fs::write(status.path().join("p/g/n/claimed/claimed"), format!("{now}\n")).unwrap();
        std::fs::write(status.path().join("p/g/n/stale/claimed"), format!("{}\n", now - 7200)).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(theseus_core::local::process::MARKER_VAR, "running")
            .spawn()
            .unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", PLAIN_LIVE, "sh", status.path().to_str().unwrap(), "3600"])
            .output()
            .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut live = parse_live(&String::from_utf8_lossy(&out.stdout));
        live.sort();
        assert_eq!(live, ["p/g/n/claimed", "p/g/n/elsewhere", "p/g/n/running"]);
    }
}
