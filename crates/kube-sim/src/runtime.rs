//! The kubelet part: runs each bound pod's containers as local processes (own process group,
//! output to a log file, a per-pod sandbox dir), reports their state in the pod status, and
//! stops them (SIGTERM, grace period, SIGKILL) when the pod is deleted.
//!
//! Where files go: the sandbox is `<root>/pods/<namespace>_<pod>_<uid prefix>/`; logs are
//! `<sandbox>/logs/<container>.log`. A `persistentVolumeClaim` mount is the host directory at the
//! same path as its `mountPath`. Every other mount (configMap, secret, emptyDir, hostPath) is
//! rebased under the sandbox: the svc plugin's `/etc/volcano/<task>.host` files are at
//! `<sandbox>/etc/volcano/<task>.host`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::Shared;
use crate::discovery::known;
use crate::events;
use crate::hosts;
use crate::procs;
use crate::sched::Cluster;
use crate::selector::Selectors;
use crate::server::ExecContext;
use crate::status::ApiError;
use crate::store::Store;
use crate::util;

/// One started container.
struct ContainerProc {
    name: String,
    argv: Vec<String>,
    log: PathBuf,
    cwd: PathBuf,
    env: Vec<(String, String)>,
    /// Process group id (= the leader's pid) while the leader runs.
    pgid: Option<i32>,
    stop: Option<oneshot::Sender<Duration>>,
    /// Restarts so far (`restartCount`).
    restarts: u32,
}

/// One pod the runtime has started.
struct PodProc {
    namespace: String,
    name: String,
    grace: Duration,
    /// `restartPolicy`: `Never`, `OnFailure` or `Always`.
    restart_policy: String,
    /// Set once the pod is being deleted: exited containers are not restarted.
    stopping: bool,
    containers: Vec<ContainerProc>,
}

/// The pods' processes, keyed by pod uid.
pub(crate) struct Runtime {
    root: PathBuf,
    pods: Mutex<HashMap<String, PodProc>>,
}

/// Why a pod cannot start yet: the container `waiting` reason and message.
struct Waiting {
    reason: &'static str,
    message: String,
}

impl Runtime {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self { root, pods: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, PodProc>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The log file of a pod's container, if the pod was started.
    pub(crate) fn log_path(&self, ns: &str, name: &str, uid: &str, container: &str) -> Option<PathBuf> {
        let pods = self.lock();
        let pod = pods.get(uid).filter(|p| p.namespace == ns && p.name == name)?;
        pod.containers.iter().find(|c| c.name == container).map(|c| c.log.clone())
    }

    /// Working dir and env of a running container, for `pods/exec`.
    pub(crate) fn exec_context(
        &self,
        store: &Store,
        ns: &str,
        name: &str,
        container: Option<&str>,
    ) -> Result<ExecContext, ApiError> {
        let pod = store.get(known::pods(), ns, name)?;
        let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
        let container = match container {
            Some(c) => c.to_owned(),
            None => {
                first_container(&pod).ok_or_else(|| ApiError::bad_request(format!("pod {name} has no containers")))?
            }
        };
        let pods = self.lock();
        let proc = pods.get(uid).and_then(|p| p.containers.iter().find(|c| c.name == container));
        match proc {
            Some(c) if c.pgid.is_some() => {
                Ok(ExecContext { command: Vec::new(), cwd: c.cwd.clone(), env: c.env.clone() })
            }
            _ => Err(ApiError::bad_request(format!(
                "unable to upgrade connection: container not found (\"{container}\")"
            ))),
        }
    }

    /// Sends SIGKILL to every process group still running, then to every process a container
    /// left behind. Used on shutdown.
    pub(crate) fn kill_all(&self) {
        for pod in self.lock().values() {
            for c in &pod.containers {
                if let Some(pid) = c.pgid.and_then(Pid::from_raw) {
                    let _ = kill_process_group(pid, Signal::KILL);
                }
            }
        }
        // And what left the groups (a launcher's own sessions), by the containers' marker.
        procs::kill_marked_under(&self.root);
    }

