//! Node-local `work` (issue 23 point 11): a cluster with a `share` dir, like the original's `hpc`
//! example (`work: /scratch/theseus` on each node's own disk, `share` on storage every node and
//! the login node see), keeps each run's code on the nodes' own `work`. The login node cannot
//! write there, so the code is shipped once, through the store under `<share>/work`, into the
//! run's *stage* dir `<share>/work/<run path>`; the batch script's first step
//! ([`MATERIALIZE`]) copies the stage into `<work>/<run path>` on every node of the allocation,
//! and the job runs from there. A log dir under `work` (the default `<work>/logs`, or the
//! example's `/scratch/theseus/logs`) is node-local too, so the log goes to `<share>/logs`
//! instead, where the login node reads it. Without `share`, `work` is shared and nothing here
//! applies.
//!
//! Pure: paths and script text, no IO.

use theseus_core::config::join;

/// Where the stage dirs of a cluster with `share` live: `<share>/work` (resolved).
pub(crate) fn stage_root(share: &str) -> String {
    join(share, "work")
}

/// Where the logs go when the configured log dir is on node-local `work`: `<share>/logs`.
pub(crate) fn log_root(share: &str) -> String {
    join(share, "logs")
}

/// `STAGE WORK` (sh, one task per node, as the batch script's first `srun` step): makes `WORK`
/// a copy of `STAGE` on this node. The copy is made aside and renamed into place, so a step cut
/// off halfway leaves no half run dir; when `WORK` already exists (a requeued job, or a `work`
/// that is shared after all and another node was first) it is kept.
pub(crate) const MATERIALIZE: &str = r#"set -e
stage=$1; work=$2
[ -d "$work" ] && exit 0
tmp="$work.partial.${SLURMD_NODENAME:-node}.$$"
rm -rf -- "$tmp"
mkdir -p -- "$tmp"
cp -pR -- "$stage/." "$tmp/"
if ! mv -T -- "$tmp" "$work" 2>/dev/null; then
  rm -rf -- "$tmp"
  [ -d "$work" ] || { echo "theseus: could not make the run dir $work on ${SLURMD_NODENAME:-this node}" >&2; exit 1; }
fi
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_script() {
        assert_eq!(stage_root("/shared/theseus/.dispatch/"), "/shared/theseus/.dispatch/work");
        assert_eq!(log_root("/s"), "/s/logs");
        let out = std::process::Command::new("sh").arg("-n").arg("-c").arg(MATERIALIZE).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// The step run twice on one dir (a shared `work`): the second keeps the first's copy.
    #[test]
    fn materialize_copies_once_and_keeps_an_existing_dir() {
        let dir = tempfile::tempdir().unwrap();
        let stage = dir.path().join("stage");
        std::fs::create_dir_all(stage.join(".theseus")).unwrap();
        std::fs::write(stage.join(".theseus/job.sbatch"), "x").unwrap();
        std::fs::write(stage.join("a.py"), "print(1)").unwrap();
        let work = dir.path().join("scratch/p/g/n/run");
        for _ in 0..2 {
            let out = std::process::Command::new("sh")
                .args(["-c", MATERIALIZE, "sh"])
                .arg(&stage)
                .arg(&work)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        assert_eq!(std::fs::read_to_string(work.join("a.py")).unwrap(), "print(1)");
        assert!(work.join(".theseus/job.sbatch").exists());
        let left: Vec<_> = std::fs::read_dir(work.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["run"], "no partial dir is left");
    }
}
