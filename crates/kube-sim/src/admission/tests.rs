//! Table-driven cases of Volcano's job webhooks. Cases marked "upstream" follow the cases of
//! volcano-sh/volcano `pkg/webhooks/admission/jobs/validate/admit_job_test.go`
//! (`TestValidateJobCreate`) and `mutate/mutate_job_test.go` (`TestCreatePatchExecution`).

use serde_json::{Value, json};

use super::*;

fn store() -> Store {
    let store = Store::new(100);
    let queue = |name: &str, state: &str| json!({"metadata": {"name": name}, "spec": {"weight": 1}, "status": {"state": state}});
    store.create(known::queues(), "", queue("default", "Open")).unwrap();
    store.create(known::queues(), "", queue("closed", "Closed")).unwrap();
    store
}

/// A job as theseus sends it (after the CRD's defaults and the mutating webhook).
fn job() -> Value {
    let mut job = json!({
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train-20261125", "namespace": "ml"},
        "spec": {
            "queue": "default",
            "plugins": {"env": [], "svc": ["--disable-network-policy=true"]},
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodFailed", "action": "AbortJob"}],
            "tasks": [{
                "name": "worker",
                "replicas": 2,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "volumes": [{"name": "work", "persistentVolumeClaim": {"claimName": "pvc"}}],
                    "containers": [{
                        "name": "main", "image": "ghcr.io/x/y:1",
                        "env": [{"name": "THESEUS_RUN_ID", "value": "r"}],
                        "volumeMounts": [{"name": "work", "mountPath": "/workspace"}],
                    }],
                }},
            }],
        },
    });
    mutate_job(&mut job);
    job
}

fn set(mut job: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let parent = job.pointer_mut(parent).unwrap_or_else(|| panic!("{pointer}"));
    match key.parse::<usize>() {
        Ok(i) if parent.is_array() => parent[i] = value,
        _ => parent[key] = value,
    }
    job
}

