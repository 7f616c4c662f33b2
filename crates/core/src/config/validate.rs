//! Validation of the config: everything serde cannot check (references between tables, chip
//! names with suggestions, env names, empty required strings); each host's own keys are checked by
//! its type ([`super::HostSettings::validate`]).
//!
//! Two stages: [`check_layer`] checks one layer (one file, one env var, one `--set`) on its own,
//! before merging, so that its errors name that layer; [`validate`] checks the merged config
//! (cross references such as host clusters) and canonicalizes chip names, naming the layer that
//! set each offending value through the provenance. A `priority` entry naming no host is only a
//! warning ([`drop_unknown_priority`]), as the original skipped it.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::MAX_COUNT;
use super::{ClusterConfig, DispatchConfig, HostTypes, Provenance};
use crate::chips;
pub(crate) use crate::keys::{KeyError, de_strict, kind_of, suggestion, unknown_key};
use crate::{Error, Result};

/// Top-level keys of a config file.
pub(crate) const TOP_KEYS: &[&str] = &["mount", "proxy", "clusters", "hosts", "priority", "gres_mapping"];

/// Validates a merged config and canonicalizes chip names (`H100` → `h100`) in every `chips` map
/// and in `gres_mapping`. Errors start with the source that set the offending value, looked up
/// in `provenance` (`config` when it has no entry).
pub fn validate(config: &mut DispatchConfig, provenance: &[Provenance]) -> Result<()> {
    let fail = |path: &str, message: String| {
        Error::InvalidConfig(format!("{}: {path}: {message}", source_of(provenance, path)))
    };

    if config.mount.is_some() && config.proxy.is_some() {
        return Err(fail("proxy", "`mount` and `proxy` are mutually exclusive".into()));
    }
    for (name, host) in &mut config.hosts {
        let prefix = format!("hosts.{name}");
        let cluster = host.cluster().to_owned();
        if !config.clusters.contains_key(&cluster) {
            let known: Vec<&str> = config.clusters.keys().map(String::as_str).collect();
            let message = format!("unknown cluster {cluster:?}{}", suggestion(&cluster, &known, "clusters"));
            return Err(fail(&format!("{prefix}.cluster"), message));
        }
        for key in host.env().keys() {
            if !crate::shell::is_env_name(key) {
                return Err(fail(&format!("{prefix}.env.{key}"), format!("invalid environment variable name {key:?}")));
            }
        }
        host.validate(&prefix).map_err(|e| fail(&e.path, e.message))?;
    }
    config.gres_mapping =
        canonical_chips(&config.gres_mapping, "gres_mapping").map_err(|e| fail(&e.path, e.message))?;
    for (chip, gres) in &config.gres_mapping {
        check_gres_type(gres).map_err(|m| fail(&format!("gres_mapping.{chip}"), m))?;
    }
    Ok(())
}

/// Drops the `priority` entries that name no host, as the original skipped them (a host taken
/// out of `hosts` must not stop every command), and returns one warning per entry, naming the
/// layer that set `priority` and the closest host name.
pub fn drop_unknown_priority(config: &mut DispatchConfig, provenance: &[Provenance]) -> Vec<String> {
    let known: Vec<&str> = config.hosts.keys().map(String::as_str).collect();
    let mut warnings = Vec::new();
    let mut kept = Vec::new();
    for (i, name) in config.priority.iter().enumerate() {
        if config.hosts.contains_key(name) {
            kept.push(name.clone());
        } else {
            warnings.push(format!(
                "{}: priority[{i}]: unknown host {name:?}{}; the entry is skipped",
                source_of(provenance, "priority"),
                suggestion(name, &known, "hosts")
            ));
        }
    }
    config.priority = kept;
    warnings
}

/// Checks an `ssh:` destination (an `~/.ssh/config` alias or `[user@]host[:port]`): not empty,
/// no whitespace or control characters, and not starting with `-`, which ssh would read as an
/// option (`-oProxyCommand=...` runs a command).
pub fn check_ssh_destination(destination: &str) -> std::result::Result<(), String> {
    if destination.trim().is_empty() {
        return Err("empty ssh destination; give an ~/.ssh/config alias or user@host".into());
    }
    if destination.starts_with('-') {
        return Err(format!(
            "{destination:?} starts with `-`, which ssh would read as an option; give an ~/.ssh/config alias or user@host"
        ));
    }
    if destination.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{destination:?} contains whitespace or a control character; give an ~/.ssh/config alias or user@host"
        ));
    }
    Ok(())
}

