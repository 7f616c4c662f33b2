//! Node-local `work` (issue 23 point 11): a cluster with a `share` dir, like the original's `hpc`
//! example (`work: /scratch/theseus` on each node's own disk, `share` on storage every node and
//! the login node see), keeps each run's code on the nodes' own `work`. The login node cannot
//! write there, so the code is shipped once, through the store under `<share>/work`, into the
//! run's *stage* dir `<share>/work/<run path>`; the batch script's first step
//! ([`MATERIALIZE`]) copies the stage into `<work>/<run path>` on every node of the allocation,
//! and the job runs from there. A log dir under `work` (the default `<work>/logs`, or the
//! example's `/scratch/theseus/logs`) is node-local too, so the log goes to `<share>/logs`
//! instead, where the login node reads it. Without `share`, or with a `share` under `work` (the
//! original example's literal `share: /scratch/theseus/.dispatch`: a dir every node sees inside
//! `work` means `work` is shared storage too), `work` is shared and nothing here applies.
//!
//! Pure: paths, the staged backend and script text, no IO.

use std::sync::Arc;

use theseus_core::Result;
use theseus_core::config::{ClusterConfig, join};
use theseus_core::job::JobIdentity;

use super::SlurmBackend;

/// A run's dirs on the cluster: [`super::SlurmHandleData`] without the run id and nodes.
pub(super) struct RunPaths {
    pub(super) work_dir: String,
    pub(super) run_dir: String,
    pub(super) log_file: String,
    pub(super) stage_dir: Option<String>,
}

impl SlurmBackend {
    /// The run's dirs: its code dir, status dir and log file, and with a `share` (node-local
    /// `work`, see `node_local`) its stage dir, and its log on the share when the log dir is
    /// under `work`.
    pub(super) fn run_paths(&self, identity: &JobIdentity) -> Result<RunPaths> {
        let (work_dir, run_dir, log_file) = self.remote.paths(identity)?;
        let Some(share) = self.node_local_share()? else {
            return Ok(RunPaths { work_dir, run_dir, log_file, stage_dir: None });
        };
        let dirs = self.remote.dirs();
        let rel = identity.run_path();
        let stage_dir = dirs.under(&stage_root(&share), &rel)?;
        let work_root = dirs.resolve(&self.remote.cluster.work)?;
        let log_dir = dirs.resolve(&self.remote.cluster.log_dir())?;
        let log_file = if theseus_core::paths::check_under(&work_root, &log_dir).is_ok() {
            dirs.under(&log_root(&share), &format!("{rel}.log"))?
        } else {
            log_file
        };
        Ok(RunPaths { work_dir, run_dir, log_file, stage_dir: Some(stage_dir) })
    }

    /// The cluster's `share`, resolved, when it makes `work` node-local: set, and not inside
    /// `work` (a dir every node sees inside `work` means `work` is shared).
    fn node_local_share(&self) -> Result<Option<String>> {
        let Some(share) = self.remote.cluster.share.as_deref() else { return Ok(None) };
        let dirs = self.remote.dirs();
        let share = dirs.resolve(share)?;
        let work = dirs.resolve(&self.remote.cluster.work)?;
        Ok(theseus_core::paths::check_under(&work, &share).is_err().then_some(share))
    }

    /// This backend with its store and code dirs on the share's stage root, when the cluster
    /// has a `share` (its `work` is node-local): what ships, syncs nothing and reclaims the code.
    pub(super) fn staged(&self) -> Result<Option<SlurmBackend>> {
        let Some(share) = self.node_local_share()? else { return Ok(None) };
        let cluster = ClusterConfig { work: stage_root(&share), ..self.remote.cluster.clone() };
        Ok(Some(SlurmBackend::with_ssh(
            self.remote.name.clone(),
            self.remote.host.clone(),
            cluster,
            Arc::clone(&self.remote.ssh),
            self.remote.settings.clone(),
        )))
    }
}

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

    /// A `share` outside `work` makes `work` node-local (a stage on the share, the log there);
    /// one inside `work`, as the original example writes it, means `work` is shared: no stage.
    #[test]
    fn a_share_inside_work_keeps_work_shared() {
        let identity = JobIdentity { run_id: "r1".into(), ..JobIdentity::new("n", Some("p"), Some("g")) };
        let backend = |share: &str| {
            let cluster = ClusterConfig {
                work: "/scratch/theseus".into(),
                log: Some("/scratch/theseus/logs".into()),
                share: Some(share.into()),
                ..ClusterConfig::default()
            };
            let host = crate::config::SlurmHost { ssh: "hpc".into(), ..Default::default() };
            SlurmBackend::new("hpc", host, cluster)
        };
        let local = backend("/shared/me/.dispatch").run_paths(&identity).unwrap();
        assert_eq!(local.stage_dir.as_deref(), Some("/shared/me/.dispatch/work/p/g/n/r1"));
        assert!(local.log_file.starts_with("/shared/me/.dispatch/logs/"), "{}", local.log_file);
        let shared = backend("/scratch/theseus/.dispatch").run_paths(&identity).unwrap();
        assert_eq!(shared.stage_dir, None);
        assert!(shared.log_file.starts_with("/scratch/theseus/logs/"), "{}", shared.log_file);
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