#[test]
fn the_mutating_webhook_fills_what_volcano_fills() {
    let mut job = json!({"metadata": {"name": "j"}, "spec": {
        "plugins": {"mpi": []},
        "tasks": [
            {"replicas": 3, "template": {"spec": {"hostNetwork": true, "containers": [{"name": "m", "image": "i"}]}}},
            {"name": "ps", "replicas": 2, "minAvailable": 1, "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}},
        ],
    }});
    mutate_job(&mut job);
    let spec = &job["spec"];
    assert_eq!(
        (spec["queue"].as_str(), spec["schedulerName"].as_str(), spec["maxRetry"].as_i64()),
        (Some("default"), Some("volcano"), Some(3))
    );
    assert_eq!(spec["tasks"][0]["name"], "default0", "upstream: a task without a name is default<index>");
    assert_eq!(spec["tasks"][0]["minAvailable"], 3);
    assert_eq!(spec["tasks"][0]["maxRetry"], 3);
    assert_eq!(spec["tasks"][0]["template"]["spec"]["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(spec["minAvailable"], 4, "the sum of the tasks' minAvailable");
    assert_eq!(spec["plugins"], json!({"mpi": [], "svc": [], "ssh": []}), "mpi needs svc and ssh");
}

#[test]
fn a_job_as_theseus_sends_it_is_admitted() {
    validate_job_create(&job(), &store()).unwrap();
}

#[test]
fn the_validating_webhook_refuses_what_volcano_refuses() {
    let prefix = "admission webhook \"validatejob.volcano.sh\" denied the request: ";
    let cases: Vec<(&str, Value, String)> = vec![
        (
            "upstream: minAvailable < 0",
            set(job(), "/spec/minAvailable", json!(-1)),
            "job 'minAvailable' must be >= 0.".into(),
        ),
        (
            "upstream: maxRetry < 0",
            set(job(), "/spec/maxRetry", json!(-1)),
            "'maxRetry' cannot be less than zero.".into(),
        ),
        (
            "upstream: ttl < 0",
            set(job(), "/spec/ttlSecondsAfterFinished", json!(-1)),
            "'ttlSecondsAfterFinished' cannot be less than zero.".into(),
        ),
        ("upstream: no task", set(job(), "/spec/tasks", json!([])), "No task specified in job spec".into()),
        (
            "upstream: minAvailable above the replicas",
            set(job(), "/spec/minAvailable", json!(3)),
            "job 'minAvailable' should not be greater than total replicas in tasks;".into(),
        ),
        (
            "upstream: task minAvailable above its replicas",
            set(job(), "/spec/tasks/0/minAvailable", json!(5)),
            "'minAvailable' is greater than 'replicas' in task: worker, job: train-20261125;".into(),
        ),
        (
            "upstream: duplicate task names",
            {
                let mut j = job();
                let task = j["spec"]["tasks"][0].clone();
                j["spec"]["tasks"].as_array_mut().unwrap().push(task);
                j
            },
            "duplicated task name worker;".into(),
        ),
        (
            "upstream: a task name that is not a DNS-1123 label",
            set(job(), "/spec/tasks/0/name", json!("Worker_1")),
            "[a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start \
             and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?')];"
                .into(),
        ),
        (
            "upstream: an unknown plugin",
            set(job(), "/spec/plugins", json!({"env": [], "horovod": []})),
            "unable to find job plugin: horovod;".into(),
        ),
        (
            "upstream: a policy event users may not name",
            set(job(), "/spec/policies", json!([{"event": "CommandIssued", "action": "AbortJob"}])),
            "1 error occurred:\n\t* spec.policies: Invalid value: \"CommandIssued\": invalid policy event\n\n valid \
             events are [* JobUpdated PodEvicted PodFailed TaskCompleted TaskFailed Unknown], valid actions are \
             [AbortJob CompleteJob RestartJob RestartTask ResumeJob TerminateJob];"
                .into(),
        ),
        (
            "upstream: event and exit code together",
            set(job(), "/spec/policies", json!([{"event": "PodFailed", "exitCode": 3, "action": "AbortJob"}])),
            "1 error occurred:\n\t* must not specify event and exitCode simultaneously".into(),
        ),
        (
            "upstream (invalid-policy-action): an action users may not name",
            set(job(), "/spec/policies", json!([{"event": "PodEvicted", "action": "someFakeAction"}])),
            "1 error occurred:\n\t* spec.policies: Invalid value: \"someFakeAction\": invalid policy action".into(),
        ),
        (
            "upstream (policy-noEvent-noExCode): neither event nor exit code",
            set(job(), "/spec/policies", json!([{"action": "AbortJob"}])),
            "1 error occurred:\n\t* either event and exitCode should be specified".into(),
        ),
        (
            "upstream (job-policy-duplicated): one event in two policies",
            set(
                job(),
                "/spec/policies",
                json!([{"event": "PodFailed", "action": "AbortJob"}, {"event": "PodFailed", "action": "RestartJob"}]),
            ),
            "1 error occurred:\n\t* duplicate event PodFailed  across different policy".into(),
        ),
        (
            "upstream (replica-lessThanZero): negative replicas",
            set(set(job(), "/spec/tasks/0/replicas", json!(-1)), "/spec/tasks/0/minAvailable", json!(-1)),
            "'replicas' < 0 in task: worker, job: train-20261125;".into(),
        ),
        (
            "upstream: exit code 0",
            set(job(), "/spec/policies", json!([{"exitCode": 0, "action": "AbortJob"}])),
            "1 error occurred:\n\t* 0 is not a valid error code".into(),
        ),
        (
            "upstream: * with other events",
            set(
                job(),
                "/spec/policies",
                json!([{"event": "*", "action": "AbortJob"}, {"event": "PodFailed", "action": "RestartJob"}]),
            ),
            "1 error occurred:\n\t* if there's * here, no other policy should be here".into(),
        ),
        (
            "upstream: volumes without a mount path",
            set(job(), "/spec/volumes", json!([{"volumeClaimName": "pvc"}])),
            "mountPath is required;".into(),
        ),
        (
            "upstream: a queue that does not exist",
            set(job(), "/spec/queue", json!("research")),
            "unable to find job queue: queues.scheduling.volcano.sh \"research\" not found;".into(),
        ),
        (
            "upstream: a closed queue",
            set(job(), "/spec/queue", json!("closed")),
            "can only submit job to queue with state `Open`, queue `closed` status is `Closed`;".into(),
        ),
        (
            "upstream: a pod name longer than 63",
            set(job(), "/metadata/name", json!("x".repeat(60))),
            format!(
                "create pod with name {}-worker-0 validate failed [name part must be no more than 63 characters];",
                "x".repeat(60)
            ),
        ),
        (
            "pod template: a container without an image",
            set(job(), "/spec/tasks/0/template/spec/containers/0/image", json!("")),
            "spec.task[0].template.spec.containers[0].image: Required value.".into(),
        ),
        (
            "pod template: a mount of a volume that is not there",
            set(job(), "/spec/tasks/0/template/spec/volumes", json!([])),
            "spec.task[0].template.spec.containers[0].volumeMounts[0].name: Not found: \"work\".".into(),
        ),
        (
            "pod template: a restart policy Kubernetes does not know",
            set(job(), "/spec/tasks/0/template/spec/restartPolicy", json!("Sometimes")),
            "spec.task[0].template.spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \
             \"Always\", \"OnFailure\", \"Never\"."
                .into(),
        ),
        (
            "upstream: tasks whose dependencies form a cycle",
            {
                let mut j = job();
                let mut second = j["spec"]["tasks"][0].clone();
                second["name"] = json!("ps");
                second["dependsOn"] = json!({"name": ["worker"]});
                j["spec"]["tasks"][0]["dependsOn"] = json!({"name": ["ps"]});
                j["spec"]["tasks"].as_array_mut().unwrap().push(second);
                j["spec"]["minAvailable"] = json!(4);
                j
            },
            "job has dependencies between tasks, but doesn't form a directed acyclic graph(DAG);".into(),
        ),
    ];
    let store = store();
    for (case, job, message) in cases {
        let err = validate_job_create(&job, &store).expect_err(case);
        assert_eq!((err.code, err.reason), (400, ""), "{case}");
        assert!(err.message.starts_with(prefix), "{case}: {}", err.message);
        assert!(err.message.contains(message.trim()), "{case}:\n{}\nwanted:\n{message}", err.message);
    }
}

#[test]
fn updates_may_change_only_sizes_and_retries() {
    let old = job();
    let scaled = set(set(old.clone(), "/spec/tasks/0/replicas", json!(4)), "/spec/minAvailable", json!(4));
    validate_job_update(&old, &scaled).unwrap();
    let cases = [
        (set(old.clone(), "/spec/queue", json!("other")), "job updates may not change fields other than"),
        (
            set(old.clone(), "/spec/minAvailable", json!(5)),
            "job 'minAvailable' must not be greater than total replicas",
        ),
        (set(old.clone(), "/spec/tasks/0/replicas", json!(-1)), "'replicas' must be >= 0 in task: worker"),
        (
            set(set(old.clone(), "/spec/tasks", json!([])), "/spec/minAvailable", json!(0)),
            "job updates may not add or remove tasks",
        ),
    ];
    for (new, message) in cases {
        let err = validate_job_update(&old, &new).unwrap_err();
        assert!(err.message.contains(message), "{}", err.message);
    }
}
