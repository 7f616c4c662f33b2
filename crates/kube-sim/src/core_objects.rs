//! The core objects theseus writes itself, Secrets and Leases (and ConfigMaps, alike), checked
//! as the API server checks them: unknown fields are dropped with a `Warning` (or refused with
//! `?fieldValidation=Strict`, through `schema`), a value of the wrong JSON type fails decoding
//! (`400`, the Go decoder's words), and the type's validation gives `422 Invalid`.
//!
//! Upstream origins (kubernetes/kubernetes):
//! - decoding: `staging/src/k8s.io/apimachinery/pkg/runtime/serializer/json/json.go` (the
//!   strict/unknown-field handling) and `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
//!   create.go` ("cannot be handled as a"); `[]byte` fields are base64 in JSON (`encoding/json`);
//! - Secrets: `pkg/apis/core/validation/validation.go` (`ValidateSecret`,
//!   `ValidateSecretUpdate`: config keys, the 1 MiB total, `immutable`);
//! - ConfigMaps: the same file (`ValidateConfigMap`, `ValidateConfigMapUpdate`);
//! - Leases: `pkg/apis/coordination/validation/validation.go` (`ValidateLeaseSpec`);
//! - Pods: only a client's update of `spec` is checked (`ValidatePodUpdate`).
//!
//! Still different: only these fields are typed (the rest of a core object is taken as it comes);
//! the decode error names the first bad field only, as Go's decoder does, but its Go type names
//! are ours for the few fields typed here; Pods (beyond the update rule), Services and the
//! other core types are not checked (theseus does not write them; Volcano's controller does);
//! the Pod update error omits the diff newer API servers append.

use serde_json::{Map, Value, json};

use crate::discovery::ResourceInfo;
use crate::status::ApiError;

/// Total bytes of a Secret's or ConfigMap's data (`core.MaxSecretSize`).
const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The typed fields of the core kinds checked here: (pointer, JSON type, Go type).
fn typed_fields(kind: &str) -> &'static [(&'static str, &'static str, &'static str)] {
    match kind {
        "Secret" => &[
            ("/data", "object", "map[string][]uint8"),
            ("/stringData", "object", "map[string]string"),
            ("/type", "string", "v1.SecretType"),
            ("/immutable", "boolean", "bool"),
        ],
        "ConfigMap" => &[
            ("/data", "object", "map[string]string"),
            ("/binaryData", "object", "map[string][]uint8"),
            ("/immutable", "boolean", "bool"),
        ],
        "Lease" => &[
            ("/spec", "object", "v1.LeaseSpec"),
            ("/spec/holderIdentity", "string", "string"),
            ("/spec/leaseDurationSeconds", "integer", "int32"),
            ("/spec/acquireTime", "string", "v1.MicroTime"),
            ("/spec/renewTime", "string", "v1.MicroTime"),
            ("/spec/leaseTransitions", "integer", "int32"),
        ],
        _ => &[],
    }
}

/// The top-level fields each kind has (the rest is pruned as unknown).
fn known_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Secret" => &["apiVersion", "kind", "metadata", "data", "stringData", "type", "immutable"],
        "ConfigMap" => &["apiVersion", "kind", "metadata", "data", "binaryData", "immutable"],
        "Lease" => &["apiVersion", "kind", "metadata", "spec"],
        _ => &[],
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "number",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A client's update of a Pod may change only what `ValidatePodUpdate` lets it
/// (pkg/apis/core/validation/validation.go): images, `activeDeadlineSeconds`, added tolerations
/// and `terminationGracePeriodSeconds`; everything else in `spec` is fixed once created.
///
/// # Errors
/// `422 Invalid` with upstream's sentence.
pub(crate) fn check_pod_update(old: &Value, new: &Value) -> Result<(), ApiError> {
    let frozen = |pod: &Value| -> Value {
        let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(m) = spec.as_object_mut() {
            for key in ["activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"] {
                m.remove(key);
            }
            for field in ["containers", "initContainers"] {
                for c in m.get_mut(field).and_then(Value::as_array_mut).into_iter().flatten() {
                    c.as_object_mut().map(|c| c.remove("image"));
                }
            }
        }
        spec
    };
    if frozen(old) == frozen(new) {
        return Ok(());
    }
    let name = new.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    Err(ApiError::invalid(
        "pods",
        name,
        format!(
            "Pod {name:?} is invalid: spec: Forbidden: pod updates may not change fields other than \
             `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,\
             `spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` \
             (allow it to be set to 1 if it was previously negative)"
        ),
    ))
}