    /// Binds unbound pods, starts bound pods that are not running yet and stops processes whose
    /// pod is gone.
    pub(crate) fn reconcile(&self, shared: &Arc<Shared>) {
        let store = &shared.store;
        let (pods, _) = store.list(known::pods(), None, &Selectors::default());
        // Pods being deleted (deletionTimestamp set, held by our finalizer) are not live: their
        // processes get stopped, and the finalizer goes when the last one exits.
        let live: std::collections::HashSet<&str> = pods
            .iter()
            .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
            .filter_map(|p| p.pointer("/metadata/uid").and_then(Value::as_str))
            .collect();
        // The grace period of a deletion: the delete's `gracePeriodSeconds` (stored as
        // `deletionGracePeriodSeconds`), else the pod's `terminationGracePeriodSeconds`.
        let deletion_grace: HashMap<&str, Duration> = pods
            .iter()
            .filter_map(|p| {
                let secs = p.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_u64)?;
                Some((p.pointer("/metadata/uid").and_then(Value::as_str)?, Duration::from_secs(secs)))
            })
            .collect();
        {
            let mut procs = self.lock();
            for (uid, pod) in procs.iter_mut() {
                if live.contains(uid.as_str()) {
                    continue;
                }
                let grace =
                    deletion_grace.get(uid.as_str()).map_or(pod.grace, |g| (*g).min(shared.config.max_grace_period));
                pod.stopping = true;
                for c in &mut pod.containers {
                    if let Some(stop) = c.stop.take() {
                        let _ = stop.send(grace);
                    }
                }
            }
            // Keep records (and logs) of deleted pods only while their processes stop.
            procs.retain(|uid, pod| live.contains(uid.as_str()) || pod.containers.iter().any(|c| c.pgid.is_some()));
        }
        let mut cluster = None;
        for pod in &pods {
            let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_owned();
            let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
            let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
            if self.lock().contains_key(&uid) || deleting || matches!(phase, "Succeeded" | "Failed") {
                continue;
            }
            let mut pod = pod.clone();
            if pod.pointer("/spec/nodeName").and_then(Value::as_str).is_none() {
                if pod.pointer("/spec/schedulerName").and_then(Value::as_str) == Some("volcano") {
                    // The Volcano scheduler binds it (scheduler.rs).
                    continue;
                }
                let cluster = cluster.get_or_insert_with(|| Cluster::from_store(store));
                match bind(store, cluster, &pod) {
                    Some(bound) => pod = bound,
                    None => continue,
                }
            }
            self.start(shared, &pod, &uid);
        }
    }

