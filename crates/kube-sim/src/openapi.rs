//! `/openapi/v3`: the discovery index of OpenAPI v3 documents and one document per group
//! version, as the API server serves them (`kube-openapi/pkg/handler3`), so that a real client
//! can find out what the server validates: kubectl's `--validate=strict` looks for the
//! `fieldValidation` parameter on the PATCH operation tagged with the object's
//! `x-kubernetes-group-version-kind` (`cli-runtime/pkg/resource/query_param_verifier_v3.go`)
//! and, when it is there, leaves validation to the server (`schema`, `admission`).
//!
//! Still different: the custom resources' schemas are the vendored CRDs' (as upstream builds
//! them, `apiextensions-apiserver/pkg/controller/openapi/builder`), but core types carry no
//! schema (their paths and operations only); no `/openapi/v2`.

use serde_json::{Map, Value, json};

use crate::discovery::{RESOURCES, ResourceInfo};

/// The group versions served, as `api/v1` or `apis/<group>/<version>`.
fn group_versions() -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in RESOURCES {
        let gv =
            if r.group.is_empty() { format!("api/{}", r.version) } else { format!("apis/{}/{}", r.group, r.version) };
        if !out.contains(&gv) {
            out.push(gv);
        }
    }
    out
}

/// `GET /openapi/v3`.
pub(crate) fn index() -> Value {
    let paths: Map<String, Value> = group_versions()
        .into_iter()
        .map(|gv| {
            let url = format!("/openapi/v3/{gv}?hash={}", hash(&gv));
            (gv, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// A stable tag for a document (the API server's is its content hash; clients only echo it).
fn hash(gv: &str) -> String {
    let sum = gv.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{sum:016X}")
}

/// `GET /openapi/v3/<gv>`, or `None` for a group version that is not served.
pub(crate) fn document(gv: &str) -> Option<Value> {
    let resources: Vec<&ResourceInfo> = RESOURCES
        .iter()
        .filter(|r| {
            let own = if r.group.is_empty() {
                format!("api/{}", r.version)
            } else {
                format!("apis/{}/{}", r.group, r.version)
            };
            own == gv
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for r in resources {
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let schema_name = schema_name(r);
        let reference = json!({"$ref": format!("#/components/schemas/{schema_name}")});
        let write_params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ]);
        let op = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", r.kind),
                "parameters": write_params,
                "requestBody": {"content": {"application/json": {"schema": reference}}},
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        let base = format!("/{gv}");
        let collection = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{base}/{}", r.plural)
        };
        paths.insert(collection.clone(), json!({"post": op("post")}));
        paths.insert(format!("{collection}/{{name}}"), json!({"put": op("put"), "patch": op("patch")}));
        let schema = crate::schema::schema_of(r).cloned().unwrap_or_else(|| json!({"type": "object"}));
        let mut schema = schema;
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name, schema);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::version()["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `io.k8s.api.core.v1.Pod` for core types, `sh.volcano.batch.v1alpha1.Job` for the rest
/// (upstream reverses a custom resource's group).
fn schema_name(r: &ResourceInfo) -> String {
    if r.group.is_empty() {
        return format!("io.k8s.api.core.{}.{}", r.version, r.kind);
    }
    let reversed: Vec<&str> = r.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), r.version, r.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_points_at_one_document_per_group_version_with_patch_operations() {
        let index = index();
        let url = index["paths"]["apis/batch.volcano.sh/v1alpha1"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with("/openapi/v3/apis/batch.volcano.sh/v1alpha1?hash="));
        let doc = document("apis/batch.volcano.sh/v1alpha1").unwrap();
        let patch = &doc["paths"]["/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Job");
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        let schema = &doc["components"]["schemas"]["sh.volcano.batch.v1alpha1.Job"];
        assert!(schema["properties"]["spec"]["properties"]["tasks"].is_object(), "the CRD's schema");
        assert!(document("apis/nowhere/v1").is_none());
        assert!(
            document("api/v1").unwrap()["paths"]["/api/v1/namespaces/{namespace}/secrets/{name}"]["patch"].is_object()
        );
    }
}
