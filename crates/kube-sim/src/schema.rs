//! Custom resources checked against their CRD's `openAPIV3Schema` (the vendored Volcano v1.15.1
//! CRDs in `crds/`) the way the API server does before it stores them: unknown fields are
//! pruned and reported (a `Warning` header by default, `400 BadRequest` with
//! `?fieldValidation=Strict`), nulls of non-nullable properties are dropped, and what is left is
//! validated into a `422 Invalid` `Status` whose causes carry the field paths.
//!
//! Upstream origins (kubernetes/kubernetes, staging/src/k8s.io/):
//! - pruning: `apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm.go` (`Prune`,
//!   `prune`, `skipPrune`); unknown-field reporting and the `fieldValidation` modes:
//!   `apiserver/pkg/endpoints/handlers/create.go` and `rest.go` (`fieldValidation`) with the
//!   strict decoding error of `apimachinery/pkg/runtime/serializer/json/json.go`;
//! - defaults: `apiextensions-apiserver/pkg/apiserver/schema/defaulting/algorithm.go` (`Default`);
//! - null dropping: `apiextensions-apiserver/pkg/apiserver/schema/defaulting/prunenulls.go`
//!   (`PruneNonNullableNullsWithoutDefaults`);
//! - validation: `apiextensions-apiserver/pkg/apiserver/validation/validation.go`
//!   (`ValidateCustomResource`, which maps the kube-openapi `validate` errors to field errors)
//!   and `apimachinery/pkg/util/validation/field/errors.go` (how a field error prints);
//! - list types: `apiextensions-apiserver/pkg/apiserver/schema/listtype/validation.go`
//!   (`ValidateListSetsAndMaps`: duplicates in `set` and `map` lists).
//!
//! Still different from a real API server: `anyOf`/`allOf`/`oneOf` are only honoured for
//! `x-kubernetes-int-or-string`; `format` (int32, date-time, ...) is not checked; CEL rules
//! (`x-kubernetes-validations`, none in these CRDs) are not run; the message of a type error on
//! an int-or-string field is worded by us.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::discovery::ResourceInfo;
use crate::status::{ApiError, Cause, InvalidDetails};

/// The vendored CRDs: `(group, plural)` to the served version's schema.
const CRDS: &[&str] = &[
    include_str!("../crds/batch.volcano.sh_jobs.yaml"),
    include_str!("../crds/scheduling.volcano.sh_podgroups.yaml"),
    include_str!("../crds/scheduling.volcano.sh_queues.yaml"),
];

/// The `fieldValidation` query parameter of create, update and patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// Unknown fields are dropped silently.
    Ignore,
    /// Unknown fields are dropped with a `Warning` header (the default).
    Warn,
    /// Unknown fields fail the request.
    Strict,
}

impl FieldValidation {
    /// From the request's query; an unknown value is a `400` as upstream
    /// (`apiserver/pkg/endpoints/handlers/rest.go`, `fieldValidation`).
    pub(crate) fn from_query(query: &[(String, String)]) -> Result<FieldValidation, ApiError> {
        match query.iter().rev().find(|(k, _)| k == "fieldValidation").map(|(_, v)| v.as_str()) {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn, or Strict, but got {other:?}"
            ))),
        }
    }
}

/// The schema of `res`, when it is one of the vendored custom resources.
pub(crate) fn schema_of(res: &ResourceInfo) -> Option<&'static Value> {
    static SCHEMAS: OnceLock<HashMap<(String, String), Value>> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| {
        CRDS.iter()
            .map(|text| {
                let crd: Value = serde_saphyr::from_str(text).expect("a vendored CRD is YAML");
                let group = crd["spec"]["group"].as_str().expect("spec.group").to_owned();
                let plural = crd["spec"]["names"]["plural"].as_str().expect("spec.names.plural").to_owned();
                let version = crd["spec"]["versions"]
                    .as_array()
                    .and_then(|vs| vs.iter().find(|v| v["storage"] == Value::Bool(true)))
                    .expect("a storage version");
                ((group, plural), version["schema"]["openAPIV3Schema"].clone())
            })
            .collect()
    });
    schemas.get(&(res.group.to_owned(), res.plural.to_owned()))
}

