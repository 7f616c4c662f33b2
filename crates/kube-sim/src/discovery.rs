//! The resources the simulator serves and the legacy discovery documents (`/version`, `/api`,
//! `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}`) that kube-rs and kubectl read.

use serde_json::{Value, json};

/// One served resource type.
#[derive(Debug)]
pub(crate) struct ResourceInfo {
    /// API group, "" for core.
    pub(crate) group: &'static str,
    /// API version inside the group.
    pub(crate) version: &'static str,
    /// URL plural, e.g. `pods`.
    pub(crate) plural: &'static str,
    /// `singularName`.
    pub(crate) singular: &'static str,
    /// `kind`.
    pub(crate) kind: &'static str,
    /// Namespaced or cluster-scoped.
    pub(crate) namespaced: bool,
    /// `shortNames`, as kubectl resolves them.
    pub(crate) short_names: &'static [&'static str],
    /// Subresources served: `status`, `log`, `exec`.
    pub(crate) subresources: &'static [&'static str],
}

impl ResourceInfo {
    /// `apiVersion` of objects of this type (`v1`, `batch.volcano.sh/v1alpha1`).
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_owned() } else { format!("{}/{}", self.group, self.version) }
    }

    /// Whether `.status` is only writable through the `status` subresource.
    pub(crate) fn has_status(&self) -> bool {
        self.subresources.contains(&"status")
    }

    /// The resource name used in error messages: `pods`, `jobs.batch.volcano.sh`.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() { self.plural.to_owned() } else { format!("{}.{}", self.plural, self.group) }
    }
}

const VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

macro_rules! res {
    ($g:expr, $v:expr, $p:expr, $s:expr, $k:expr, $ns:expr, [$($sn:expr),*], [$($sub:expr),*]) => {
        ResourceInfo { group: $g, version: $v, plural: $p, singular: $s, kind: $k, namespaced: $ns,
            short_names: &[$($sn),*], subresources: &[$($sub),*] }
    };
}

