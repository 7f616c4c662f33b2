//! The settings of a `type: sandbox` host, read strictly from its config keys.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use theseus_core::config::HostKind;
use theseus_core::config::validate::check_count;
use theseus_core::keys::KeyError;

/// The `type:` of sandbox hosts.
pub const KIND: HostKind = HostKind::named("sandbox");

/// `type: sandbox`: jobs run as local processes under `dir`, at most `slots` processes each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxHost {
    /// The cluster the host belongs to (its root holds the jobs' data dirs).
    pub cluster: String,
    /// How many processes one job may run.
    pub slots: u32,
    /// The sandbox dir: the store, the code, the status and the log of every run (`~` is the
    /// user's home). Default: `<cluster root>/sandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// `uv sync --group` names.
    #[serde(default)]
    pub uv_groups: Vec<String>,
    /// Environment for jobs on this host.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A billed thing each submit pretends to create (e.g. "a sandbox VM"), to test the CLI's
    /// confirmation: `Backend::creates` lists it, and `submit` refuses without the user's
    /// confirmation. `error: TEXT` makes `creates` fail with TEXT (a host that cannot say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creates: Option<String>,
}

impl SandboxHost {
    /// Checks what serde cannot: `slots` is a count from 1 to `MAX_COUNT`. `path` is
    /// `hosts.NAME`; errors name the full key and what to write instead.
    pub fn validate(&self, path: &str) -> Result<(), KeyError> {
        let key = format!("{path}.slots");
        if self.slots == 0 {
            return Err(KeyError::new(key, "a sandbox needs at least 1 slot (set `slots: 1` or more)"));
        }
        check_count(&key, Some(self.slots))
    }
}
