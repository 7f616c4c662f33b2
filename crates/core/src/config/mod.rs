//! The dispatch config: clusters (filesystem layout and credentials), hosts (where jobs run),
//! `priority` and `gres_mapping`, as in the original dispatcher.
//!
//! The types here are the *validated* shape. [`load`] builds them from the figment layers
//! (built-in defaults < user file < project file < environment < CLI) and [`validate`] checks
//! everything that serde cannot (references between tables, chip names, counts). Each host's
//! own keys are read and checked by its [`HostType`] from the registry ([`HostTypes`]) the
//! program passes in.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

pub mod compat;
pub mod flags;
pub mod host;
pub mod load;
pub mod ssh;
pub mod validate;

pub use crate::cluster::{ClusterConfig, Materialize, join};
pub use crate::keys::Provenance;
pub use crate::plan::{HostKind, MAX_COUNT};
pub use flags::{FlagConstant, FlagSets, GivenFlag, HostFlag};
pub use host::{Gpus, HostConfig, HostSettings, HostType, HostTypes};
pub use load::{ConfigSources, ENV_PREFIX, LoadedConfig, display_path, expand_tilde};
pub use ssh::{KnownHosts, SshSettings};

/// The whole dispatch config.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DispatchConfig {
    /// Local path of a JuiceFS mount of the theseus root (REPL sync; accepted, not used yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
    /// Alternative mailbox transport `[user@]host:/path` (accepted, not used yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// Filesystem layout and credentials per cluster.
    #[serde(default)]
    pub clusters: IndexMap<String, ClusterConfig>,
    /// Execution targets, in the order the solver tries them after `priority`.
    #[serde(default)]
    pub hosts: IndexMap<String, HostConfig>,
    /// Hosts tried first, in this order.
    #[serde(default)]
    pub priority: Vec<String>,
    /// Chip name to Slurm GRES type token (the `TYPE` in `gpu:TYPE:N`).
    #[serde(default)]
    pub gres_mapping: BTreeMap<String, String>,
}

impl DispatchConfig {
    /// Hosts in solver order: `priority` first, then the rest in config order.
    pub fn ordered_hosts(&self) -> Vec<(&str, &HostConfig)> {
        let mut out: Vec<(&str, &HostConfig)> = Vec::new();
        for name in &self.priority {
            if let Some((k, h)) = self.hosts.get_key_value(name.as_str())
                && !out.iter().any(|(n, _)| *n == k.as_str())
            {
                out.push((k.as_str(), h));
            }
        }
        for (k, h) in &self.hosts {
            if !out.iter().any(|(n, _)| *n == k.as_str()) {
                out.push((k.as_str(), h));
            }
        }
        out
    }

    /// The cluster a host belongs to.
    pub fn cluster_of(&self, host: &HostConfig) -> Option<&ClusterConfig> {
        self.clusters.get(host.cluster())
    }
}

/// A duration key's text: a string, or a number of seconds as YAML and env values give it
/// (`probe_timeout: 5`), kept as text for [`crate::duration::parse`].
pub fn duration_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    use serde::de::Error as _;
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(text)) => Ok(Some(text)),
        Some(serde_json::Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => {
            Err(D::Error::custom(format!("expected a duration such as `5s` or a number of seconds, found {other}")))
        }
    }
}
