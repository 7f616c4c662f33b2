//! The HTTP router: discovery, the REST verbs on every served resource, watches, `pods/log`,
//! and the `pods/exec` hand-off point ([`serve_exec`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::Shared;
use crate::admission;
use crate::api_admission;
use crate::core_objects;
use crate::discovery::{self, ResourceInfo};
use crate::response::{Body, error_response, json_response, stream_body, text};
use crate::schema::{self, FieldValidation};
use crate::selector::{FieldSelector, LabelSelector, Selectors};
use crate::status::{ApiError, Result};
use crate::store::{Part, Preconditions, Propagation};
use crate::watch::{self, WatchOptions};

/// Longest watch the simulator keeps open, whatever `timeoutSeconds` says.
const MAX_WATCH: Duration = Duration::from_secs(1800);

/// Serves one request; fails at the HTTP level (the connection is closed without an answer)
/// only during an [`crate::Outage::Refuse`]; errors of the API are Status bodies.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    peer: Option<Arc<crate::Identity>>,
    req: Request<Incoming>,
) -> Result<Response<Body>, std::io::Error> {
    match shared.faults.current_outage() {
        Some(crate::Outage::Refuse) => {
            return Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "simulated API outage"));
        }
        Some(crate::Outage::Hang) => shared.faults.hang_while_out().await,
        None => {}
    }
    let path_and_query = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    shared.faults.record(req.method().as_str(), &path_and_query);
    match shared.faults.take_nth() {
        Some(crate::RequestFault::Reset) => {
            return Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "simulated connection reset"));
        }
        Some(crate::RequestFault::Hang) => std::future::pending::<()>().await,
        Some(crate::RequestFault::Status(code)) => {
            return Ok(error_response(&ApiError::injected(code, (code == 429).then_some(1))));
        }
        Some(crate::RequestFault::DropStreams) => {
            shared.faults.drop_watches();
            shared.faults.cut_log_streams();
        }
        None => {}
    }
    Ok(match route(&shared, peer.as_deref(), req).await {
        Ok(resp) => resp,
        Err(err) => error_response(&err),
    })
}

