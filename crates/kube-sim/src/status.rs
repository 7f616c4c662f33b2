//! API errors as the apiserver reports them: `metav1.Status` bodies with a reason and a code.

use serde_json::{Value, json};

/// A failed API call, rendered as a `metav1.Status` body (kube-rs turns it into `kube::Error::Api`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// HTTP status code, also the Status `code`.
    pub code: u16,
    /// The Status `reason` (`NotFound`, `AlreadyExists`, `Conflict`, ...).
    pub reason: &'static str,
    /// Human-readable message, worded like the apiserver's.
    pub message: String,
    /// `details.name` and `details.kind`, when the error is about one object.
    pub details: Option<(String, String)>,
    /// `Retry-After` seconds for 429 responses.
    pub retry_after: Option<u64>,
    /// `details.group` and `details.causes` of a `422 Invalid` about a custom resource.
    pub invalid: Option<Box<InvalidDetails>>,
}

/// The details of a `422 Invalid` (boxed: most errors have none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidDetails {
    /// `details.group`.
    pub group: String,
    /// `details.causes`: one per field error.
    pub causes: Vec<Cause>,
}

/// One `details.causes` entry (`metav1.StatusCause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, ...
    pub reason: &'static str,
    /// The field error without its path.
    pub message: String,
    /// The field path (`spec.tasks[0].replicas`).
    pub field: String,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None, retry_after: None, invalid: None }
    }

    /// 404 for one object: `pods "x" not found`.
    pub fn not_found(resource: &str, name: &str) -> Self {
        let mut e = Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"));
        e.details = Some((name.to_owned(), resource.to_owned()));
        e
    }

    /// 404 for a path the server does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(404, "NotFound", format!("the server could not find the requested resource ({path})"))
    }

    /// 409 on create of an existing name.
    pub fn already_exists(resource: &str, name: &str) -> Self {
        let mut e = Self::new(409, "AlreadyExists", format!("{resource} \"{name}\" already exists"));
        e.details = Some((name.to_owned(), resource.to_owned()));
        e
    }

    /// 409 on an update with a stale `resourceVersion`.
    pub fn conflict(resource: &str, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again"
            ),
        );
        e.details = Some((name.to_owned(), resource.to_owned()));
        e
    }

    /// 400 for a malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 422 for an object that fails validation.
    pub fn invalid(resource: &str, name: &str, message: impl Into<String>) -> Self {
        let mut e = Self::new(422, "Invalid", message);
        e.details = Some((name.to_owned(), resource.to_owned()));
        e
    }

    /// 401 for a request without a known bearer token.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 for a request RBAC does not allow; `message` is the whole sentence.
    pub fn forbidden(resource: &str, name: &str, message: String) -> Self {
        let mut e = Self::new(403, "Forbidden", message);
        e.details = Some((name.to_owned(), resource.split('.').next().unwrap_or(resource).to_owned()));
        e
    }

    /// A validating admission webhook's denial: `400`, no reason, the webhook named
    /// (`apiserver/pkg/admission/plugin/webhook/errors/statuserror.go`, `ToStatusErr`).
    pub fn webhook_denied(webhook: &str, message: &str) -> Self {
        Self::new(400, "", format!("admission webhook {webhook:?} denied the request: {message}"))
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 415 for a patch type the simulator does not implement.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format: {content_type}"),
        )
    }

    /// 410 for a watch that resumes from a compacted `resourceVersion`.
    pub fn gone(requested: u64, oldest: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {requested} ({oldest})"))
    }

    /// 410 for a LIST whose `continue` token's `resourceVersion` was compacted.
    pub fn continue_expired() -> Self {
        Self::new(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a \
             new list without the continue parameter.",
        )
    }

    /// 501 for an endpoint the simulator knows about but does not serve (yet).
    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(501, "NotImplemented", message)
    }

    /// An injected fault: 429 gets `TooManyRequests` and a `Retry-After`, anything else `InternalError`.
    pub fn injected(code: u16, retry_after: Option<u64>) -> Self {
        let reason = match code {
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        let mut e = Self::new(code, reason, format!("injected fault: HTTP {code}"));
        e.retry_after = retry_after;
        e
    }

    /// The `metav1.Status` JSON body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((name, kind)) = &self.details {
            status["details"] = json!({ "name": name, "kind": kind });
            if let Some(invalid) = &self.invalid {
                status["details"]["group"] = json!(invalid.group);
                let causes: Vec<Value> = invalid
                    .causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                status["details"]["causes"] = Value::Array(causes);
            }
        }
        if let Some(secs) = self.retry_after {
            status["details"]["retryAfterSeconds"] = json!(secs);
        }
        status
    }
}

/// Shorthand used across the crate.
pub(crate) type Result<T, E = ApiError> = std::result::Result<T, E>;
