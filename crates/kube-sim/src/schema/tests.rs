//! Table-driven cases of the CRD schema rules: what the API server accepts is accepted (pruned
//! and defaulted as it would be), what it refuses is refused with its words and field paths.

use serde_json::{Value, json};

use super::*;
use crate::discovery::RESOURCES;

fn jobs() -> &'static ResourceInfo {
    RESOURCES.iter().find(|r| r.plural == "jobs").unwrap()
}

fn queues() -> &'static ResourceInfo {
    RESOURCES.iter().find(|r| r.plural == "queues").unwrap()
}

/// A gang job as theseus renders one, trimmed to what matters here.
fn job() -> Value {
    json!({
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "labels": {"theseus.dev/run-id": "r1"}},
        "spec": {
            "minAvailable": 2,
            "schedulerName": "volcano",
            "plugins": {"env": [], "svc": ["--disable-network-policy=true"]},
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [{
                "name": "worker",
                "replicas": 2,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "main",
                        "image": "ghcr.io/x/y:1",
                        "command": ["bash", "-c", "true"],
                        "env": [{"name": "A", "value": "1"}],
                        "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "500m"}},
                    }],
                }},
            }],
        },
    })
}

fn with(mut base: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let target = base.pointer_mut(parent).unwrap();
    match target {
        Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
        }
        _ => panic!("{pointer}"),
    }
    base
}

#[test]
fn a_job_as_theseus_renders_it_is_admitted_and_defaulted() {
    let mut obj = job();
    let warnings = admit(jobs(), &mut obj, FieldValidation::Strict).unwrap();
    assert!(warnings.is_empty());
    // The CRD's defaults, as a Job read back from the API server has them.
    assert_eq!(obj["spec"]["maxRetry"], 3);
    assert_eq!(obj["spec"]["queue"], "default");
    assert_eq!(obj["metadata"]["labels"]["theseus.dev/run-id"], "r1", "metadata is the server's own");
}

#[test]
fn unknown_fields_are_pruned_with_a_warning_or_refused_when_strict() {
    let typo = with(job(), "/spec/minAvaliable", json!(2));
    let nested = with(typo, "/spec/tasks/0/template/spec/containers/0/imagePullPolicyy", json!("Always"));
    let mut obj = nested.clone();
    let warnings = admit(jobs(), &mut obj, FieldValidation::Warn).unwrap();
    assert_eq!(
        warnings,
        [
            "unknown field \"spec.minAvaliable\"",
            "unknown field \"spec.tasks[0].template.spec.containers[0].imagePullPolicyy\"",
        ]
    );
    assert!(obj["spec"].get("minAvaliable").is_none());
    assert!(obj["spec"]["tasks"][0]["template"]["spec"]["containers"][0].get("imagePullPolicyy").is_none());

    let mut quiet = nested.clone();
    assert!(admit(jobs(), &mut quiet, FieldValidation::Ignore).unwrap().is_empty());
    assert_eq!(quiet, obj);

    let err = admit(jobs(), &mut nested.clone(), FieldValidation::Strict).unwrap_err();
    assert_eq!(err.code, 400);
    assert_eq!(err.reason, "BadRequest");
    assert_eq!(
        err.message,
        "Job in version \"v1alpha1\" cannot be handled as a Job: strict decoding error: unknown field \
         \"spec.minAvaliable\", unknown field \"spec.tasks[0].template.spec.containers[0].imagePullPolicyy\""
    );
}

