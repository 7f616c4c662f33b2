//! The backend factory: turns a host of the config into an `Arc<dyn Backend>`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use theseus_backend_slurm::slurm::SlurmBackend;
use theseus_backend_ssh::plain::PlainBackend;
use theseus_backend_ssh::ssh::{SshHost, SshOptions};
use theseus_backend_volcano::VolcanoBackend;
use theseus_core::backend::DynBackend;
use theseus_core::config::{DispatchConfig, HostConfig, LoadedConfig, SshSettings};
use theseus_core::local::LocalBackend;

/// The backend of host `name`.
pub(crate) fn for_host(config: &DispatchConfig, name: &str, home: &Path) -> Result<Arc<DynBackend>> {
    let host = config.hosts.get(name).ok_or_else(|| anyhow!("unknown host `{name}`"))?;
    let cluster = config
        .clusters
        .get(host.cluster())
        .ok_or_else(|| anyhow!("host `{name}` names unknown cluster `{}`", host.cluster()))?;
    Ok(match host {
        HostConfig::Local(local) => Arc::new(LocalBackend::new(name, local.clone(), cluster.clone(), home)),
        HostConfig::Volcano(volcano) => Arc::new(VolcanoBackend::new(name, volcano.clone(), cluster.clone())),
        HostConfig::Plain(plain) => Arc::new(PlainBackend::with_ssh(
            name,
            plain.clone(),
            cluster.clone(),
            ssh_host(&plain.ssh, &plain.connection),
            theseus_backend_ssh::plain::Settings::default(),
        )),
        HostConfig::Slurm(slurm) => Arc::new(SlurmBackend::with_ssh(
            name,
            slurm.clone(),
            cluster.clone(),
            ssh_host(&slurm.ssh, &slurm.connection),
            theseus_backend_slurm::slurm::Settings::default(),
        )),
    })
}

/// The SSH connection to `destination` (an `~/.ssh/config` alias or `user@host`), with the
/// host's connection keys; what they leave unset, the user's ssh config decides. With
/// `THESEUS_SSH_CONFIG=FILE`, ssh reads FILE instead of `~/.ssh/config` (as `ssh -F FILE`).
fn ssh_host(destination: &str, settings: &SshSettings) -> Arc<SshHost> {
    let mut options = SshOptions::from_settings(destination, settings);
    if let Some(file) = std::env::var_os("THESEUS_SSH_CONFIG").filter(|f| !f.is_empty()) {
        options.config_file = Some(file.into());
    }
    Arc::new(SshHost::new(options))
}

/// Checks the config keys that only a backend understands (e.g. Kubernetes quantities of volcano
/// hosts); errors name the layer the key came from. Returns warnings to show.
pub(crate) fn check(loaded: &LoadedConfig) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    for (name, host) in &loaded.config.hosts {
        let HostConfig::Volcano(volcano) = host else { continue };
        if let Err(message) = theseus_backend_volcano::validate_host(name, volcano) {
            let key = message.split(':').next().unwrap_or_default();
            let source = theseus_core::config::validate::source_of(&loaded.provenance, key);
            anyhow::bail!("{source}: {message}");
        }
        if let Some(cluster) = loaded.config.clusters.get(&volcano.cluster)
            && let Err((key, message)) =
                theseus_backend_volcano::check_cluster_paths(name, volcano, &volcano.cluster, cluster)
        {
            let source = theseus_core::config::validate::source_of(&loaded.provenance, &key);
            anyhow::bail!("{source}: {key}: {message}");
        }
        if let Some(cluster) = loaded.config.clusters.get(&volcano.cluster)
            && cluster.mount.is_some()
        {
            warnings.push(format!(
                "clusters.{}.mount is ignored for volcano host `{name}`: its pods see the PVC `{}` at `{}`",
                volcano.cluster, volcano.pvc_name, volcano.pvc_mount_path
            ));
        }
    }
    Ok(warnings)
}