/// Whether this module checks `res`.
pub(crate) fn checks(res: &ResourceInfo) -> bool {
    (res.group.is_empty() && matches!(res.kind, "Secret" | "ConfigMap")) || res.kind == "Lease"
}

/// Decodes and validates a create or update of `res`; `old` is the stored object on update.
/// Unknown top-level and `spec` fields were pruned by the caller's field validation.
/// Returns the unknown fields found (pruned here).
///
/// # Errors
/// `400` when a field has the wrong type (or a `[]byte` field is not base64), `422` for what
/// the type's validation refuses.
pub(crate) fn admit(res: &ResourceInfo, obj: &mut Value, old: Option<&Value>) -> Result<Vec<String>, ApiError> {
    if !checks(res) {
        return Ok(Vec::new());
    }
    let mut unknown = Vec::new();
    if let Some(map) = obj.as_object_mut() {
        let keys: Vec<String> = map.keys().cloned().collect();
        for key in keys {
            if !known_fields(res.kind).contains(&key.as_str()) {
                map.remove(&key);
                unknown.push(key);
            }
        }
        if res.kind == "Lease"
            && let Some(spec) = map.get_mut("spec").and_then(Value::as_object_mut)
        {
            let known = [
                "holderIdentity",
                "leaseDurationSeconds",
                "acquireTime",
                "renewTime",
                "leaseTransitions",
                "strategy",
                "preferredHolder",
            ];
            let keys: Vec<String> = spec.keys().cloned().collect();
            for key in keys.into_iter().filter(|k| !known.contains(&k.as_str())) {
                spec.remove(&key);
                unknown.push(format!("spec.{key}"));
            }
        }
    }
    unknown.sort();
    decode(res, obj)?;
    let errors = validate(res, obj, old);
    if errors.is_empty() {
        return Ok(unknown);
    }
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let joined = if errors.len() == 1 { errors[0].clone() } else { format!("[{}]", errors.join(", ")) };
    Err(ApiError::invalid(res.plural, name, format!("{} {name:?} is invalid: {joined}", res.kind)))
}

/// The Go decoder: every typed field has its type; `[]byte` values are base64.
fn decode(res: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let cannot = |detail: String| {
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {detail}",
            kind = res.kind,
            version = res.version
        ))
    };
    for (pointer, want, go) in typed_fields(res.kind) {
        let Some(value) = obj.pointer(pointer) else { continue };
        if value.is_null() {
            continue;
        }
        let field = pointer.trim_start_matches('/').replace('/', ".");
        let fits = match *want {
            "integer" => value.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
            "object" => value.is_object(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !fits {
            return Err(cannot(format!(
                "json: cannot unmarshal {} into Go struct field {}.{field} of type {go}",
                json_type(value),
                res.kind
            )));
        }
        if go.starts_with("map[string]") {
            for (key, item) in value.as_object().into_iter().flatten() {
                let ok = match *go {
                    "map[string][]uint8" => item.as_str().is_some_and(|s| base64_decoded_len(s).is_some()),
                    _ => item.is_string(),
                };
                if !ok {
                    let detail = match item.as_str() {
                        Some(_) => format!("illegal base64 data in {}.{field}[{key:?}]", res.kind),
                        None => format!(
                            "json: cannot unmarshal {} into Go struct field {}.{field} of type {}",
                            json_type(item),
                            res.kind,
                            go.trim_start_matches("map[string]")
                        ),
                    };
                    return Err(cannot(detail));
                }
            }
        }
        if *go == "v1.MicroTime"
            && let Some(text) = value.as_str()
            && !is_rfc3339(text)
        {
            return Err(cannot(format!(
                "parsing time {text:?} as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse {text:?} as \"2006\""
            )));
        }
    }
    Ok(())
}

/// The length of standard base64 (padded) text once decoded, `None` when it is not base64.
fn base64_decoded_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let padding = bytes.iter().rev().take_while(|b| **b == b'=').count();
    if padding > 2 {
        return None;
    }
    let body = &bytes[..bytes.len() - padding];
    body.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/').then(|| bytes.len() / 4 * 3 - padding)
}