/// Admits a create, update or patched object of `res`: prunes it in place and validates it.
/// Returns the `Warning` texts to send (unknown fields under `Warn`).
///
/// # Errors
/// `400` for unknown fields under `Strict`, `422` for a value the schema refuses.
pub(crate) fn admit(res: &ResourceInfo, obj: &mut Value, mode: FieldValidation) -> Result<Vec<String>, ApiError> {
    let Some(schema) = schema_of(res) else { return Ok(Vec::new()) };
    let mut unknown = Vec::new();
    prune_root(obj, schema, &mut unknown, false);
    // Reported sorted, as `pruning.PruneWithOptions` returns them.
    unknown.sort();
    let warnings = unknown_fields(res, &unknown, mode)?;
    apply_defaults(obj, schema);
    let errors = validate(obj, schema);
    if !errors.is_empty() {
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
        let messages: Vec<String> = errors.iter().map(FieldError::to_string).collect();
        let joined = if messages.len() == 1 { messages[0].clone() } else { format!("[{}]", messages.join(", ")) };
        let mut err =
            ApiError::invalid(res.kind, &name, format!("{}.{} {name:?} is invalid: {joined}", res.kind, res.group));
        err.invalid = Some(Box::new(InvalidDetails {
            group: res.group.to_owned(),
            causes: errors.iter().map(FieldError::cause).collect(),
        }));
        return Err(err);
    }
    Ok(warnings)
}

/// What the fields a decoder dropped become under `mode`: `Warning` texts, nothing, or (with
/// `Strict`) the `400` strict decoding error.
///
/// # Errors
/// The strict decoding error.
pub(crate) fn unknown_fields(
    res: &ResourceInfo,
    unknown: &[String],
    mode: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let list: Vec<String> = unknown.iter().map(|p| format!("unknown field {p:?}")).collect();
    match mode {
        FieldValidation::Strict if !list.is_empty() => Err(ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            list.join(", "),
            kind = res.kind,
            version = res.version,
        ))),
        FieldValidation::Warn => Ok(list),
        _ => Ok(Vec::new()),
    }
}

/// Prunes a merge patch of `res` before it is applied, keeping its nulls (they delete): the
/// merged object was admitted with [`admit`], and the fields it pruned came from the patch.
pub(crate) fn prune_patch(res: &ResourceInfo, patch: &mut Value) {
    if let Some(schema) = schema_of(res) {
        prune_root(patch, schema, &mut Vec::new(), true);
    }
}

/// `prune` at the root: `apiVersion`, `kind` and `metadata` are the API server's own.
fn prune_root(obj: &mut Value, schema: &Value, unknown: &mut Vec<String>, keep_nulls: bool) {
    let Value::Object(map) = obj else { return };
    let props = schema.get("properties").and_then(Value::as_object);
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&key)) {
            Some(sub) => {
                if map[&key].is_null() && !nullable(sub) && !keep_nulls {
                    map.remove(&key);
                } else {
                    prune(map.get_mut(&key).expect("present"), sub, &key, unknown, keep_nulls);
                }
            }
            None => {
                map.remove(&key);
                unknown.push(key);
            }
        }
    }
}

/// Removes (and records) fields the schema does not know, and nulls of non-nullable
/// properties; `x-kubernetes-preserve-unknown-fields` keeps unknown ones.
fn prune(value: &mut Value, schema: &Value, path: &str, unknown: &mut Vec<String>, keep_nulls: bool) {
    match value {
        Value::Object(map) => {
            let embedded = flag(schema, "x-kubernetes-embedded-resource");
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let child = format!("{path}.{key}");
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(&key)) {
                    if map[&key].is_null() && !nullable(sub) && !keep_nulls {
                        map.remove(&key);
                    } else {
                        prune(map.get_mut(&key).expect("present"), sub, &child, unknown, keep_nulls);
                    }
                } else if let Some(sub) = additional {
                    prune(map.get_mut(&key).expect("present"), sub, &child, unknown, keep_nulls);
                } else if !preserve {
                    map.remove(&key);
                    unknown.push(child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, sub, &format!("{path}[{i}]"), unknown, keep_nulls);
                }
            }
        }
        _ => {}
    }
}

