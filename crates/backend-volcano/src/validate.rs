//! Checks of a Volcano host's settings that serde cannot make: required strings, Kubernetes
//! quantities, helper resources and label syntax. Errors name the key.

use theseus_core::config::VolcanoHost;

use crate::helper::helper_resources;
use crate::quantity::Quantity;

/// Checks a volcano host's settings; `name` is the host's name in the config.
///
/// # Errors
/// One message naming the key, e.g. `hosts.k8s.memory: invalid quantity "64Gx"`.
pub fn validate_host(name: &str, host: &VolcanoHost) -> Result<(), String> {
    check_host(host).map_err(|m| format!("hosts.{name}.{m}"))
}

/// [`validate_host`] without the `hosts.<name>.` prefix.
pub(crate) fn check_host(host: &VolcanoHost) -> Result<(), String> {
    if host.image.trim().is_empty() {
        return Err("image: a volcano host needs a container image".into());
    }
    if host.pvc_name.trim().is_empty() {
        return Err("pvc_name: a volcano host needs a PVC for code and logs".into());
    }
    if !host.pvc_mount_path.starts_with('/') {
        return Err(format!("pvc_mount_path: {:?} is not an absolute path", host.pvc_mount_path));
    }
    for (key, value) in [
        ("cpu", &host.cpu),
        ("memory", &host.memory),
        ("cpu_cpu", &host.cpu_cpu),
        ("cpu_memory", &host.cpu_memory),
        ("shm_size", &host.shm_size),
    ] {
        if let Some(value) = value {
            Quantity::parse(value).map_err(|e| format!("{key}: {e}"))?;
        }
    }
    helper_resources(host.helper_resources.as_ref()).map_err(|m| format!("helper_resources.{m}"))?;
    for (key, value) in &host.labels {
        if !is_label_key(key) {
            return Err(format!("labels: invalid label key {key:?}"));
        }
        if !is_label_value(value) {
            return Err(format!("labels.{key}: invalid label value {value:?}"));
        }
    }
    Ok(())
}

/// Whether `value` is a valid label value: empty, or at most 63 of `[A-Za-z0-9._-]` starting and
/// ending with an alphanumeric.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// Whether `key` is a valid label key: an optional DNS subdomain prefix and `/`, then a name
/// that is a non-empty [`is_label_value`].
pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_syntax() {
        assert!(is_label_key("theseus.dev/run-id"));
        assert!(is_label_key("team"));
        assert!(!is_label_key("Bad_Prefix/x"));
        assert!(!is_label_key("a/b/c"));
        assert!(is_label_value(""));
        assert!(is_label_value("ml-team_1.x"));
        assert!(!is_label_value("-x"));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
