//! Loading the dispatch config from its layers with figment, and where each value came from.
//!
//! The layers, lowest first: built-in defaults (one `local` cluster and one `local` host), the
//! user file (`-d PATH`, else `~/.theseus.yaml`), the project `.theseus.yaml` (found walking up),
//! `THESEUSCFG_*` environment variables (`__` nests) and CLI `--set KEY=VALUE` settings. Maps
//! merge deeply; lists and scalars replace.
//!
//! Each layer is parsed (YAML, order-preserving) and checked on its own first, so that errors
//! name the file, variable or `--set` that caused them. The layers are then merged by figment,
//! hosts and clusters are put back in the order they first appeared (figment's maps are sorted),
//! and the merged result is deserialized strictly and validated.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use figment::value::{Dict, Map as FigmentMap};
use figment::{Figment, Metadata, Profile, Provider};
use serde_json::{Map, Value};

use super::validate::{self, KeyError};
use super::{DispatchConfig, HostTypes};
use crate::keys::Provenance;
pub use crate::keys::{redact_quoted, yaml_message};
use crate::{Error, Result};

/// Prefix of environment variables that set config keys (`THESEUSCFG_PRIORITY=a,b`). It is not
/// `THESEUS_`, so it cannot collide with the `THESEUS_*` variables the bootstrap uses.
pub const ENV_PREFIX: &str = "THESEUSCFG_";

/// File name of the user and project config files.
pub const FILE_NAME: &str = ".theseus.yaml";

/// Source name of the built-in layer in provenance and messages.
pub const DEFAULTS_SOURCE: &str = "built-in defaults";

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
    /// The host types hosts may have (the program's registry).
    pub host_types: HostTypes,
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
    /// Things the user should know that do not stop a job: hosts of unsupported types set
    /// aside, keys nothing reads (see [`super::compat`]).
    pub warnings: Vec<String>,
}

/// Loads, merges and validates the config.
///
/// Layers, lowest first: built-in defaults, user file, project file, environment, CLI.
pub fn load(sources: &ConfigSources) -> Result<LoadedConfig> {
    let home = sources.home.as_deref();
    let mut layers = vec![Layer { kind: LayerKind::Defaults, source: DEFAULTS_SOURCE.into(), value: defaults() }];
    let mut files = Vec::new();

    let user = match &sources.explicit_file {
        Some(path) if !path.exists() => {
            return Err(Error::InvalidConfig(format!(
                "dispatch config file {} does not exist",
                display_path(path, home)
            )));
        }
        Some(path) => Some(path.clone()),
        None => home.map(|h| h.join(FILE_NAME)).filter(|p| p.is_file()),
    };
    let project = sources.project_start.as_deref().and_then(|start| find_project_file(start, home, user.as_deref()));
    for path in user.into_iter().chain(project) {
        let source = display_path(&path, home);
        let text = crate::files::read_bounded(&path, crate::files::CONFIG_LIMIT, "dispatch config file")?;
        let value = parse_yaml(&text).map_err(|m| Error::InvalidConfig(format!("{source}: invalid YAML: {m}")))?;
        let value = match value {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(Error::InvalidConfig(format!(
                    "{source}: expected a map of settings, found {}",
                    validate::kind_of(&other)
                )));
            }
        };
        layers.push(Layer { kind: LayerKind::File, source, value });
        files.push(path);
    }
    // Hosts and clusters the files name, so that env names can address `gpu-box` as `GPU_BOX`.
    let mut named: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for layer in &layers {
        for table in ["hosts", "clusters"] {
            if let Some(Value::Object(map)) = layer.value.get(table) {
                named.entry(table).or_default().extend(map.keys().cloned());
            }
        }
    }
    for (name, raw) in &sources.env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let source = format!("env {name}");
        let mut segments: Vec<String> = rest.split("__").map(str::to_owned).collect();
        if let [table, entry, ..] = segments.as_mut_slice()
            && let Some(existing) = named.get(table.to_lowercase().as_str())
        {
            *entry = super::compat::env_table_name(entry, existing)
                .map_err(|m| Error::InvalidConfig(format!("{source}: {m}")))?;
        }
        let value = setting_layer(&segments, raw, true).map_err(|m| Error::InvalidConfig(format!("{source}: {m}")))?;
        layers.push(Layer { kind: LayerKind::Override, source, value });
    }
    for (key, raw) in &sources.cli {
        let segments: Vec<String> = key.split('.').map(str::to_owned).collect();
        let value =
            setting_layer(&segments, raw, false).map_err(|m| Error::InvalidConfig(format!("--set {key}: {m}")))?;
        layers.push(Layer { kind: LayerKind::Override, source: "--set".into(), value });
    }

    // Hosts of types the registry knows but has not built in are set aside with a warning.
    let unsupported =
        super::compat::unsupported_hosts(&sources.host_types, layers.iter().map(|l| (l.source.as_str(), &l.value)));
    for layer in &mut layers {
        super::compat::remove_hosts(&mut layer.value, &unsupported);
    }
    let mut warnings = super::compat::unsupported_warnings(&unsupported);

    let mut types = HashMap::new();
    for layer in &layers {
        validate::check_layer(&layer.value, &sources.host_types, &mut types)
            .map_err(|e| layer_error(&layer.source, e))?;
    }

    let mut merged = merge(&layers)?;
    warnings.extend(super::compat::drop_priority_entries(&mut merged, &unsupported));
    let provenance = provenance(&layers, &merged);
    let mut config = build(&merged, &layers, &sources.host_types)?;
    validate::validate(&mut config, &provenance)?;
    warnings.extend(validate::drop_unknown_priority(&mut config, &provenance));
    warnings.extend(super::compat::juicefs_warnings(&config, |key| validate::source_of(&provenance, key)));
    Ok(LoadedConfig { config, files, provenance, warnings })
}

