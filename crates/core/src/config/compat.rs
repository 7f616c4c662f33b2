//! Config files written for the original dispatcher, and what theseus shows of a config: hosts
//! of types the registry knows but has not built in are set aside with a warning instead of failing the
//! whole file, JuiceFS keys that nothing reads are named, env variables can address hosts whose
//! names contain `-`, and secrets are redacted before a config is shown.
//!
//! Pure: JSON layers and configs in, layers, warnings and configs out.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{ClusterConfig, DispatchConfig, HostTypes};

/// The names of the hosts some layer gives a `type` the registry knows but has not built in
/// (`(layer source, layer)` in).
pub(crate) fn unsupported_hosts<'a>(
    registry: &HostTypes,
    layers: impl IntoIterator<Item = (&'a str, &'a Map<String, Value>)>,
) -> BTreeMap<String, (String, String)> {
    let mut found = BTreeMap::new();
    for (source, layer) in layers {
        let Some(Value::Object(hosts)) = layer.get("hosts") else { continue };
        for (name, host) in hosts {
            if let Some(Value::String(kind)) = host.get("type")
                && registry.is_not_built(kind)
            {
                found.entry(name.clone()).or_insert_with(|| (source.to_owned(), kind.clone()));
            }
        }
    }
    found
}

/// Removes the `unsupported` hosts from a layer (every layer: a lower file may have set keys of
/// the same host).
pub(crate) fn remove_hosts(layer: &mut Map<String, Value>, unsupported: &BTreeMap<String, (String, String)>) {
    if let Some(Value::Object(hosts)) = layer.get_mut("hosts") {
        hosts.retain(|name, _| !unsupported.contains_key(name));
    }
}

/// The warning for each set-aside host.
pub(crate) fn unsupported_warnings(unsupported: &BTreeMap<String, (String, String)>) -> Vec<String> {
    unsupported
        .iter()
        .map(|(name, (source, kind))| {
            format!(
                "{source}: hosts.{name}: type `{kind}` is not supported by theseus yet; the host is left out of solving"
            )
        })
        .collect()
}

/// Drops the entries of the merged `priority` list that name set-aside hosts, with a warning.
pub(crate) fn drop_priority_entries(
    merged: &mut Map<String, Value>,
    unsupported: &BTreeMap<String, (String, String)>,
) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(Value::Array(items)) = merged.get_mut("priority") {
        items.retain(|item| match item.as_str().and_then(|name| unsupported.get_key_value(name)) {
            Some((name, (_, kind))) => {
                warnings.push(format!(
                    "priority: `{name}` is a `{kind}` host, which theseus does not support yet; the entry is ignored"
                ));
                false
            }
            None => true,
        });
    }
    warnings
}

/// Warnings for JuiceFS keys of clusters used by hosts reached over SSH: theseus mounts nothing,
/// so jobs see whatever the machines have at `root`. For clusters of `volcano` hosts the keys
/// are ignored as the original ignored them there, with its warning: pods see only the PVC.
pub(crate) fn juicefs_warnings(config: &DispatchConfig, source: impl Fn(&str) -> String) -> Vec<String> {
    let mut users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut pvc_users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, host) in &config.hosts {
        // Hosts reached over SSH run on machines with their own filesystems.
        if host.connection().is_some() {
            users.entry(host.cluster()).or_default().push(name);
        } else if host.kind() == super::HostKind::named("volcano") {
            pvc_users.entry(host.cluster()).or_default().push(name);
        }
    }
    let mut warnings = Vec::new();
    for (cluster_name, hosts) in pvc_users {
        let Some(cluster) = config.clusters.get(cluster_name) else { continue };
        let keys = juicefs_keys(cluster);
        if let Some(first) = keys.first() {
            warnings.push(format!(
                "{}: clusters.{cluster_name}: {} {} for volcano hosts ({}): their pods see only the PVC; to use \
                 JuiceFS there, put it behind the PVC (the JuiceFS CSI driver)",
                source(&format!("clusters.{cluster_name}.{first}")),
                keys.join(", "),
                if keys.len() == 1 { "is ignored" } else { "are ignored" },
                hosts.join(", ")
            ));
        }
    }
    for (cluster_name, hosts) in users {
        let Some(cluster) = config.clusters.get(cluster_name) else { continue };
        let keys = juicefs_keys(cluster);
        if keys.is_empty() {
            continue;
        }
        warnings.push(format!(
            "{}: clusters.{cluster_name}: {} {}: theseus does not mount JuiceFS, so nothing will be mounted at `{}` for \
             jobs on {}; mount it on those machines yourself (or remove the keys)",
            source(&format!("clusters.{cluster_name}.{}", keys[0])),
            keys.join(", "),
            if keys.len() == 1 { "is ignored" } else { "are ignored" },
            cluster.root,
            hosts.join(", ")
        ));
    }
    warnings
}