/// Sets every absent property that has a `default` in the schema, at every level present
/// (`apiextensions-apiserver/pkg/apiserver/schema/defaulting/algorithm.go`, `Default`).
fn apply_defaults(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (key, sub) in props {
                    if let Some(default) = sub.get("default")
                        && !map.contains_key(key)
                    {
                        map.insert(key.clone(), default.clone());
                    }
                }
                for (key, child) in map.iter_mut() {
                    if let Some(sub) = props.get(key) {
                        apply_defaults(child, sub);
                    }
                }
            } else if let Some(sub) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in map.values_mut() {
                    apply_defaults(child, sub);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                items.iter_mut().for_each(|item| apply_defaults(item, sub));
            }
        }
        _ => {}
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key) == Some(&Value::Bool(true))
}

fn nullable(schema: &Value) -> bool {
    flag(schema, "nullable")
}

/// The kinds of field error the schema validation reports, with their `Status` cause reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Required,
    TypeInvalid,
    Invalid,
    NotSupported,
    TooLong,
    TooMany,
    Duplicate,
}

/// One field error, printed as `field.Error.Error()` prints it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldError {
    kind: Kind,
    field: String,
    value: Value,
    detail: String,
}

impl FieldError {
    fn reason(&self) -> &'static str {
        match self.kind {
            Kind::Required => "FieldValueRequired",
            Kind::TypeInvalid => "FieldValueTypeInvalid",
            Kind::Invalid => "FieldValueInvalid",
            Kind::NotSupported => "FieldValueNotSupported",
            Kind::TooLong => "FieldValueTooLong",
            Kind::TooMany => "FieldValueTooMany",
            Kind::Duplicate => "FieldValueDuplicate",
        }
    }

    /// `ErrorBody`: the type's words, the bad value (not for required and too long), the detail.
    fn body(&self) -> String {
        let words = match self.kind {
            Kind::Required => "Required value",
            Kind::TypeInvalid | Kind::Invalid => "Invalid value",
            Kind::NotSupported => "Unsupported value",
            Kind::TooLong => "Too long",
            Kind::TooMany => "Too many",
            Kind::Duplicate => "Duplicate value",
        };
        let mut s = match self.kind {
            Kind::Required | Kind::TooLong => words.to_owned(),
            _ => format!("{words}: {}", go_value(&self.value)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    fn cause(&self) -> Cause {
        Cause { reason: self.reason(), message: self.body(), field: self.field.clone() }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// A JSON value as Go's `%v`/`%q` prints the decoded value in a field error.
fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "\"null\"".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Object(map) => {
            let fields: Vec<String> = map.iter().map(|(k, v)| format!("{k:?}:{}", go_value(v))).collect();
            format!("map[string]interface {{}}{{{}}}", fields.join(", "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_value).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
    }
}

/// JSON Schema's name of a value's type, as the validator reports it.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Validates a pruned object against its schema; the root's `metadata`, `apiVersion` and
/// `kind` are the API server's own and not checked here.
pub(crate) fn validate(obj: &Value, schema: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Value::Object(map) = obj else {
        errors.push(type_error("", obj, "object"));
        return errors;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    required(map, schema, "", &mut errors);
    for (key, value) in map {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if let Some(sub) = props.and_then(|p| p.get(key)) {
            check(value, sub, key, &mut errors);
        }
    }
    errors
}

fn type_error(path: &str, value: &Value, wanted: &str) -> FieldError {
    let actual = type_name(value);
    FieldError {
        kind: Kind::TypeInvalid,
        field: path.to_owned(),
        value: Value::String(actual.to_owned()),
        detail: format!("{path} in body must be of type {wanted}: {actual:?}"),
    }
}

fn required(map: &Map<String, Value>, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    for key in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !map.contains_key(key) {
            let field = if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
            errors.push(FieldError { kind: Kind::Required, field, value: Value::Null, detail: String::new() });
        }
    }
}

/// Checks one value and everything under it.
fn check(value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if value.is_null() && nullable(schema) {
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !matches!(type_name(value), "integer" | "string") {
            errors.push(type_error(path, value, "integer,string"));
            return;
        }
    } else if let Some(wanted) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(value);
        let fits = actual == wanted || (wanted == "number" && actual == "integer");
        if !fits {
            errors.push(type_error(path, value, wanted));
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let supported: Vec<String> =
            options.iter().map(|o| o.as_str().map_or_else(|| o.to_string(), |s| format!("{s:?}"))).collect();
        errors.push(FieldError {
            kind: Kind::NotSupported,
            field: path.to_owned(),
            value: value.clone(),
            detail: format!("supported values: {}", supported.join(", ")),
        });
    }
    match value {
        Value::Number(n) => bounds(n.as_f64().unwrap_or(0.0), value, schema, path, errors),
        Value::String(s) => string_rules(s, value, schema, path, errors),
        Value::Array(items) => {
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                errors.push(invalid(path, value, format!("{path} in body should have at least {min} items")));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                errors.push(FieldError {
                    kind: Kind::TooMany,
                    field: path.to_owned(),
                    value: Value::from(items.len()),
                    detail: format!("must have at most {max} items"),
                });
            }
            if let Some(sub) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item, sub, &format!("{path}[{i}]"), errors);
                }
            }
            list_type(items, schema, path, errors);
        }
        Value::Object(map) => {
            required(map, schema, path, errors);
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                let child_path = format!("{path}.{key}");
                if let Some(sub) = props.and_then(|p| p.get(key)) {
                    check(child, sub, &child_path, errors);
                } else if let Some(sub) = additional {
                    check(child, sub, &child_path, errors);
                }
            }
        }
        _ => {}
    }
}