    fn start(&self, shared: &Arc<Shared>, pod: &Value, uid: &str) {
        let store = &shared.store;
        let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default").to_owned();
        let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
        let containers: Vec<Value> =
            pod.pointer("/spec/containers").and_then(Value::as_array).cloned().unwrap_or_default();
        for c in &containers {
            let image = c.get("image").and_then(Value::as_str).unwrap_or("");
            if shared.faults.is_unpullable(image) {
                let waiting =
                    Waiting { reason: "ImagePullBackOff", message: format!("Back-off pulling image \"{image}\"") };
                set_waiting(store, &ns, &name, uid, &containers, &waiting);
                events::emit(
                    store,
                    pod,
                    "Warning",
                    "Failed",
                    &format!("Failed to pull image \"{image}\": image not found in the simulator"),
                    "kubelet",
                );
                return;
            }
        }
        let sandbox = self.root.join("pods").join(format!("{ns}_{name}_{}", uid.get(..8).unwrap_or(uid)));
        let mut prepared = Vec::new();
        for c in &containers {
            match prepare(store, pod, c, &sandbox, &shared.config.host_env_passthrough) {
                Ok(p) => prepared.push(p),
                Err(waiting) => {
                    set_waiting(store, &ns, &name, uid, &containers, &waiting);
                    return;
                }
            }
        }
        // The pod's /etc/hosts (see `hosts`), written once for all its containers.
        let hosts = sandbox.join("etc-hosts");
        let wrapper = match std::fs::create_dir_all(&sandbox)
            .and_then(|()| std::fs::write(&hosts, hosts::hosts_file(store, pod)))
        {
            Ok(()) => hosts::wrapper(&hosts, &hosts::pod_hostname(pod)),
            Err(e) => {
                tracing::warn!(pod = %name, "cannot write the pod's hosts file {}: {e}", hosts.display());
                Vec::new()
            }
        };
        if let Err(why) = hosts::isolation() {
            let message = format!(
                "pod names and Services do not resolve in this pod: the simulator cannot give it its own /etc/hosts: {why}"
            );
            events::emit(store, pod, "Warning", "HostsFileUnavailable", &message, "kubelet");
        }
        let grace_secs = pod.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_u64).unwrap_or(30);
        let grace = Duration::from_secs(grace_secs).min(shared.config.max_grace_period);
        let mut procs = Vec::new();
        let mut statuses = Vec::new();
        let mut children = Vec::new();
        let now = util::now_rfc3339();
        for (c, p) in containers.iter().zip(prepared) {
            let cname = c.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
            let image = c.get("image").and_then(Value::as_str).unwrap_or("").to_owned();
            let argv: Vec<String> =
                if p.argv.is_empty() { Vec::new() } else { wrapper.iter().chain(&p.argv).cloned().collect() };
            let spawned = procs::spawn(&argv, &p.env, &p.cwd, &p.log);
            let marker = procs::marker(&p.log);
            let (stop_tx, stop_rx) = oneshot::channel();
            let (state, pgid) = match &spawned {
                Ok(child) => (json!({"running": {"startedAt": now}}), child.id().and_then(|id| i32::try_from(id).ok())),
                Err(err) => (terminated(128, "StartError", Some(err.clone()), &now), None),
            };
            statuses.push(json!({
                "name": cname, "image": image, "imageID": format!("sim://{image}"),
                "containerID": format!("sim://{}", pgid.unwrap_or(0)),
                "ready": spawned.is_ok(), "started": spawned.is_ok(), "restartCount": 0, "state": state,
            }));
            procs.push(ContainerProc {
                name: cname,
                argv,
                log: p.log,
                cwd: p.cwd,
                env: p.env,
                pgid,
                stop: Some(stop_tx),
                restarts: 0,
            });
            children.push((spawned.ok(), stop_rx, marker));
        }
        let restart_policy = pod.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("Always").to_owned();
        self.lock().insert(
            uid.to_owned(),
            PodProc {
                namespace: ns.clone(),
                name: name.clone(),
                grace,
                restart_policy,
                stopping: false,
                containers: procs,
            },
        );
        let all_started = children.iter().all(|(c, _, _)| c.is_some());
        let children_started = children.iter().any(|(c, _, _)| c.is_some());
        let _ = store.update(known::pods(), &ns, &name, |obj| {
            if obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
                return;
            }
            let status = &mut obj["status"];
            status["phase"] = json!(if all_started { "Running" } else { "Failed" });
            status["hostIP"] = json!("127.0.0.1");
            status["podIP"] = json!("127.0.0.1");
            status["podIPs"] = json!([{"ip": "127.0.0.1"}]);
            status["startTime"] = json!(now);
            status["conditions"] = json!([
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": if all_started { "True" } else { "False" }, "lastTransitionTime": now},
                {"type": "Ready", "status": if all_started { "True" } else { "False" }, "lastTransitionTime": now},
            ]);
            status["containerStatuses"] = json!(statuses);
            if children_started {
                add_finalizer(obj);
            }
        });
        for (idx, (child, stop_rx, marker)) in children.into_iter().enumerate() {
            let Some(child) = child else { continue };
            let shared = shared.clone();
            let (ns, name, uid) = (ns.clone(), name.clone(), uid.to_owned());
            tokio::spawn(async move {
                let (mut child, mut stop_rx) = (child, stop_rx);
                loop {
                    let code = procs::supervise(child, stop_rx, &marker).await;
                    let Some(backoff) = shared.runtime.exited(&shared.store, &ns, &name, &uid, idx, code) else {
                        break;
                    };
                    tokio::time::sleep(backoff).await;
                    match shared.runtime.respawn(&shared.store, &ns, &name, &uid, idx) {
                        Some(next) => (child, stop_rx) = next,
                        None => break,
                    }
                }
            });
        }
    }

    /// Records a container's exit in the pod status and forgets its process group. Returns the
    /// back-off after which it restarts, when the pod's `restartPolicy` restarts it (the
    /// kubelet's `CrashLoopBackOff`: 10 s doubling up to 5 min, `backOffPeriod` and
    /// `MaxContainerBackOff` in pkg/kubelet/kubelet.go).
    fn exited(&self, store: &Store, ns: &str, name: &str, uid: &str, idx: usize, code: i32) -> Option<Duration> {
        let mut all_exited = true;
        let mut backoff = None;
        if let Some(pod) = self.lock().get_mut(uid) {
            let restarts = match pod.restart_policy.as_str() {
                "Always" => !pod.stopping,
                "OnFailure" => !pod.stopping && code != 0,
                _ => false,
            };
            if let Some(c) = pod.containers.get_mut(idx) {
                c.pgid = None;
                if restarts {
                    backoff = Some(procs::backoff(c.restarts));
                }
            }
            all_exited = backoff.is_none() && pod.containers.iter().all(|c| c.pgid.is_none());
        }
        let now = util::now_rfc3339();
        let _ = store.update(known::pods(), ns, name, |obj| {
            if obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
                return;
            }
            let pod_ref = format!("{name}_{ns}({uid})");
            let Some(cs) = obj.pointer_mut(&format!("/status/containerStatuses/{idx}")) else { return };
            let started = cs.pointer("/state/running/startedAt").cloned().unwrap_or(json!(now));
            let reason = if code == 0 { "Completed" } else { "Error" };
            cs["state"] = terminated(code, reason, None, &now);
            cs["state"]["terminated"]["startedAt"] = started;
            cs["ready"] = json!(false);
            cs["started"] = json!(false);
            if let Some(wait) = backoff {
                // kuberuntime's "back-off %s restarting failed container=%s pod=%s".
                let container = cs["name"].as_str().unwrap_or("").to_owned();
                cs["lastState"] = cs["state"].take();
                let message =
                    format!("back-off {}s restarting failed container={container} pod={pod_ref}", wait.as_secs());
                cs["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}});
                return;
            }
            let codes: Vec<Option<i64>> = obj
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| c.pointer("/state/terminated/exitCode").and_then(Value::as_i64))
                .collect();
            if codes.iter().all(Option::is_some) {
                let ok = codes.iter().all(|c| *c == Some(0));
                obj["status"]["phase"] = json!(if ok { "Succeeded" } else { "Failed" });
                if let Some(conds) = obj.pointer_mut("/status/conditions").and_then(Value::as_array_mut) {
                    for cond in
                        conds.iter_mut().filter(|c| matches!(c["type"].as_str(), Some("Ready" | "ContainersReady")))
                    {
                        // The scheduler's eviction reason stays (`defaultEvictor.Evict`).
                        if c_is_evict(cond) {
                            continue;
                        }
                        cond["status"] = json!("False");
                        cond["reason"] = json!("PodCompleted");
                    }
                }
            }
            if all_exited {
                // Nothing left to stop: a pending deletion may complete.
                remove_finalizer(obj);
            }
        });
        backoff
    }

    /// Starts container `idx` of a pod again after its back-off, unless the pod is being
    /// deleted (then its deletion may complete).
    fn respawn(
        &self,
        store: &Store,
        ns: &str,
        name: &str,
        uid: &str,
        idx: usize,
    ) -> Option<(tokio::process::Child, oneshot::Receiver<Duration>)> {
        let mut pods = self.lock();
        let started = pods.get_mut(uid).filter(|p| !p.stopping).and_then(|pod| {
            let c = pod.containers.get_mut(idx)?;
            let child = procs::spawn(&c.argv, &c.env, &c.cwd, &c.log).ok()?;
            let (tx, rx) = oneshot::channel();
            c.pgid = child.id().and_then(|id| i32::try_from(id).ok());
            c.stop = Some(tx);
            c.restarts += 1;
            Some((child, rx, c.restarts))
        });
        drop(pods);
        let now = util::now_rfc3339();
        let _ = store.update(known::pods(), ns, name, |obj| {
            if obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
                return;
            }
            match &started {
                Some((_, _, restarts)) => {
                    if let Some(cs) = obj.pointer_mut(&format!("/status/containerStatuses/{idx}")) {
                        cs["state"] = json!({"running": {"startedAt": now}});
                        cs["restartCount"] = json!(restarts);
                        cs["ready"] = json!(true);
                        cs["started"] = json!(true);
                    }
                }
                None => remove_finalizer(obj),
            }
        });
        started.map(|(child, rx, _)| (child, rx))
    }
}

