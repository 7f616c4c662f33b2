//! Loading the dispatch config from its layers with figment, and where each value came from.

use std::path::PathBuf;

use serde::Serialize;

use super::DispatchConfig;
use crate::Result;

/// Prefix of environment variables that set config keys (`THESEUSCFG_PRIORITY=a,b`). It is not
/// `THESEUS_`, so it cannot collide with the `THESEUS_*` variables the bootstrap uses.
pub const ENV_PREFIX: &str = "THESEUSCFG_";

/// Where to look for each layer.
#[derive(Debug, Clone, Default)]
pub struct ConfigSources {
    /// `-d/--dispatch-config`: replaces the user file (must exist).
    pub explicit_file: Option<PathBuf>,
    /// The user's home (for `~/.theseus.yaml`); `None` skips the user file.
    pub home: Option<PathBuf>,
    /// Where to start looking for a project `.theseus.yaml` (walking up); `None` skips it.
    pub project_start: Option<PathBuf>,
    /// Environment variables (all of them; only [`ENV_PREFIX`] ones are used).
    pub env: Vec<(String, String)>,
    /// CLI `--set KEY=VALUE` settings (dotted keys, YAML values).
    pub cli: Vec<(String, String)>,
}

/// A loaded, validated config with its provenance.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The merged config.
    pub config: DispatchConfig,
    /// The files that contributed, lowest layer first.
    pub files: Vec<PathBuf>,
    /// Where each leaf value came from.
    pub provenance: Vec<Provenance>,
}

/// Where one value of the merged config came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// Dotted key path, e.g. `hosts.gpu-box.chips.h100`.
    pub key: String,
    /// Source, e.g. `built-in defaults`, `~/.theseus.yaml`, `env THESEUSCFG_PRIORITY`, `--set`.
    pub source: String,
}

/// Loads, merges and validates the config.
pub fn load(sources: &ConfigSources) -> Result<LoadedConfig> {
    let _ = sources;
    Err(crate::Error::InvalidConfig("config loading not written yet".into()))
}
