//! The host types this program knows — the one list, one line each — and the backend factory
//! over it: turns a host of the config into an `Arc<dyn Backend>`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use theseus_core::backend::DynBackend;
use theseus_core::config::{DispatchConfig, HostType, HostTypes, LoadedConfig};

/// Every built-in host type, in the order messages list them.
pub static HOST_TYPES: &[&dyn HostType] = &[
    &theseus_backend_ssh::plain::PlainType,
    &theseus_backend_slurm::SlurmType,
    &theseus_backend_volcano::VolcanoType,
    &theseus_backend_tpu::TpuType,
    &theseus_core::local::LocalType,
];

/// The registry config loading reads hosts with: `types` ([`HOST_TYPES`] in the `theseus`
/// binary); a host without `type:` is a plain one.
pub fn registry(types: &[&'static dyn HostType]) -> HostTypes {
    HostTypes::new(types).with_default("plain")
}

/// The backend of host `name`.
pub(crate) fn for_host(config: &DispatchConfig, name: &str, home: &Path) -> Result<Arc<DynBackend>> {
    let host = config.hosts.get(name).ok_or_else(|| anyhow!("unknown host `{name}`"))?;
    let cluster = config
        .clusters
        .get(host.cluster())
        .ok_or_else(|| anyhow!("host `{name}` names unknown cluster `{}`", host.cluster()))?;
    Ok(host.backend(name, cluster, home))
}

/// Checks the config keys that only a host type understands (e.g. Kubernetes quantities of
/// volcano hosts); errors name the layer the key came from. Returns warnings to show.
pub(crate) fn check(loaded: &LoadedConfig) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    for (name, host) in &loaded.config.hosts {
        let Some(cluster) = loaded.config.clusters.get(host.cluster()) else { continue };
        match host.check(name, cluster) {
            Ok(found) => warnings.extend(found),
            Err(e) => {
                let source = theseus_core::config::validate::source_of(&loaded.provenance, &e.path);
                anyhow::bail!("{source}: {}: {}", e.path, e.message);
            }
        }
    }
    Ok(warnings)
}