/// A `Ready` condition the scheduler set when it evicted the pod.
fn c_is_evict(cond: &Value) -> bool {
    cond["type"] == "Ready" && cond["reason"] == "Evict"
}

fn add_finalizer(obj: &mut Value) {
    let finalizers = &mut obj["metadata"]["finalizers"];
    if !finalizers.is_array() {
        *finalizers = json!([]);
    }
    if let Some(list) = finalizers.as_array_mut()
        && !list.iter().any(|f| f == PROCESS_FINALIZER)
    {
        list.push(json!(PROCESS_FINALIZER));
    }
}

fn remove_finalizer(obj: &mut Value) {
    let empty = match obj["metadata"]["finalizers"].as_array_mut() {
        Some(list) => {
            list.retain(|f| f != PROCESS_FINALIZER);
            list.is_empty()
        }
        None => false,
    };
    if empty && let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("finalizers");
    }
}

/// The finalizer the runtime holds on a pod while its processes run, so that a deleted pod
/// disappears only once they are gone (as the kubelet confirms container termination).
pub(crate) const PROCESS_FINALIZER: &str = "sim.theseus.dev/processes";

/// A container ready to spawn.
struct Prepared {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    log: PathBuf,
}

fn terminated(code: i32, reason: &str, message: Option<String>, now: &str) -> Value {
    let mut t = json!({"exitCode": code, "reason": reason, "startedAt": now, "finishedAt": now});
    if let Some(m) = message {
        t["message"] = json!(m);
    }
    json!({"terminated": t})
}

