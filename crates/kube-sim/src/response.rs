//! The simulator's HTTP responses: the body type every handler returns, and the JSON, text,
//! Status-error and streaming responses built on it.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::status::ApiError;

/// The body of every response.
pub(crate) type Body = BoxBody<Bytes, std::io::Error>;

/// A JSON response.
pub(crate) fn json_response(code: StatusCode, value: &Value) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::from(value.to_string())));
    *resp.status_mut() = code;
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    resp
}

/// A `text/plain` response.
pub(crate) fn text(code: StatusCode, body: Bytes) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = code;
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
    resp
}

pub(crate) fn error_response(err: &ApiError) -> Response<Body> {
    let code = StatusCode::from_u16(err.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(code, &err.to_status());
    if let Some(secs) = err.retry_after
        && let Ok(value) = header::HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, value);
    }
    resp
}

pub(crate) fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// A chunked body fed by a channel; it ends when the sender is dropped.
pub(crate) fn stream_body(mut rx: mpsc::Receiver<Bytes>) -> Body {
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b)))));
    BodyExt::boxed(StreamBody::new(stream))
}
