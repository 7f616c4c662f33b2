//! The workers of a TPU VM, each a plain SSH host ([`PlainBackend`] of `theseus-backend-ssh`,
//! reused whole: claim, ship through the content-addressed store, detached supervisor, status,
//! logs, cancel, shell, forward, sync), and what makes one job into one run per worker.
//!
//! Paths: the TPU layout resolves a cluster path under `~` to itself (`~/theseus/work/...`), so
//! that the bootstrap core renders names the home of no worker; per worker, those paths are
//! replaced by the worker's own (its `$HOME` over SSH) in the rendered files before they are
//! shipped. A real TPU VM's workers share a home path on separate disks; the simulator gives
//! each worker its own home on one machine, so they never share a run dir either way. Absolute
//! cluster paths are used as they are on every worker.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use theseus_backend_ssh::paths::RemoteDirs;
use theseus_backend_ssh::plain::{PlainBackend, PlainHost, Settings};
use theseus_backend_ssh::ssh::{KnownHostsPolicy, RemoteCommand, SshHost, SshOptions};
use theseus_core::backend::{PreparedJob, RunLayout};
use theseus_core::bootstrap::{BOOTSTRAP_DIR, Launch, RenderedFile};
use theseus_core::config::ClusterConfig;
use theseus_core::job::JobIdentity;
use theseus_core::shell::quote;
use theseus_core::{Error, Result};

/// The `~` that the TPU layout leaves in cluster paths.
pub(crate) const HOME: &str = "~";

/// The wrapper every worker's supervisor starts (`worker.sh` with its values).
pub(crate) const WRAPPER: &str = "tpu-worker.sh";

/// How the backend reaches workers.
#[derive(Debug, Clone, Default)]
pub struct Connector {
    /// The login user (host key `ssh_user`); unset: the node's `ssh-keys` user, else ssh's.
    pub user: Option<String>,
    /// An ssh config used instead of `~/.ssh/config` (`THESEUS_SSH_CONFIG` is read too).
    pub config_file: Option<PathBuf>,
    /// Where per-VM known-hosts files go (a recreated VM has new host keys: each incarnation
    /// gets a file of its own, keys accepted on first use, as gcloud does with its own file).
    /// Unset: the user's ssh config decides.
    pub known_hosts_dir: Option<PathBuf>,
    /// Control sockets' dir (default: openssh's).
    pub control_dir: Option<PathBuf>,
    /// `ConnectTimeout`.
    pub connect_timeout: Option<Duration>,
    /// The plain backend's knobs for every worker.
    pub settings: Settings,
}

/// One worker of one node incarnation, connected.
#[derive(Debug)]
pub(crate) struct Worker {
    /// Its index (rank).
    pub(crate) index: u32,
    /// Its `$HOME`.
    pub(crate) home: String,
    /// The worker as a plain host.
    pub(crate) plain: Arc<PlainBackend>,
}

/// Connected workers, by node incarnation, address and user.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    workers: Mutex<HashMap<String, Arc<Worker>>>,
}

impl Pool {
    /// Worker `index` at `address` of node incarnation `node_id`, connected on first use.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn get(
        &self,
        connector: &Connector,
        host: &str,
        cluster_name: &str,
        cluster: &ClusterConfig,
        node_id: &str,
        index: u32,
        address: &str,
        user: Option<&str>,
    ) -> Result<Arc<Worker>> {
        let key = format!("{node_id}/{address}/{}", user.unwrap_or(""));
        if let Some(w) = self.workers.lock().expect("pool lock").get(&key) {
            return Ok(Arc::clone(w));
        }
        let mut options = SshOptions::new(address);
        options.user = user.map(str::to_owned);
        options.config_file = connector
            .config_file
            .clone()
            .or_else(|| std::env::var_os("THESEUS_SSH_CONFIG").filter(|f| !f.is_empty()).map(PathBuf::from));
        if let Some(dir) = &connector.known_hosts_dir {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
            options.known_hosts = Some(KnownHostsPolicy::AcceptNew);
            let safe: String =
                node_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
            options.known_hosts_file = Some(dir.join(format!("known_hosts-{host}-{safe}")));
        }
        options.control_dir = connector.control_dir.clone();
        options.connect_timeout = connector.connect_timeout;
        let ssh = Arc::new(SshHost::new(options));
        let out = ssh
            .run(&RemoteCommand::script(r#"printf '%s' "$HOME""#, Vec::<String>::new()).retry_safe())
            .await
            .map_err(|e| Error::Backend {
                backend: format!("tpu({host})"),
                message: format!("failed to reach worker {index} of VM `{host}` at `{address}` over SSH"),
                source: Some(Box::new(e)),
            })?;
        let home = out.stdout_text().trim().to_owned();
        if !home.starts_with('/') || home.contains('\'') || home.chars().any(char::is_control) {
            return Err(Error::backend(
                format!("tpu({host})"),
                format!("worker {index} of VM `{host}` has no usable $HOME (`{home}`)"),
            ));
        }
        let settings = Settings { remote_home: Some(home.clone()), ..connector.settings.clone() };
        let entry = PlainHost { ssh: address.to_owned(), cluster: cluster_name.to_owned(), ..PlainHost::default() };
        let name = format!("{host}-w{index}");
        let plain = Arc::new(PlainBackend::with_ssh(name, entry, cluster.clone(), ssh, settings));
        let worker = Arc::new(Worker { index, home, plain });
        self.workers.lock().expect("pool lock").insert(key, Arc::clone(&worker));
        Ok(worker)
    }
}

/// The run's layout with cluster paths under `~` kept as they are (see the module docs).
pub(crate) fn template_layout(
    host: &str,
    cluster_name: &str,
    cluster: &ClusterConfig,
    identity: &JobIdentity,
    launch: Launch,
) -> Result<RunLayout> {
    dirs(host, cluster_name, cluster, HOME).layout(identity, launch)
}

/// The cluster's dirs on a worker whose home is `home`.
pub(crate) fn dirs<'a>(
    host: &'a str,
    cluster_name: &'a str,
    cluster: &'a ClusterConfig,
    home: &'a str,
) -> RemoteDirs<'a> {
    RemoteDirs { kind: "tpu", host, cluster_name, cluster, home: Some(home) }
}

