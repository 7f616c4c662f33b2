//! A small stateful stand-in for the Cloud TPU API behind wiremock, for the client's contract
//! tests: nodes that are `CREATING` for a few polls then `READY`, operations done at their first
//! poll, spot queued resources `ACCEPTED` then `ACTIVE`, and switches for quota refusals and
//! stockouts. The real simulator (crates/tpu-sim) is the full one; this one only answers what the
//! tests ask, as Google documents it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The project and zone the fake serves.
pub(crate) const PARENT: &str = "projects/p/locations/us-central2-b";

/// The token the fake accepts.
pub(crate) const TOKEN: &str = "tok";

#[derive(Debug, Default)]
pub(crate) struct State {
    /// Node id to its JSON.
    pub nodes: BTreeMap<String, Value>,
    /// Queued-resource id to its JSON.
    pub queued: BTreeMap<String, Value>,
    /// Operation name to its final JSON (returned at the first poll).
    pub ops: BTreeMap<String, Value>,
    /// Polls of a node while `CREATING` before it is `READY`.
    pub creating_polls: u32,
    /// Refuse creates with 429 and a `QuotaFailure`.
    pub quota: bool,
    /// End creates with `RESOURCE_EXHAUSTED` (code 8): the node stays behind, stuck.
    pub stockout: bool,
    /// Polls of a queued resource while `ACCEPTED`.
    pub accepted_polls: u32,
    /// Answer the next N requests with this status (transient failures).
    pub fail_next: Vec<u16>,
    /// Do the next POSTs' work but answer 503, as a lost answer looks to the client.
    pub lose_posts: u32,
    /// Answer 404 for every operation (the API no longer keeps them).
    pub forget_ops: bool,
    /// Every request: `METHOD /path?query`.
    pub log: Vec<String>,
    next_op: u32,
}

#[derive(Clone, Default)]
pub(crate) struct FakeTpu(pub(crate) Arc<Mutex<State>>);

impl FakeTpu {
    pub(crate) async fn start() -> (MockServer, FakeTpu) {
        let server = MockServer::start().await;
        let fake = FakeTpu::default();
        Mock::given(any()).respond_with(fake.clone()).mount(&server).await;
        (server, fake)
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.0.lock().unwrap())
    }

    pub(crate) fn log(&self) -> Vec<String> {
        self.with(|s| s.log.clone())
    }

    /// The requests whose line starts with `prefix` (`POST`, `DELETE /v2/...`).
    pub(crate) fn count(&self, prefix: &str) -> usize {
        self.log().iter().filter(|l| l.starts_with(prefix)).count()
    }

    /// Puts a node in `state`, created by theseus or not.
    pub(crate) fn put_node(&self, id: &str, state: &str, theseus: bool) {
        let mut node = ready_node(id, json!({}));
        node["state"] = json!(state);
        if theseus {
            node["labels"] = json!({"theseus-created": "true", "theseus-run": "old"});
        }
        self.with(|s| s.nodes.insert(id.to_owned(), node));
    }
}

fn ready_node(id: &str, body: Value) -> Value {
    let mut node = body;
    node["name"] = json!(format!("{PARENT}/nodes/{id}"));
    node["state"] = json!("READY");
    node["networkEndpoints"] = json!([
        {"ipAddress": "10.0.0.2", "port": 8470, "accessConfig": {"externalIp": "34.0.0.2"}},
        {"ipAddress": "10.0.0.3", "port": 8470, "accessConfig": {"externalIp": "34.0.0.3"}}
    ]);
    node["createTime"] = json!("2026-11-27T20:00:00Z");
    node
}

fn error(http: u16, status: &str, message: &str, details: Value) -> ResponseTemplate {
    ResponseTemplate::new(http)
        .set_body_json(json!({"error": {"code": http, "status": status, "message": message, "details": details}}))
}

fn not_found(what: &str) -> ResponseTemplate {
    error(404, "NOT_FOUND", &format!("Resource '{what}' was not found"), json!([]))
}

impl State {
    fn operation(&mut self, result: Value) -> ResponseTemplate {
        self.next_op += 1;
        let name = format!("{PARENT}/operations/op-{}", self.next_op);
        let mut done = result;
        done["name"] = json!(name);
        done["done"] = json!(true);
        self.ops.insert(name.clone(), done);
        ResponseTemplate::new(200).set_body_json(json!({"name": name, "done": false, "metadata": {"verb": "create"}}))
    }