/// Expands a leading `~` (alone or followed by `/`) to `home`; other paths are returned as is.
pub fn expand_tilde(path: &str, home: &Path) -> PathBuf {
    if path == "~" {
        home.to_path_buf()
    } else if let Some(rest) = path.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(path)
    }
}

/// A path for messages: under `home` it is shown as `~/...`.
pub fn display_path(path: &Path, home: Option<&Path>) -> String {
    match home.and_then(|h| path.strip_prefix(h).ok()) {
        Some(rest) if rest.as_os_str().is_empty() => "~".into(),
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    }
}

/// What a layer is, which decides where its new hosts go in the host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LayerKind {
    Defaults,
    File,
    Override,
}

/// One parsed layer.
#[derive(Debug, Clone)]
struct Layer {
    kind: LayerKind,
    source: String,
    value: Map<String, Value>,
}

/// The built-in layer: a `local` cluster and a `local` host, so no file is needed.
fn defaults() -> Map<String, Value> {
    let value = serde_json::json!({
        "clusters": {
            "local": { "root": "~/.local/share/theseus", "work": "~/.local/share/theseus/work" }
        },
        "hosts": { "local": { "type": "local", "cluster": "local" } }
    });
    match value {
        Value::Object(map) => map,
        _ => unreachable!("the defaults are a map"),
    }
}

/// The nearest `.theseus.yaml` walking up from `start`, unless it is the user's own file.
fn find_project_file(start: &Path, home: Option<&Path>, user: Option<&Path>) -> Option<PathBuf> {
    let start = std::path::absolute(start).ok()?;
    let found = start.ancestors().map(|dir| dir.join(FILE_NAME)).find(|p| p.is_file())?;
    let same = |other: &Path| {
        other == found || matches!((found.canonicalize(), other.canonicalize()), (Ok(a), Ok(b)) if a == b)
    };
    let home_file = home.map(|h| h.join(FILE_NAME));
    if home_file.as_deref().is_some_and(same) || user.is_some_and(same) {
        return None;
    }
    Some(found)
}

/// Parses YAML text into JSON values (maps keep their order), with nulls in maps removed so that
/// an empty `hosts:` does not erase a lower layer's hosts.
pub(crate) fn parse_yaml(text: &str) -> std::result::Result<Value, String> {
    let mut value: Value = serde_saphyr::from_str(text).map_err(|e| yaml_message(&e.to_string()))?;
    strip_nulls(&mut value);
    Ok(value)
}

fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// A layer holding one setting: `segments` is the key path, `raw` a YAML value. Env keys are
/// lowercased (except the names under an `env` table); a comma-separated `priority` is a list.
fn setting_layer(segments: &[String], raw: &str, lowercase: bool) -> std::result::Result<Map<String, Value>, String> {
    if segments.iter().any(String::is_empty) {
        return Err("invalid key: empty key segment".into());
    }
    let keys: Vec<String> = segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if lowercase && (i == 0 || segments[i - 1].to_lowercase() != "env") { s.to_lowercase() } else { s.clone() }
        })
        .collect();
    let mut value = if raw.trim().is_empty() {
        Value::String(raw.to_owned())
    } else {
        parse_yaml(raw).map_err(|m| format!("invalid YAML value: {m}"))?
    };
    if let (true, Value::String(list)) = (keys.len() == 1 && keys[0] == "priority", &value) {
        value = Value::Array(list.split(',').map(|s| Value::String(s.trim().to_owned())).filter(|v| v != "").collect());
    }
    for key in keys.iter().rev() {
        let mut map = Map::new();
        map.insert(key.clone(), value);
        value = Value::Object(map);
    }
    match value {
        Value::Object(map) => Ok(map),
        _ => unreachable!("at least one key segment"),
    }
}

/// A layer as a figment provider, named by its source.
struct LayerProvider<'a>(&'a Layer);

impl Provider for LayerProvider<'_> {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.0.source.clone())
    }

    fn data(&self) -> std::result::Result<FigmentMap<Profile, Dict>, figment::Error> {
        match figment::value::Value::serialize(&self.0.value)? {
            figment::value::Value::Dict(_, dict) => Ok(Profile::Default.collect(dict)),
            _ => Err(figment::Error::from("a config layer is not a map".to_owned())),
        }
    }
}

/// Merges the layers with figment and restores the order of hosts and clusters.
fn merge(layers: &[Layer]) -> Result<Map<String, Value>> {
    let figment = layers.iter().fold(Figment::new(), |f, layer| f.merge(LayerProvider(layer)));
    let merged: Value =
        figment.extract().map_err(|e| Error::InvalidConfig(format!("failed to merge the config: {e}")))?;
    let Value::Object(mut merged) = merged else {
        return Err(Error::InvalidConfig("failed to merge the config: not a map".into()));
    };
    for table in ["clusters", "hosts"] {
        if let Some(Value::Object(entries)) = merged.get_mut(table) {
            let mut sorted = Map::new();
            for name in entry_order(layers, table) {
                if let Some(v) = entries.remove(&name) {
                    sorted.insert(name, v);
                }
            }
            sorted.append(entries);
            *entries = sorted;
        }
    }
    Ok(merged)
}

/// Names of `table` in order of first appearance in the files, then in env and `--set`, with the
/// built-in entries last unless a file defines them.
fn entry_order(layers: &[Layer], table: &str) -> Vec<String> {
    let names = |layer: &Layer| -> Vec<String> {
        layer.value.get(table).and_then(Value::as_object).map(|m| m.keys().cloned().collect()).unwrap_or_default()
    };
    let builtin: Vec<String> = layers.iter().filter(|l| l.kind == LayerKind::Defaults).flat_map(names).collect();
    let mut order: Vec<String> = Vec::new();
    let push = |name: String, order: &mut Vec<String>| {
        if !order.contains(&name) {
            order.push(name);
        }
    };
    for name in layers.iter().filter(|l| l.kind == LayerKind::File).flat_map(names) {
        push(name, &mut order);
    }
    for name in layers.iter().filter(|l| l.kind == LayerKind::Override).flat_map(names) {
        if !builtin.contains(&name) {
            push(name, &mut order);
        }
    }
    for name in builtin {
        push(name, &mut order);
    }
    order
}

