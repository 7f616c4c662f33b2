//! Volcano's admission webhooks for `batch.volcano.sh` Jobs, run where a real API server runs
//! them: the mutating webhook on create (after decoding and the CRD's defaults), then, after the
//! schema validation, the validating webhook on create and update. A denial is what the API
//! server makes of a webhook's `allowed: false`: a `400` whose message is
//! `admission webhook "validatejob.volcano.sh" denied the request: ...`
//! (kubernetes `apiserver/pkg/admission/plugin/webhook/errors/statuserror.go`, `ToStatusErr`).
//!
//! Upstream origins (volcano-sh/volcano):
//! - defaults: `pkg/webhooks/admission/jobs/mutate/mutate_job.go` (`createPatch` and the
//!   `patchDefault*` functions, `mutateSpec`);
//! - checks: `pkg/webhooks/admission/jobs/validate/admit_job.go` (`validateJobCreate`,
//!   `validateJobUpdate`, `validateJobName`, `validateK8sPodNameLength`, `validateTaskTemplate`)
//!   and `validate/util.go` (`validatePolicies`, `validateIO`, `topoSort`);
//! - known plugins: `pkg/controllers/job/plugins/factory.go` (`RegisterPluginBuilder`).
//!
//! Still different: `validateTaskTemplate` runs Kubernetes' whole `ValidatePodTemplate`; here
//! only the rules a dispatcher can break are ported (containers present, names, image, restart
//! policy, env names, volume mounts naming volumes); the lists of valid events and actions in a
//! policy error are sorted (Go prints a map in random order); the topology-policy QoS check is
//! not ported.

use std::collections::{BTreeSet, HashSet};

use serde_json::{Value, json};

use crate::discovery::known;
use crate::status::ApiError;
use crate::store::Store;

/// The validating webhook's name, as the denial quotes it.
const VALIDATING: &str = "validatejob.volcano.sh";

/// Plugins the job controller has builders for.
const PLUGINS: &[&str] = &["env", "svc", "ssh", "tensorflow", "mpi", "pytorch"];

/// Policy events a user may name (`policyEventMap` entries that are `true`).
const EVENTS: &[&str] = &["*", "PodFailed", "PodEvicted", "Unknown", "TaskCompleted", "TaskFailed", "JobUpdated"];

/// Policy actions a user may name (`policyActionMap` entries that are `true`).
const ACTIONS: &[&str] = &["AbortJob", "RestartJob", "RestartTask", "TerminateJob", "CompleteJob", "ResumeJob"];

fn denied(message: &str) -> ApiError {
    ApiError::webhook_denied(VALIDATING, message.trim())
}

fn int(value: &Value, pointer: &str) -> Option<i64> {
    value.pointer(pointer).and_then(Value::as_i64)
}

