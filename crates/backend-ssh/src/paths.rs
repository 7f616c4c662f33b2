//! Cluster paths on a remote host, shared by the plain and Slurm backends: `~` is resolved
//! against a known home dir, everything else must be absolute (the remote side never expands).

use theseus_core::backend::RunLayout;
use theseus_core::bootstrap::{DataDirs, Launch};
use theseus_core::config::{ClusterConfig, join};
use theseus_core::job::JobIdentity;
use theseus_core::{Error, Result};

/// Where a backend's cluster paths live on its host.
pub struct RemoteDirs<'a> {
    /// `plain` or `slurm`, for messages.
    pub kind: &'static str,
    /// The host's name in the config.
    pub host: &'a str,
    /// The name of the host's cluster.
    pub cluster_name: &'a str,
    /// The cluster's paths.
    pub cluster: &'a ClusterConfig,
    /// The remote home dir, when known.
    pub home: Option<&'a str>,
}

impl RemoteDirs<'_> {
    /// A cluster path as an absolute path on the host.
    pub fn resolve(&self, path: &str) -> Result<String> {
        let (kind, host, cluster) = (self.kind, self.host, self.cluster_name);
        if let Some(rest) = path.strip_prefix('~') {
            let home = self.home.ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "cluster `{cluster}`: path `{path}` starts with `~`, but the home dir on {kind} host `{host}` is not \
                     known; use an absolute path"
                ))
            })?;
            return Ok(join(home, rest));
        }
        if !path.starts_with('/') {
            return Err(Error::InvalidConfig(format!(
                "cluster `{cluster}`: path `{path}` must be absolute for {kind} host `{host}`"
            )));
        }
        Ok(path.to_owned())
    }

    /// The run's work dir, status dir and log file, each checked to lie under its cluster dir
    /// (`work`, `status`, `log`).
    pub fn run_paths(&self, identity: &JobIdentity) -> Result<(String, String, String)> {
        let rel = identity.run_path();
        Ok((
            self.under(&self.cluster.work, &rel)?,
            self.under(&self.cluster.status_dir(), &rel)?,
            self.under(&self.cluster.log_dir(), &format!("{rel}.log"))?,
        ))
    }

    /// `base` resolved, joined with `rel`, and checked to stay under `base`.
    pub fn under(&self, base: &str, rel: &str) -> Result<String> {
        let base = self.resolve(base)?;
        let path = join(&base, rel);
        theseus_core::paths::check_under(&base, &path).map_err(|m| {
            Error::InvalidConfig(format!("{} host `{}`: refusing a run path: {m}", self.kind, self.host))
        })?;
        Ok(path)
    }

    /// The run's layout with `launch` as its rank wiring.
    pub fn layout(&self, identity: &JobIdentity, launch: Launch) -> Result<RunLayout> {
        let (work_dir, run_dir, log_file) = self.run_paths(identity)?;
        Ok(RunLayout {
            work_dir,
            run_dir,
            log_file,
            root_dir: self.resolve(&self.cluster.root)?,
            uv_cache_dir: self.cluster.uv_dir.as_deref().map(|d| self.resolve(d)).transpose()?,
            data_dirs: DataDirs {
                data: self.resolve(&self.cluster.data_dir())?,
                checkpoints: self.resolve(&self.cluster.checkpoints_dir())?,
                results: self.resolve(&self.cluster.results_dir())?,
            },
            launch,
        })
    }
}

/// A coordinator port derived from the run id, so that `layout` stays pure (no remote probing):
/// an even port in 20000..40000, the same for every rank of a run; torch's `MASTER_PORT` is the
/// odd one after it, which no other run's coordinator takes. The id is hashed (64-bit FNV-1a): run ids
/// differ in a few characters, and a plain byte sum gave runs of the same minute, or with the
/// same characters in another order, the same port, so two such jobs sharing a node (the Slurm
/// lab's preempted training and another test's job) tore down each other's JAX coordinator.
pub fn coordinator_port(run_id: &str) -> u16 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in run_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    20000 + 2 * (hash % 10000) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_the_same_second_get_coordinator_ports_apart() {
        // Same characters in another order: a byte sum gave both one port.
        assert_ne!(coordinator_port("20261127-193056-fb6123"), coordinator_port("20261127-193056-fb6132"));
        let ports: std::collections::BTreeSet<u16> =
            (0..200).map(|i| coordinator_port(&format!("20261127-193056-{i:06x}"))).collect();
        assert!(ports.len() >= 195, "{} distinct ports for 200 runs of one second", ports.len());
        assert!(ports.iter().all(|p| (20000..40000).contains(p) && p % 2 == 0), "torch takes the odd port after");
    }

    #[test]
    fn run_paths_stay_under_the_cluster_dirs() {
        let cluster = ClusterConfig { root: "/r".into(), work: "~/w".into(), ..ClusterConfig::default() };
        let dirs = RemoteDirs { kind: "slurm", host: "s", cluster_name: "c", cluster: &cluster, home: Some("/home/u") };
        let (work, run, log) = dirs.run_paths(&JobIdentity::new("n", Some("p"), None)).unwrap();
        assert!(
            work.starts_with("/home/u/w/p/default/n/")
                && run.starts_with("/r/status/p/")
                && log.starts_with("/home/u/w/logs/p/")
        );

        let escaping = JobIdentity::new("n", Some("../../../../tmp/x"), Some("y"));
        let err = dirs.run_paths(&escaping).unwrap_err().to_string();
        assert!(err.contains("slurm host `s`") && err.contains("not under `/home/u/w`"), "{err}");
    }
}
