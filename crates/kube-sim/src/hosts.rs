//! Name resolution inside pods. On a real node the kubelet writes each pod's `/etc/hosts` (its own
//! host name; `managedHostsFileContent` in pkg/kubelet/kubelet_pods.go) and cluster DNS resolves
//! Services (`<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc.cluster.local`) and, behind a headless Service
//! named like a pod's `subdomain`, the pod's `<hostname>.<subdomain>` (what Volcano's `svc` plugin
//! relies on). Pods here are local processes on 127.0.0.1 with the host's resolver, so the
//! simulator writes a hosts file per pod naming all of that as 127.0.0.1 and gives each container
//! its own mount namespace (`unshare --mount`) in which that file is bind-mounted over
//! `/etc/hosts`, and its own UTS namespace whose host name is the pod's, as a pod has. Divergences: the names are those that exist when the container starts (a
//! Service created later does not resolve in it, where cluster DNS would answer once it exists),
//! a Service resolves whether or not it selects a pod, and commands run by `pods/exec` see the
//! host's `/etc/hosts` (`kubectl exec` on a node joins the container's namespaces). Building that needs the privilege to
//! make mount namespaces (root, as in CI); without it ([`isolation`] says why) containers run with
//! the host's `/etc/hosts`, and the runtime puts a `Warning` event on the pod saying so.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

use crate::discovery::known;
use crate::store::Store;

/// The cluster domain names end with (kubelet's `--cluster-domain` default).
const CLUSTER_DOMAIN: &str = "cluster.local";

/// The names a pod's hosts file gives 127.0.0.1 (and the kubelet's fixed lines), for `pod`.
pub(crate) fn hosts_file(store: &Store, pod: &Value) -> String {
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let hostname = pod_hostname(pod);
    let subdomain = pod.pointer("/spec/subdomain").and_then(Value::as_str).filter(|s| !s.is_empty());
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    match subdomain {
        Some(sub) => out.push_str(&format!("127.0.0.1\t{hostname}.{sub}.{ns}.svc.{CLUSTER_DOMAIN}\t{hostname}\n")),
        None => out.push_str(&format!("127.0.0.1\t{hostname}\n")),
    }
    let aliases = pod.pointer("/spec/hostAliases").and_then(Value::as_array).filter(|a| !a.is_empty());
    if let Some(aliases) = aliases {
        out.push_str("\n# Entries added by HostAliases.\n");
        for alias in aliases {
            let ip = alias.get("ip").and_then(Value::as_str).unwrap_or("");
            let names: Vec<&str> = alias
                .get("hostnames")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            out.push_str(&format!("{ip}\t{}\n", names.join("\t")));
        }
    }
    out.push_str("\n# Cluster DNS as the simulator answers it: every pod is on 127.0.0.1.\n");
    let mut services = std::collections::HashSet::new();
    store.for_each(known::services(), ns, |svc| {
        if let Some(svc) = svc.pointer("/metadata/name").and_then(Value::as_str) {
            services.insert(svc.to_owned());
            out.push_str(&format!("127.0.0.1\t{}\n", dns_names(svc, ns).join(" ")));
        }
    });
    // `<hostname>.<subdomain>` of the namespace's pods behind a headless Service of that name.
    store.for_each(known::pods(), ns, |other| {
        let spec = |key: &str| other.pointer(&format!("/spec/{key}")).and_then(Value::as_str).filter(|s| !s.is_empty());
        if let (Some(host), Some(sub)) = (spec("hostname"), spec("subdomain"))
            && services.contains(sub)
        {
            out.push_str(&format!("127.0.0.1\t{}\n", dns_names(&format!("{host}.{sub}"), ns).join(" ")));
        }
    });
    out
}

/// The pod's host name: `spec.hostname`, else its name cut to 63 characters without a trailing
/// `-` or `.` (the kubelet's `truncatePodHostnameIfNeeded`).
pub(crate) fn pod_hostname(pod: &Value) -> String {
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("pod");
    let hostname = pod.pointer("/spec/hostname").and_then(Value::as_str).filter(|h| !h.is_empty()).unwrap_or(name);
    hostname[..hostname.len().min(63)].trim_end_matches(['-', '.']).to_owned()
}

/// `<name>`, `<name>.<ns>`, `<name>.<ns>.svc` and `<name>.<ns>.svc.<domain>`: what a pod of `ns`
/// resolves through its DNS search list.
fn dns_names(name: &str, ns: &str) -> [String; 4] {
    [name.to_owned(), format!("{name}.{ns}"), format!("{name}.{ns}.svc"), format!("{name}.{ns}.svc.{CLUSTER_DOMAIN}")]
}

/// Whether containers can get their own `/etc/hosts` here: `Ok` with the `unshare` and `mount`
/// programs, or why not (probed once: a mount namespace with `/etc/hosts` bind-mounted).
pub(crate) fn isolation() -> &'static Result<(String, String), String> {
    static PROBE: OnceLock<Result<(String, String), String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        let find = |program: &str| {
            std::env::var_os("PATH")
                .into_iter()
                .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
                .chain(["/usr/bin".into(), "/bin".into(), "/usr/sbin".into(), "/sbin".into()])
                .map(|dir| dir.join(program))
                .find(|p| p.is_file())
                .map(|p| p.display().to_string())
                .ok_or_else(|| format!("`{program}` (util-linux) is not installed"))
        };
        let (unshare, mount) = (find("unshare")?, find("mount")?);
        let probe = "printf %s kube-sim-probe > /proc/sys/kernel/hostname && \"$0\" --bind /etc/hosts /etc/hosts";
        let out = std::process::Command::new(&unshare)
            .args(["--mount", "--uts", "--propagation", "private", "--", "/bin/sh", "-c", probe, &mount])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {unshare}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "`unshare --mount --uts` with a host name and a bind mount failed ({}): run the simulator as root",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok((unshare, mount))
    })
}

/// The argv prefix that runs a command as a pod's container does for names: in a UTS namespace
/// of its own whose host name is the pod's `hostname` (what `gethostname` returns in a pod, and
/// what e.g. gloo resolves to find its interface), and a mount namespace of its own with `hosts`
/// over `/etc/hosts`. The command's pid stays that of the prefix (each step `exec`s). Empty when
/// [`isolation`] failed.
pub(crate) fn wrapper(hosts: &Path, hostname: &str) -> Vec<String> {
    let Ok((unshare, mount)) = isolation() else { return Vec::new() };
    let mount = format!("'{}'", mount.replace('\'', "'\\''"));
    let script = format!(
        "printf %s \"$1\" > /proc/sys/kernel/hostname && {mount} --bind \"$0\" /etc/hosts || \
         {{ echo \"kube-sim: cannot give the container its host name and /etc/hosts ($0)\" >&2; exit 128; }}; \
         shift; exec \"$@\""
    );
    [unshare.as_str(), "--mount", "--uts", "--propagation", "private", "--", "/bin/sh", "-c", &script]
        .into_iter()
        .map(str::to_owned)
        .chain([hosts.display().to_string(), hostname.to_owned()])
        .collect()
}
