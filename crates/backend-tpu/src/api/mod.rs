//! A typed client of the Cloud TPU API v2 over HTTPS ([`Client`]): nodes, queued resources
//! and long-running operations of one project and zone, every request with a bearer token from
//! a [`TokenSource`], a per-request deadline, one retry with a fresh token after a 401, and
//! retries with backoff of rate limits and server errors. Google's error JSON becomes one line
//! ([`error`]).

pub mod error;
pub mod transport;
pub mod types;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use error::{Context, ErrorKind, TpuError};
pub use types::{ApiNode, NodeList, Operation, QueuedResource, Status};

use self::transport::Http;

/// Google's endpoint of the Cloud TPU API.
pub const GOOGLE_ENDPOINT: &str = "https://tpu.googleapis.com/";

/// An OAuth2 access token. Its `Debug` shows no part of it and it has no `Display`: the text
/// is read only to build the `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken(String);

impl AccessToken {
    /// Wraps the token text.
    pub fn new(text: impl Into<String>) -> AccessToken {
        AccessToken(text.into())
    }

    /// The token text (for the `Authorization` header only).
    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken(<redacted>)")
    }
}

/// Where the client gets its bearer tokens ([`crate::auth::Auth`], or a fixed token in tests).
#[async_trait::async_trait]
pub trait TokenSource: Send + Sync + fmt::Debug {
    /// A token valid for at least a minute.
    async fn token(&self) -> Result<AccessToken, TpuError>;

    /// Forgets `token` (the API refused it); the next [`TokenSource::token`] gets a new one.
    fn invalidate(&self, token: &AccessToken);
}

/// How many times and how patiently transient failures are tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all (1: no retry).
    pub attempts: u32,
    /// Wait before the second attempt; doubled each time.
    pub first_wait: Duration,
    /// Longest wait.
    pub max_wait: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry { attempts: 4, first_wait: Duration::from_secs(1), max_wait: Duration::from_secs(8) }
    }
}

/// The Cloud TPU API of one project and zone.
#[derive(Debug, Clone)]
pub struct Client {
    http: Http,
    /// `https://host/` (with the trailing slash).
    endpoint: String,
    project: String,
    zone: String,
    tokens: Arc<dyn TokenSource>,
    timeout: Duration,
    retry: Retry,
}

/// An HTTP method the client uses.
#[derive(Debug, Clone, Copy)]
enum Method {
    Get,
    Post,
    Delete,
}

impl Client {
    /// A client of `endpoint` (e.g. [`GOOGLE_ENDPOINT`]) for `project` and `zone`.
    pub fn new(
        http: Http,
        endpoint: &str,
        project: &str,
        zone: &str,
        tokens: Arc<dyn TokenSource>,
        timeout: Duration,
    ) -> Client {
        let mut endpoint = endpoint.trim().to_owned();
        if !endpoint.ends_with('/') {
            endpoint.push('/');
        }
        Client {
            http,
            endpoint,
            project: project.to_owned(),
            zone: zone.to_owned(),
            tokens,
            timeout,
            retry: Retry::default(),
        }
    }

    /// The same client with another retry policy.
    pub fn with_retry(mut self, retry: Retry) -> Client {
        self.retry = retry;
        self
    }

    /// The project.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The zone.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// `projects/P/locations/Z`.
    pub fn parent(&self) -> String {
        format!("projects/{}/locations/{}", self.project, self.zone)
    }

    /// A context for error words.
    pub fn context(&self, action: impl Into<String>, accelerator_type: &str) -> Context {
        Context {
            action: action.into(),
            project: self.project.clone(),
            zone: self.zone.clone(),
            accelerator_type: accelerator_type.to_owned(),
        }
    }

    /// `GET nodes/{id}`; `None` when there is no such node.
    ///
    /// # Errors
    /// Any failure but `NOT_FOUND`.
    pub async fn get_node(&self, id: &str) -> Result<Option<ApiNode>, TpuError> {
        let ctx = self.context(format!("get TPU VM {id}"), "");
        absent_is_none(
            self.call(Method::Get, &format!("{}/nodes/{id}", self.parent()), None::<&()>, &ctx).await,
            &self.zone,
        )
    }

    /// `GET nodes` with every page.
    ///
    /// # Errors
    /// Any failure.
    pub async fn list_nodes(&self) -> Result<Vec<ApiNode>, TpuError> {
        let ctx = self.context("list TPU VMs", "");
        let mut nodes = Vec::new();
        self.pages("nodes", &ctx, |page: NodeList| {
            nodes.extend(page.nodes);
            page.next_page_token
        })
        .await?;
        Ok(nodes)
    }

