//! The pods of a Volcano job and what the job plugins add to them: names `J-T-i`, labels and
//! annotations (`createJobPod` in pkg/controllers/job/job_controller_util.go), the `env` plugin's
//! `VK_TASK_INDEX`/`VC_TASK_INDEX`, the `svc` plugin's hosts ConfigMap, headless Service,
//! NetworkPolicy, `VC_<TASK>_HOSTS`/`VC_<TASK>_NUM` and `/etc/volcano` mount, and the `ssh`
//! plugin's key Secret and `/root/.ssh` mount (pkg/controllers/job/plugins).

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::Shared;
use crate::discovery::known;

/// One task of a job spec.
pub(crate) struct Task {
    pub(crate) name: String,
    pub(crate) replicas: usize,
    pub(crate) min_available: Option<usize>,
    pub(crate) max_retry: i64,
    pub(crate) template: Value,
    pub(crate) policies: Vec<Value>,
}

pub(crate) fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn tasks_of(job: &Value) -> Vec<Task> {
    job.pointer("/spec/tasks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| Task {
            name: t.get("name").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| format!("default{i}")),
            replicas: t.get("replicas").and_then(Value::as_u64).unwrap_or(1) as usize,
            min_available: t.get("minAvailable").and_then(Value::as_u64).map(|m| m as usize),
            max_retry: t.get("maxRetry").and_then(Value::as_i64).unwrap_or(0),
            template: t.get("template").cloned().unwrap_or(json!({})),
            policies: t.get("policies").and_then(Value::as_array).cloned().unwrap_or_default(),
        })
        .collect()
}

/// The controller reference a job sets on what it creates.
pub(crate) fn owner_ref(job: &Value) -> Value {
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
    })
}

/// The PodGroup's name: `<job>-<uid>` (`generateRelatedPodGroupName` in
/// pkg/controllers/job/job_controller_actions.go; before Volcano 1.5 it was the job's name).
pub(crate) fn podgroup_name(job: &Value) -> String {
    format!("{}-{}", str_at(job, "/metadata/name"), str_at(job, "/metadata/uid"))
}

fn plugins(job: &Value) -> HashSet<String> {
    let mut set: HashSet<String> =
        job.pointer("/spec/plugins").and_then(Value::as_object).into_iter().flatten().map(|(k, _)| k.clone()).collect();
    if ["pytorch", "mpi", "tensorflow", "ray"].iter().any(|p| set.contains(*p)) {
        set.insert("svc".into());
    }
    set
}

fn env_key(task: &str) -> String {
    task.to_uppercase().replace('-', "_")
}

/// The svc plugin's host list of a task (`GenerateHosts` in pkg/controllers/job/plugins/svc/
/// svc.go): `J-T-i.J` per replica, or the template's `hostname.subdomain` once when it sets a
/// hostname.
pub(crate) fn hosts_of(job: &str, task: &Task) -> Vec<String> {
    let hostname = task.template.pointer("/spec/hostname").and_then(Value::as_str).filter(|h| !h.is_empty());
    let subdomain =
        task.template.pointer("/spec/subdomain").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(job);
    match hostname {
        Some(host) => vec![format!("{host}.{subdomain}")],
        None => (0..task.replicas).map(|i| format!("{job}-{}-{i}.{subdomain}", task.name)).collect(),
    }
}