/// A parsed resource path.
struct Target {
    res: &'static ResourceInfo,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

async fn route(shared: &Arc<Shared>, peer: Option<&crate::Identity>, req: Request<Incoming>) -> Result<Response<Body>> {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // With RBAC on, a token must be known; discovery is open to every user.
    let who = match &shared.config.authz {
        Some(authz) => Some((authz, authz.authenticate(peer, &header_str(&req, header::AUTHORIZATION))?)),
        None => None,
    };
    if req.method() == Method::GET {
        let doc = match segments.as_slice() {
            ["version"] => Some(discovery::version()),
            ["api"] => Some(discovery::core_versions(&shared.addr.to_string())),
            ["api", "v1"] => discovery::resource_list("", "v1"),
            ["apis"] => Some(discovery::group_list()),
            ["apis", group] => discovery::group(group),
            ["apis", group, version] => discovery::resource_list(group, version),
            ["openapi", "v3"] => Some(crate::openapi::index()),
            ["openapi", "v3", rest @ ..] => crate::openapi::document(&rest.join("/")),
            ["healthz" | "readyz" | "livez"] => return Ok(text(StatusCode::OK, "ok".into())),
            _ => None,
        };
        if let Some(doc) = doc {
            return Ok(json_response(StatusCode::OK, &doc));
        }
    }
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::no_route(&path)),
    };
    let target = parse_target(group, version, rest).ok_or_else(|| ApiError::no_route(&path))?;
    let verb = verb_of(req.method(), &target, &query);
    if let Some((authz, (user, groups))) = &who {
        let attrs = crate::rbac::Attributes {
            verb: verb.to_owned(),
            group: target.res.group.to_owned(),
            resource: target.res.plural.to_owned(),
            subresource: target.sub.clone(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            qualified: target.res.qualified(),
        };
        authz.authorize(user, groups, &attrs)?;
    }
    let fault_resource = match &target.sub {
        Some(sub) => format!("{}/{sub}", target.res.plural),
        None => target.res.plural.to_owned(),
    };
    if shared.faults.hangs(verb, &fault_resource) {
        std::future::pending::<()>().await;
    }
    if let Some(err) = shared.faults.check(verb, &fault_resource) {
        return Err(err);
    }
    let res = target.res;
    let ns = target.namespace.clone().unwrap_or_default();
    match (target.name.as_deref(), target.sub.as_deref()) {
        (Some(name), Some("exec")) if res.plural == "pods" => Ok(serve_exec(shared, req, &ns, name, &query).await),
        (Some(name), Some("portforward")) if res.plural == "pods" => {
            let ports = if crate::portforward::wants_spdy_tunnel(&req) {
                None
            } else {
                Some(crate::portforward::ports(&query)?)
            };
            shared.store.get(res, &ns, name)?;
            Ok(crate::portforward::serve(req, ports))
        }
        (Some(name), Some("log")) if res.plural == "pods" => crate::logs::serve(shared, &ns, name, &query).await,
        (Some(name), sub) => {
            let part = match sub {
                None => Part::Main,
                Some("status") if res.has_status() => Part::Status,
                Some(other) => return Err(ApiError::no_route(&format!("{}/{other}", res.plural))),
            };
            match *req.method() {
                Method::GET => Ok(json_response(StatusCode::OK, &shared.store.get(res, &ns, name)?)),
                Method::PUT => {
                    let mode = FieldValidation::from_query(&query)?;
                    let mut body = read_json(req).await?;
                    let current = shared.store.get(res, &ns, name)?;
                    let warnings = admit_update(res, &current, &mut body, part, mode)?;
                    if dry_run(&query)? {
                        return Ok(with_warnings(shared, json_response(StatusCode::OK, &body), &warnings));
                    }
                    let stored = shared.store.replace(res, &ns, name, body, part)?;
                    Ok(with_warnings(shared, json_response(StatusCode::OK, &stored), &warnings))
                }
                Method::PATCH => {
                    let content_type = header_str(&req, header::CONTENT_TYPE);
                    if !(content_type.starts_with("application/merge-patch+json")
                        || content_type.starts_with("application/strategic-merge-patch+json"))
                    {
                        return Err(ApiError::unsupported_media_type(&content_type));
                    }
                    let mode = FieldValidation::from_query(&query)?;
                    let mut body = read_json(req).await?;
                    // The patched object is what is admitted (pruned, then validated); the patch
                    // is then applied without the fields pruning removed.
                    let current = shared.store.get(res, &ns, name)?;
                    let mut merged = current.clone();
                    crate::store::merge_patch(&mut merged, &body);
                    let warnings = admit_update(res, &current, &mut merged, part, mode)?;
                    if dry_run(&query)? {
                        return Ok(with_warnings(shared, json_response(StatusCode::OK, &merged), &warnings));
                    }
                    schema::prune_patch(res, &mut body);
                    let stored = shared.store.patch(res, &ns, name, &body, part)?;
                    Ok(with_warnings(shared, json_response(StatusCode::OK, &stored), &warnings))
                }
                Method::DELETE if part == Part::Main => {
                    let body = read_body(req).await?;
                    // `dryRun` comes in the query or in the body's DeleteOptions.
                    let in_body = serde_json::from_slice::<Value>(&body)
                        .ok()
                        .is_some_and(|o| o["dryRun"].as_array().is_some_and(|d| d.iter().any(|v| v == "All")));
                    if dry_run(&query)? || in_body {
                        return Ok(json_response(StatusCode::OK, &shared.store.get(res, &ns, name)?));
                    }
                    let propagation = propagation(&query, &body)?;
                    let pre = preconditions(&body);
                    // A resourceVersion precondition must see the object as the client saw it, so
                    // the grace period is recorded only for deletes without one.
                    if res.plural == "pods"
                        && pre.resource_version.is_none()
                        && let Some(grace) = grace_period(&query, &body)
                    {
                        // DeleteOptions.gracePeriodSeconds overrides the pod's own grace period;
                        // the runtime reads it from `deletionGracePeriodSeconds`.
                        let _ = shared.store.update(res, &ns, name, |pod| {
                            pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                        });
                    }
                    Ok(json_response(StatusCode::OK, &shared.store.delete_if(res, &ns, name, propagation, &pre)?))
                }
                _ => Err(ApiError::method_not_allowed(format!("{} is not supported on {}", verb, res.plural))),
            }
        }
        (None, None) => {
            let namespace = target.namespace.as_deref();
            let selectors = selectors(&query)?;
            match *req.method() {
                Method::GET if verb == "watch" => Ok(serve_watch(shared, res, namespace, selectors, &query)?),
                Method::GET => {
                    let get = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
                    let limit = match get("limit").filter(|l| !l.is_empty()) {
                        Some(l) => {
                            l.parse::<usize>().map_err(|_| ApiError::bad_request(format!("invalid limit `{l}`")))?
                        }
                        None => 0,
                    };
                    let token = get("continue").filter(|t| !t.is_empty());
                    if limit == 0 && token.is_none() {
                        let (items, rv) = shared.store.list(res, namespace, &selectors);
                        return Ok(json_response(StatusCode::OK, &list_json(res, items, rv)));
                    }
                    // `limit=0` with a token: the rest of the list in one page.
                    let limit = if limit == 0 { usize::MAX } else { limit };
                    let page = shared.store.list_page(res, namespace, &selectors, limit, token)?;
                    let mut list = list_json(res, page.items, page.rv);
                    if let Some(next) = page.next {
                        list["metadata"]["continue"] = json!(next);
                    }
                    Ok(json_response(StatusCode::OK, &list))
                }
                Method::POST => {
                    let ns = namespace.or((!res.namespaced).then_some("")).ok_or_else(|| {
                        ApiError::method_not_allowed(format!("create of {} needs a namespace", res.plural))
                    })?;
                    let mode = FieldValidation::from_query(&query)?;
                    let dry = dry_run(&query)?;
                    let mut body = read_json(req).await?;
                    if schema::schema_of(res).is_some() && res.has_status() {
                        // A custom resource's status is only written through `/status`: on
                        // create it is dropped (apiextensions-apiserver
                        // pkg/registry/customresource/strategy.go, `PrepareForCreate`).
                        body.as_object_mut().map(|m| m.remove("status"));
                    }
                    // Mutating plugins, so before the schema's validation (a strategy's).
                    api_admission::admit_create(res, ns, &mut body, &shared.store)?;
                    let mut warnings = schema::admit(res, &mut body, mode)?;
                    let unknown = core_objects::admit(res, &mut body, None)?;
                    warnings.extend(schema::unknown_fields(res, &unknown, mode)?);
                    if is_vcjob(res) {
                        admission::mutate_job(&mut body);
                        admission::validate_job_create(&body, &shared.store)?;
                    }
                    if res.plural == "queues" && body.pointer("/status/state").is_none() {
                        // The queue controller opens a new queue; in a real cluster a moment later.
                        body["status"]["state"] = json!("Open");
                    }
                    let stored = if dry {
                        shared.store.create_dry_run(res, ns, body)?
                    } else {
                        shared.store.create(res, ns, body)?
                    };
                    if !dry && std::ptr::eq(res, crate::discovery::known::namespaces()) {
                        let name = stored.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
                        api_admission::namespace_created(&shared.store, name);
                    }
                    Ok(with_warnings(shared, json_response(StatusCode::CREATED, &stored), &warnings))
                }
                Method::DELETE => {
                    let body = read_body(req).await?;
                    let propagation = propagation(&query, &body)?;
                    let (items, _) = shared.store.list(res, namespace, &selectors);
                    let mut deleted = Vec::new();
                    for item in items {
                        let item_ns = item.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
                        let item_name = item.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
                        // Another delete (garbage collection) may have won the race: skip it.
                        if let Ok(obj) = shared.store.delete(res, item_ns, item_name, propagation) {
                            deleted.push(obj);
                        }
                    }
                    Ok(json_response(StatusCode::OK, &list_json(res, deleted, shared.store.current_rv())))
                }
                _ => Err(ApiError::method_not_allowed(format!("{verb} is not supported on {}", res.plural))),
            }
        }
        (None, Some(_)) => Err(ApiError::no_route(&path)),
    }
}