fn tasks(job: &Value) -> &[Value] {
    job.pointer("/spec/tasks").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// `mutatejob.volcano.sh` on create: default queue, scheduler, `maxRetry`, task names, task
/// `minAvailable` and `maxRetry`, `dnsPolicy` with `hostNetwork`, job `minAvailable`, and the
/// plugins other plugins need.
pub(crate) fn mutate_job(job: &mut Value) {
    // Only through `get_mut`/`pointer_mut`: indexing a missing key would add it as `null`.
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if spec.get("queue").and_then(Value::as_str).is_none_or(str::is_empty) {
        spec.insert("queue".into(), json!("default"));
    }
    if spec.get("schedulerName").and_then(Value::as_str).is_none_or(str::is_empty) {
        spec.insert("schedulerName".into(), json!("volcano"));
    }
    if spec.get("maxRetry").and_then(Value::as_i64).is_none_or(|r| r == 0) {
        spec.insert("maxRetry".into(), json!(3));
    }
    for (index, task) in spec.get_mut("tasks").and_then(Value::as_array_mut).into_iter().flatten().enumerate() {
        let Some(task) = task.as_object_mut() else { continue };
        if task.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            task.insert("name".into(), json!(format!("default{index}")));
        }
        if let Some(pod) = task.get_mut("template").and_then(|t| t.get_mut("spec")).and_then(Value::as_object_mut)
            && pod.get("hostNetwork") == Some(&json!(true))
            && pod.get("dnsPolicy").and_then(Value::as_str).is_none_or(str::is_empty)
        {
            pod.insert("dnsPolicy".into(), json!("ClusterFirstWithHostNet"));
        }
        if task.get("minAvailable").is_none_or(Value::is_null) {
            let replicas = task.get("replicas").and_then(Value::as_i64).unwrap_or(0);
            task.insert("minAvailable".into(), json!(replicas));
        }
        if task.get("maxRetry").and_then(Value::as_i64).is_none_or(|r| r == 0) {
            task.insert("maxRetry".into(), json!(3));
        }
    }
    if spec.get("minAvailable").and_then(Value::as_i64).is_none_or(|m| m == 0) {
        let total: i64 = spec
            .get("tasks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|t| t["minAvailable"].as_i64().or_else(|| t["replicas"].as_i64()).unwrap_or(0))
            .sum();
        spec.insert("minAvailable".into(), json!(total));
    }
    if let Some(plugins) = spec.get_mut("plugins").and_then(Value::as_object_mut) {
        if ["tensorflow", "mpi", "pytorch"].iter().any(|p| plugins.contains_key(*p)) && !plugins.contains_key("svc") {
            plugins.insert("svc".into(), json!([]));
        }
        if plugins.contains_key("mpi") && !plugins.contains_key("ssh") {
            plugins.insert("ssh".into(), json!([]));
        }
    }
}

/// `validateJobCreate`. The queue must exist and be `Open`.
pub(crate) fn validate_job_create(job: &Value, store: &Store) -> Result<(), ApiError> {
    let name = job.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    if int(job, "/spec/minAvailable").unwrap_or(0) < 0 {
        return Err(denied("job 'minAvailable' must be >= 0."));
    }
    if int(job, "/spec/maxRetry").unwrap_or(0) < 0 {
        return Err(denied("'maxRetry' cannot be less than zero."));
    }
    if int(job, "/spec/ttlSecondsAfterFinished").is_some_and(|t| t < 0) {
        return Err(denied("'ttlSecondsAfterFinished' cannot be less than zero."));
    }
    let tasks = tasks(job);
    if tasks.is_empty() {
        return Err(denied("No task specified in job spec"));
    }
    let mut msg = String::new();
    let mut names = HashSet::new();
    let mut total = 0;
    let mut depends = false;
    for (index, task) in tasks.iter().enumerate() {
        let task_name = task["name"].as_str().unwrap_or("");
        depends |= task.get("dependsOn").is_some_and(|d| !d.is_null());
        let replicas = task["replicas"].as_i64().unwrap_or(0);
        if replicas < 0 {
            msg += &format!(" 'replicas' < 0 in task: {task_name}, job: {name};");
        }
        if let Some(min) = task["minAvailable"].as_i64() {
            if min < 0 {
                msg += &format!(" 'minAvailable' < 0 in task: {task_name}, job: {name};");
            } else if min > replicas {
                msg += &format!(" 'minAvailable' is greater than 'replicas' in task: {task_name}, job: {name};");
            }
        }
        total += replicas;
        let label_errors = dns1123_label(task_name);
        if !label_errors.is_empty() {
            msg += &format!(" [{}];", label_errors.join(" "));
        }
        if !names.insert(task_name.to_owned()) {
            msg += &format!(" duplicated task name {task_name};");
            break;
        }
        if let Some(err) = validate_policies(task.get("policies"), "spec.tasks.policies") {
            msg += &err;
        }
        let pod_name = format!("{name}-{task_name}-{index}");
        let errs = qualified_name(&pod_name);
        if !errs.is_empty() {
            msg += &format!("create pod with name {pod_name} validate failed [{}];", errs.join(" "));
        }
        msg += &validate_task_template(task, index);
    }
    let errs = qualified_name(name);
    if !errs.is_empty() {
        msg += &format!("create job with name {name} validate failed [{}]", errs.join(" "));
    }
    if total < int(job, "/spec/minAvailable").unwrap_or(0) {
        msg += " job 'minAvailable' should not be greater than total replicas in tasks;";
    }
    if let Some(err) = validate_policies(job.pointer("/spec/policies"), "spec.policies") {
        msg += &err;
    }
    if let Some(plugins) = job.pointer("/spec/plugins").and_then(Value::as_object) {
        for plugin in plugins.keys() {
            if !PLUGINS.contains(&plugin.as_str()) {
                msg += &format!(" unable to find job plugin: {plugin};");
            }
        }
    }
    msg += &validate_io(job.pointer("/spec/volumes"));
    let queue = job.pointer("/spec/queue").and_then(Value::as_str).unwrap_or("");
    match store.get(known::queues(), "", queue) {
        Err(err) => msg += &format!(" unable to find job queue: {};", err.message),
        Ok(q) => {
            let state = q.pointer("/status/state").and_then(Value::as_str).unwrap_or("");
            if state != "Open" {
                msg +=
                    &format!(" can only submit job to queue with state `Open`, queue `{queue}` status is `{state}`;");
            }
        }
    }
    if depends && !is_dag(tasks) {
        msg += " job has dependencies between tasks, but doesn't form a directed acyclic graph(DAG);";
    }
    if msg.is_empty() { Ok(()) } else { Err(denied(&msg)) }
}

/// `validateJobUpdate`: only `minAvailable`, `maxRetry`, task `replicas`, `minAvailable` and
/// `maxRetry` may change, within the same bounds as on create.
pub(crate) fn validate_job_update(old: &Value, new: &Value) -> Result<(), ApiError> {
    let mut total = 0;
    for task in tasks(new) {
        let task_name = task["name"].as_str().unwrap_or("");
        let replicas = task["replicas"].as_i64().unwrap_or(0);
        if replicas < 0 {
            return Err(denied(&format!("'replicas' must be >= 0 in task: {task_name}")));
        }
        if let Some(min) = task["minAvailable"].as_i64() {
            if min < 0 {
                return Err(denied(&format!("'minAvailable' must be >= 0 in task: {task_name}")));
            } else if min > replicas {
                return Err(denied(&format!("'minAvailable' must be <= 'replicas' in task: {task_name}")));
            }
        }
        total += replicas;
    }
    let min = int(new, "/spec/minAvailable").unwrap_or(0);
    if min > total {
        return Err(denied("job 'minAvailable' must not be greater than total replicas"));
    }
    if min < 0 {
        return Err(denied("job 'minAvailable' must be >= 0"));
    }
    if tasks(old).len() != tasks(new).len() {
        return Err(denied("job updates may not add or remove tasks"));
    }
    let frozen = |job: &Value| -> Value {
        let mut spec = job["spec"].clone();
        for key in ["minAvailable", "priorityClassName", "maxRetry"] {
            spec.as_object_mut().map(|m| m.remove(key));
        }
        if let Some(tasks) = spec["tasks"].as_array_mut() {
            for task in tasks {
                for key in ["replicas", "minAvailable", "maxRetry"] {
                    task.as_object_mut().map(|m| m.remove(key));
                }
            }
        }
        spec
    };
    if frozen(old) != frozen(new) {
        return Err(denied(
            "job updates may not change fields other than `minAvailable`, `maxRetry`, `tasks[*].replicas under spec`, \
             `tasks[*].maxRetry under spec`",
        ));
    }
    Ok(())
}

/// `validatePolicies`, with the suffix `validateJobCreate` adds to its error.
fn validate_policies(policies: Option<&Value>, path: &str) -> Option<String> {
    let policies = policies.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let mut errors: Vec<String> = Vec::new();
    let mut seen_events = BTreeSet::new();
    let mut exit_codes = HashSet::new();
    for policy in policies {
        let mut events: Vec<&str> =
            policy["events"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if let Some(event) = policy["event"].as_str().filter(|e| !e.is_empty()) {
            events.push(event);
        }
        let mut unique = Vec::new();
        for e in events {
            if !unique.contains(&e) {
                unique.push(e);
            }
        }
        let exit_code = policy["exitCode"].as_i64();
        if !unique.is_empty() && exit_code.is_some() {
            errors.push("must not specify event and exitCode simultaneously".into());
            break;
        }
        if unique.is_empty() && exit_code.is_none() {
            errors.push("either event and exitCode should be specified".into());
            break;
        }
        if let Some(code) = exit_code {
            if code == 0 {
                errors.push("0 is not a valid error code".into());
                break;
            }
            if !exit_codes.insert(code) {
                errors.push(format!("duplicate exitCode {code}"));
                break;
            }
            continue;
        }
        let action = policy["action"].as_str().unwrap_or("");
        let mut stop = false;
        for event in unique {
            if !EVENTS.contains(&event) {
                errors.push(format!("{path}: Invalid value: {event:?}: invalid policy event"));
                stop = true;
                break;
            }
            if !ACTIONS.contains(&action) {
                errors.push(format!("{path}: Invalid value: {action:?}: invalid policy action"));
                stop = true;
                break;
            }
            if !seen_events.insert(event) {
                errors.push(format!("duplicate event {event}  across different policy"));
                stop = true;
                break;
            }
        }
        if stop {
            break;
        }
    }
    if seen_events.contains("*") && seen_events.len() > 1 {
        errors.push("if there's * here, no other policy should be here".into());
    }
    if errors.is_empty() {
        return None;
    }
    // go-multierror's format, then the lists `validateJobCreate` appends.
    let head =
        if errors.len() == 1 { "1 error occurred:".to_owned() } else { format!("{} errors occurred:", errors.len()) };
    let body: String = errors.iter().map(|e| format!("\n\t* {e}")).collect();
    let mut events: Vec<&str> = EVENTS.to_vec();
    events.sort_unstable();
    let mut actions: Vec<&str> = ACTIONS.to_vec();
    actions.sort_unstable();
    Some(format!(
        "{head}{body}\n\n valid events are [{}], valid actions are [{}];",
        events.join(" "),
        actions.join(" ")
    ))
}

/// `validateIO`: volumes need a unique mount path and a claim.
fn validate_io(volumes: Option<&Value>) -> String {
    let mut paths = HashSet::new();
    for volume in volumes.and_then(Value::as_array).into_iter().flatten() {
        let path = volume["mountPath"].as_str().unwrap_or("");
        if path.is_empty() {
            return " mountPath is required;".into();
        }
        if !paths.insert(path) {
            return format!(" duplicated mountPath: {path};");
        }
        let claim = volume.get("volumeClaim").is_some_and(|c| !c.is_null());
        let claim_name = volume["volumeClaimName"].as_str().unwrap_or("");
        if !claim && claim_name.is_empty() {
            return " either VolumeClaim or VolumeClaimName must be specified;".into();
        }
        if !claim_name.is_empty() && claim {
            return "conflict: If you want to use an existing PVC, just specify VolumeClaimName.If you want to create \
                    a new PVC, you do not need to specify VolumeClaimName"
                .into();
        }
    }
    String::new()
}

/// The part of Kubernetes' `ValidatePodTemplate` a dispatcher can get wrong, each error as
/// `spec.task[i].<path>: <error>. `.
fn validate_task_template(task: &Value, index: usize) -> String {
    let spec = &task["template"]["spec"];
    let mut errors = Vec::new();
    let containers = spec["containers"].as_array().map_or(&[][..], Vec::as_slice);
    if containers.is_empty() {
        errors.push("template.spec.containers: Required value".to_owned());
    }
    let volumes: HashSet<&str> =
        spec["volumes"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).collect();
    let mut names = HashSet::new();
    for (i, container) in containers.iter().enumerate() {
        let at = format!("template.spec.containers[{i}]");
        match container["name"].as_str().unwrap_or("") {
            "" => errors.push(format!("{at}.name: Required value")),
            name => {
                let label = dns1123_label(name);
                if !label.is_empty() {
                    errors.push(format!("{at}.name: Invalid value: {name:?}: {}", label.join(", ")));
                } else if !names.insert(name) {
                    errors.push(format!("{at}.name: Duplicate value: {name:?}"));
                }
            }
        }
        if container["image"].as_str().is_none_or(|i| i.trim().is_empty()) {
            errors.push(format!("{at}.image: Required value"));
        }
        for (j, var) in container["env"].as_array().into_iter().flatten().enumerate() {
            let name = var["name"].as_str().unwrap_or("");
            if name.is_empty() {
                errors.push(format!("{at}.env[{j}].name: Required value"));
            } else if !is_env_var_name(name) {
                errors.push(format!(
                    "{at}.env[{j}].name: Invalid value: {name:?}: a valid environment variable name must consist of \
                     alphabetic characters, digits, '_', '-', or '.', and must not start with a digit (e.g. \
                     'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for validation is \
                     '[-._a-zA-Z][-._a-zA-Z0-9]*')"
                ));
            }
        }
        for (j, mount) in container["volumeMounts"].as_array().into_iter().flatten().enumerate() {
            let name = mount["name"].as_str().unwrap_or("");
            if !volumes.contains(name) {
                errors.push(format!("{at}.volumeMounts[{j}].name: Not found: {name:?}"));
            }
        }
    }
    if let Some(policy) = spec["restartPolicy"].as_str()
        && !["Always", "OnFailure", "Never"].contains(&policy)
    {
        errors.push(format!(
            "template.spec.restartPolicy: Unsupported value: {policy:?}: supported values: \"Always\", \"OnFailure\", \
             \"Never\""
        ));
    }
    if errors.is_empty() {
        return String::new();
    }
    let mut msg = format!("spec.task[{index}].");
    for e in errors {
        msg += &e;
        msg += ". ";
    }
    msg
}

/// `validation.IsDNS1123Label`'s messages.
fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    let ok = !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if !ok {
        errs.push(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and \
             end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .to_owned(),
        );
    }
    errs
}

/// `validation.IsQualifiedName`'s messages for a name without a prefix.
fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.is_empty() {
        errs.push("name part must be non-empty".to_owned());
        return errs;
    }
    if value.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    let ok = value.bytes().all(|b| alnum(b) || b"-_.".contains(&b))
        && value.bytes().next().is_some_and(alnum)
        && value.bytes().last().is_some_and(alnum);
    if !ok {
        errs.push(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an \
             alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
             '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
                .to_owned(),
        );
    }
    errs
}

fn is_env_var_name(name: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b"-._".contains(&b);
    name.bytes().all(ok) && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// `topoSort`: whether the tasks' `dependsOn` names form a DAG.
fn is_dag(tasks: &[Value]) -> bool {
    let names: Vec<&str> = tasks.iter().map(|t| t["name"].as_str().unwrap_or("")).collect();
    let deps = |i: usize| -> Vec<&str> {
        tasks[i]
            .pointer("/dependsOn/name")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    };
    let mut done: Vec<bool> = vec![false; tasks.len()];
    loop {
        let mut progressed = false;
        for i in 0..tasks.len() {
            if done[i] {
                continue;
            }
            let ready = deps(i).iter().all(|d| names.iter().position(|n| n == d).is_some_and(|j| done[j]));
            if ready {
                done[i] = true;
                progressed = true;
            }
        }
        if !progressed {
            return done.iter().all(|d| *d);
        }
    }
}

#[cfg(test)]
mod tests;