/// The svc plugin's ConfigMap, headless Service and NetworkPolicy (its `OnJobAdd`); existing
/// ones are kept.
pub(crate) fn ensure_job_objects(shared: &Shared, job: &Value, tasks: &[Task]) {
    let store = &shared.store;
    let ns = str_at(job, "/metadata/namespace");
    let name = str_at(job, "/metadata/name");
    if plugins(job).contains("ssh") {
        ensure_ssh_secret(store, job, tasks);
    }
    if !plugins(job).contains("svc") {
        return;
    }
    let mut data = serde_json::Map::new();
    for t in tasks {
        let hosts = hosts_of(name, t);
        data.insert(format!("{}.host", t.name.replace('-', "_")), json!(hosts.join("\n")));
        data.insert(format!("VC_{}_HOSTS", env_key(&t.name)), json!(hosts.join(",")));
        data.insert(format!("VC_{}_NUM", env_key(&t.name)), json!(hosts.len().to_string()));
    }
    let cm = json!({"metadata": {"name": format!("{name}-svc"), "ownerReferences": [owner_ref(job)]}, "data": data});
    let _ = store.create(known::configmaps(), ns, cm);
    let svc = json!({
        "metadata": {"name": name, "ownerReferences": [owner_ref(job)]},
        "spec": {"clusterIP": "None", "selector": {"volcano.sh/job-name": name}, "ports": [{"name": "placeholder-volcano", "port": 1, "protocol": "TCP"}]},
    });
    let _ = store.create(known::services(), ns, svc);
    // Unless told not to, the svc plugin also lets only the job's own pods reach them
    // (pkg/controllers/job/plugins/svc/svc.go, `createNetworkPolicyIfNotExist`).
    let args: Vec<&str> = job
        .pointer("/spec/plugins/svc")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let disabled = args.iter().any(|a| matches!(*a, "--disable-network-policy" | "--disable-network-policy=true"));
    if !disabled {
        let selector = json!({"matchLabels": {"volcano.sh/job-name": name, "volcano.sh/job-namespace": ns}});
        let policy = json!({
            "metadata": {"name": name, "ownerReferences": [owner_ref(job)]},
            "spec": {"podSelector": selector, "ingress": [{"from": [{"podSelector": selector}]}], "policyTypes": ["Ingress"]},
        });
        let _ = store.create(known::networkpolicies(), ns, policy);
    }
}

/// The ssh plugin's Secret `<job>-ssh` (its `OnJobAdd`, pkg/controllers/job/plugins/ssh/ssh.go):
/// a fresh RSA key pair (made with `ssh-keygen`; upstream with Go's crypto) and an ssh config
/// that names every pod (`generateSSHConfig`). Kept when it exists.
fn ensure_ssh_secret(store: &crate::store::Store, job: &Value, tasks: &[Task]) {
    let ns = str_at(job, "/metadata/namespace");
    let name = str_at(job, "/metadata/name");
    let secret_name = format!("{name}-ssh");
    if store.get(known::secrets(), ns, &secret_name).is_ok() {
        return;
    }
    let Some((private, public)) = rsa_key_pair() else {
        tracing::warn!(job = %name, "ssh plugin: ssh-keygen failed; no key Secret");
        return;
    };
    let mut config = String::from("StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n");
    for t in tasks {
        let hostname = t.template.pointer("/spec/hostname").and_then(Value::as_str).filter(|h| !h.is_empty());
        let subdomain =
            t.template.pointer("/spec/subdomain").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(name);
        for i in 0..t.replicas {
            let host = hostname.map_or_else(|| format!("{name}-{}-{i}", t.name), str::to_owned);
            config.push_str(&format!("Host {host}\n  HostName {host}.{subdomain}\n"));
            if hostname.is_some() {
                break;
            }
        }
    }
    let b64 = |s: &str| json!(crate::util::base64_encode(s.as_bytes()));
    let secret = json!({
        "metadata": {"name": secret_name, "ownerReferences": [owner_ref(job)]},
        "type": "Opaque",
        "data": {"id_rsa": b64(&private), "id_rsa.pub": b64(&public), "config": b64(&config)},
    });
    let _ = store.create(known::secrets(), ns, secret);
}

/// A new 1024-bit RSA key pair (PEM private key, authorized-keys public line), as upstream's.
fn rsa_key_pair() -> Option<(String, String)> {
    let dir = std::env::temp_dir().join(format!(
        "theseus-kube-sim-ssh-{}-{}",
        std::process::id(),
        crate::util::name_suffix()
    ));
    std::fs::create_dir_all(&dir).ok()?;
    let key = dir.join("id_rsa");
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "rsa", "-b", "1024", "-m", "PEM", "-N", "", "-f"])
        .arg(&key)
        .stdin(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    let pair = made
        .then(|| Some((std::fs::read_to_string(&key).ok()?, std::fs::read_to_string(key.with_extension("pub")).ok()?)))
        .flatten();
    let _ = std::fs::remove_dir_all(&dir);
    pair
}

