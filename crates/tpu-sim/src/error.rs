//! Google's error model on the wire: the JSON error body of a failed REST call
//! (`{"error": {"code", "message", "status", "details"}}`, the JSON mapping of
//! `google.rpc.Status` with the HTTP code in `code`, as googleapis' `google/rpc/status.proto`
//! and AIP-193 describe it), and the `google.rpc.Status` an operation ends with
//! (`code` is then the canonical code number of `google/rpc/code.proto`).

use serde_json::{Value, json};

/// A failed API call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    /// HTTP status.
    pub(crate) http: u16,
    /// Canonical code name (`google.rpc.Code`).
    pub(crate) status: &'static str,
    pub(crate) message: String,
    pub(crate) details: Vec<Value>,
}

/// The canonical code name and number for an HTTP status, as `google/rpc/code.proto` maps them.
pub(crate) fn canonical(http: u16) -> (&'static str, i32) {
    match http {
        400 => ("INVALID_ARGUMENT", 3),
        401 => ("UNAUTHENTICATED", 16),
        403 => ("PERMISSION_DENIED", 7),
        404 => ("NOT_FOUND", 5),
        409 => ("ALREADY_EXISTS", 6),
        429 => ("RESOURCE_EXHAUSTED", 8),
        499 => ("CANCELLED", 1),
        501 => ("UNIMPLEMENTED", 12),
        503 => ("UNAVAILABLE", 14),
        504 => ("DEADLINE_EXCEEDED", 4),
        _ => ("INTERNAL", 13),
    }
}

impl ApiError {
    pub(crate) fn new(http: u16, message: impl Into<String>) -> ApiError {
        ApiError { http, status: canonical(http).0, message: message.into(), details: Vec::new() }
    }

    /// 400 INVALID_ARGUMENT with a `google.rpc.BadRequest` naming the field.
    pub(crate) fn invalid(field: &str, message: impl Into<String>) -> ApiError {
        let message = message.into();
        let mut err = ApiError::new(400, message.clone());
        err.details.push(json!({
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"field": field, "description": message}],
        }));
        err
    }

    /// 400 FAILED_PRECONDITION (the resource is in the wrong state for the call).
    pub(crate) fn precondition(message: impl Into<String>) -> ApiError {
        ApiError { status: "FAILED_PRECONDITION", ..ApiError::new(400, message) }
    }

    pub(crate) fn not_found(what: &str) -> ApiError {
        ApiError::new(404, format!("Resource '{what}' was not found"))
    }

    /// 401 UNAUTHENTICATED as Google's front end answers, with the `ErrorInfo` reason
    /// (`CREDENTIALS_MISSING` or `ACCESS_TOKEN_EXPIRED`/`ACCESS_TOKEN_TYPE_UNSUPPORTED`).
    pub(crate) fn unauthenticated(reason: &str) -> ApiError {
        let mut err = ApiError::new(
            401,
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other \
             valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
        );
        err.details.push(json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "googleapis.com",
            "metadata": {"service": "tpu.googleapis.com", "method": "google.cloud.tpu.v2.Tpu"},
        }));
        err
    }

    /// 429 RESOURCE_EXHAUSTED for a create over the zone's quota, with `QuotaFailure` and
    /// `ErrorInfo` details.
    pub(crate) fn quota(project: &str, zone: &str, limit: u32, wanted: u32, used: u32) -> ApiError {
        let message = format!(
            "Quota limit 'TPUV2sPodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: {limit} in zone {zone} \
             (in use: {used}, requested: {wanted})."
        );
        let mut err = ApiError::new(429, message.clone());
        err.details.push(json!({
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{"subject": format!("projects/{project}/locations/{zone}"), "description": message}],
        }));
        err.details.push(json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "RESOURCE_QUOTA_EXCEEDED",
            "domain": "tpu.googleapis.com",
            "metadata": {"zone": zone, "project": project, "quota_limit_value": limit.to_string()},
        }));
        err
    }

    /// The JSON error body.
    pub(crate) fn body(&self) -> Value {
        json!({"error": {"code": self.http, "message": self.message, "status": self.status, "details": self.details}})
    }
}

/// The `google.rpc.Status` an operation ends with.
pub(crate) fn rpc_status(code: i32, message: &str) -> Value {
    json!({"code": code, "message": message})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_google_shape() {
        let body = ApiError::invalid("node.accelerator_type", "bad").body();
        assert_eq!(body["error"]["code"], 400);
        assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
        assert_eq!(body["error"]["details"][0]["fieldViolations"][0]["field"], "node.accelerator_type");
        let q = ApiError::quota("p", "z", 8, 32, 0).body();
        assert_eq!(
            (q["error"]["code"].as_u64(), q["error"]["status"].as_str()),
            (Some(429), Some("RESOURCE_EXHAUSTED"))
        );
        assert_eq!(q["error"]["details"][0]["@type"], "type.googleapis.com/google.rpc.QuotaFailure");
        assert_eq!(ApiError::precondition("x").status, "FAILED_PRECONDITION");
        assert_eq!(canonical(401), ("UNAUTHENTICATED", 16));
    }
}