fn first_container(pod: &Value) -> Option<String> {
    pod.pointer("/spec/containers/0/name").and_then(Value::as_str).map(str::to_owned)
}

/// The default scheduler for pods created without `nodeName`: the first node whose taints and
/// labels accept the pod and that has room ([`Cluster::place_default`]); otherwise the pod
/// stays Pending, `PodScheduled=False` and a `FailedScheduling` event with the reason.
fn bind(store: &Store, cluster: &mut Cluster, pod: &Value) -> Option<Value> {
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let now = util::now_rfc3339();
    match cluster.place_default(&pod["spec"]) {
        Ok(node) => store.update(known::pods(), ns, name, |obj| obj["spec"]["nodeName"] = json!(node)).ok(),
        Err(message) => {
            let updated = store.update(known::pods(), ns, name, |obj| {
                obj["status"]["phase"] = json!("Pending");
                let cond =
                    json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message});
                if obj.pointer("/status/conditions/0") != Some(&cond) {
                    obj["status"]["conditions"] = json!([cond]);
                    obj["status"]["conditions"][0]["lastTransitionTime"] = json!(now);
                }
            });
            if let Ok(obj) = updated {
                events::emit(store, &obj, "Warning", "FailedScheduling", &message, "default-scheduler");
            }
            None
        }
    }
}