#[test]
fn values_the_schema_refuses_are_422_with_the_field_path() {
    // (change, field, cause reason, message after the path)
    let cases: &[(&str, Value, &str, &str, &str)] = &[
        (
            "/spec/minAvailable",
            json!("2"),
            "spec.minAvailable",
            "FieldValueTypeInvalid",
            "Invalid value: \"string\": spec.minAvailable in body must be of type integer: \"string\"",
        ),
        (
            "/spec/minAvailable",
            json!(-1),
            "spec.minAvailable",
            "FieldValueInvalid",
            "Invalid value: -1: spec.minAvailable in body should be greater than or equal to 0",
        ),
        (
            "/spec/tasks/0/replicas",
            json!(1.5),
            "spec.tasks[0].replicas",
            "FieldValueTypeInvalid",
            "Invalid value: \"number\": spec.tasks[0].replicas in body must be of type integer: \"number\"",
        ),
        (
            "/spec/policies/0/event",
            json!("PodCrashed"),
            "spec.policies[0].event",
            "FieldValueNotSupported",
            "Unsupported value: \"PodCrashed\": supported values: \"*\", \"PodPending\", \"PodRunning\", \
             \"PodFailed\", \"PodEvicted\", \"Unknown\", \"TaskCompleted\", \"OutOfSync\", \"CommandIssued\", \
             \"JobUpdated\", \"TaskFailed\"",
        ),
        (
            "/spec/queue",
            json!("Team A"),
            "spec.queue",
            "FieldValueInvalid",
            "Invalid value: \"Team A\": spec.queue in body should match \
             '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
        ),
        (
            "/spec/tasks",
            json!([]),
            "spec.tasks",
            "FieldValueInvalid",
            "Invalid value: []interface {}{}: spec.tasks in body should have at least 1 items",
        ),
        (
            "/spec/tasks/0/template/spec/containers/0/resources/limits/cpu",
            json!("half"),
            "spec.tasks[0].template.spec.containers[0].resources.limits.cpu",
            "FieldValueInvalid",
            "Invalid value: \"half\": spec.tasks[0].template.spec.containers[0].resources.limits.cpu in body \
             should match '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?\
             (([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$'",
        ),
        (
            "/spec/tasks/0/template/spec/containers/0/resources/limits/memory",
            json!(true),
            "spec.tasks[0].template.spec.containers[0].resources.limits.memory",
            "FieldValueTypeInvalid",
            "Invalid value: \"boolean\": spec.tasks[0].template.spec.containers[0].resources.limits.memory in \
             body must be of type integer,string: \"boolean\"",
        ),
        (
            "/spec/schedulerName",
            json!("v".repeat(64)),
            "spec.schedulerName",
            "FieldValueTooLong",
            "Too long: may not be more than 63 bytes",
        ),
    ];
    for (pointer, value, field, reason, body) in cases {
        let mut obj = with(job(), pointer, value.clone());
        let err = admit(jobs(), &mut obj, FieldValidation::Warn).expect_err(pointer);
        assert_eq!((err.code, err.reason), (422, "Invalid"), "{pointer}");
        assert_eq!(err.message, format!("Job.batch.volcano.sh \"train\" is invalid: {field}: {body}"), "{pointer}");
        let causes = &err.invalid.as_ref().expect("details").causes;
        assert_eq!(causes.len(), 1, "{pointer}: {causes:?}");
        assert_eq!(causes[0], Cause { reason, message: (*body).to_owned(), field: (*field).to_owned() });
        let status = err.to_status();
        assert_eq!(status["details"]["group"], "batch.volcano.sh");
        assert_eq!(status["details"]["causes"][0]["field"], *field);
    }
}

#[test]
fn several_errors_are_listed_in_brackets_and_required_fields_are_named() {
    let mut obj = with(job(), "/spec/tasks/0/template/spec/containers/0", json!({"image": "x"}));
    obj["spec"]["minAvailable"] = json!(-2);
    let err = admit(jobs(), &mut obj, FieldValidation::Warn).unwrap_err();
    assert_eq!(
        err.message,
        "Job.batch.volcano.sh \"train\" is invalid: [spec.minAvailable: Invalid value: -2: spec.minAvailable in \
         body should be greater than or equal to 0, spec.tasks[0].template.spec.containers[0].name: Required value]"
    );
    assert_eq!(err.invalid.unwrap().causes[1].reason, "FieldValueRequired");
}

#[test]
fn duplicate_keys_of_map_lists_are_refused() {
    let env = json!([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]);
    let mut obj = with(job(), "/spec/tasks/0/template/spec/containers/0/env", env);
    let err = admit(jobs(), &mut obj, FieldValidation::Warn).unwrap_err();
    assert_eq!(
        err.message,
        "Job.batch.volcano.sh \"train\" is invalid: spec.tasks[0].template.spec.containers[0].env[1]: Duplicate \
         value: map[string]interface {}{\"name\":\"A\"}"
    );
}

#[test]
fn nulls_of_non_nullable_fields_are_dropped_and_patches_keep_theirs() {
    let mut obj = with(job(), "/spec/ttlSecondsAfterFinished", Value::Null);
    assert!(admit(jobs(), &mut obj, FieldValidation::Strict).unwrap().is_empty());
    assert!(obj["spec"].get("ttlSecondsAfterFinished").is_none());

    let mut patch = json!({"spec": {"ttlSecondsAfterFinished": null, "bogus": 1}});
    prune_patch(jobs(), &mut patch);
    assert_eq!(patch, json!({"spec": {"ttlSecondsAfterFinished": null}}), "a null in a patch deletes");
}

#[test]
fn queues_have_their_own_rules() {
    let queue = json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"},
                       "spec": {"weight": 0, "capability": {"nvidia.com/gpu": 8}}});
    let err = admit(queues(), &mut queue.clone(), FieldValidation::Warn).unwrap_err();
    assert_eq!(
        err.message,
        "Queue.scheduling.volcano.sh \"q\" is invalid: spec.weight: Invalid value: 0: spec.weight in body should be \
         greater than or equal to 1"
    );
    let mut ok = with(queue, "/spec/weight", json!(4));
    admit(queues(), &mut ok, FieldValidation::Strict).unwrap();
    assert_eq!(ok["spec"]["dequeueStrategy"], "traverse", "defaulted");
}

#[test]
fn field_validation_values_other_than_the_three_are_refused() {
    let q = |v: &str| vec![("fieldValidation".to_owned(), v.to_owned())];
    assert_eq!(FieldValidation::from_query(&[]).unwrap(), FieldValidation::Warn);
    assert_eq!(FieldValidation::from_query(&q("Strict")).unwrap(), FieldValidation::Strict);
    assert_eq!(FieldValidation::from_query(&q("strict")).unwrap_err().code, 400);
}