    /// `GET queuedResources` with every page.
    ///
    /// # Errors
    /// Any failure.
    pub async fn list_queued_resources(&self) -> Result<Vec<QueuedResource>, TpuError> {
        let ctx = self.context("list queued resources", "");
        let mut resources = Vec::new();
        self.pages("queuedResources", &ctx, |page: types::QueuedResourceList| {
            resources.extend(page.queued_resources);
            page.next_page_token
        })
        .await?;
        Ok(resources)
    }

    /// Reads every page of a list (`collection` under the parent); `take` keeps a page's
    /// items and returns its `nextPageToken`.
    async fn pages<P: DeserializeOwned>(
        &self,
        collection: &str,
        ctx: &Context,
        mut take: impl FnMut(P) -> String,
    ) -> Result<(), TpuError> {
        let mut token = String::new();
        // A page token that repeats would loop for ever: stop at a generous page count.
        for _ in 0..1000 {
            let mut path = format!("{}/{collection}", self.parent());
            if !token.is_empty() {
                path.push_str(&format!("?pageToken={}", query_escape(&token)));
            }
            let next = take(self.call(Method::Get, &path, None::<&()>, ctx).await?);
            if next.is_empty() || next == token {
                break;
            }
            token = next;
        }
        Ok(())
    }

    /// `POST nodes?nodeId={id}`.
    ///
    /// # Errors
    /// Any failure (quota: [`ErrorKind::Quota`]; a node of that id: [`ErrorKind::AlreadyExists`]).
    pub async fn create_node(&self, id: &str, node: &ApiNode) -> Result<Operation, TpuError> {
        let ctx = self.context(format!("create TPU VM {id}"), &node.accelerator_type);
        let path = format!("{}/nodes?nodeId={}", self.parent(), query_escape(id));
        self.call(Method::Post, &path, Some(node), &ctx).await
    }

    /// `DELETE nodes/{id}`; `None` when there is no such node.
    ///
    /// # Errors
    /// Any failure but `NOT_FOUND`.
    pub async fn delete_node(&self, id: &str) -> Result<Option<Operation>, TpuError> {
        let ctx = self.context(format!("delete TPU VM {id}"), "");
        absent_is_none(
            self.call(Method::Delete, &format!("{}/nodes/{id}", self.parent()), None::<&()>, &ctx).await,
            &self.zone,
        )
    }

    /// `POST queuedResources?queuedResourceId={id}`.
    ///
    /// # Errors
    /// Any failure.
    pub async fn create_queued_resource(&self, id: &str, resource: &QueuedResource) -> Result<Operation, TpuError> {
        let accelerator = resource
            .tpu
            .as_ref()
            .and_then(|t| t.node_spec.first())
            .map(|s| s.node.accelerator_type.clone())
            .unwrap_or_default();
        let ctx = self.context(format!("queue TPU VM {id}"), &accelerator);
        let path = format!("{}/queuedResources?queuedResourceId={}", self.parent(), query_escape(id));
        self.call(Method::Post, &path, Some(resource), &ctx).await
    }

    /// `GET queuedResources/{id}`; `None` when there is none.
    ///
    /// # Errors
    /// Any failure but `NOT_FOUND`.
    pub async fn get_queued_resource(&self, id: &str) -> Result<Option<QueuedResource>, TpuError> {
        let ctx = self.context(format!("get queued resource {id}"), "");
        let path = format!("{}/queuedResources/{id}", self.parent());
        absent_is_none(self.call(Method::Get, &path, None::<&()>, &ctx).await, &self.zone)
    }

    /// `DELETE queuedResources/{id}` (`force`: with its node); `None` when there is none.
    ///
    /// # Errors
    /// Any failure but `NOT_FOUND`.
    pub async fn delete_queued_resource(&self, id: &str, force: bool) -> Result<Option<Operation>, TpuError> {
        let ctx = self.context(format!("delete queued resource {id}"), "");
        let mut path = format!("{}/queuedResources/{id}", self.parent());
        if force {
            path.push_str("?force=true");
        }
        absent_is_none(self.call(Method::Delete, &path, None::<&()>, &ctx).await, &self.zone)
    }

    /// `GET {name}` of an operation (`projects/P/locations/Z/operations/X`).
    ///
    /// # Errors
    /// Any failure.
    pub async fn get_operation(&self, name: &str) -> Result<Operation, TpuError> {
        let ctx = self.context("follow an operation", "");
        self.call(Method::Get, name.trim_start_matches('/'), None::<&()>, &ctx).await
    }

