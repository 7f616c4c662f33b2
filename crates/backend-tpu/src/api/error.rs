//! The TPU backend's errors ([`TpuError`]) and the reading of Google's error JSON
//! (`{"error": {"code", "message", "status", "details"}}`, googleapis `google/rpc/status.proto`
//! and `google/rpc/error_details.proto`) into one clear line that says what to do.
//! Pure: no IO (checked by `cargo xtask tidy`).

use serde::Deserialize;
use serde_json::Value;

use super::types::{Status, code};

/// What kind of failure an error is, for callers that act on it (retry, recreate, refuse).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The resource does not exist (404 `NOT_FOUND`).
    NotFound,
    /// The resource exists already (409 `ALREADY_EXISTS`).
    AlreadyExists,
    /// A quota of the project is used up (429 `RESOURCE_EXHAUSTED` with a quota detail).
    Quota,
    /// The zone has no capacity now (an operation ended with code 8).
    Stockout,
    /// The account may not do this (403 `PERMISSION_DENIED`).
    PermissionDenied,
    /// The token was refused (401 `UNAUTHENTICATED`).
    Unauthenticated,
    /// The request is wrong (400 `INVALID_ARGUMENT`, `FAILED_PRECONDITION`, ...).
    Invalid,
    /// Worth another try later: rate limits (429 without a quota detail), 500, 502, 503, 504,
    /// lost connections and timeouts.
    Transient,
    /// No credentials, or a credential file that cannot be used.
    Credentials,
    /// theseus refused (creation not confirmed, a VM it did not create).
    Refused,
    /// Anything else.
    Other,
}

/// An error of the TPU backend: one line saying what failed and what to do. It never holds a
/// token, a key or a request's headers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TpuError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// The line shown to the user.
    pub message: String,
}

impl TpuError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> TpuError {
        TpuError { kind, message: message.into() }
    }

    /// Whether another attempt may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Transient
    }
}

impl From<TpuError> for theseus_core::Error {
    fn from(e: TpuError) -> Self {
        theseus_core::Error::backend("tpu", e.message)
    }
}

/// What a request was doing, for the error's words.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// e.g. `create TPU VM my-tpu`.
    pub action: String,
    /// The project.
    pub project: String,
    /// The zone.
    pub zone: String,
    /// The accelerator type, when the request is about one (`v4-8`).
    pub accelerator_type: String,
}

#[derive(Deserialize)]
struct Envelope {
    error: ErrorBody,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    code: i32,
    message: String,
    status: String,
    details: Vec<Value>,
}

/// The longest part of Google's own message kept in a line.
const MAX_MESSAGE: usize = 400;

/// Google's message on one line, shortened.
fn one_line(text: &str) -> String {
    let mut line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push_str("...");
    }
    line
}

/// The family of an accelerator type for quota words: `v4-32` → `TPU v4`.
fn family(accelerator_type: &str) -> String {
    match accelerator_type.rsplit_once('-') {
        Some((generation, _)) if !generation.is_empty() => format!("TPU {generation}"),
        _ => "TPU".to_owned(),
    }
}

/// Whether `details` say a quota was used up (a `QuotaFailure`, or an `ErrorInfo` whose reason
/// names a quota and is not a per-minute rate limit).
fn is_quota(details: &[Value]) -> bool {
    details.iter().any(|d| {
        let kind = d.get("@type").and_then(Value::as_str).unwrap_or_default();
        let reason = d.get("reason").and_then(Value::as_str).unwrap_or_default().to_ascii_uppercase();
        kind.ends_with("google.rpc.QuotaFailure")
            || (kind.ends_with("google.rpc.ErrorInfo") && reason.contains("QUOTA") && !reason.contains("RATE_LIMIT"))
    })
}

/// Reads an HTTP error answer of the API into a [`TpuError`]. `body` is Google's error JSON
/// (anything else is shown shortened).
pub fn from_response(http: u16, body: &[u8], ctx: &Context) -> TpuError {
    let parsed: Option<ErrorBody> = serde_json::from_slice::<Envelope>(body).ok().map(|e| e.error);
    let (status, message, details) = match parsed {
        Some(b) => (b.status, one_line(&b.message), b.details),
        None => (String::new(), one_line(&String::from_utf8_lossy(body)), Vec::new()),
    };
    let detail = if message.is_empty() { format!("HTTP {http}") } else { message };
    let Context { action, project, zone, accelerator_type } = ctx;
    match (http, status.as_str()) {
        (429, _) | (_, "RESOURCE_EXHAUSTED") if is_quota(&details) => {
            // The quota's own name and numbers are in Google's message; its `QuotaFailure`
            // subject is a resource path, not words for the user.
            let what = format!("{} cores", family(accelerator_type));
            TpuError::new(
                ErrorKind::Quota,
                format!(
                    "quota exceeded for {what} in {zone} of project {project}: {detail}; ask for more quota (console: IAM & Admin > Quotas) or use a smaller accelerator_type or another zone"
                ),
            )
        }
        (429, _) | (_, "RESOURCE_EXHAUSTED") => TpuError::new(
            ErrorKind::Transient,
            format!("the Cloud TPU API is rate-limiting requests ({action}): {detail}; try again in a minute"),
        ),
        (401, _) | (_, "UNAUTHENTICATED") => TpuError::new(
            ErrorKind::Unauthenticated,
            format!(
                "the Cloud TPU API refused the Google credentials ({action}): {detail}; run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS to a valid service-account key file"
            ),
        ),
        (403, _) | (_, "PERMISSION_DENIED") => TpuError::new(
            ErrorKind::PermissionDenied,
            format!(
                "permission denied to {action} in project {project}: {detail}; the account needs the IAM role roles/tpu.admin on the project (and the Cloud TPU API enabled: `gcloud services enable tpu.googleapis.com`)"
            ),
        ),
        (404, _) | (_, "NOT_FOUND") => TpuError::new(ErrorKind::NotFound, format!("not found ({action}): {detail}")),
        (409, _) | (_, "ALREADY_EXISTS") => {
            TpuError::new(ErrorKind::AlreadyExists, format!("already exists ({action}): {detail}"))
        }
        (500 | 502 | 503 | 504, _) | (_, "UNAVAILABLE") => TpuError::new(
            ErrorKind::Transient,
            format!("the Cloud TPU API failed (HTTP {http}) to {action}: {detail}; try again later"),
        ),
        (400, _) | (_, "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE") => TpuError::new(
            ErrorKind::Invalid,
            format!("the Cloud TPU API refused to {action} in {zone} of project {project}: {detail}"),
        ),
        _ => TpuError::new(ErrorKind::Other, format!("the Cloud TPU API failed (HTTP {http}) to {action}: {detail}")),
    }
}