/// The source of the value at `path`: the entry for `path` itself, for a key under it, or for
/// the closest enclosing key.
pub fn source_of(provenance: &[Provenance], path: &str) -> String {
    let under = format!("{path}.");
    if let Some(p) = provenance.iter().rev().find(|p| p.key == path || p.key.starts_with(&under)) {
        return p.source.clone();
    }
    let mut best: Option<&Provenance> = None;
    for p in provenance {
        if path.starts_with(&format!("{}.", p.key)) && best.is_none_or(|b| p.key.len() > b.key.len()) {
            best = Some(p);
        }
    }
    best.map_or_else(|| "config".to_owned(), |p| p.source.clone())
}

/// Re-keys a chip map by catalog name; two spellings of one chip are an error. `path` is the
/// map's key (`hosts.NAME.chips`).
pub fn canonical_chips<V: Clone>(map: &BTreeMap<String, V>, path: &str) -> Result<BTreeMap<String, V>, KeyError> {
    let mut out = BTreeMap::new();
    let mut spelled: HashMap<&str, &str> = HashMap::new();
    for (key, value) in map {
        let chip = chips::parse(key).map_err(|e| KeyError::new(format!("{path}.{key}"), e.to_string()))?;
        if let Some(first) = spelled.insert(chip.name, key) {
            let message = format!("{first:?} and {key:?} are the same chip ({})", chip.name);
            return Err(KeyError::new(format!("{path}.{key}"), message));
        }
        out.insert(chip.name.to_owned(), value.clone());
    }
    Ok(out)
}

/// Checks one layer on its own. `types` holds the host types set by the lower layers; the
/// layer's own `type` settings are added to it.
pub(crate) fn check_layer(
    layer: &Map<String, Value>,
    registry: &HostTypes,
    types: &mut HashMap<String, String>,
) -> Result<(), KeyError> {
    for (key, value) in layer {
        match key.as_str() {
            "mount" | "proxy" => {
                if !value.is_string() {
                    return Err(KeyError::new(key, format!("expected a string, found {}", kind_of(value))));
                }
            }
            "clusters" => {
                for (name, cluster) in as_map(value, key)? {
                    let path = format!("clusters.{name}");
                    let mut cluster = as_map(cluster, &path)?.clone();
                    check_cluster_paths(&cluster, &path)?;
                    for required in ["root", "work"] {
                        cluster.entry(required).or_insert_with(|| Value::String(String::new()));
                    }
                    de_strict::<ClusterConfig>(Value::Object(cluster), &path)?;
                }
            }
            "hosts" => {
                for (name, host) in as_map(value, key)? {
                    check_host_layer(name, as_map(host, &format!("hosts.{name}"))?, registry, types)?;
                }
            }
            "priority" => {
                let list = value.as_array().ok_or_else(|| KeyError::new(key, "expected a list of host names"))?;
                for (i, item) in list.iter().enumerate() {
                    if !item.is_string() {
                        return Err(KeyError::new(
                            key,
                            format!("priority[{i}]: expected a host name, found {}", kind_of(item)),
                        ));
                    }
                }
            }
            "gres_mapping" => {
                for (chip, gres) in as_map(value, key)? {
                    let path = format!("gres_mapping.{chip}");
                    chips::parse(chip).map_err(|e| KeyError::new(&path, e.to_string()))?;
                    if !gres.is_string() {
                        return Err(KeyError::new(
                            path,
                            format!("expected a GRES type string, found {}", kind_of(gres)),
                        ));
                    }
                }
            }
            _ => return Err(unknown_key(key, key, TOP_KEYS)),
        }
    }
    Ok(())
}

/// Keys of a cluster that are paths on the cluster's machines.
pub(crate) const CLUSTER_PATH_KEYS: &[&str] =
    &["root", "work", "log", "data", "checkpoints", "results", "status", "share", "cache_dir", "uv_dir"];

/// Checks the path keys a layer sets on one cluster: absolute (or `~/…`) and normalised.
fn check_cluster_paths(cluster: &Map<String, Value>, path: &str) -> Result<(), KeyError> {
    for key in CLUSTER_PATH_KEYS {
        if let Some(Value::String(value)) = cluster.get(*key) {
            crate::paths::check_cluster_path(value)
                .map_err(|m| KeyError::new(format!("{path}.{key}"), format!("{value:?}: {m}")))?;
        }
    }
    Ok(())
}

