//! The seam between the config and the host types: a [`HostType`] reads the settings of hosts
//! whose `type:` is its kind, strictly, into a [`HostSettings`] that knows its own keys, checks,
//! fit rule and backend. Core implements only the local type; each backend crate implements its
//! own, and the CLI lists them in one [`HostTypes`] registry. Core never names another kind.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use super::SshSettings;
use super::flags::{GivenFlag, HostFlag};
use crate::availability::Availability;
use crate::backend::DynBackend;
use crate::chips::Chip;
use crate::cluster::ClusterConfig;
use crate::fit::{Outcome, Want};
use crate::keys::KeyError;
use crate::plan::HostKind;

/// One `type:` of host: its name and how to read a host's settings.
pub trait HostType: Send + Sync {
    /// The `type:` value of this type's hosts.
    fn kind(&self) -> HostKind;

    /// Keys a host of this type must have. One layer may leave them to another (a project file
    /// adding `chips` to a user file's host), so a layer alone is checked with placeholders.
    fn required_keys(&self) -> &'static [&'static str] {
        &["cluster"]
    }

    /// The command-line overrides hosts of this type understand: per override name (`image`,
    /// `namespace`, `cpu`, `mem`, `oversubscribe`: the CLI's flags), the config keys it sets.
    /// An override a type does not list leaves its hosts alone.
    fn overrides(&self) -> &'static [(&'static str, &'static [&'static str])] {
        &[]
    }

    /// The flags this type adds to `submit`, `plan` and `repl` (`--tpu-spot`), each setting a
    /// key of every host of the type ([`HostTypes::apply_flags`]). The default: none.
    fn flags(&self) -> &'static [HostFlag] {
        &[]
    }

    /// Reads a host's settings (its keys without `type`) strictly: an unknown key is an error
    /// naming the key and the keys this type knows, at `path` (`hosts.NAME`).
    fn parse(&self, body: Map<String, Value>, path: &str) -> Result<Box<dyn HostSettings>, KeyError>;
}

/// The GPUs a host offers, for the hints of a failed solve.
#[derive(Debug, Clone, Copy)]
pub enum Gpus<'a> {
    /// These chips and counts (a count of 0: none of that chip).
    Listed(&'a BTreeMap<String, u32>),
    /// Any GPU the scheduler has (nothing listed).
    Unlisted,
}

/// The [`HostSettings`] methods every host type writes the same way, for a `Clone + Serialize`
/// settings struct with the fields `cluster: String`, `env: BTreeMap<String, String>` and
/// `uv_groups: Vec<String>`: `kind` (the given [`HostKind`]), `cluster`, `env`, `env_mut`,
/// `uv_groups`, `to_value` and `clone_box`. Used inside `impl HostSettings for ... { }`.
#[macro_export]
macro_rules! common_host_settings {
    ($kind:expr) => {
        fn kind(&self) -> $crate::config::HostKind {
            $kind
        }

        fn cluster(&self) -> &str {
            &self.cluster
        }

        fn env(&self) -> &::std::collections::BTreeMap<String, String> {
            &self.env
        }

        fn env_mut(&mut self) -> &mut ::std::collections::BTreeMap<String, String> {
            &mut self.env
        }

        fn uv_groups(&self) -> &[String] {
            &self.uv_groups
        }

        fn to_value(&self) -> $crate::config::host::JsonValue {
            $crate::config::host::settings_value(self)
        }

        fn clone_box(&self) -> Box<dyn $crate::config::HostSettings> {
            Box::new(self.clone())
        }
    };
}

/// JSON, as [`HostSettings::to_value`] returns it.
pub type JsonValue = Value;

/// A host's settings as JSON (for [`common_host_settings`]).
pub fn settings_value<T: Serialize>(settings: &T) -> Value {
    serde_json::to_value(settings).expect("host settings serialize to JSON")
}

/// The validated settings of one host, as its [`HostType`] read them.
pub trait HostSettings: Debug + Send + Sync {
    /// The host's type.
    fn kind(&self) -> HostKind;

    /// The name of the cluster the host belongs to.
    fn cluster(&self) -> &str;

    /// Host-level environment variables.
    fn env(&self) -> &BTreeMap<String, String>;

    /// Host-level environment variables, to redact them.
    fn env_mut(&mut self) -> &mut BTreeMap<String, String>;

    /// Host-level `uv sync --group` names.
    fn uv_groups(&self) -> &[String];

    /// The host's `probe_timeout`, when set (a host not probed over a network has none).
    fn probe_timeout(&self) -> Option<Duration> {
        None
    }

    /// How long one call to the host's API may take, when the host says (status and cancel
    /// wait a little longer than this).
    fn api_timeout(&self) -> Option<Duration> {
        None
    }