/// Reads the error of a finished long-running operation (or of a failed queued resource).
pub fn from_status(status: &Status, ctx: &Context) -> TpuError {
    let detail = one_line(&status.message);
    let Context { action, project, zone, accelerator_type } = ctx;
    match status.code {
        code::RESOURCE_EXHAUSTED if is_quota(&status.details) => {
            let what = format!("{} cores", family(accelerator_type));
            TpuError::new(
                ErrorKind::Quota,
                format!(
                    "quota exceeded for {what} in {zone} of project {project}: {detail}; ask for more quota (console: IAM & Admin > Quotas) or use a smaller accelerator_type or another zone"
                ),
            )
        }
        code::RESOURCE_EXHAUSTED => TpuError::new(
            ErrorKind::Stockout,
            format!(
                "no capacity for {accelerator_type} in {zone} now (Google: {detail}); try again later, another zone, or spot (`--tpu-spot`) to queue for capacity"
            ),
        ),
        code::PERMISSION_DENIED => TpuError::new(
            ErrorKind::PermissionDenied,
            format!(
                "permission denied to {action} in project {project}: {detail}; the account needs the IAM role roles/tpu.admin on the project"
            ),
        ),
        code::NOT_FOUND => TpuError::new(ErrorKind::NotFound, format!("not found ({action}): {detail}")),
        code::ALREADY_EXISTS => TpuError::new(ErrorKind::AlreadyExists, format!("already exists ({action}): {detail}")),
        code::UNAVAILABLE => TpuError::new(ErrorKind::Transient, format!("{action} failed: {detail}; try again later")),
        _ => TpuError::new(ErrorKind::Other, format!("{action} failed in {zone} of project {project}: {detail}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Context {
        Context {
            action: "create TPU VM t".into(),
            project: "p".into(),
            zone: "us-central2-b".into(),
            accelerator_type: "v4-32".into(),
        }
    }

    fn answer(http: u16, body: Value) -> TpuError {
        from_response(http, body.to_string().as_bytes(), &ctx())
    }

    #[test]
    fn quota_is_one_line_naming_family_zone_and_project() {
        let e = answer(
            429,
            json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota limit 'TPUV4PodPerProjectPerZoneForTPUAPI' exceeded.\n Limit: 8",
                "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"subject": "projects/p/locations/us-central2-b", "description": "d"}]}]}}),
        );
        assert_eq!(e.kind, ErrorKind::Quota);
        assert!(
            e.message.starts_with("quota exceeded for TPU v4 cores in us-central2-b of project p: Quota limit"),
            "{e}"
        );
        assert!(!e.message.contains('\n'));
        let e = answer(
            429,
            json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "m",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "QUOTA_EXCEEDED"}]}}),
        );
        assert!(e.message.starts_with("quota exceeded for TPU v4 cores"), "{e}");
    }

    #[test]
    fn rate_limits_and_server_errors_are_transient() {
        let e = answer(
            429,
            json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "slow down",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED"}]}}),
        );
        assert!(e.is_transient());
        assert!(answer(503, json!({"error": {"code": 503, "status": "UNAVAILABLE", "message": "x"}})).is_transient());
        assert!(from_response(502, b"<html>bad gateway</html>", &ctx()).is_transient());
    }

    #[test]
    fn permission_denied_names_the_role() {
        let e = answer(
            403,
            json!({"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "Permission 'tpu.nodes.create' denied"}}),
        );
        assert_eq!(e.kind, ErrorKind::PermissionDenied);
        assert!(e.message.contains("roles/tpu.admin") && e.message.contains("tpu.nodes.create"), "{e}");
    }

    #[test]
    fn other_answers() {
        assert_eq!(
            answer(404, json!({"error": {"code": 404, "status": "NOT_FOUND", "message": "x"}})).kind,
            ErrorKind::NotFound
        );
        assert_eq!(
            answer(401, json!({"error": {"code": 401, "status": "UNAUTHENTICATED", "message": "x"}})).kind,
            ErrorKind::Unauthenticated
        );
        let e = answer(
            400,
            json!({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "Invalid acceleratorType"}}),
        );
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert!(e.message.contains("acceleratorType"));
        let long = "x".repeat(5000);
        assert!(from_response(418, long.as_bytes(), &ctx()).message.len() < 600);
    }

    #[test]
    fn a_failed_operation_with_code_8_is_a_stockout() {
        let status = Status {
            code: 8,
            message: "There is no more capacity in the zone \"us-central2-b\"".into(),
            details: vec![],
        };
        let e = from_status(&status, &ctx());
        assert_eq!(e.kind, ErrorKind::Stockout);
        assert!(
            e.message.starts_with("no capacity for v4-32 in us-central2-b now (Google: There is no more capacity"),
            "{e}"
        );
    }
}
