//! The vendored jobs CRD's `openAPIV3Schema`, tightened so unknown fields fail, as a validator.

use std::sync::OnceLock;

use serde_json::Value;

/// Validation errors of `instance` against the jobs CRD (`v1alpha1`), as text; empty when valid.
pub(crate) fn errors(instance: &Value) -> Vec<String> {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    let validator = VALIDATOR.get_or_init(|| {
        jsonschema::options().with_draft(jsonschema::Draft::Draft4).build(&schema()).expect("the CRD schema compiles")
    });
    validator.iter_errors(instance).map(|e| format!("{e} at {}", e.instance_path())).collect()
}

/// Asserts that `instance` is valid, printing every error.
pub(crate) fn assert_valid(instance: &Value) {
    let errors = errors(instance);
    assert!(errors.is_empty(), "schema errors:\n{}\n{instance:#}", errors.join("\n"));
}

fn schema() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/test_data/crds/batch.volcano.sh_jobs.yaml");
    let text = std::fs::read_to_string(path).expect("the vendored CRD is readable");
    let crd: Value = serde_saphyr::from_str(&text).expect("the CRD is YAML");
    let version = crd["spec"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .find(|v| v["name"] == "v1alpha1")
        .expect("v1alpha1 is served");
    let mut schema = version["schema"]["openAPIV3Schema"].clone();
    tighten(&mut schema, "");
    schema
}

/// Adds `additionalProperties: false` to every object schema with `properties` and no
/// `x-kubernetes-preserve-unknown-fields`, except `metadata` (only `type: object` in the CRD).
fn tighten(schema: &mut Value, name: &str) {
    let Value::Object(map) = schema else { return };
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if map.contains_key("properties") && !preserve && name != "metadata" {
        map.entry("additionalProperties").or_insert(Value::Bool(false));
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for (key, sub) in props.iter_mut() {
            tighten(sub, key);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = map.get_mut(key) {
            tighten(sub, "");
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(subs)) = map.get_mut(key) {
            subs.iter_mut().for_each(|s| tighten(s, ""));
        }
    }
}