/// The source of every leaf of `merged`: the last layer that set it.
fn provenance(layers: &[Layer], merged: &Map<String, Value>) -> Vec<Provenance> {
    let mut sources: HashMap<Vec<String>, &str> = HashMap::new();
    for layer in layers {
        for path in leaves(&layer.value) {
            sources.insert(path, &layer.source);
        }
    }
    leaves(merged)
        .into_iter()
        .filter_map(|path| sources.get(&path).map(|s| Provenance { key: path.join("."), source: (*s).to_owned() }))
        .collect()
}

/// Key paths of the leaves of a map (scalars, lists and empty maps), in order.
fn leaves(map: &Map<String, Value>) -> Vec<Vec<String>> {
    fn walk(map: &Map<String, Value>, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        for (key, value) in map {
            prefix.push(key.clone());
            match value {
                Value::Object(inner) if !inner.is_empty() => walk(inner, prefix, out),
                _ => out.push(prefix.clone()),
            }
            prefix.pop();
        }
    }
    let mut out = Vec::new();
    walk(map, &mut Vec::new(), &mut out);
    out
}

/// The source of the first (`first`) or last layer that has the dotted `path` (or, failing that,
/// its closest enclosing key).
fn layer_source(layers: &[Layer], path: &str, first: bool) -> String {
    let has = |layer: &&Layer, path: &str| {
        let mut value = Some(&layer.value);
        let mut segments = path.split('.').peekable();
        while let Some(seg) = segments.next() {
            match value.and_then(|m| m.get(seg)) {
                Some(v) if segments.peek().is_none() => return v.is_object() || !v.is_null(),
                Some(Value::Object(inner)) => value = Some(inner),
                _ => return false,
            }
        }
        false
    };
    let mut path = path.to_owned();
    loop {
        let found =
            if first { layers.iter().find(|l| has(l, &path)) } else { layers.iter().rev().find(|l| has(l, &path)) };
        if let Some(layer) = found {
            return layer.source.clone();
        }
        match path.rfind('.') {
            Some(i) => path.truncate(i),
            None => return "config".into(),
        }
    }
}

fn layer_error(source: &str, e: KeyError) -> Error {
    Error::InvalidConfig(format!("{source}: {}: {}", e.path, e.message))
}

/// Deserializes the merged map strictly into a [`DispatchConfig`], keeping the key order.
fn build(merged: &Map<String, Value>, layers: &[Layer], registry: &HostTypes) -> Result<DispatchConfig> {
    let fail = |e: KeyError| {
        // A missing key is the fault of the layer that defined the table; others of the one that set the key.
        let first = e.message.starts_with("missing required key");
        layer_error(&layer_source(layers, &e.path, first), e)
    };
    let mut config = DispatchConfig::default();
    for (key, value) in merged {
        match key.as_str() {
            "mount" => config.mount = Some(validate::de_strict(value.clone(), key).map_err(fail)?),
            "proxy" => config.proxy = Some(validate::de_strict(value.clone(), key).map_err(fail)?),
            "priority" => config.priority = validate::de_strict(value.clone(), key).map_err(fail)?,
            "gres_mapping" => config.gres_mapping = validate::de_strict(value.clone(), key).map_err(fail)?,
            "clusters" => {
                for (name, cluster) in value.as_object().into_iter().flatten() {
                    let parsed = validate::de_strict(cluster.clone(), &format!("clusters.{name}")).map_err(fail)?;
                    config.clusters.insert(name.clone(), parsed);
                }
            }
            "hosts" => {
                for (name, host) in value.as_object().into_iter().flatten() {
                    let body = host.as_object().cloned().unwrap_or_default();
                    let host = registry.parse(body, &format!("hosts.{name}")).map_err(fail)?;
                    config.hosts.insert(name.clone(), host);
                }
            }
            _ => return Err(fail(validate::unknown_key(key, key, validate::TOP_KEYS))),
        }
    }
    Ok(config)
}

/// Reads a whole config from one JSON map (a run's host as the ledger keeps it), strictly, with
/// the host types of `registry`. Not validated: it was when it was saved.
pub fn from_value(value: &Value, registry: &HostTypes) -> Result<DispatchConfig> {
    let empty = Map::new();
    let merged = value.as_object().unwrap_or(&empty);
    build(merged, &[], registry)
}