    fn handle(&mut self, method: &str, path: &str, query: &str, body: &[u8]) -> ResponseTemplate {
        let Some(rest) = path.strip_prefix(&format!("/v2/{PARENT}/")) else {
            // Google's answer for a zone it does not know (or the project may not use).
            let zone = path.split('/').nth(5).unwrap_or_default();
            return error(
                404,
                "NOT_FOUND",
                &format!("Location {zone} is not found or access is unauthorized."),
                json!([]),
            );
        };
        let parts: Vec<&str> = rest.split('/').collect();
        match (method, parts.as_slice()) {
            ("GET", ["nodes"]) => {
                let nodes: Vec<Value> = self.nodes.values().cloned().collect();
                ResponseTemplate::new(200).set_body_json(json!({"nodes": nodes}))
            }
            ("GET", ["nodes", id]) => {
                let polls = self.creating_polls;
                match self.nodes.get_mut(*id) {
                    None => not_found(id),
                    Some(node) => {
                        if node["state"] == "CREATING" && !self.stockout {
                            if polls == 0 {
                                node["state"] = json!("READY");
                            } else {
                                self.creating_polls -= 1;
                            }
                        }
                        ResponseTemplate::new(200).set_body_json(node.clone())
                    }
                }
            }
            ("POST", ["nodes"]) => {
                let id = query.strip_prefix("nodeId=").unwrap_or_default().to_owned();
                if self.quota {
                    return error(
                        429,
                        "RESOURCE_EXHAUSTED",
                        "Quota 'TPUV4sPodPerProjectPerZoneForTPUAPI' exhausted. Limit 0 in zone us-central2-b",
                        json!([{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"subject": "TPU v4 cores", "description": "limit 0"}]}]),
                    );
                }
                if self.nodes.contains_key(&id) {
                    return error(409, "ALREADY_EXISTS", "node exists", json!([]));
                }
                let mut node = ready_node(&id, serde_json::from_slice(body).unwrap());
                node["state"] = json!("CREATING");
                self.nodes.insert(id.clone(), node.clone());
                let result = if self.stockout {
                    json!({"error": {"code": 8, "message": "There is no more capacity in the zone \"us-central2-b\"; you can try in another zone where Cloud TPU Nodes are offered"}})
                } else {
                    json!({"response": node})
                };
                self.operation(result)
            }
            ("DELETE", ["nodes", id]) => match self.nodes.remove(*id) {
                None => not_found(id),
                Some(_) => self.operation(json!({"response": {}})),
            },
            ("GET", ["queuedResources"]) => {
                let queued: Vec<Value> = self.queued.values().cloned().collect();
                ResponseTemplate::new(200).set_body_json(json!({"queuedResources": queued}))
            }
            ("POST", ["queuedResources"]) => {
                let id = query.strip_prefix("queuedResourceId=").unwrap_or_default().to_owned();
                if self.queued.contains_key(&id) {
                    return error(409, "ALREADY_EXISTS", "queued resource exists", json!([]));
                }
                let mut qr: Value = serde_json::from_slice(body).unwrap();
                qr["name"] = json!(format!("{PARENT}/queuedResources/{id}"));
                qr["state"] = json!({"state": "ACCEPTED"});
                self.queued.insert(id, qr.clone());
                self.operation(json!({"response": qr}))
            }
            ("GET", ["queuedResources", id]) => {
                let accepted_polls = self.accepted_polls;
                let stockout = self.stockout;
                let Some(qr) = self.queued.get_mut(*id) else { return not_found(id) };
                if qr["state"]["state"] == "ACCEPTED" {
                    if accepted_polls > 0 {
                        self.accepted_polls -= 1;
                    } else if stockout {
                        qr["state"] = json!({"state": "FAILED", "failedData": {"error": {"code": 8, "message": "There is no more capacity in the zone"}}});
                    } else {
                        qr["state"] = json!({"state": "ACTIVE"});
                        let spec = qr["tpu"]["nodeSpec"][0].clone();
                        let node_id = spec["nodeId"].as_str().unwrap().to_owned();
                        let mut node = ready_node(&node_id, spec["node"].clone());
                        node["queuedResource"] = qr["name"].clone();
                        node["schedulingConfig"] = json!({"spot": true});
                        let answer = qr.clone();
                        self.nodes.insert(node_id, node);
                        return ResponseTemplate::new(200).set_body_json(answer);
                    }
                }
                ResponseTemplate::new(200).set_body_json(qr.clone())
            }
            ("DELETE", ["queuedResources", id]) => match self.queued.remove(*id) {
                None => not_found(id),
                Some(qr) => {
                    if query.contains("force=true") {
                        let node_id = qr["tpu"]["nodeSpec"][0]["nodeId"].as_str().unwrap_or_default().to_owned();
                        self.nodes.remove(&node_id);
                    }
                    self.operation(json!({"response": {}}))
                }
            },
            ("GET", ["operations", _]) => {
                let name = path.trim_start_matches("/v2/");
                match self.ops.get(name).filter(|_| !self.forget_ops) {
                    Some(op) => ResponseTemplate::new(200).set_body_json(op.clone()),
                    None => not_found(name),
                }
            }
            _ => error(400, "INVALID_ARGUMENT", &format!("the fake does not serve {method} {path}"), json!([])),
        }
    }
}

impl Respond for FakeTpu {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut state = self.0.lock().unwrap();
        let method = request.method.to_string();
        let path = request.url.path().to_owned();
        let query = request.url.query().unwrap_or_default().to_owned();
        let line = if query.is_empty() { format!("{method} {path}") } else { format!("{method} {path}?{query}") };
        state.log.push(line);
        if !state.fail_next.is_empty() {
            let status = state.fail_next.remove(0);
            return error(status, "UNAVAILABLE", "The service is currently unavailable.", json!([]));
        }
        let auth = request.headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
        if auth != format!("Bearer {TOKEN}") {
            return error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.", json!([]));
        }
        let answer = state.handle(&method, &path, &query, &request.body);
        if method == "POST" && state.lose_posts > 0 {
            state.lose_posts -= 1;
            return error(503, "UNAVAILABLE", "The service is currently unavailable.", json!([]));
        }
        answer
    }
}
