//! The capacity page (`GET /api/capacity`): what `plan` sees per host for the default request
//! (one GPU of any kind, as a job that asks for nothing gets), every configured host probed at
//! once within its probe budget (core's [`probe`]), and, where the host has shared queues
//! (Volcano), how a one-GPU job stands among them (`Backend::shares`, as `plan` asks it).
//! Kept for [`CACHE_FOR`]: a page reloaded in a loop does not probe every cluster each time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use theseus_core::availability::Availability;
use theseus_core::backend::DynBackend;
use theseus_core::config::{Gpus, HostConfig, LoadedConfig};
use theseus_core::ledger::now_rfc3339;
use theseus_core::probe;
use theseus_core::solver::{ChipRequest, Plan, Request};
use theseus_ui::SourceError;

use super::Shared;

/// How long one probe's answer is shown before the next request probes again.
const CACHE_FOR: Duration = Duration::from_secs(30);

/// The capacity of every host, probed at most once per [`CACHE_FOR`] (requests meanwhile wait
/// for the probe under way and share its answer).
pub(super) async fn cached(shared: &Shared) -> Result<Value, SourceError> {
    let mut cache = shared.capacity.lock().await;
    if let Some((at, value)) = &*cache
        && at.elapsed() < CACHE_FOR
    {
        return Ok(value.clone());
    }
    let value = probe_all(&shared.ctx, shared.loaded()?).await;
    *cache = Some((Instant::now(), value.clone()));
    Ok(value)
}

/// Probes every host of `loaded` at once.
async fn probe_all(ctx: &crate::context::Context, loaded: &LoadedConfig) -> Value {
    let hosts = loaded.config.hosts.iter().map(|(name, host)| {
        let budget = probe::budget(None, host);
        let kind = host.kind().to_string();
        let backend = ctx.backend(loaded, name).map_err(|e| format!("{e:#}"));
        let request = request(name, host);
        async move {
            let (availability, queues) = match backend {
                Ok(backend) => tokio::join!(
                    availability(&backend, name, &request, budget),
                    shares(&backend, &request, &kind, budget)
                ),
                Err(e) => (Availability::Unknown { reason: e.clone() }, Err(e)),
            };
            json!({
                "host": name,
                "kind": kind,
                "request": request.to_string(),
                "availability": availability,
                "queues": queues.as_ref().ok().and_then(|q| q.as_ref()),
                "queues_error": queues.as_ref().err(),
            })
        }
    });
    let hosts = futures::future::join_all(hosts).await;
    json!({"hosts": hosts, "probed_at": now_rfc3339()})
}

/// The request a job that asks for nothing makes (`dispatch::request`: one GPU of any kind),
/// on `host` only; one CPU process on a host that lists no GPUs (its free cores).
fn request(host: &str, config: &HostConfig) -> Request {
    let no_gpus = matches!(config.gpus(), Gpus::Listed(chips) if chips.values().all(|n| *n == 0));
    Request {
        chip: if no_gpus { ChipRequest::Cpu } else { ChipRequest::AnyGpu },
        count: 1,
        preferred_clusters: Vec::new(),
        forbidden_clusters: Vec::new(),
        host: Some(host.to_owned()),
    }
}

async fn availability(backend: &Arc<DynBackend>, host: &str, request: &Request, budget: Duration) -> Availability {
    let target: probe::Target = (host.to_owned(), Arc::clone(backend), budget);
    let mut got = probe::gather(&[target], request).await;
    got.remove(host).unwrap_or(Availability::Unknown { reason: "not probed".into() })
}

/// How `request` (one GPU) stands among the host's queues, as `plan` asks it; `Ok(None)` for a
/// host without queues or a CPU request.
async fn shares(
    backend: &Arc<DynBackend>,
    request: &Request,
    kind: &str,
    budget: Duration,
) -> Result<Option<theseus_core::shares::QueueShares>, String> {
    // The plan of one chip on one node of the host, as the solver would make it.
    let plan = Plan {
        host: request.host.clone().unwrap_or_default(),
        kind: theseus_core::config::HostKind::from(kind.to_owned()),
        cluster: String::new(),
        chip: None,
        nodes: 1,
        chips_per_node: 1,
        processes_per_node: 1,
        total_chips: 1,
        placement: Default::default(),
        placement_text: String::new(),
        queued: false,
        notes: Vec::new(),
        considered: Vec::new(),
    };
    match tokio::time::timeout(budget, backend.shares(request, &plan)).await {
        Ok(Ok(shares)) => Ok(shares),
        Ok(Err(e)) => Err(super::one_line(&e)),
        Err(_) => Err(format!("no answer within {}s (probe timeout)", budget.as_secs_f64())),
    }
}