fn set_waiting(store: &Store, ns: &str, name: &str, uid: &str, containers: &[Value], waiting: &Waiting) {
    let _ = store.update(known::pods(), ns, name, |obj| {
        if obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
            return;
        }
        let statuses: Vec<Value> = containers
            .iter()
            .map(|c| {
                json!({
                    "name": c.get("name").cloned().unwrap_or(json!("")),
                    "image": c.get("image").cloned().unwrap_or(json!("")),
                    "imageID": "", "ready": false, "started": false, "restartCount": 0,
                    "state": {"waiting": {"reason": waiting.reason, "message": waiting.message}},
                })
            })
            .collect();
        obj["status"]["phase"] = json!("Pending");
        obj["status"]["hostIP"] = json!("127.0.0.1");
        obj["status"]["containerStatuses"] = json!(statuses);
    });
}

/// Resolves a container's argv, env, mounts and working dir.
fn prepare(store: &Store, pod: &Value, c: &Value, sandbox: &Path, passthrough: &[String]) -> Result<Prepared, Waiting> {
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let pod_name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let cname = c.get("name").and_then(Value::as_str).unwrap_or("main");
    let config_error = |message: String| Waiting { reason: "CreateContainerConfigError", message };
    let mut env: Vec<(String, String)> =
        passthrough.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v))).collect();
    let hostname = pod.pointer("/spec/hostname").and_then(Value::as_str).unwrap_or(pod_name);
    env.push(("HOSTNAME".into(), hostname.into()));
    env.push(("HOME".into(), sandbox.display().to_string()));
    for source in c.get("envFrom").and_then(Value::as_array).into_iter().flatten() {
        let prefix = source.get("prefix").and_then(Value::as_str).unwrap_or("");
        for (field, res, is_secret) in
            [("configMapRef", known::configmaps(), false), ("secretRef", known::secrets(), true)]
        {
            let Some(r) = source.get(field) else { continue };
            let name = r.get("name").and_then(Value::as_str).unwrap_or("");
            match store.get(res, ns, name) {
                Ok(obj) => {
                    for (k, v) in data_of(&obj, is_secret) {
                        env.push((format!("{prefix}{k}"), v));
                    }
                }
                Err(_) if r.get("optional").and_then(Value::as_bool) == Some(true) => {}
                Err(_) => return Err(config_error(format!("{} \"{name}\" not found", res.singular))),
            }
        }
    }
    for var in c.get("env").and_then(Value::as_array).into_iter().flatten() {
        let name = var.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
        let value = match (var.get("value"), var.get("valueFrom")) {
            (Some(v), _) => expand(v.as_str().unwrap_or(""), &env),
            (None, Some(from)) => match resolve_from(store, pod, ns, from) {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                Err(message) => return Err(config_error(message)),
            },
            (None, None) => String::new(),
        };
        env.push((name, value));
    }
    let argv: Vec<String> = ["command", "args"]
        .iter()
        .flat_map(|f| c.get(*f).and_then(Value::as_array).cloned().unwrap_or_default())
        .map(|a| expand(a.as_str().unwrap_or(""), &env))
        .collect();
    let pvc_paths =
        mount_volumes(store, pod, c, sandbox).map_err(|message| Waiting { reason: "ContainerCreating", message })?;
    let cwd = match c.get("workingDir").and_then(Value::as_str) {
        Some(wd) if pvc_paths.iter().any(|p| Path::new(wd).starts_with(p)) => PathBuf::from(wd),
        Some(wd) => sandbox.join(wd.trim_start_matches('/')),
        None => sandbox.to_path_buf(),
    };
    std::fs::create_dir_all(&cwd).map_err(|e| config_error(format!("creating working dir {}: {e}", cwd.display())))?;
    Ok(Prepared { argv, env, cwd, log: sandbox.join("logs").join(format!("{cname}.log")) })
}

