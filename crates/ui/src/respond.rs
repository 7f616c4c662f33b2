//! Responses: JSON and error bodies, the pages and assets, the security headers every answer
//! carries, the statuses of [`SourceError`]s, and the capped history of `/logs`.
//! Pure: no IO (checked by `cargo xtask tidy`).

use std::collections::VecDeque;
use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use theseus_core::backend::LogLine;

use crate::api::LogEvent;
use crate::assets::{self, Asset};
use crate::source::SourceError;

/// Every response's body: whole, or a stream of events.
pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The most lines `GET /api/runs/{id}/logs` returns (the last ones).
pub(crate) const MAX_LOG_LINES: usize = 200_000;

/// What pages may load: their own scripts, styles and images only (no inline code).
const PAGE_POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
                           connect-src 'self'; frame-ancestors 'none'";

/// Which headers an answer gets beyond the common ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// JSON or events under `/api/`: never stored.
    Api,
    /// The page (it carries the token): the content policy, never stored.
    Page,
    /// An asset or an error page: the content policy, revalidated before reuse.
    Static,
}

/// `text` as a whole body.
pub(crate) fn full(text: impl Into<Bytes>) -> Body {
    Full::new(text.into()).boxed_unsync()
}

/// A response of `status` with `body` of `content_type`.
pub(crate) fn with_body(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// `value` as JSON.
pub(crate) fn json(status: StatusCode, value: &impl serde::Serialize) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(body) => with_body(status, "application/json", full(body)),
        Err(e) => error(true, StatusCode::INTERNAL_SERVER_ERROR, &format!("cannot encode the answer as JSON: {e}")),
    }
}

/// An error: `{"error": message}` under `/api/`, a small HTML page elsewhere.
pub(crate) fn error(api: bool, status: StatusCode, message: &str) -> Response<Body> {
    let message = one_line(message);
    if api {
        json(status, &serde_json::json!({ "error": message }))
    } else {
        let html = format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>theseus ui: {}</title></head>\
             <body><p>{}</p></body></html>\n",
            status.as_u16(),
            assets::escape_html(&message)
        );
        with_body(status, "text/html; charset=utf-8", full(html))
    }
}

/// The status and one-line message of a source's error.
pub(crate) fn source_error(api: bool, err: &SourceError) -> Response<Body> {
    let status = match err {
        SourceError::NotFound(_) => StatusCode::NOT_FOUND,
        SourceError::BadRequest(_) => StatusCode::BAD_REQUEST,
        SourceError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(api, status, &err.to_string())
}

/// `index.html` with the token.
pub(crate) fn page(token: &str) -> Response<Body> {
    with_body(StatusCode::OK, "text/html; charset=utf-8", full(assets::index_html(token)))
}

/// An embedded asset.
pub(crate) fn asset(asset: Asset) -> Response<Body> {
    with_body(StatusCode::OK, asset.content_type(), full(asset.body()))
}

/// Adds the headers every answer carries, and those of its kind.
pub(crate) fn secure(response: &mut Response<Body>, kind: Kind) {
    let headers = response.headers_mut();
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    if kind != Kind::Api {
        headers.insert("content-security-policy", HeaderValue::from_static(PAGE_POLICY));
    }
    let cache = if kind == Kind::Static { "no-cache" } else { "no-store" };
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
}

/// A run's output as `/logs` answers it: the last [`MAX_LOG_LINES`] lines and how it ended.
#[derive(Debug, Default)]
pub(crate) struct History {
    lines: VecDeque<LogLine>,
    truncated: bool,
    end: Option<serde_json::Value>,
    error: Option<String>,
}

impl History {
    /// Takes one event; true when it is the last (`end`, `error`). Notes are not lines.
    pub(crate) fn push(&mut self, event: LogEvent) -> bool {
        match event {
            LogEvent::Line(line) => {
                if self.lines.len() == MAX_LOG_LINES {
                    self.lines.pop_front();
                    self.truncated = true;
                }
                self.lines.push_back(line);
                false
            }
            LogEvent::Note { .. } => false,
            LogEvent::End { state, exit_code } => {
                self.end = Some(serde_json::json!({ "state": state, "exit_code": exit_code }));
                true
            }
            LogEvent::Error { error } => {
                self.error = Some(error);
                true
            }
        }
    }

    /// `{"lines", "end", "truncated"}`, and `"error"` when the history broke off.
    pub(crate) fn into_json(self) -> serde_json::Value {
        let mut out = serde_json::json!({ "lines": self.lines, "end": self.end, "truncated": self.truncated });
        if let Some(error) = self.error {
            out["error"] = serde_json::Value::String(error);
        }
        out
    }
}

/// `text` on one line (a source's message should be one already).
fn one_line(text: &str) -> String {
    text.split(['\n', '\r']).map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use theseus_core::backend::JobState;

    use super::*;

    fn line(n: usize) -> LogEvent {
        LogEvent::Line(LogLine { rank: None, text: format!("line {n}"), source: None })
    }

    #[test]
    fn history_keeps_the_last_lines() {
        let mut history = History::default();
        for n in 0..MAX_LOG_LINES + 5 {
            assert!(!history.push(line(n)));
        }
        assert!(!history.push(LogEvent::Note { text: "waiting".into() }));
        assert!(history.push(LogEvent::End { state: JobState::Completed, exit_code: Some(0) }));
        let json = history.into_json();
        let lines = json["lines"].as_array().unwrap();
        assert_eq!(lines.len(), MAX_LOG_LINES);
        assert_eq!(lines[0]["text"], "line 5");
        assert_eq!(lines[MAX_LOG_LINES - 1]["text"], format!("line {}", MAX_LOG_LINES + 4));
        assert_eq!(json["truncated"], true);
        assert_eq!(json["end"], serde_json::json!({"state": "completed", "exit_code": 0}));
        assert!(json.get("error").is_none());
    }

    #[test]
    fn history_without_end_or_with_error() {
        let mut history = History::default();
        history.push(line(1));
        let json = History::default().into_json();
        assert_eq!(json, serde_json::json!({"lines": [], "end": null, "truncated": false}));
        assert!(history.push(LogEvent::Error { error: "host gone".into() }));
        let json = history.into_json();
        assert_eq!(json["lines"].as_array().unwrap().len(), 1);
        assert_eq!(json["error"], "host gone");
        assert_eq!(json["end"], serde_json::Value::Null);
    }

    #[test]
    fn errors_are_one_line_and_escaped() {
        assert_eq!(one_line("a\n  b\r\n\nc"), "a b c");
        let response = error(false, StatusCode::NOT_FOUND, "<x>");
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        let response = source_error(true, &SourceError::BadRequest("bad".into()));
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(source_error(true, &SourceError::NotFound("r".into())).status(), StatusCode::NOT_FOUND);
        assert_eq!(source_error(true, &SourceError::Failed("x".into())).status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn security_headers_by_kind() {
        let mut response = page("t");
        secure(&mut response, Kind::Page);
        let h = response.headers();
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "no-referrer");
        assert_eq!(h["x-frame-options"], "DENY");
        assert!(h["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
        assert_eq!(h[header::CACHE_CONTROL], "no-store");
        let mut response = json(StatusCode::OK, &1);
        secure(&mut response, Kind::Api);
        assert!(response.headers().get("content-security-policy").is_none());
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
    }
}