/// Checks one host of one layer, with placeholders for the required keys a lower layer may set.
fn check_host_layer(
    name: &str,
    host: &Map<String, Value>,
    registry: &HostTypes,
    types: &mut HashMap<String, String>,
) -> Result<(), KeyError> {
    let path = format!("hosts.{name}");
    let kind = match host.get("type") {
        Some(Value::String(t)) => {
            let kind = registry.get(Some(t)).map_err(|m| KeyError::new(format!("{path}.type"), m))?;
            types.insert(name.to_owned(), t.clone());
            kind
        }
        Some(other) => {
            return Err(KeyError::new(format!("{path}.type"), format!("expected a string, found {}", kind_of(other))));
        }
        None => types
            .get(name)
            .map_or_else(|| registry.get(None), |t| registry.get(Some(t)))
            .map_err(|m| KeyError::new(format!("{path}.type"), m))?,
    };
    if let Some(chips) = host.get("chips") {
        check_chip_counts(chips, &format!("{path}.chips"))?;
    }
    if let Some(Value::Object(env)) = host.get("env") {
        for key in env.keys() {
            if !crate::shell::is_env_name(key) {
                return Err(KeyError::new(
                    format!("{path}.env.{key}"),
                    format!("invalid environment variable name {key:?}"),
                ));
            }
        }
    }
    if let Some(value) = host.get("probe_timeout") {
        check_probe_timeout(value).map_err(|m| KeyError::new(format!("{path}.probe_timeout"), m))?;
    }
    let mut body = host.clone();
    body.remove("type");
    for key in kind.required_keys() {
        body.entry(*key).or_insert_with(|| Value::String(String::new()));
    }
    kind.parse(body, &path).map(|_| ())
}

/// Checks a `probe_timeout` value: a duration through [`crate::duration::parse`] (a number is
/// seconds), more than 0.
fn check_probe_timeout(value: &Value) -> std::result::Result<(), String> {
    let text = match value {
        Value::String(text) => text.clone(),
        Value::Number(n) => n.to_string(),
        other => return Err(format!("expected a duration such as `5s`, found {}", kind_of(other))),
    };
    match crate::duration::parse(&text) {
        Ok(d) if d.is_zero() => Err(format!("{text:?}: a probe timeout must be more than 0 (e.g. `5s`)")),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

/// Checks a `chips` map: known chip names and whole counts of 0 or more.
fn check_chip_counts(value: &Value, path: &str) -> Result<(), KeyError> {
    for (chip, count) in as_map(value, path)? {
        let key = format!("{path}.{chip}");
        chips::parse(chip).map_err(|e| KeyError::new(&key, e.to_string()))?;
        match count {
            Value::Number(n) if n.as_u64().is_some_and(|c| c <= u64::from(MAX_COUNT)) => {}
            Value::Number(n) if n.as_u64().is_some() => {
                return Err(KeyError::new(key, format!("invalid count {n}: at most {MAX_COUNT}")));
            }
            Value::Number(n) if n.as_i64().is_some_and(|c| c < 0) => {
                return Err(KeyError::new(key, format!("invalid count {n}: counts must be 0 or more")));
            }
            other => {
                return Err(KeyError::new(
                    key,
                    format!("invalid count {other}: counts must be whole numbers, 0 or more"),
                ));
            }
        }
    }
    Ok(())
}

/// A `gres_mapping` value: a bare GRES type (`a100`), which theseus writes as `gpu:TYPE:N`.
fn check_gres_type(gres: &str) -> std::result::Result<(), String> {
    if let Some(bare) = gres.strip_prefix("gpu:") {
        return Err(format!(
            "`{gres}` includes the `gpu:` prefix; write the bare GRES type `{bare}` (theseus writes `gpu:{bare}:N`)"
        ));
    }
    if gres.is_empty() || !gres.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
        return Err(format!(
            "`{gres}` is not a GRES type (letters, digits, `_`, `-`, `.`; as in the `TYPE` of `gpu:TYPE:N` that `sinfo -o %G` shows)"
        ));
    }
    Ok(())
}

/// Checks a count key of a host (`gpus_per_node`, `processes`): at most [`MAX_COUNT`]. `path`
/// is the key.
pub fn check_count(path: &str, count: Option<u32>) -> Result<(), KeyError> {
    match count.filter(|n| *n > MAX_COUNT) {
        Some(n) => Err(KeyError::new(path, format!("invalid count {n}: at most {MAX_COUNT}"))),
        None => Ok(()),
    }
}

fn as_map<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, KeyError> {
    value.as_object().ok_or_else(|| KeyError::new(path, format!("expected a map, found {}", kind_of(value))))
}