    /// The SSH connection keys of a host reached over SSH; `None` for the others.
    fn connection(&self) -> Option<&SshSettings> {
        None
    }

    /// The settings as config keys (without `type`), for `config show`, the ledger's copy of a
    /// run's host, and equality.
    fn to_value(&self) -> Value;

    /// A copy.
    fn clone_box(&self) -> Box<dyn HostSettings>;

    /// Checks what serde cannot (counts, destinations, chip names, which it canonicalises) once
    /// the layers are merged. `path` is `hosts.NAME`; errors name the full key.
    fn validate(&mut self, path: &str) -> Result<(), KeyError>;

    /// Checks that need the host's cluster (paths the backend mounts, names it derives), after
    /// [`HostSettings::validate`]; `Ok` carries warnings. Errors name the full key.
    fn check(&self, name: &str, cluster: &ClusterConfig) -> Result<Vec<String>, KeyError> {
        let _ = (name, cluster);
        Ok(Vec::new())
    }

    /// The GPUs the host offers.
    fn gpus(&self) -> Gpus<'_>;

    /// The accelerators other than GPUs the host offers, with how many of each (a host of a
    /// type with such chips), for the hints of a failed solve: without it a request for one
    /// of them reads "no host offers" it.
    fn accelerators(&self) -> Vec<(&'static Chip, u32)> {
        Vec::new()
    }

    /// The solver's rule for this type: how the host would run `want` given what its backend
    /// measured. `gres_mapping` is the config's chip-to-GRES table.
    fn fit(&self, gres_mapping: &BTreeMap<String, String>, want: &Want, availability: &Availability) -> Outcome;

    /// The first note of a plan sent to this host although nothing fits now (its [`HostSettings::fit`]
    /// answered [`Outcome::Queue`]): `request` as text, `name` the host.
    fn queued_note(&self, request: &str, name: &str) -> String {
        format!("no host has {request} free now; sending to {name} where it will queue")
    }

    /// Notes every plan on this host carries (`time limit 14-0 (the default; ...)`).
    fn plan_notes(&self, name: &str) -> Vec<String> {
        let _ = name;
        Vec::new()
    }

    /// The backend of host `name` on `cluster`; `home` is the user's home (local paths).
    fn backend(&self, name: &str, cluster: &ClusterConfig, home: &Path) -> Arc<DynBackend>;
}

/// One host of the config: its settings behind the type that read them.
#[derive(Debug)]
pub struct HostConfig(Box<dyn HostSettings>);

impl HostConfig {
    /// Wraps settings a [`HostType`] read.
    pub fn new(settings: Box<dyn HostSettings>) -> HostConfig {
        HostConfig(settings)
    }

    /// The host's `probe_timeout`, when set.
    pub fn probe_timeout(&self) -> Option<Duration> {
        self.0.probe_timeout()
    }

    /// The host's keys with `type` first, as a config file writes them.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("type".into(), Value::String(self.0.kind().to_string()));
        if let Value::Object(rest) = self.0.to_value() {
            map.extend(rest);
        }
        Value::Object(map)
    }
}

impl std::ops::Deref for HostConfig {
    type Target = dyn HostSettings;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::ops::DerefMut for HostConfig {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut *self.0
    }
}

impl Clone for HostConfig {
    fn clone(&self) -> Self {
        HostConfig(self.0.clone_box())
    }
}

impl PartialEq for HostConfig {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind() && self.0.to_value() == other.0.to_value()
    }
}

impl Serialize for HostConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

/// The host types a program knows: the one list, in the order messages name them, with the
/// type of a host that gives no `type:` and the types known by name but not built in (hosts of
/// those are set aside with a warning, as the original dispatcher's configs may have them).
#[derive(Clone, Default)]
pub struct HostTypes {
    types: Vec<&'static dyn HostType>,
    default: Option<HostKind>,
    not_built: Vec<&'static str>,
}

