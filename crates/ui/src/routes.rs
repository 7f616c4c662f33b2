//! What a request asks for: its method and path as a [`Route`], or why none fits (404, 405).
//! Path segments are percent-decoded one by one, so a run name holding `%2F` stays one segment.
//! Pure: no IO (checked by `cargo xtask tidy`).

use http::Method;

use crate::assets::Asset;
use crate::query::percent_decode;

/// A page, an asset or an API call, with the run it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET /`, `/runs/{id}`, `/capacity`: `index.html`.
    Page,
    /// `GET /assets/{name}`.
    Asset(Asset),
    /// `GET /api/health`.
    Health,
    /// `GET /api/runs`.
    Runs,
    /// `GET /api/runs/{id}`.
    Run(String),
    /// `GET /api/runs/{id}/logs`.
    Logs(String),
    /// `GET /api/runs/{id}/logs/stream`.
    LogStream(String),
    /// `GET /api/events`.
    Events,
    /// `GET /api/capacity`.
    Capacity,
    /// `POST /api/runs/{id}/cancel`.
    Cancel(String),
}

/// Why no route fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// No such path (404).
    NotFound,
    /// The path exists for other methods (405), listed for `Allow`.
    Method(&'static str),
}

/// The route of `method path` (`path` without the query).
pub(crate) fn route(method: &Method, path: &str) -> Result<Route, Miss> {
    let Some(rest) = path.strip_prefix('/') else { return Err(Miss::NotFound) };
    let segments: Vec<String> = if rest.is_empty() { Vec::new() } else { rest.split('/').map(decode).collect() };
    if segments.iter().any(String::is_empty) {
        return Err(Miss::NotFound);
    }
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    let (found, post) = match parts.as_slice() {
        [] | ["capacity"] | ["runs", _] => (Route::Page, false),
        ["assets", name] => (Route::Asset(Asset::named(name).ok_or(Miss::NotFound)?), false),
        ["api", "health"] => (Route::Health, false),
        ["api", "runs"] => (Route::Runs, false),
        ["api", "runs", id] => (Route::Run((*id).to_owned()), false),
        ["api", "runs", id, "logs"] => (Route::Logs((*id).to_owned()), false),
        ["api", "runs", id, "logs", "stream"] => (Route::LogStream((*id).to_owned()), false),
        ["api", "runs", id, "cancel"] => (Route::Cancel((*id).to_owned()), true),
        ["api", "events"] => (Route::Events, false),
        ["api", "capacity"] => (Route::Capacity, false),
        _ => return Err(Miss::NotFound),
    };
    match (post, method) {
        (true, &Method::POST) => Ok(found),
        (true, _) => Err(Miss::Method("POST")),
        (false, &Method::GET | &Method::HEAD) => Ok(found),
        (false, _) => Err(Miss::Method("GET, HEAD")),
    }
}

/// Whether `path` is under `/api/` (answered in JSON, errors included).
pub(crate) fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/")
}

fn decode(segment: &str) -> String {
    percent_decode(segment, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Result<Route, Miss> {
        route(&Method::GET, path)
    }

    #[test]
    fn pages_assets_and_api() {
        assert_eq!(get("/"), Ok(Route::Page));
        assert_eq!(get("/capacity"), Ok(Route::Page));
        assert_eq!(get("/runs/abc"), Ok(Route::Page));
        assert_eq!(get("/assets/app.js"), Ok(Route::Asset(Asset::Script)));
        assert_eq!(get("/api/health"), Ok(Route::Health));
        assert_eq!(get("/api/runs"), Ok(Route::Runs));
        assert_eq!(get("/api/runs/r1"), Ok(Route::Run("r1".into())));
        assert_eq!(get("/api/runs/r1/logs"), Ok(Route::Logs("r1".into())));
        assert_eq!(get("/api/runs/r1/logs/stream"), Ok(Route::LogStream("r1".into())));
        assert_eq!(get("/api/events"), Ok(Route::Events));
        assert_eq!(get("/api/capacity"), Ok(Route::Capacity));
        assert_eq!(route(&Method::POST, "/api/runs/r1/cancel"), Ok(Route::Cancel("r1".into())));
        assert_eq!(route(&Method::HEAD, "/api/health"), Ok(Route::Health));
    }

    #[test]
    fn run_ids_are_decoded_per_segment() {
        assert_eq!(get("/api/runs/my%20run"), Ok(Route::Run("my run".into())));
        assert_eq!(get("/api/runs/a%2Fb/logs"), Ok(Route::Logs("a/b".into())));
        assert_eq!(get("/api/runs/a+b"), Ok(Route::Run("a+b".into())));
    }

    #[test]
    fn unknown_paths_and_wrong_methods() {
        for path in ["", "/x", "/api", "/api/", "/api/runs/", "/api/runs//logs", "/runs", "/runs/a/b", "/assets/x.js"] {
            assert_eq!(get(path), Err(Miss::NotFound), "{path}");
        }
        assert_eq!(get("/assets/../Cargo.toml"), Err(Miss::NotFound));
        assert_eq!(get("/api/runs/r1/cancel"), Err(Miss::Method("POST")));
        assert_eq!(route(&Method::POST, "/api/runs"), Err(Miss::Method("GET, HEAD")));
        assert_eq!(route(&Method::DELETE, "/api/runs/r1"), Err(Miss::Method("GET, HEAD")));
        assert_eq!(route(&Method::POST, "/nowhere"), Err(Miss::NotFound));
    }

    #[test]
    fn api_paths() {
        assert!(is_api("/api/health"));
        assert!(is_api("/api"));
        assert!(!is_api("/apix"));
        assert!(!is_api("/runs/api"));
    }
}