/// The ssh plugin's `--ssh-key-file-path` (default `/root/.ssh`).
fn ssh_key_path(job: &Value) -> String {
    let args: Vec<&str> = job
        .pointer("/spec/plugins/ssh")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut path = "/root/.ssh".to_owned();
    for (i, a) in args.iter().enumerate() {
        if let Some(v) = a.strip_prefix("--ssh-key-file-path=") {
            path = v.to_owned();
        } else if *a == "--ssh-key-file-path"
            && let Some(v) = args.get(i + 1)
        {
            path = (*v).to_owned();
        }
    }
    path
}

/// Creates replica `index` of `task` (unbound: the gang scheduler binds it) through the API
/// server's admission plugins, as the job controller's `Pods().Create` does. `Ok` when the pod
/// exists now (made here or before); otherwise the creation error as `syncJob` words it.
pub(crate) fn create_pod(
    shared: &Shared,
    job: &Value,
    tasks: &[Task],
    task: &Task,
    index: usize,
    version: u64,
) -> Result<(), String> {
    let store = &shared.store;
    let ns = str_at(job, "/metadata/namespace");
    let name = str_at(job, "/metadata/name");
    let queue = job.pointer("/spec/queue").and_then(Value::as_str).unwrap_or("default");
    let plugins = plugins(job);
    let pod_name = format!("{name}-{}-{index}", task.name);
    let mut pod = json!({"metadata": task.template.get("metadata").cloned().unwrap_or(json!({})), "spec": task.template.get("spec").cloned().unwrap_or(json!({}))});
    let meta = &mut pod["metadata"];
    meta["name"] = json!(pod_name);
    meta["namespace"] = json!(ns);
    for (k, v) in [
        ("volcano.sh/job-name", name.to_owned()),
        ("volcano.sh/task-spec", task.name.clone()),
        ("volcano.sh/task-index", index.to_string()),
        ("volcano.sh/queue-name", queue.to_owned()),
        ("volcano.sh/job-namespace", ns.to_owned()),
    ] {
        meta["labels"][k] = json!(v);
    }
    meta["annotations"]["scheduling.k8s.io/group-name"] = json!(podgroup_name(job));
    meta["annotations"]["volcano.sh/job-name"] = json!(name);
    meta["annotations"]["volcano.sh/task-spec"] = json!(task.name);
    meta["annotations"]["volcano.sh/task-index"] = json!(index.to_string());
    meta["annotations"]["volcano.sh/queue-name"] = json!(queue);
    meta["annotations"]["volcano.sh/job-version"] = json!(version.to_string());
    meta["annotations"]["volcano.sh/job-retry-count"] =
        json!(job.pointer("/status/retryCount").and_then(Value::as_u64).unwrap_or(0).to_string());
    meta["ownerReferences"] = json!([owner_ref(job)]);
    let spec = &mut pod["spec"];
    if spec["schedulerName"].is_null() {
        spec["schedulerName"] = job.pointer("/spec/schedulerName").cloned().unwrap_or(json!("volcano"));
    }
    // `createJobPod`: the job's PriorityClass when the template names none.
    let job_class = job.pointer("/spec/priorityClassName").and_then(Value::as_str).filter(|c| !c.is_empty());
    if let Some(class) = job_class
        && spec["priorityClassName"].as_str().is_none_or(str::is_empty)
    {
        spec["priorityClassName"] = json!(class);
    }
    let mut extra_env = Vec::new();
    if plugins.contains("env") {
        extra_env.push(json!({"name": "VK_TASK_INDEX", "value": index.to_string()}));
        extra_env.push(json!({"name": "VC_TASK_INDEX", "value": index.to_string()}));
    }
    if plugins.contains("svc") {
        if spec["hostname"].is_null() {
            spec["hostname"] = json!(pod_name);
        }
        if spec["subdomain"].is_null() {
            spec["subdomain"] = json!(name);
        }
        // From the ConfigMap, as upstream: the pod spec stays small, the container's env does not.
        let cm = format!("{name}-svc");
        for t in tasks {
            for key in [format!("VC_{}_HOSTS", env_key(&t.name)), format!("VC_{}_NUM", env_key(&t.name))] {
                extra_env.push(json!({"name": key, "valueFrom": {"configMapKeyRef": {"name": cm, "key": key}}}));
            }
        }
        let volume = json!({"name": format!("{name}-svc"), "configMap": {"name": format!("{name}-svc")}});
        match spec["volumes"].as_array_mut() {
            Some(v) => v.push(volume),
            None => spec["volumes"] = json!([volume]),
        }
    }
    if plugins.contains("ssh") {
        // `mountRsaKey`: the Secret's keys under `.ssh/`, mounted with that subPath.
        let secret = format!("{name}-ssh");
        let item = |key: &str, file: &str| json!({"key": key, "path": format!(".ssh/{file}")});
        let volume = json!({"name": secret, "secret": {"secretName": secret, "defaultMode": 384, "items": [
            item("id_rsa", "id_rsa"), item("id_rsa.pub", "id_rsa.pub"), item("id_rsa.pub", "authorized_keys"), item("config", "config"),
        ]}});
        match spec["volumes"].as_array_mut() {
            Some(v) => v.push(volume),
            None => spec["volumes"] = json!([volume]),
        }
        let mount = json!({"name": secret, "mountPath": ssh_key_path(job), "subPath": ".ssh"});
        for c in spec["containers"].as_array_mut().into_iter().flatten() {
            match c["volumeMounts"].as_array_mut() {
                Some(m) => m.push(mount.clone()),
                None => c["volumeMounts"] = json!([mount]),
            }
        }
    }
    for field in ["containers", "initContainers"] {
        for c in spec[field].as_array_mut().into_iter().flatten() {
            match c["env"].as_array_mut() {
                Some(env) => env.extend(extra_env.iter().cloned()),
                None => c["env"] = json!(extra_env),
            }
            if plugins.contains("svc") {
                let mount = json!({"name": format!("{name}-svc"), "mountPath": "/etc/volcano"});
                match c["volumeMounts"].as_array_mut() {
                    Some(m) => m.push(mount),
                    None => c["volumeMounts"] = json!([mount]),
                }
            }
        }
    }
    pod["status"] = json!({"phase": "Pending"});
    let created = crate::api_admission::admit_create(known::pods(), ns, &mut pod, store)
        .and_then(|()| store.create(known::pods(), ns, pod));
    match created {
        Ok(_) => Ok(()),
        Err(err) if err.code == 409 => Ok(()),
        Err(err) => {
            // Every pass retries: at debug, or a refused create would fill the log.
            tracing::debug!(%err, pod = %pod_name, "could not create a job pod");
            Err(format!("failed to create pod {pod_name}, err: {}", go_status_error(&err)))
        }
    }
}

/// `%#v` of the `*errors.StatusError` client-go returns for a refused create, as `syncJob`
/// quotes it. Go prints the address of `Details`; a fixed one stands for it here, so the
/// message is the same on every pass (and events of the same message are one event).
fn go_status_error(err: &crate::status::ApiError) -> String {
    format!(
        "&errors.StatusError{{ErrStatus:v1.Status{{TypeMeta:v1.TypeMeta{{Kind:\"\", APIVersion:\"\"}}, \
         ListMeta:v1.ListMeta{{SelfLink:\"\", ResourceVersion:\"\", Continue:\"\", RemainingItemCount:(*int64)(nil)}}, \
         Status:\"Failure\", Message:{:?}, Reason:{:?}, Details:(*v1.StatusDetails)(0xc000000000), Code:{}}}}}",
        err.message, err.reason, err.code
    )
}