/// The JuiceFS keys a cluster sets.
fn juicefs_keys(cluster: &ClusterConfig) -> Vec<&'static str> {
    [
        ("mount", &cluster.mount),
        ("cache_size", &cluster.cache_size),
        ("cache_dir", &cluster.cache_dir),
        ("all_squash", &cluster.all_squash),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.is_some().then_some(key))
    .collect()
}

/// The host or cluster an env variable's name segment means: env names are upper case and
/// most shells cannot export a name with `-`, so `GPU_BOX` addresses an existing `gpu-box`
/// (matched without case, `_` standing for `-`). A segment that matches no existing name is
/// the name itself, lower-cased; one that matches two is an error.
pub(crate) fn env_table_name(segment: &str, existing: &BTreeSet<String>) -> Result<String, String> {
    let folded = |s: &str| s.to_lowercase().replace('-', "_");
    let wanted = folded(segment);
    let matches: Vec<&String> = existing.iter().filter(|name| folded(name) == wanted).collect();
    match matches.as_slice() {
        [] => Ok(segment.to_lowercase()),
        [one] => Ok((*one).clone()),
        several => Err(format!(
            "`{segment}` matches {} (`_` stands for `-` in env names); rename one of them or use `--set`",
            several.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(" and ")
        )),
    }
}

/// What replaces a secret in shown config.
pub const REDACTED: &str = "<redacted>";

/// `config` as it may be shown: W&B keys, Hugging Face tokens, passwords in JuiceFS URLs and
/// env values whose names look secret (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*_KEY`) replaced
/// with [`REDACTED`].
pub fn redacted(config: &DispatchConfig) -> DispatchConfig {
    let mut shown = config.clone();
    for cluster in shown.clusters.values_mut() {
        for secret in [&mut cluster.wandb, &mut cluster.hf_token] {
            if secret.is_some() {
                *secret = Some(REDACTED.into());
            }
        }
        if let Some(url) = &mut cluster.mount {
            *url = redact_url_password(url);
        }
    }
    for host in shown.hosts.values_mut() {
        for (key, value) in host.env_mut().iter_mut() {
            if secret_name(key) {
                *value = REDACTED.into();
            }
        }
    }
    shown
}

/// Whether an env variable's name says it holds a secret.
pub fn secret_name(name: &str) -> bool {
    let upper = name.to_uppercase();
    ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"].iter().any(|w| upper.contains(w))
        || upper.ends_with("_KEY")
        || upper == "KEY"
}

/// `scheme://user:password@host/...` with the password redacted; other text unchanged.
fn redact_url_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let Some((userinfo, host)) = rest.split_once('@') else { return url.to_owned() };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:{REDACTED}@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_segments_find_hosts_with_hyphens() {
        let existing: BTreeSet<String> = ["gpu-box", "local", "a_b", "a-b"].iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(env_table_name("GPU_BOX", &existing).unwrap(), "gpu-box");
        assert_eq!(env_table_name("gpu-box", &existing).unwrap(), "gpu-box");
        assert_eq!(env_table_name("LOCAL", &existing).unwrap(), "local");
        assert_eq!(env_table_name("NEW_HOST", &existing).unwrap(), "new_host");
        let err = env_table_name("A_B", &existing).unwrap_err();
        assert!(err.contains("`a-b` and `a_b`"), "{err}");
    }

    #[test]
    fn url_passwords_and_secret_names_are_redacted() {
        assert_eq!(
            redact_url_password("redis://:hunter2@redis.example.com:6379/0"),
            "redis://:<redacted>@redis.example.com:6379/0"
        );
        assert_eq!(redact_url_password("redis://redis.example.com/0"), "redis://redis.example.com/0");
        for name in ["HF_TOKEN", "WANDB_API_KEY", "db_password", "AWS_SECRET_ACCESS_KEY"] {
            assert!(secret_name(name), "{name}");
        }
        for name in ["NCCL_DEBUG", "CUDA_VISIBLE_DEVICES", "KEYBOARD"] {
            assert!(!secret_name(name), "{name}");
        }
    }
}
