//! Cases of the core objects' decoding and validation (the Secret and Lease theseus writes, and
//! what upstream's `validation_test.go` refuses: bad keys, size, immutability, lease duration).

use serde_json::json;

use super::*;
use crate::discovery::RESOURCES;

fn res(kind: &str) -> &'static ResourceInfo {
    RESOURCES.iter().find(|r| r.kind == kind).unwrap()
}

#[test]
fn a_secret_and_a_lease_as_theseus_writes_them_pass() {
    let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                            "type": "Opaque", "stringData": {"WANDB_API_KEY": "k", "HF.token-1": "t"}});
    assert!(admit(res("Secret"), &mut secret, None).unwrap().is_empty());
    let mut lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
                           "spec": {"holderIdentity": "run", "leaseDurationSeconds": 30,
                                    "acquireTime": "2026-11-25T01:02:03.000000Z", "renewTime": "2026-11-25T01:02:03.123456+01:00"}});
    assert!(admit(res("Lease"), &mut lease, None).unwrap().is_empty());
}

#[test]
fn unknown_fields_are_dropped_and_named() {
    let mut secret = json!({"kind": "Secret", "metadata": {"name": "s"}, "stringdata": {"A": "b"}});
    assert_eq!(admit(res("Secret"), &mut secret, None).unwrap(), ["stringdata"]);
    assert!(secret.get("stringdata").is_none());
    let mut lease = json!({"kind": "Lease", "metadata": {"name": "l"}, "spec": {"holder": "x"}});
    assert_eq!(admit(res("Lease"), &mut lease, None).unwrap(), ["spec.holder"]);
}

#[test]
fn wrong_types_fail_decoding_with_400() {
    let cases = [
        (
            "Secret",
            json!({"data": {"A": "not base64!"}}),
            "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data in Secret.data[\"A\"]",
        ),
        (
            "Secret",
            json!({"stringData": {"A": 1}}),
            "Secret in version \"v1\" cannot be handled as a Secret: json: cannot unmarshal number into Go struct field Secret.stringData of type string",
        ),
        (
            "Secret",
            json!({"immutable": "yes"}),
            "Secret in version \"v1\" cannot be handled as a Secret: json: cannot unmarshal string into Go struct field Secret.immutable of type bool",
        ),
        (
            "Lease",
            json!({"spec": {"leaseDurationSeconds": "30"}}),
            "Lease in version \"v1\" cannot be handled as a Lease: json: cannot unmarshal string into Go struct field Lease.spec.leaseDurationSeconds of type int32",
        ),
        (
            "Lease",
            json!({"spec": {"renewTime": "yesterday"}}),
            "Lease in version \"v1\" cannot be handled as a Lease: parsing time \"yesterday\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"yesterday\" as \"2006\"",
        ),
    ];
    for (kind, mut body, message) in cases {
        body["metadata"] = json!({"name": "x"});
        let err = admit(res(kind), &mut body, None).unwrap_err();
        assert_eq!((err.code, err.message.as_str()), (400, message));
    }
}

#[test]
fn validation_refuses_what_upstream_refuses_with_422() {
    let big = "x".repeat(MAX_DATA_BYTES + 1);
    let cases = [
        (
            "Secret",
            json!({"stringData": {"bad key": "v"}}),
            None,
            "Secret \"x\" is invalid: stringData[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        ),
        (
            "Secret",
            json!({"stringData": {"k": big}}),
            None,
            "Secret \"x\" is invalid: data: Too long: must have at most 1048576 bytes",
        ),
        (
            "Secret",
            json!({"immutable": true, "data": {"k": "Yg=="}}),
            Some(json!({"immutable": true, "data": {"k": "YQ=="}})),
            "Secret \"x\" is invalid: data: Forbidden: field is immutable when `immutable` is set",
        ),
        (
            "Secret",
            json!({"type": "kubernetes.io/tls"}),
            Some(json!({"type": "Opaque"})),
            "Secret \"x\" is invalid: type: Invalid value: \"kubernetes.io/tls\": field is immutable",
        ),
        (
            "Lease",
            json!({"spec": {"leaseDurationSeconds": 0}}),
            None,
            "Lease \"x\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
        ),
    ];
    for (kind, mut body, old, message) in cases {
        body["metadata"] = json!({"name": "x"});
        let err = admit(res(kind), &mut body, old.as_ref()).unwrap_err();
        assert_eq!((err.code, err.reason, err.message.as_str()), (422, "Invalid", message));
    }
}

#[test]
fn a_pods_spec_is_fixed_but_its_images_and_deadline() {
    let pod =
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "a:1", "command": ["x"]}]}});
    let mut newer = pod.clone();
    newer["spec"]["containers"][0]["image"] = json!("a:2");
    newer["spec"]["activeDeadlineSeconds"] = json!(60);
    check_pod_update(&pod, &newer).unwrap();
    let mut changed = pod.clone();
    changed["spec"]["containers"][0]["command"] = json!(["y"]);
    let err = check_pod_update(&pod, &changed).unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message.starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than"),
        "{}",
        err.message
    );
}
