//! The simulator's own admin API under `/sim/v1/` (contract §2; not Google's, no auth):
//!
//! - `POST /sim/v1/projects/P/locations/Z/nodes/ID:preempt`: a READY spot/preemptible node is
//!   PREEMPTED; the answer (the node) comes once its workers' processes are gone.
//! - `POST /sim/v1/quota` `{"project", "zone", "acceleratorCores"}` (absent: no limit).
//! - `POST /sim/v1/capacity` `{"zone", "available": bool}` (false: stockout).
//! - `POST /sim/v1/tokens` -> a token reply (for a fake `gcloud auth print-access-token`);
//!   `POST /sim/v1/tokens:expire` expires every token; `POST /sim/v1/token-lifetime`
//!   `{"seconds"}` sets `expires_in` of tokens issued later.
//! - `POST /sim/v1/keys` `{"project"?, "email"?}` -> a service-account key file whose
//!   `token_uri` is the simulator's; `POST /sim/v1/authorized-user` -> an ADC
//!   `authorized_user` file.
//! - `GET /sim/v1/requests`: the request log; `POST /sim/v1/faults`: a fault (see `faults`).
//! - `GET /sim/v1/projects/P/locations/Z/nodes/ID/workers`: each worker's address, network
//!   namespace, directory, host key and the pids in its namespace (for tests).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::Shared;
use crate::error::ApiError;

fn field<'a>(body: &'a Value, key: &str) -> Result<&'a str, ApiError> {
    body[key]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::invalid(key, format!("`{key}` (a string) is required")))
}

/// Serves `/sim/v1/...`: `(status, body)`.
pub(crate) async fn route(
    shared: &Arc<Shared>,
    method: &http::Method,
    path: &str,
    body: &[u8],
) -> Result<(u16, Value), ApiError> {
    let body: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::new(400, format!("the admin body is not JSON: {e}")))?
    };
    let rest = path.trim_start_matches("/sim/v1/");
    let post = *method == http::Method::POST;
    match rest {
        "quota" if post => {
            let (project, zone) = (field(&body, "project")?, field(&body, "zone")?);
            let key = (project.to_owned(), zone.to_owned());
            match body["acceleratorCores"].as_u64() {
                Some(n) => shared.lock().quota.insert(key, u32::try_from(n).unwrap_or(u32::MAX)),
                None => shared.lock().quota.remove(&key),
            };
            Ok((200, json!({})))
        }
        "capacity" if post => {
            let zone = field(&body, "zone")?.to_owned();
            let available = body["available"]
                .as_bool()
                .ok_or_else(|| ApiError::invalid("available", "`available` (true or false) is required"))?;
            let mut st = shared.lock();
            if available {
                st.stockout.remove(&zone)
            } else {
                st.stockout.insert(zone)
            };
            Ok((200, json!({})))
        }
        "tokens" if post => Ok((200, shared.auth.issue())),
        "tokens:expire" if post => {
            shared.auth.expire_all();
            Ok((200, json!({})))
        }
        "token-lifetime" if post => {
            let secs = body["seconds"].as_u64().ok_or_else(|| ApiError::invalid("seconds", "`seconds` is required"))?;
            shared.auth.set_lifetime(secs);
            Ok((200, json!({})))
        }
        "keys" if post => {
            let project = body["project"].as_str().unwrap_or(&shared.config.project).to_owned();
            let email = body["email"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("theseus-test@{project}.iam.gserviceaccount.com"));
            let (sh, token_uri) = (shared.clone(), shared.token_uri.clone());
            let key = tokio::task::spawn_blocking(move || {
                crate::auth::service_account_key(&sh.auth, &project, &email, &token_uri)
            })
            .await
            .map_err(|e| ApiError::new(500, e.to_string()))?
            .map_err(|e| ApiError::new(500, e))?;
            Ok((200, key))
        }
        "authorized-user" if post => Ok((200, shared.auth.new_user())),
        "requests" if *method == http::Method::GET => Ok((200, json!(shared.faults.log()))),
        "faults" if post => {
            let spec = serde_json::from_value(body).map_err(|e| ApiError::new(400, format!("bad fault: {e}")))?;
            shared.faults.add(spec).map_err(|e| ApiError::new(400, e))?;
            Ok((200, json!({})))
        }
        other => {
            if let Some(name) = other.strip_suffix(":preempt").filter(|_| post) {
                return Ok((200, crate::lifecycle::preempt(shared, name).await?));
            }
            if let Some(name) = other.strip_suffix("/workers").filter(|_| *method == http::Method::GET) {
                return workers(shared, name).map(|w| (200, w));
            }
            Err(ApiError::new(404, format!("no admin route {method} {path}")))
        }
    }
}

fn workers(shared: &Shared, name: &str) -> Result<Value, ApiError> {
    let mut list: Vec<Value> = {
        let st = shared.lock();
        let rec = st.nodes.get(name).ok_or_else(|| ApiError::not_found(name))?;
        rec.workers
            .iter()
            .flat_map(|r| r.workers.iter())
            .enumerate()
            .map(|(i, w)| json!({"worker": i, "ip": w.ip, "netns": w.netns, "dir": w.dir, "hostKey": w.host_key}))
            .collect()
    };
    // Outside the lock: each is a command.
    for w in &mut list {
        let pids = crate::workers::pids_in(w["netns"].as_str().unwrap_or_default());
        w["pids"] = json!(pids);
    }
    Ok(json!({"workers": list}))
}