/// The one place where `pods/{name}/exec` is served. It resolves the pod's working directory
/// and environment (what the exec'd command must see) and then hands the request over to the
/// websocket exec handler.
///
/// Merge point: replace the 501 below with
/// `crate::exec::serve(req, target).await` (mapping the body into [`Body`]), building the
/// handler's `ExecTarget` from `context`.
async fn serve_exec(
    shared: &Shared,
    req: Request<Incoming>,
    ns: &str,
    pod: &str,
    query: &[(String, String)],
) -> Response<Body> {
    let command: Vec<String> = query.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
    let container = query.iter().find(|(k, _)| k == "container").map(|(_, v)| v.as_str());
    let context = match shared.runtime.exec_context(&shared.store, ns, pod, container) {
        Ok(context) => ExecContext { command, ..context },
        Err(err) => return error_response(&err),
    };
    let target = crate::exec::ExecTarget {
        cwd: context.cwd,
        env: context.env,
        protocols: shared.faults.exec_protocols(),
        drop_after_stdin_bytes: shared.faults.exec_stdin_cut(),
    };
    crate::exec::serve(req, target).await.map(|body| body.map_err(|never| match never {}).boxed())
}

/// What an exec'd command runs with: its argv and the pod container's working directory and
/// environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecContext {
    /// The `command=` query parameters, in order.
    pub command: Vec<String>,
    /// The container's working directory on the host.
    pub cwd: std::path::PathBuf,
    /// The container's resolved environment.
    pub env: Vec<(String, String)>,
}

