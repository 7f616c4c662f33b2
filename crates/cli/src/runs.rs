//! Finding a run of the ledger and the backend to ask about it, for every command that takes
//! `NAME|RUN_ID`, and refreshing the live rows of a listing (`list`, `gc`). The rules of what a
//! backend's answer means for the ledger are core's ([`theseus_core::lifecycle`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use theseus_core::backend::DynBackend;
use theseus_core::config::{self, DispatchConfig, HostKind, LoadedConfig, compat};
use theseus_core::ledger::{Ledger, Record};
use theseus_core::lifecycle::{self, STATUS_TIMEOUT, SilentHost};

use crate::context::Context;

/// How long `status` and `list` wait for `host`: a host whose calls end at its `api_timeout`
/// (naming it), so the wait outlasts that; other hosts get [`STATUS_TIMEOUT`].
pub(crate) fn answer_within(loaded: Option<&LoadedConfig>, host: &str) -> Duration {
    match loaded.and_then(|l| l.config.hosts.get(host)).and_then(|h| h.api_timeout()) {
        Some(t) => (t + Duration::from_secs(5)).max(STATUS_TIMEOUT),
        None => STATUS_TIMEOUT,
    }
}

/// The run `job` (a name or a run id) of the ledger, and the backend that ran it.
pub(crate) fn find(ctx: &Context, ledger: &Ledger, job: &str) -> Result<(Record, Arc<DynBackend>)> {
    let record = ledger
        .find(job)?
        .ok_or_else(|| anyhow!("no job or run `{job}` in the ledger (`theseus list` shows what is there)"))?;
    let loaded = ctx.config()?;
    let backend = backend_for(ctx, &loaded, ledger, &record)?;
    Ok((record, backend))
}

/// What the ledger keeps of the config for a run on `host` (see [`Ledger::set_host_config`]):
/// that host, its cluster and the GRES mapping, secrets redacted.
pub(crate) fn host_snapshot(config: &DispatchConfig, host: &str) -> Option<serde_json::Value> {
    let redacted = compat::redacted(config);
    let entry = redacted.hosts.get(host)?.clone();
    let mut one = DispatchConfig { gres_mapping: redacted.gres_mapping.clone(), ..DispatchConfig::default() };
    if let Some(cluster) = redacted.clusters.get(entry.cluster()) {
        one.clusters.insert(entry.cluster().to_owned(), cluster.clone());
    }
    one.hosts.insert(host.to_owned(), entry);
    serde_json::to_value(&one).ok()
}

/// The backend that ran `record`: the configured host when it is still the same place (type
/// and cluster as recorded), else the host as recorded at submit (a run submitted with
/// `-d FILE` is followed without it).
pub(crate) fn backend_for(
    ctx: &Context,
    loaded: &LoadedConfig,
    ledger: &Ledger,
    record: &Record,
) -> Result<Arc<DynBackend>> {
    let recorded: Option<DispatchConfig> = ledger
        .host_config(&record.identity.run_id)
        .ok()
        .flatten()
        .and_then(|value| config::load::from_value(&value, &crate::backends::registry()).ok())
        .filter(|c: &DispatchConfig| c.hosts.contains_key(&record.host));
    let same_place = |recorded: &DispatchConfig| {
        let current = host_snapshot(&loaded.config, &record.host)
            .and_then(|v| config::load::from_value(&v, &crate::backends::registry()).ok());
        current.is_some_and(|current: DispatchConfig| {
            let (a, b) = (&current.hosts[&record.host], &recorded.hosts[&record.host]);
            a.kind() == b.kind() && current.clusters.get(a.cluster()) == recorded.clusters.get(b.cluster())
        })
    };
    let backend = if loaded.config.hosts.contains_key(&record.host) && recorded.as_ref().is_none_or(same_place) {
        ctx.backend(loaded, &record.host)?
    } else if let Some(recorded) = recorded {
        crate::backends::for_host(&recorded, &record.host, &ctx.home)?
    } else if record.handle.kind == HostKind::LOCAL {
        // The host left the config; a local handle carries every path it needs.
        Arc::new(theseus_core::local::LocalBackend::new(
            &record.host,
            Default::default(),
            Default::default(),
            &ctx.home,
        ))
    } else {
        return Err(anyhow!("host `{}` of run `{}` is no longer in the config", record.host, record.identity.run_id));
    };
    Ok(backend)
}

/// Asks the backends about every row that is not terminal, all at once, each within
/// [`answer_within`] (see [`lifecycle::refresh_live`]). Rows whose backend cannot be asked (or
/// does not answer in time) keep their last known state; they are returned (run id to reason),
/// and each such host is named once on stderr.
pub(crate) async fn refresh_live(ctx: &Context, ledger: &Ledger, records: &mut [Record]) -> HashMap<String, String> {
    if records.iter().all(|r| r.state.is_terminal()) {
        return HashMap::new();
    }
    let Ok(loaded) = ctx.config() else { return HashMap::new() };
    let learned = lifecycle::refresh_live(
        ledger,
        records,
        |record| backend_for(ctx, &loaded, ledger, record).map_err(|e| format!("{e:#}")),
        |host| answer_within(Some(&loaded), host),
    )
    .await;
    for SilentHost { host, reason, rows } in learned.silent {
        let rows = if rows == 1 { "its live run is".to_owned() } else { format!("its {rows} live runs are") };
        eprintln!(
            "theseus: warning: host `{host}` did not answer ({reason}); {rows} shown in the last known state, marked `?`"
        );
    }
    learned.unanswered
}
