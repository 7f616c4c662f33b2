//! One request to one response: the token checked first (nothing is served without it), then the
//! route, then the [`Source`] asked; every answer gets the security headers.

use std::sync::Arc;

use futures::StreamExt;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri, header};

use crate::auth::{self, Grant};
use crate::query;
use crate::respond::{self, Body, History, Kind};
use crate::routes::{self, Miss, Route};
use crate::source::Source;
use crate::streams::{self, Stop};

/// What every request's answer draws on.
pub(crate) struct Shared {
    /// Where the runs come from.
    pub(crate) source: Arc<dyn Source>,
    /// The token every request must carry, and its cookie's name.
    pub(crate) key: auth::Key,
    /// Ends the open streams when the server shuts down.
    pub(crate) stop: Stop,
}

/// The answer to `method uri` with `headers` (the request's body is never read).
pub(crate) async fn handle(shared: &Shared, method: &Method, uri: &Uri, headers: &HeaderMap) -> Response<Body> {
    let path = uri.path();
    let api = routes::is_api(path);
    let pairs = query::pairs(uri.query());
    let grant = auth::authorise(method, headers, query::get(&pairs, "token"), &shared.key);
    let Some(grant) = grant else {
        let mut response = respond::error(api, StatusCode::UNAUTHORIZED, auth::DENIED);
        respond::secure(&mut response, if api { Kind::Api } else { Kind::Static });
        return response;
    };
    let (mut response, kind) = match routes::route(method, path) {
        Ok(route) => answer(shared, route, &pairs).await,
        Err(miss) => (missed(api, miss, method, path), if api { Kind::Api } else { Kind::Static }),
    };
    respond::secure(&mut response, kind);
    if grant == Grant::Query && response.status().is_success() {
        let cookie = HeaderValue::from_str(&auth::set_cookie(&shared.key));
        if let Ok(cookie) = cookie {
            response.headers_mut().insert(header::SET_COOKIE, cookie);
        }
    }
    if *method == Method::HEAD {
        *response.body_mut() = respond::full("");
    }
    response
}

/// The answer to an authorised request for `route`.
async fn answer(shared: &Shared, route: Route, pairs: &[(String, String)]) -> (Response<Body>, Kind) {
    let source = &shared.source;
    let response = match route {
        Route::Page => return (respond::page(&shared.key.token), Kind::Page),
        Route::Asset(asset) => return (respond::asset(asset), Kind::Static),
        Route::Health => {
            respond::json(StatusCode::OK, &serde_json::json!({ "ok": true, "version": env!("CARGO_PKG_VERSION") }))
        }
        Route::Runs => match query::run_query(pairs) {
            Ok(run_query) => ok_json(source.runs(&run_query).await),
            Err(message) => respond::error(true, StatusCode::BAD_REQUEST, &message),
        },
        Route::Run(id) => ok_json(source.run(&id).await),
        Route::Logs(id) => match source.logs(&id, false).await {
            Ok(mut events) => {
                let mut history = History::default();
                while let Some(event) = events.next().await {
                    if history.push(event) {
                        break;
                    }
                }
                respond::json(StatusCode::OK, &history.into_json())
            }
            Err(e) => respond::source_error(true, &e),
        },
        Route::LogStream(id) => {
            let follow = query::get(pairs, "follow").is_none_or(|v| v != "0" && v != "false");
            match source.logs(&id, follow).await {
                Ok(events) => streams::logs(events, shared.stop.clone()),
                Err(e) => respond::source_error(true, &e),
            }
        }
        Route::Events => streams::changes(source.clone(), shared.stop.clone()),
        Route::Capacity => ok_json(source.capacity().await),
        Route::Cancel(id) => ok_json(source.cancel(&id).await),
    };
    (response, Kind::Api)
}

/// 200 with the JSON of `answer`, or the status of its error.
fn ok_json<T: serde::Serialize>(answer: Result<T, crate::SourceError>) -> Response<Body> {
    match answer {
        Ok(value) => respond::json(StatusCode::OK, &value),
        Err(e) => respond::source_error(true, &e),
    }
}

/// 404 or 405 (with `Allow`).
fn missed(api: bool, miss: Miss, method: &Method, path: &str) -> Response<Body> {
    match miss {
        Miss::NotFound => respond::error(api, StatusCode::NOT_FOUND, &format!("theseus ui: nothing at `{path}`")),
        Miss::Method(allow) => {
            let message = format!("theseus ui: `{path}` answers {allow}, not {method}");
            let mut response = respond::error(api, StatusCode::METHOD_NOT_ALLOWED, &message);
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
            response
        }
    }
}
