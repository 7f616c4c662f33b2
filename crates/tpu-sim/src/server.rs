//! The HTTPS front: TLS, then one request at a time per connection (HTTP/1.1): `/v2/...`
//! (bearer token required, request log and injected faults apply), `POST /token` (the OAuth2
//! token endpoint, logged, faults apply), `/sim/v1/...` (admin, neither logged nor faulted).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::Shared;
use crate::error::ApiError;
use crate::faults::Injected;

/// Accepts connections until the task is aborted.
pub(crate) async fn accept_loop(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    acceptor: tokio_rustls::TlsAcceptor,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let (shared, acceptor) = (shared.clone(), acceptor.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(stream).await else { return };
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { handle(&shared, req).await }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn json_response(status: u16, body: &Value) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json; charset=UTF-8"));
    resp
}

/// Decodes `a=b&c=d` (form bodies and queries), `+` and `%XX` included.
pub(crate) fn form_decode(text: &str) -> HashMap<String, String> {
    fn unescape(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => match s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                },
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (unescape(k), unescape(v)),
            None => (unescape(p), String::new()),
        })
        .collect()
}

/// Serves one request; an `Err` (an injected reset) closes the connection without an answer.
async fn handle(shared: &Arc<Shared>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let path_and_query = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| path.clone());
    let query = form_decode(req.uri().query().unwrap_or(""));
    let authorization = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(json_response(400, &ApiError::new(400, "cannot read the request body").body())),
    };
    if path.starts_with("/sim/v1/") {
        return Ok(match crate::admin::route(shared, &method, &path, &body).await {
            Ok((status, value)) => json_response(status, &value),
            Err(err) => json_response(err.http, &err.body()),
        });
    }
    // The API's own latency, a few tens of milliseconds per call.
    if !shared.config.latency.is_zero() {
        tokio::time::sleep(shared.config.latency).await;
    }
    let flaky = path.starts_with("/v2/") && shared.faults.flaky_hit(method.as_str());
    let injected = if flaky { None } else { shared.faults.take_request(method.as_str(), &path_and_query) };
    let (status, value) = if flaky {
        (503, ApiError::new(503, "The service is currently unavailable.").body())
    } else if let Some(Injected::Reset) = injected {
        // Logged with status 0: no answer.
        shared.faults.record(method.as_str(), &path_and_query, 0);
        return Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected connection reset"));
    } else if let Some(Injected::Status(status, message)) = injected {
        let mut err = ApiError::new(status, message);
        if status == 429 {
            err.details.push(serde_json::json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com"}));
        }
        (status, err.body())
    } else if path == "/token" && method == http::Method::POST {
        let form = form_decode(&String::from_utf8_lossy(&body));
        match shared.auth.token_endpoint(&form, &shared.token_uri) {
            Ok(reply) => (200, reply),
            Err((status, reply)) => (status, reply),
        }
    } else if path.starts_with("/v2/") {
        let result = match shared.auth.check(authorization.as_deref()) {
            Ok(()) => crate::api::route(shared, &method, &path, &query, &body).await,
            Err(err) => Err(err),
        };
        match result {
            Ok(ok) => ok,
            Err(err) => (err.http, err.body()),
        }
    } else {
        let err = ApiError::new(404, format!("The requested URL {path} was not found on this server."));
        (404, err.body())
    };
    shared.faults.record(method.as_str(), &path_and_query, status);
    Ok(json_response(status, &value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_plus_and_percent() {
        let f = form_decode("grant_type=urn%3Aietf%3Aparams&scope=a+b&x=%zz&y=%4");
        assert_eq!(f["grant_type"], "urn:ietf:params");
        assert_eq!(f["scope"], "a b");
        assert_eq!(f["x"], "%zz");
        assert_eq!(f["y"], "%4");
    }
}