    /// One API call: `{endpoint}v2/{path}`, JSON in and out, with the token, the deadline and
    /// the retries.
    async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        ctx: &Context,
    ) -> Result<T, TpuError> {
        let url = format!("{}v2/{path}", self.endpoint);
        let body = match body {
            Some(b) => Bytes::from(serde_json::to_vec(b).map_err(|e| TpuError::new(ErrorKind::Other, e.to_string()))?),
            None => Bytes::new(),
        };
        let mut refreshed = false;
        let mut wait = self.retry.first_wait;
        let mut attempt = 1;
        loop {
            let token = self.tokens.token().await?;
            let answer = self.send(method, &url, &body, &token, &ctx.action).await;
            let failure = match answer {
                Ok(a) if (200..300).contains(&a.status) => {
                    return serde_json::from_slice(&a.body).map_err(|e| {
                        TpuError::new(
                            ErrorKind::Other,
                            format!(
                                "the Cloud TPU API answered {} ({}) with JSON theseus cannot read: {e}",
                                ctx.action,
                                path_of(&url)
                            ),
                        )
                    });
                }
                Ok(a) if a.status == 401 && !refreshed => {
                    // An expired or revoked token: once more with a new one.
                    self.tokens.invalidate(&token);
                    refreshed = true;
                    continue;
                }
                Ok(a) => error::from_response(a.status, &a.body, ctx),
                Err(e) => e,
            };
            if !failure.is_transient() || attempt >= self.retry.attempts {
                return Err(failure);
            }
            tracing::debug!(attempt, error = %failure, "TPU API: trying again");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(self.retry.max_wait);
            attempt += 1;
        }
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        body: &Bytes,
        token: &AccessToken,
        what: &str,
    ) -> Result<transport::Answer, TpuError> {
        let (name, has_body) = match method {
            Method::Get => (http::Method::GET, false),
            Method::Post => (http::Method::POST, true),
            Method::Delete => (http::Method::DELETE, false),
        };
        let mut request = http::Request::builder()
            .method(name.clone())
            .uri(url)
            .header(http::header::AUTHORIZATION, format!("Bearer {}", token.secret()))
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, concat!("theseus/", env!("CARGO_PKG_VERSION")));
        if has_body {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(if has_body { body.clone() } else { Bytes::new() }))
            .map_err(|e| TpuError::new(ErrorKind::Other, format!("bad request URL {}: {e}", path_of(url))))?;
        let answer = self.http.send(request, self.timeout, what).await;
        match &answer {
            Ok(a) => tracing::debug!(method = %name, path = path_of(url), status = a.status, "TPU API"),
            Err(e) => tracing::debug!(method = %name, path = path_of(url), error = %e, "TPU API"),
        }
        answer
    }
}

/// A URL without scheme and host, for logs and messages.
fn path_of(url: &str) -> &str {
    url.split_once("://").and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..])).unwrap_or(url)
}

/// `NOT_FOUND` of the resource as `None`. A `NOT_FOUND` of the location (an unknown zone, or one
/// the project cannot use) is an error naming the zone: Google's message then names the
/// location and not the resource (`Location us-x1-a is not found or access is unauthorized`).
fn absent_is_none<T>(result: Result<T, TpuError>, zone: &str) -> Result<Option<T>, TpuError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind == ErrorKind::NotFound && is_location_error(&e.message) => Err(TpuError::new(
            ErrorKind::Invalid,
            format!(
                "{}; check the host's `zone` ({zone}): it must be a zone with Cloud TPUs that the project may use",
                e.message
            ),
        )),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a `NOT_FOUND` line is about the location rather than a node or queued resource:
/// Google's part of it names a location and no node or queued resource.
fn is_location_error(message: &str) -> bool {
    let google = message.split_once("): ").map_or(message, |(_, rest)| rest).to_ascii_lowercase();
    google.contains("location") && !google.contains("node") && !google.contains("queuedresource")
}

/// Percent-encodes a query or form value (ids and page tokens are mostly safe; `+`, `/`, `=`
/// are not): every byte but RFC 3986's unreserved ones.
pub(crate) fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_never_show_in_debug() {
        let token = AccessToken::new("ya29.secret");
        assert!(!format!("{token:?}").contains("secret"));
    }

    #[test]
    fn query_values_are_escaped() {
        assert_eq!(query_escape("a+b/c=="), "a%2Bb%2Fc%3D%3D");
        assert_eq!(query_escape("node-1"), "node-1");
    }

    #[test]
    fn a_missing_location_is_not_a_missing_node() {
        for location in [
            "Location us-x1-a is not found or access is unauthorized.",
            "Resource 'projects/p/locations/us-x1-a' was not found",
        ] {
            assert!(is_location_error(&format!("not found (get TPU VM t): {location}")), "{location}");
        }
        for absent in [
            "Resource 'projects/p/locations/z/nodes/t' was not found",
            "node t not found",
            "Node t not found in location z",
            "Resource 'projects/p/locations/z/queuedResources/t' was not found",
        ] {
            assert!(!is_location_error(&format!("not found (get TPU VM t): {absent}")), "{absent}");
        }
    }

    #[test]
    fn paths_leave_out_the_host() {
        assert_eq!(path_of("https://h:1/v2/projects/p"), "/v2/projects/p");
    }
}