/// What the wrapper of worker 0 does after its bootstrap: delete the node.
#[derive(Debug, Clone, Default)]
pub(crate) struct SelfDelete {
    /// The node's resource name (`projects/P/locations/Z/nodes/ID`).
    pub(crate) resource: String,
    /// Seconds between the run's end and the delete.
    pub(crate) after: u64,
}

/// The job as a worker with layout `worker` runs it (`worker0`: the first): one process, the
/// rendered files with the template's `~` paths replaced by the worker's, started by the TPU
/// wrapper (which keeps the resume base beside the checkpoints on worker 0, puts it back on a
/// restart, and deletes the VM afterwards when `delete` is set, on worker 0 only).
pub(crate) fn worker_job(
    job: &PreparedJob,
    template: &RunLayout,
    worker: &RunLayout,
    worker0: bool,
    delete: Option<&SelfDelete>,
    restarts: u32,
) -> PreparedJob {
    let mut pairs: Vec<(&str, &str)> = vec![
        (&template.work_dir, &worker.work_dir),
        (&template.run_dir, &worker.run_dir),
        (&template.log_file, &worker.log_file),
        (&template.root_dir, &worker.root_dir),
        (&template.data_dirs.data, &worker.data_dirs.data),
        (&template.data_dirs.checkpoints, &worker.data_dirs.checkpoints),
        (&template.data_dirs.results, &worker.data_dirs.results),
    ];
    if let (Some(a), Some(b)) = (&template.uv_cache_dir, &worker.uv_cache_dir) {
        pairs.push((a, b));
    }
    pairs.retain(|(a, b)| a != b && a.starts_with(HOME));
    // Longer first: a dir's path is a prefix of the paths under it.
    pairs.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
    let mut files: Vec<RenderedFile> = job
        .bootstrap
        .files
        .iter()
        .map(|f| {
            let mut contents = f.contents.clone();
            for (from, to) in &pairs {
                contents = contents.replace(from, to);
            }
            RenderedFile { contents, ..f.clone() }
        })
        .collect();
    let bootstrap = theseus_core::config::join(&worker.work_dir, &job.bootstrap.entry);
    let base_copy = theseus_core::config::join(
        &theseus_core::bootstrap::checkpoint_dir(&worker.data_dirs.checkpoints, &job.identity),
        &format!(".theseus-resume-base-{}", job.identity.run_id),
    );
    files.push(RenderedFile {
        path: format!("{BOOTSTRAP_DIR}/{WRAPPER}"),
        contents: wrapper(&bootstrap, worker, worker0, delete, restarts, &base_copy),
        executable: true,
    });
    let mut plan = job.plan.clone();
    plan.nodes = 1;
    plan.processes_per_node = 1;
    let mut out = job.clone();
    out.plan = plan;
    out.bootstrap.files = files;
    out.bootstrap.entry = format!("{BOOTSTRAP_DIR}/{WRAPPER}");
    out
}

/// The wrapper script of one worker.
fn wrapper(
    bootstrap: &str,
    worker: &RunLayout,
    worker0: bool,
    delete: Option<&SelfDelete>,
    restarts: u32,
    base_copy: &str,
) -> String {
    let d = delete.cloned().unwrap_or_default();
    let exit_file = theseus_core::config::join(&worker.run_dir, "exit_code");
    let log = theseus_core::config::join(&worker.run_dir, "tpu-delete.log");
    format!(
        "#!/usr/bin/env bash\n# theseus TPU worker wrapper (rendered per worker).\n\
         theseus_tpu_bootstrap={}\ntheseus_tpu_delete={}\ntheseus_tpu_resource={}\n\
         theseus_tpu_delete_after={}\ntheseus_tpu_exit_file={}\ntheseus_tpu_delete_log={}\n\
         theseus_tpu_run_dir={}\ntheseus_tpu_base_copy={}\ntheseus_tpu_worker0={}\n{}{}",
        quote(bootstrap),
        u8::from(delete.is_some()),
        quote(&d.resource),
        d.after,
        quote(&exit_file),
        quote(&log),
        quote(&worker.run_dir),
        quote(base_copy),
        u8::from(worker0),
        // The bootstrap counts attempts from the restarts its backend reports (resume.sh).
        if restarts > 0 { format!("export THESEUS_RESTART_COUNT={restarts}\n") } else { String::new() },
        include_str!("worker.sh"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_paths_keep_the_tilde_and_worker_paths_replace_it() {
        let cluster = ClusterConfig { root: "~/t".into(), work: "~/t/work".into(), ..ClusterConfig::default() };
        let id = JobIdentity::new("n", Some("p"), None);
        let t = template_layout("h", "c", &cluster, &id, Launch::Single).unwrap();
        assert!(t.work_dir.starts_with("~/t/work/p/"), "{}", t.work_dir);
        let w = dirs("h", "c", &cluster, "/home/w1").layout(&id, Launch::Single).unwrap();
        assert!(w.work_dir.starts_with("/home/w1/t/work/p/"), "{}", w.work_dir);
    }
}