fn invalid(path: &str, value: &Value, detail: String) -> FieldError {
    FieldError { kind: Kind::Invalid, field: path.to_owned(), value: value.clone(), detail }
}

/// `minimum`/`maximum` (kube-openapi `validate/validator.go`, `numberValidator`).
fn bounds(n: f64, value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let exclusive = flag(schema, "exclusiveMinimum");
        if n < min || (exclusive && n == min) {
            let words = if exclusive { "greater than" } else { "greater than or equal to" };
            errors.push(invalid(path, value, format!("{path} in body should be {words} {}", number(min))));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let exclusive = flag(schema, "exclusiveMaximum");
        if n > max || (exclusive && n == max) {
            let words = if exclusive { "less than" } else { "less than or equal to" };
            errors.push(invalid(path, value, format!("{path} in body should be {words} {}", number(max))));
        }
    }
}

fn number(n: f64) -> String {
    if n.fract() == 0.0 { format!("{}", n as i64) } else { n.to_string() }
}

/// `maxLength`, `minLength` and `pattern` (kube-openapi `stringValidator`).
fn string_rules(s: &str, value: &Value, schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let chars = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && chars > max
    {
        errors.push(FieldError {
            kind: Kind::TooLong,
            field: path.to_owned(),
            value: value.clone(),
            detail: format!("may not be more than {max} bytes"),
        });
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && chars < min
    {
        errors.push(invalid(path, value, format!("{path} in body should be at least {min} chars long")));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && !pattern_matches(pattern, s)
    {
        errors.push(invalid(path, value, format!("{path} in body should match '{pattern}'")));
    }
}

/// Whether `s` matches a schema `pattern` (compiled once per pattern; one that does not compile
/// matches nothing, as the CRD would have been refused).
fn pattern_matches(pattern: &str, s: &str) -> bool {
    static CACHE: OnceLock<std::sync::Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    let re = cache.entry(pattern.to_owned()).or_insert_with(|| regex::Regex::new(pattern).ok());
    re.as_ref().is_some_and(|re| re.is_match(s))
}

/// `x-kubernetes-list-type: set` and `map` (with `x-kubernetes-list-map-keys`): no duplicates.
fn list_type(items: &[Value], schema: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    errors.push(FieldError {
                        kind: Kind::Duplicate,
                        field: format!("{path}[{i}]"),
                        value: item.clone(),
                        detail: String::new(),
                    });
                }
            }
        }
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let key_of = |item: &Value| -> Map<String, Value> {
                keys.iter().filter_map(|k| item.get(*k).map(|v| ((*k).to_owned(), v.clone()))).collect()
            };
            for (i, item) in items.iter().enumerate() {
                let key = key_of(item);
                if items[..i].iter().any(|earlier| key_of(earlier) == key) {
                    errors.push(FieldError {
                        kind: Kind::Duplicate,
                        field: format!("{path}[{i}]"),
                        value: Value::Object(key),
                        detail: String::new(),
                    });
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