impl HostTypes {
    /// A registry of `types`, with no default type and nothing set aside.
    pub fn new(types: &[&'static dyn HostType]) -> HostTypes {
        HostTypes { types: types.to_vec(), default: None, not_built: Vec::new() }
    }

    /// The type of a host that gives no `type:`.
    pub fn with_default(mut self, kind: &'static str) -> HostTypes {
        self.default = Some(HostKind::named(kind));
        self
    }

    /// Types known by name whose hosts are set aside with a warning.
    pub fn with_not_built(mut self, kinds: &[&'static str]) -> HostTypes {
        self.not_built = kinds.to_vec();
        self
    }

    /// The known kinds, in order.
    pub fn kinds(&self) -> Vec<HostKind> {
        self.types.iter().map(|t| t.kind()).collect()
    }

    /// Whether hosts of `kind` are set aside rather than read.
    pub fn is_not_built(&self, kind: &str) -> bool {
        self.not_built.contains(&kind)
    }

    /// The type named `kind` (`None`: the default type); errors say which types exist.
    pub fn get(&self, kind: Option<&str>) -> Result<&'static dyn HostType, String> {
        let Some(kind) = kind.map(str::to_owned).or_else(|| self.default.as_ref().map(ToString::to_string)) else {
            return Err(format!("missing required key \"type\" (expected one of: {})", self.listed()));
        };
        if let Some(found) = self.types.iter().find(|t| t.kind() == *kind.as_str()) {
            return Ok(*found);
        }
        if self.is_not_built(&kind) {
            return Err(format!("{} hosts are not supported yet", kind.to_uppercase()));
        }
        Err(format!("unknown host type {kind:?} (expected one of: {})", self.listed()))
    }

    /// Reads one host: `body` holds its keys, `type` among them or not. `path` is `hosts.NAME`.
    pub fn parse(&self, mut body: Map<String, Value>, path: &str) -> Result<HostConfig, KeyError> {
        let kind = match body.remove("type") {
            None => None,
            Some(Value::String(t)) => Some(t),
            Some(other) => {
                let message = format!("expected a string, found {}", crate::keys::kind_of(&other));
                return Err(KeyError::new(format!("{path}.type"), message));
            }
        };
        let host_type = self.get(kind.as_deref()).map_err(|m| KeyError::new(format!("{path}.type"), m))?;
        host_type.parse(body, path).map(HostConfig::new)
    }

    /// `host` (at `path`, `hosts.NAME`) with `keys` set as a config layer would set them: read
    /// again by its type and validated, so a value is checked like the key it replaces.
    pub fn with_keys(&self, host: &HostConfig, path: &str, keys: Vec<(&str, Value)>) -> Result<HostConfig, KeyError> {
        let Value::Object(mut body) = host.to_value() else { unreachable!("a host is a map") };
        for (key, value) in keys {
            body.insert(key.to_owned(), value);
        }
        let mut changed = self.parse(body, path)?;
        changed.validate(path)?;
        Ok(changed)
    }

    /// Sets override `name` to `value` on every host whose type lists it (see
    /// [`HostType::overrides`]), as a `--set hosts.NAME.KEY=...` layer would, each value checked
    /// like the key it replaces. Returns the names of the hosts it changed.
    pub fn apply_override(
        &self,
        config: &mut super::DispatchConfig,
        name: &str,
        value: &Value,
    ) -> Result<Vec<String>, KeyError> {
        let mut changed = Vec::new();
        for (host_name, host) in config.hosts.iter_mut() {
            let kind = host.kind();
            let host_type =
                self.get(Some(kind.as_str())).map_err(|m| KeyError::new(format!("hosts.{host_name}.type"), m))?;
            let Some((_, keys)) = host_type.overrides().iter().find(|(o, _)| *o == name) else { continue };
            let keys = keys.iter().map(|k| (*k, value.clone())).collect();
            *host = self.with_keys(host, &format!("hosts.{host_name}"), keys)?;
            changed.push(host_name.clone());
        }
        Ok(changed)
    }

    /// Every registered type's flags, with the type, in registry order.
    pub fn flags(&self) -> Vec<(HostKind, HostFlag)> {
        self.types.iter().flat_map(|t| t.flags().iter().map(|f| (t.kind(), *f))).collect()
    }

    /// Sets each of `given` on every host of its type, as a `--set hosts.NAME.KEY=...` layer
    /// would, each value checked like the key it replaces. Returns the hosts it changed; an
    /// error is one line naming the flag, the key and the fix.
    pub fn apply_flags(&self, config: &mut super::DispatchConfig, given: &[GivenFlag]) -> Result<Vec<String>, String> {
        let mut changed = Vec::new();
        for flag in given {
            let value = flag.value().map_err(|m| format!("{}: {m}", flag.shown()))?;
            for (name, host) in config.hosts.iter_mut() {
                if host.kind() != flag.kind {
                    continue;
                }
                let path = format!("hosts.{name}");
                *host = self.with_keys(host, &path, vec![(flag.flag.key(), value.clone())]).map_err(|e| {
                    format!("{}: {}: {} (fix the flag, or the key in the config)", flag.shown(), e.path, e.message)
                })?;
                if !changed.contains(name) {
                    changed.push(name.clone());
                }
            }
        }
        Ok(changed)
    }

    fn listed(&self) -> String {
        self.types.iter().map(|t| t.kind().to_string()).collect::<Vec<_>>().join(", ")
    }
}

impl Debug for HostTypes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTypes")
            .field("types", &self.listed())
            .field("default", &self.default)
            .field("not_built", &self.not_built)
            .finish()
    }
}
