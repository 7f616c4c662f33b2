//! Checks of a Volcano host's settings that serde cannot make: required strings, object names,
//! Kubernetes quantities, helper resources, label and node-selector syntax and tolerations, so a
//! host that passes renders manifests the apiserver accepts. Errors name the key.

use theseus_core::config::ClusterConfig;

use crate::config::{Toleration, VolcanoHost};

use crate::quantity::Quantity;
use crate::resources::helper_resources;

/// Checks a volcano host's settings; `name` is the host's name in the config.
///
/// # Errors
/// One message naming the key, e.g. `hosts.k8s.memory: invalid quantity "64Gx"`.
pub fn validate_host(name: &str, host: &VolcanoHost) -> Result<(), String> {
    check_host(host).map_err(|m| format!("hosts.{name}.{m}"))
}

/// Checks that the paths of a volcano host's cluster lie on its PVC: the pods see the PVC at
/// `pvc_mount_path` and nothing else, so code shipped or logs written elsewhere would not be
/// found. `host_name` and `cluster_name` are the names in the config.
///
/// # Errors
/// The offending key (`clusters.<cluster>.<key>`) and a message with the fix.
pub fn check_cluster_paths(
    host_name: &str,
    host: &VolcanoHost,
    cluster_name: &str,
    cluster: &ClusterConfig,
) -> Result<(), (String, String)> {
    let mount = host.pvc_mount_path.trim_end_matches('/');
    let mount = if mount.is_empty() { "/" } else { mount };
    for (key, value) in [
        ("root", Some(&cluster.root)),
        ("work", Some(&cluster.work)),
        ("log", cluster.log.as_ref()),
        ("status", cluster.status.as_ref()),
    ] {
        let Some(path) = value else { continue };
        let trimmed = path.trim_end_matches('/');
        let under = mount == "/" && path.starts_with('/')
            || trimmed == mount
            || trimmed.strip_prefix(mount).is_some_and(|rest| rest.starts_with('/'));
        if !under || path.split('/').any(|part| part == "..") {
            return Err((
                format!("clusters.{cluster_name}.{key}"),
                format!(
                    "`{path}` is not under `{mount}`, where volcano host `{host_name}` mounts its PVC \
                     (hosts.{host_name}.pvc_mount_path): its pods would not find it; use a path under `{mount}`"
                ),
            ));
        }
    }
    Ok(())
}

/// [`validate_host`] without the `hosts.<name>.` prefix.
pub(crate) fn check_host(host: &VolcanoHost) -> Result<(), String> {
    if host.image.trim().is_empty() {
        return Err("image: a volcano host needs a container image".into());
    }
    if host.helper_image.trim().is_empty() {
        return Err("helper_image: the code-shipping helper needs a container image".into());
    }
    if host.pvc_name.trim().is_empty() {
        return Err("pvc_name: a volcano host needs a PVC for code and logs".into());
    }
    // torch's MASTER_PORT is the next port (see theseus_core::bootstrap); a Service port is 1..65535.
    if host.coordinator_port == 0 || host.coordinator_port == u16::MAX {
        return Err(format!(
            "coordinator_port: {} cannot be used: a port from 1 to 65534 (torch's MASTER_PORT is the next one)",
            host.coordinator_port
        ));
    }
    if !host.pvc_mount_path.starts_with('/') {
        return Err(format!("pvc_mount_path: {:?} is not an absolute path", host.pvc_mount_path));
    }
    if !is_dns_subdomain(&host.pvc_name) {
        return Err(format!("pvc_name: {:?} is not a valid PVC name", host.pvc_name));
    }
    if !host.namespace.is_empty() && !is_dns_label(&host.namespace) {
        return Err(format!("namespace: {:?} is not a valid namespace name", host.namespace));
    }
    // A Queue is a custom resource: the apiserver checks its name as a DNS-1123 subdomain
    // (apiextensions-apiserver, `customResourceStrategy.Validate` with `NameIsDNSSubdomain`).
    // Empty means Volcano's `default` queue.
    if !host.queue.is_empty() && !is_dns_subdomain(&host.queue) {
        return Err(format!(
            "queue: {:?} is not a valid queue name (lowercase letters, digits, `-` and `.`, starting and ending \
             with a letter or digit)",
            host.queue
        ));
    }
    if !is_label_key(&host.gpu_resource_key) {
        return Err(format!("gpu_resource_key: {:?} is not a valid resource name", host.gpu_resource_key));
    }
    for (key, value) in [("priority_class", &host.priority_class), ("service_account", &host.service_account)] {
        if let Some(value) = value.as_deref().filter(|v| !is_dns_subdomain(v)) {
            return Err(format!("{key}: {value:?} is not a valid object name"));
        }
    }
    for (i, name) in host.image_pull_secrets.iter().enumerate() {
        if !is_dns_subdomain(name) {
            return Err(format!("image_pull_secrets[{i}]: {name:?} is not a valid secret name"));
        }
    }
    for (key, value) in [
        ("cpu", &host.cpu),
        ("memory", &host.memory),
        ("cpu_cpu", &host.cpu_cpu),
        ("cpu_memory", &host.cpu_memory),
        ("shm_size", &host.shm_size),
    ] {
        if let Some(value) = value {
            let quantity = Quantity::parse(value).map_err(|e| format!("{key}: {e}"))?;
            if quantity.value() < 0.0 {
                return Err(format!("{key}: {value:?} is negative"));
            }
        }
    }
    helper_resources(host.helper_resources.as_ref()).map_err(|m| format!("helper_resources.{m}"))?;
    for (section, map) in [("labels", &host.labels), ("node_selector", &host.node_selector)] {
        for (key, value) in map {
            if !is_label_key(key) {
                return Err(format!("{section}: invalid label key {key:?}"));
            }
            if !is_label_value(value) {
                return Err(format!("{section}.{key}: invalid label value {value:?}"));
            }
        }
    }
    for (i, toleration) in host.tolerations.iter().enumerate() {
        check_toleration(toleration).map_err(|m| format!("tolerations[{i}].{m}"))?;
    }
    if host.restart_on_failure && host.max_retry == 0 {
        return Err("restart_on_failure: needs max_retry of at least 1 (with 0 a failed rank fails the job, \
                    which is what restart_on_failure: false does)"
            .into());
    }
    host.ttl_seconds()?;
    if let Some(text) = &host.start_timeout {
        theseus_core::duration::parse(text).map_err(|e| format!("start_timeout: {text:?}: {e}"))?;
    }
    if let Some(text) = &host.api_timeout {
        crate::client::parse_api_timeout(text).map_err(|e| format!("api_timeout: {e}"))?;
    }
    Ok(())
}