/// Every resource the simulator serves.
pub(crate) static RESOURCES: &[ResourceInfo] = &[
    res!("", "v1", "pods", "pod", "Pod", true, ["po"], ["status", "log", "exec", "portforward"]),
    res!("", "v1", "secrets", "secret", "Secret", true, [], []),
    res!("", "v1", "configmaps", "configmap", "ConfigMap", true, ["cm"], []),
    res!("", "v1", "services", "service", "Service", true, ["svc"], ["status"]),
    res!(
        "",
        "v1",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        true,
        ["pvc"],
        ["status"]
    ),
    res!("", "v1", "events", "event", "Event", true, ["ev"], []),
    res!("", "v1", "nodes", "node", "Node", false, ["no"], ["status"]),
    res!("", "v1", "namespaces", "namespace", "Namespace", false, ["ns"], ["status"]),
    res!("batch.volcano.sh", "v1alpha1", "jobs", "job", "Job", true, ["vcjob", "vj"], ["status"]),
    res!(
        "scheduling.volcano.sh",
        "v1beta1",
        "podgroups",
        "podgroup",
        "PodGroup",
        true,
        ["pg", "podgroup-v1beta1"],
        ["status"]
    ),
    res!("scheduling.volcano.sh", "v1beta1", "queues", "queue", "Queue", false, ["q", "queue-v1beta1"], ["status"]),
    res!("coordination.k8s.io", "v1", "leases", "lease", "Lease", true, [], []),
    res!("bus.volcano.sh", "v1alpha1", "commands", "command", "Command", true, [], []),
    res!("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", true, ["netpol"], []),
    res!("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, ["sa"], []),
    res!("scheduling.k8s.io", "v1", "priorityclasses", "priorityclass", "PriorityClass", false, ["pc"], []),
];

/// Well-known resources, for the controller and runtime.
pub(crate) mod known {
    use super::{RESOURCES, ResourceInfo};
    /// `v1` pods.
    pub(crate) fn pods() -> &'static ResourceInfo {
        &RESOURCES[0]
    }
    /// `v1` secrets.
    pub(crate) fn secrets() -> &'static ResourceInfo {
        &RESOURCES[1]
    }
    /// `v1` configmaps.
    pub(crate) fn configmaps() -> &'static ResourceInfo {
        &RESOURCES[2]
    }
    /// `v1` services.
    pub(crate) fn services() -> &'static ResourceInfo {
        &RESOURCES[3]
    }
    /// `v1` events.
    pub(crate) fn events() -> &'static ResourceInfo {
        &RESOURCES[5]
    }
    /// `v1` nodes.
    pub(crate) fn nodes() -> &'static ResourceInfo {
        &RESOURCES[6]
    }
    /// `v1` namespaces.
    pub(crate) fn namespaces() -> &'static ResourceInfo {
        &RESOURCES[7]
    }
    /// Volcano jobs.
    pub(crate) fn jobs() -> &'static ResourceInfo {
        &RESOURCES[8]
    }
    /// Volcano podgroups.
    pub(crate) fn podgroups() -> &'static ResourceInfo {
        &RESOURCES[9]
    }
    /// Volcano queues.
    pub(crate) fn queues() -> &'static ResourceInfo {
        &RESOURCES[10]
    }
    /// Volcano bus commands (`vcctl` actions on jobs and queues).
    pub(crate) fn commands() -> &'static ResourceInfo {
        &RESOURCES[12]
    }
    /// Network policies (the svc plugin's).
    pub(crate) fn networkpolicies() -> &'static ResourceInfo {
        &RESOURCES[13]
    }
    /// `v1` service accounts.
    pub(crate) fn serviceaccounts() -> &'static ResourceInfo {
        &RESOURCES[14]
    }
    /// `scheduling.k8s.io/v1` priority classes.
    pub(crate) fn priorityclasses() -> &'static ResourceInfo {
        &RESOURCES[15]
    }
}

/// Finds a served resource by group, version and plural.
pub(crate) fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    RESOURCES.iter().find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Finds a served resource by `apiVersion` and `kind` (for owner references).
pub(crate) fn find_kind(api_version: &str, kind: &str) -> Option<&'static ResourceInfo> {
    RESOURCES.iter().find(|r| r.api_version() == api_version && r.kind == kind)
}

/// `GET /version`.
pub(crate) fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-theseus-sim", "gitCommit": "0000000",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0",
        "compiler": "gc", "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn groups() -> Vec<(&'static str, &'static str)> {
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !groups.contains(&(r.group, r.version)) {
            groups.push((r.group, r.version));
        }
    }
    groups
}

fn group_json(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

/// `GET /apis`.
pub(crate) fn group_list() -> Value {
    let groups: Vec<Value> = groups().into_iter().map(|(g, v)| group_json(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/{group}`, or `None` for an unknown group.
pub(crate) fn group(group: &str) -> Option<Value> {
    let (g, v) = groups().into_iter().find(|(g, _)| *g == group)?;
    let mut doc = group_json(g, v);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`, or `None` for an unknown group version.
pub(crate) fn resource_list(group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in RESOURCES.iter().filter(|r| r.group == group && r.version == version) {
        let mut entry = json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": VERBS,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if matches!(r.plural, "pods" | "services" | "jobs" | "podgroups") {
            entry["categories"] = json!(["all"]);
        }
        resources.push(entry);
        for sub in r.subresources {
            let (kind, verbs): (&str, &[&str]) = match *sub {
                "status" => (r.kind, &["get", "patch", "update"]),
                "log" => (r.kind, &["get"]),
                "exec" => ("PodExecOptions", &["create", "get"]),
                _ => continue,
            };
            resources.push(json!({
                "name": format!("{}/{sub}", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": kind, "verbs": verbs,
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}))
}