fn serve_watch(
    shared: &Shared,
    res: &'static ResourceInfo,
    namespace: Option<&str>,
    selectors: Selectors,
    query: &[(String, String)],
) -> Result<Response<Body>> {
    let get = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let from_rv = match get("resourceVersion").filter(|s| !s.is_empty()) {
        Some(rv) => {
            Some(rv.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resourceVersion `{rv}`")))?)
        }
        None => None,
    };
    let timeout = match get("timeoutSeconds") {
        Some(secs) => Duration::from_secs(secs.parse().map_err(|_| ApiError::bad_request("invalid timeoutSeconds"))?),
        None => MAX_WATCH,
    };
    let opts = WatchOptions {
        from_rv,
        namespace: namespace.map(str::to_owned),
        selectors,
        bookmarks: matches!(get("allowWatchBookmarks"), Some("true" | "1")),
        send_initial_events: matches!(get("sendInitialEvents"), Some("true" | "1")),
        timeout: timeout.min(MAX_WATCH),
        bookmark_interval: shared.config.bookmark_interval,
    };
    let rx = watch::start(&shared.store, res, opts, shared.faults.watch_drops());
    let mut resp = Response::new(stream_body(rx));
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    Ok(resp)
}

fn parse_target(group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    let owned = |s: Option<&&str>| s.map(|s| (*s).to_owned());
    if let ["namespaces", ns, plural, tail @ ..] = rest
        && let Some(res) = discovery::find(group, version, plural)
        && res.namespaced
        && tail.len() <= 2
    {
        return Some(Target {
            res,
            namespace: Some((*ns).to_owned()),
            name: owned(tail.first()),
            sub: owned(tail.get(1)),
        });
    }
    let (plural, tail) = rest.split_first()?;
    let res = discovery::find(group, version, plural)?;
    if tail.len() > 2 || (res.namespaced && !tail.is_empty()) {
        return None;
    }
    Some(Target { res, namespace: None, name: owned(tail.first()), sub: owned(tail.get(1)) })
}

fn verb_of(method: &Method, target: &Target, query: &[(String, String)]) -> &'static str {
    let watching = query.iter().any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
    match (method.as_str(), target.name.is_some()) {
        (_, true) if matches!(target.sub.as_deref(), Some("exec" | "portforward")) => "create",
        ("GET", true) => "get",
        ("GET", false) if watching => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

fn selectors(query: &[(String, String)]) -> Result<Selectors> {
    let get = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or("");
    Ok(Selectors {
        labels: LabelSelector::parse(get("labelSelector"))?,
        fields: FieldSelector::parse(get("fieldSelector"))?,
    })
}

fn propagation(query: &[(String, String)], body: &[u8]) -> Result<Propagation> {
    let from_body = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("propagationPolicy").and_then(Value::as_str).map(str::to_owned));
    let from_query = query.iter().find(|(k, _)| k == "propagationPolicy").map(|(_, v)| v.clone());
    match from_query.or(from_body).as_deref() {
        None | Some("Background") => Ok(Propagation::Background),
        Some("Foreground") => Ok(Propagation::Foreground),
        Some("Orphan") => Ok(Propagation::Orphan),
        Some(other) => Err(ApiError::bad_request(format!("invalid propagationPolicy `{other}`"))),
    }
}

/// `gracePeriodSeconds` of a delete, from the query or the `DeleteOptions` body.
fn grace_period(query: &[(String, String)], body: &[u8]) -> Option<u64> {
    let from_query = query.iter().find(|(k, _)| k == "gracePeriodSeconds").and_then(|(_, v)| v.parse().ok());
    from_query.or_else(|| serde_json::from_slice::<Value>(body).ok()?.get("gracePeriodSeconds")?.as_u64())
}

/// `preconditions` of a DeleteOptions body.
fn preconditions(body: &[u8]) -> Preconditions {
    let value = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    let get = |key: &str| value.pointer(&format!("/preconditions/{key}")).and_then(Value::as_str).map(str::to_owned);
    Preconditions { uid: get("uid"), resource_version: get("resourceVersion") }
}

fn list_json(res: &ResourceInfo, items: Vec<Value>, rv: u64) -> Value {
    json!({
        "kind": format!("{}List", res.kind),
        "apiVersion": res.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    })
}

fn header_str(req: &Request<Incoming>, name: header::HeaderName) -> String {
    req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes> {
    Ok(req
        .into_body()
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?
        .to_bytes())
}

async fn read_json(req: Request<Incoming>) -> Result<Value> {
    let body = read_body(req).await?;
    serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// Splits and percent-decodes a query string.
pub(crate) fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(hi), Some(lo)) => {
                        out.push((hi * 16 + lo) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Everything an update (`PUT`, or the object a `PATCH` makes) goes through before it is
/// stored: the CRD schema, the core type's decoding and validation, the Pod update rule and
/// Volcano's job webhook. Returns the `Warning` texts.
fn admit_update(
    res: &'static ResourceInfo,
    current: &Value,
    next: &mut Value,
    part: Part,
    mode: FieldValidation,
) -> Result<Vec<String>> {
    let mut warnings = schema::admit(res, next, mode)?;
    let unknown = core_objects::admit(res, next, Some(current))?;
    if res.plural == "pods" && part == Part::Main {
        core_objects::check_pod_update(current, next)?;
    }
    warnings.extend(schema::unknown_fields(res, &unknown, mode)?);
    if is_vcjob(res) && part == Part::Main {
        admission::validate_job_update(current, next)?;
    }
    Ok(warnings)
}

/// `dryRun=All`: every check, nothing stored; any other value is refused as upstream
/// (`apiserver/pkg/endpoints/handlers/rest.go` with `apimachinery` `ValidateDryRun`).
fn dry_run(query: &[(String, String)]) -> Result<bool> {
    let values: Vec<&str> = query.iter().filter(|(k, _)| k == "dryRun").map(|(_, v)| v.as_str()).collect();
    match values.as_slice() {
        [] => Ok(false),
        ["All"] => Ok(true),
        other => Err(ApiError::bad_request(format!(
            "dryRun: Unsupported value: []string{{{}}}: supported values: \"All\"",
            other.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Volcano's `batch.volcano.sh` Jobs, which its admission webhooks see.
fn is_vcjob(res: &ResourceInfo) -> bool {
    res.group == "batch.volcano.sh" && res.plural == "jobs"
}

/// Adds one `Warning: 299 - "TEXT"` header per warning, as the API server sends them
/// (`apiserver/pkg/warning`, `apiserver/pkg/endpoints/filters/warning.go`).
fn with_warnings(shared: &Shared, mut response: Response<Body>, warnings: &[String]) -> Response<Body> {
    shared.warnings.lock().unwrap_or_else(|e| e.into_inner()).extend(warnings.iter().cloned());
    for warning in warnings {
        let quoted = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = header::HeaderValue::from_str(&format!("299 - \"{quoted}\"")) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}