/// Creates the container's mounts; returns the PVC mount paths (host paths used as is).
fn mount_volumes(store: &Store, pod: &Value, c: &Value, sandbox: &Path) -> Result<Vec<PathBuf>, String> {
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let volumes: Vec<Value> = pod.pointer("/spec/volumes").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut pvc_paths = Vec::new();
    for mount in c.get("volumeMounts").and_then(Value::as_array).into_iter().flatten() {
        let vname = mount.get("name").and_then(Value::as_str).unwrap_or("");
        let mount_path = mount.get("mountPath").and_then(Value::as_str).unwrap_or("");
        let Some(volume) = volumes.iter().find(|v| v.get("name").and_then(Value::as_str) == Some(vname)) else {
            return Err(format!("volume \"{vname}\" is mounted but not defined"));
        };
        if volume.get("persistentVolumeClaim").is_some() {
            std::fs::create_dir_all(mount_path).map_err(|e| format!("creating PVC mount {mount_path}: {e}"))?;
            pvc_paths.push(PathBuf::from(mount_path));
            continue;
        }
        let dir = sandbox.join(mount_path.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating mount {}: {e}", dir.display()))?;
        let source = if let Some(cm) = volume.get("configMap") {
            Some((known::configmaps(), cm.get("name"), false, cm))
        } else {
            volume.get("secret").map(|s| (known::secrets(), s.get("secretName"), true, s))
        };
        if let Some((res, name, is_secret, spec)) = source {
            let name = name.and_then(Value::as_str).unwrap_or("");
            let obj = match store.get(res, ns, name) {
                Ok(obj) => obj,
                Err(_) if spec.get("optional").and_then(Value::as_bool) == Some(true) => continue,
                Err(_) => {
                    return Err(format!(
                        "MountVolume.SetUp failed for volume \"{vname}\": {} \"{name}\" not found",
                        res.singular
                    ));
                }
            };
            // `items` project keys to paths (a key may appear twice); a `subPath` mount shows
            // one dir of the volume (kubelet's atomic writer and subpath handling).
            let data = data_of(&obj, is_secret);
            let files: Vec<(String, String)> = match spec.get("items").and_then(Value::as_array) {
                Some(items) => items
                    .iter()
                    .filter_map(|item| {
                        let key = item.get("key").and_then(Value::as_str)?;
                        let path = item.get("path").and_then(Value::as_str)?;
                        data.iter().find(|(k, _)| k == key).map(|(_, v)| (path.to_owned(), v.clone()))
                    })
                    .collect(),
                None => data,
            };
            let sub = mount.get("subPath").and_then(Value::as_str).filter(|p| !p.is_empty());
            for (rel, value) in files {
                let rel = match sub {
                    Some(sub) => match rel.strip_prefix(&format!("{}/", sub.trim_end_matches('/'))) {
                        Some(inner) => inner.to_owned(),
                        None => continue,
                    },
                    None => rel,
                };
                let path = dir.join(&rel);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
                }
                std::fs::write(&path, value).map_err(|e| format!("writing {}: {e}", path.display()))?;
            }
        }
    }
    Ok(pvc_paths)
}

/// A ConfigMap's `data` or a Secret's decoded `data`.
fn data_of(obj: &Value, is_secret: bool) -> Vec<(String, String)> {
    obj.get("data")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let text = v.as_str().unwrap_or("");
            let value = if is_secret {
                util::base64_decode(text).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
            } else {
                text.to_owned()
            };
            (k.clone(), value)
        })
        .collect()
}