/// The apiserver's rules for one toleration; the message starts with the field.
fn check_toleration(t: &Toleration) -> Result<(), String> {
    let exists = match t.operator.as_deref() {
        None | Some("Equal") => false,
        Some("Exists") => true,
        Some(other) => return Err(format!("operator: {other:?} is not \"Exists\" or \"Equal\"")),
    };
    if t.key.is_empty() && !exists {
        return Err("operator: must be \"Exists\" when the key is empty".into());
    }
    if !t.key.is_empty() && !is_label_key(&t.key) {
        return Err(format!("key: invalid taint key {:?}", t.key));
    }
    match (exists, t.value.as_deref()) {
        (true, Some(value)) if !value.is_empty() => {
            return Err(format!("value: {value:?} must be empty when the operator is \"Exists\""));
        }
        (false, Some(value)) if !is_label_value(value) => {
            return Err(format!("value: invalid taint value {value:?}"));
        }
        _ => {}
    }
    match t.effect.as_deref() {
        None | Some("" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") => {}
        Some(other) => {
            return Err(format!("effect: {other:?} is not NoSchedule, PreferNoSchedule or NoExecute"));
        }
    }
    if t.toleration_seconds.is_some() && t.effect.as_deref() != Some("NoExecute") {
        return Err("tolerationSeconds: only allowed with the effect \"NoExecute\"".into());
    }
    Ok(())
}

/// Whether `name` is a DNS-1123 label: at most 63 of `[a-z0-9-]`, alphanumeric at both ends.
pub(crate) fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Whether `name` is a DNS-1123 subdomain (most object names): at most 253, dot-separated
/// [`is_dns_label`]s.
pub(crate) fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
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
    let prefix_ok = prefix.is_none_or(is_dns_subdomain);
    prefix_ok && !name.is_empty() && is_label_value(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_paths_must_lie_on_the_pvc() {
        let host: VolcanoHost = serde_json::from_value(serde_json::json!({
            "cluster": "c", "image": "i", "pvc_name": "p", "pvc_mount_path": "/mnt/pvc/"
        }))
        .unwrap();
        let cluster =
            |root: &str, work: &str| ClusterConfig { root: root.into(), work: work.into(), ..ClusterConfig::default() };
        assert_eq!(check_cluster_paths("k8s", &host, "c", &cluster("/mnt/pvc", "/mnt/pvc/work")), Ok(()));
        for (root, work, key) in [
            ("/mnt/pvc", "/scratch/work", "clusters.c.work"),
            ("/mnt/pvc2", "/mnt/pvc/work", "clusters.c.root"),
            ("/mnt/pvc", "/mnt/pvc/../etc", "clusters.c.work"),
            ("mnt/pvc", "/mnt/pvc/w", "clusters.c.root"),
        ] {
            let (got, message) = check_cluster_paths("k8s", &host, "c", &cluster(root, work)).unwrap_err();
            assert_eq!(got, key, "{root} {work}");
            assert!(message.contains("hosts.k8s.pvc_mount_path") && message.contains("under `/mnt/pvc`"), "{message}");
        }
        let logs_elsewhere = ClusterConfig { log: Some("/var/log/x".into()), ..cluster("/mnt/pvc", "/mnt/pvc/w") };
        assert_eq!(check_cluster_paths("k8s", &host, "c", &logs_elsewhere).unwrap_err().0, "clusters.c.log");
    }

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
        assert!(is_dns_label("ml-team") && !is_dns_label("ML") && !is_dns_label("a.b") && !is_dns_label(""));
        assert!(is_dns_subdomain("ghcr.io-creds") && !is_dns_subdomain("a..b") && !is_dns_subdomain("-a"));
    }

    #[test]
    fn object_names_are_checked_with_their_key() {
        let host = |extra: serde_json::Value| -> VolcanoHost {
            let mut body = serde_json::json!({"cluster": "c", "image": "i", "pvc_name": "p"});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            serde_json::from_value(body).unwrap()
        };
        assert_eq!(check_host(&host(serde_json::json!({"queue": "ml-team.a"}))), Ok(()));
        assert_eq!(check_host(&host(serde_json::json!({"queue": ""}))), Ok(()));
        for (extra, key) in [
            (serde_json::json!({"queue": "a b"}), "queue:"),
            (serde_json::json!({"queue": "Team"}), "queue:"),
            (serde_json::json!({"queue": "-q"}), "queue:"),
            (serde_json::json!({"priority_class": "high prio"}), "priority_class:"),
            (serde_json::json!({"service_account": "sa/x"}), "service_account:"),
            (serde_json::json!({"pvc_name": "P"}), "pvc_name:"),
            (serde_json::json!({"namespace": "a.b"}), "namespace:"),
            (serde_json::json!({"labels": {"team": "a b"}}), "labels.team:"),
            (serde_json::json!({"labels": {"a b": "x"}}), "labels:"),
            (serde_json::json!({"node_selector": {"bad key": "x"}}), "node_selector:"),
            (serde_json::json!({"node_selector": {"k": "-x"}}), "node_selector.k:"),
            // torch's MASTER_PORT is the next port: 65535 has none.
            (serde_json::json!({"coordinator_port": 65535}), "coordinator_port:"),
            (serde_json::json!({"coordinator_port": 0}), "coordinator_port:"),
        ] {
            let err = check_host(&host(extra.clone())).unwrap_err();
            assert!(err.starts_with(key), "{extra}: {err}");
        }
    }

    #[test]
    fn the_ttl_takes_seconds_a_duration_or_never_and_defaults_to_a_day() {
        let host = |ttl: serde_json::Value| -> VolcanoHost {
            serde_json::from_value(
                serde_json::json!({"cluster": "c", "image": "i", "pvc_name": "p", "ttl_seconds_after_finished": ttl}),
            )
            .unwrap()
        };
        assert_eq!(host(serde_json::Value::Null).ttl_seconds(), Ok(Some(crate::config::DEFAULT_TTL_SECONDS)));
        assert_eq!(crate::config::DEFAULT_TTL_SECONDS, 86_400);
        assert_eq!(host(serde_json::json!(600)).ttl_seconds(), Ok(Some(600)));
        assert_eq!(host(serde_json::json!(0)).ttl_seconds(), Ok(Some(0)), "0: collected as soon as it finishes");
        assert_eq!(host(serde_json::json!("12h")).ttl_seconds(), Ok(Some(43_200)));
        assert_eq!(host(serde_json::json!("never")).ttl_seconds(), Ok(None));
        for bad in
            [serde_json::json!(-5), serde_json::json!("soon"), serde_json::json!("1.5"), serde_json::json!("30000d")]
        {
            let err = check_host(&host(bad.clone())).unwrap_err();
            assert!(
                err.starts_with("ttl_seconds_after_finished: ") && err.contains("`never` to keep finished vcjobs"),
                "{bad}: {err}"
            );
        }
        let err = validate_host("k8s", &host(serde_json::json!("-1h"))).unwrap_err();
        assert!(
            err.starts_with("hosts.k8s.ttl_seconds_after_finished: \"-1h\": a duration cannot be negative"),
            "{err}"
        );
    }

    #[test]
    fn toleration_rules() {
        let t = |key: &str, op: Option<&str>, value: Option<&str>, effect: Option<&str>, secs: Option<i64>| {
            check_toleration(&Toleration {
                key: key.into(),
                operator: op.map(Into::into),
                value: value.map(Into::into),
                effect: effect.map(Into::into),
                toleration_seconds: secs,
            })
        };
        assert_eq!(t("", Some("Exists"), None, None, None), Ok(()));
        assert_eq!(t("spot", None, Some("true"), Some("NoExecute"), Some(60)), Ok(()));
        assert!(t("", None, None, None, None).unwrap_err().starts_with("operator:"));
        assert!(t("k", Some("In"), None, None, None).unwrap_err().starts_with("operator:"));
        assert!(t("k", Some("Exists"), Some("v"), None, None).unwrap_err().starts_with("value:"));
        assert!(t("k", Some("Equal"), Some("a b"), None, None).unwrap_err().starts_with("value:"));
        assert!(t("k k", Some("Exists"), None, None, None).unwrap_err().starts_with("key:"));
        assert!(t("k", Some("Exists"), None, Some("NoRun"), None).unwrap_err().starts_with("effect:"));
        assert!(
            t("k", Some("Exists"), None, Some("NoSchedule"), Some(5)).unwrap_err().starts_with("tolerationSeconds:")
        );
    }
}