/// `2006-01-02T15:04:05[.frac](Z|±hh:mm)`.
fn is_rfc3339(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    if b.len() < 20 || !(digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10)) {
        return false;
    }
    if !(b[10] == b'T' && digits(11..13) && b[13] == b':' && digits(14..16) && b[16] == b':' && digits(17..19)) {
        return false;
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    rest == "Z" || (rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) && rest.as_bytes()[3] == b':')
}

/// `IsConfigMapKey`'s message.
const CONFIG_KEY: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  \
                          or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

fn config_key_errors(field: &str, keys: &Map<String, Value>, errors: &mut Vec<String>) {
    for key in keys.keys() {
        let ok = !key.is_empty()
            && key.len() <= 253
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
        if !ok || key == "." || key == ".." || key.starts_with("..") {
            errors.push(format!("{field}[{key}]: Invalid value: {key:?}: {CONFIG_KEY}"));
        }
    }
}

/// The type's validation, as field errors printed `path: message`.
fn validate(res: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<String> {
    let mut errors = Vec::new();
    match res.kind {
        "Secret" | "ConfigMap" => {
            let (text_field, bytes_field) =
                if res.kind == "Secret" { ("stringData", "data") } else { ("data", "binaryData") };
            let mut total = 0;
            for field in [text_field, bytes_field] {
                if let Some(map) = obj.get(field).and_then(Value::as_object) {
                    config_key_errors(field, map, &mut errors);
                    for v in map.values().filter_map(Value::as_str) {
                        total += if field == bytes_field { base64_decoded_len(v).unwrap_or(0) } else { v.len() };
                    }
                }
            }
            if total > MAX_DATA_BYTES {
                errors.push(format!("{bytes_field}: Too long: must have at most {MAX_DATA_BYTES} bytes"));
            }
            if let Some(old) = old {
                let was_immutable = old.get("immutable") == Some(&json!(true));
                if was_immutable && obj.get("immutable") != Some(&json!(true)) {
                    errors.push("immutable: Forbidden: field is immutable when `immutable` is set".to_owned());
                }
                if was_immutable
                    && (obj.get(bytes_field) != old.get(bytes_field) || obj.get(text_field) != old.get(text_field))
                {
                    errors.push(format!("{bytes_field}: Forbidden: field is immutable when `immutable` is set"));
                }
                if res.kind == "Secret" && obj.get("type") != old.get("type") {
                    let value = obj.get("type").and_then(Value::as_str).unwrap_or("");
                    errors.push(format!("type: Invalid value: {value:?}: field is immutable"));
                }
            }
        }
        "Lease" => {
            if let Some(d) = obj.pointer("/spec/leaseDurationSeconds").and_then(Value::as_i64)
                && d <= 0
            {
                errors.push(format!("spec.leaseDurationSeconds: Invalid value: {d}: must be greater than 0"));
            }
            if let Some(t) = obj.pointer("/spec/leaseTransitions").and_then(Value::as_i64)
                && t < 0
            {
                errors.push(format!("spec.leaseTransitions: Invalid value: {t}: must be greater than or equal to 0"));
            }
        }
        _ => {}
    }
    errors
}

#[cfg(test)]
mod tests;
