//! Cases of the built-in admission plugins that the HTTP tests do not reach: objects without a
//! name yet, the globalDefault class, a policy the pod gives itself, terminating namespaces.

use serde_json::{Value, json};

use super::*;

fn store() -> Store {
    let store = Store::new(100);
    for (name, phase) in [("ml", "Active"), ("old", "Terminating")] {
        store.create(known::namespaces(), "", json!({"metadata": {"name": name}, "status": {"phase": phase}})).unwrap();
        namespace_created(&store, name);
    }
    seed_priority_classes(&store);
    store
}

fn pod(spec: Value) -> Value {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "main", "image": "img"}]);
    json!({"metadata": {"generateName": "p-"}, "spec": spec})
}

#[test]
fn a_refusal_of_an_object_without_a_name_yet_names_only_the_resource() {
    let store = store();
    let mut p = pod(json!({"serviceAccountName": "robot"}));
    let err = admit_create(known::pods(), "ml", &mut p, &store).unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (403, "pods is forbidden: error looking up service account ml/robot: serviceaccount \"robot\" not found")
    );
}

#[test]
fn a_terminating_namespace_takes_no_new_objects() {
    let store = store();
    let mut p = pod(json!({}));
    p["metadata"]["name"] = json!("p");
    let err = admit_create(known::pods(), "old", &mut p, &store).unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (403, "pods \"p\" is forbidden: unable to create new content in namespace old because it is being terminated")
    );
}

#[test]
fn the_global_default_class_and_a_contradicting_policy() {
    let store = store();
    let mut plain = pod(json!({}));
    admit_create(known::pods(), "ml", &mut plain, &store).unwrap();
    assert_eq!((&plain["spec"]["priority"], plain["spec"].get("priorityClassName")), (&json!(0), None));

    let mut batch = json!({"metadata": {"name": "batch"}, "value": 100, "globalDefault": true});
    admit_create(known::priorityclasses(), "", &mut batch, &store).unwrap();
    assert_eq!(batch["preemptionPolicy"], "PreemptLowerPriority", "the API's default");
    store.create(known::priorityclasses(), "", batch).unwrap();
    let mut defaulted = pod(json!({}));
    admit_create(known::pods(), "ml", &mut defaulted, &store).unwrap();
    assert_eq!(
        (&defaulted["spec"]["priority"], &defaulted["spec"]["priorityClassName"]),
        (&json!(100), &json!("batch"))
    );

    let mut never = pod(json!({"priorityClassName": "system-node-critical", "preemptionPolicy": "Never"}));
    let err = admit_create(known::pods(), "ml", &mut never, &store).unwrap_err();
    assert_eq!(err.code, 403);
    assert!(
        err.message.ends_with(
            "the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority admission \
         controller computed PreemptLowerPriority from the given PriorityClass name"
        ),
        "{}",
        err.message
    );
}