/// Resolves `valueFrom`; `Ok(None)` for an optional reference that is missing.
/// `metadata.annotations['KEY']` or `metadata.labels['KEY']` as (`annotations`|`labels`, KEY).
fn subscript(path: &str) -> Option<(&'static str, &str)> {
    let (map, rest) = if let Some(rest) = path.strip_prefix("metadata.annotations[") {
        ("annotations", rest)
    } else {
        ("labels", path.strip_prefix("metadata.labels[")?)
    };
    let key = rest.strip_suffix(']')?;
    let key = key.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')).unwrap_or(key);
    Some((map, key))
}

fn resolve_from(store: &Store, pod: &Value, ns: &str, from: &Value) -> Result<Option<String>, String> {
    for (field, res, is_secret, kind) in [
        ("secretKeyRef", known::secrets(), true, "Secret"),
        ("configMapKeyRef", known::configmaps(), false, "ConfigMap"),
    ] {
        let Some(r) = from.get(field) else { continue };
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        let key = r.get("key").and_then(Value::as_str).unwrap_or("");
        let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
        let obj = match store.get(res, ns, name) {
            Ok(obj) => obj,
            Err(_) if optional => return Ok(None),
            Err(_) => return Err(format!("{} \"{name}\" not found", res.singular)),
        };
        return match data_of(&obj, is_secret).into_iter().find(|(k, _)| k == key) {
            Some((_, v)) => Ok(Some(v)),
            None if optional => Ok(None),
            None => Err(format!("couldn't find key {key} in {kind} {ns}/{name}")),
        };
    }
    if let Some(path) = from.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
        let value = match (path, subscript(path)) {
            ("status.podIP" | "status.hostIP", _) => Some("127.0.0.1".to_owned()),
            // `metadata.annotations['KEY']` and `metadata.labels['KEY']`: the value, empty when
            // the key is absent (`ExtractFieldPathAsString` in
            // k8s.io/kubernetes pkg/fieldpath/fieldpath.go; read, not run).
            (_, Some((map, key))) => {
                Some(pod["metadata"][map].get(key).and_then(Value::as_str).unwrap_or("").to_owned())
            }
            _ => {
                let pointer = format!("/{}", path.replace('.', "/"));
                pod.pointer(&pointer).and_then(Value::as_str).map(str::to_owned)
            }
        };
        return Ok(Some(value.unwrap_or_default()));
    }
    Ok(Some(String::new()))
}

/// Kubernetes `$(VAR)` expansion against the variables defined so far; `$$` escapes.
fn expand(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(idx) = rest.find('$') {
        out.push_str(&rest[..idx]);
        let after = &rest[idx + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some((_, v)) = env.iter().rev().find(|(k, _)| k == &inner[..end])
        {
            out.push_str(v);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_paths_subscript_annotations_and_labels() {
        assert_eq!(
            subscript("metadata.annotations['volcano.sh/job-retry-count']"),
            Some(("annotations", "volcano.sh/job-retry-count"))
        );
        assert_eq!(subscript("metadata.labels['app']"), Some(("labels", "app")));
        assert_eq!(subscript("metadata.name"), None);
        let pod = serde_json::json!({"metadata": {"annotations": {"a": "1"}, "labels": {}}});
        let from = |p: &str| serde_json::json!({"fieldRef": {"fieldPath": p}});
        let store = Store::new(10);
        assert_eq!(resolve_from(&store, &pod, "default", &from("metadata.annotations['a']")), Ok(Some("1".into())));
        assert_eq!(resolve_from(&store, &pod, "default", &from("metadata.labels['x']")), Ok(Some(String::new())));
    }

    #[test]
    fn expands_like_kubelet() {
        let env = vec![("A".to_owned(), "1".to_owned())];
        assert_eq!(expand("x$(A)y", &env), "x1y");
        assert_eq!(expand("$(B)", &env), "$(B)");
        assert_eq!(expand("$$(A) $HOME", &env), "$(A) $HOME");
    }
}
