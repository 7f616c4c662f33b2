//! `theseus gc`: frees space on every host of the config (or `--host`).
//!
//! - Every backend's [`Backend::reclaim`]: code dirs of finished runs older than `--older-than`
//!   (logs and status stay), `.partial` and upload dirs of crashed submits, and objects no run
//!   links any more. Runs the ledger says are submitting, pending or running (after asking their
//!   backends, as `list` does) are passed as live; each backend adds the runs it sees live.
//! - Volcano hosts: also the Kubernetes leftovers of crashed clients (helper vcjobs and pods,
//!   Secrets of runs that have no vcjob, stale name claims), found by theseus's labels.
//!
//! stderr says what was removed (or would be, with `--dry-run`) with sizes and the total freed;
//! stdout carries the data: the number of items removed, or with `--output json` the whole
//! report per host.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, anyhow};
use serde::Serialize;
use theseus_core::Error;
use theseus_core::backend::{ReclaimKind, ReclaimOptions, ReclaimReport};
use theseus_core::config::{HostKind, LoadedConfig};
use theseus_core::lifecycle;

use crate::args::{GcArgs, OutputFormat};
use crate::context::Context;
use crate::hosts::{hosts, not_yet};
use crate::progress::human;

/// Default age of run code dirs and objects that `gc` removes.
const STORE_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default age of the leftovers of crashed clients that `gc` deletes (Volcano helpers; younger
/// ones may still be shipping).
const HELPER_AGE: Duration = Duration::from_secs(3600);

/// What `gc` did on one host.
#[derive(Debug, Serialize)]
struct HostGc {
    host: String,
    kind: HostKind,
    cluster: String,
    dry_run: bool,
    /// The store and run dirs (absent when the backend cannot reclaim or failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    reclaim: Option<ReclaimReport>,
    /// Leftovers of crashed clients deleted (hosts whose backend leaves some: Volcano).
    #[serde(skip_serializing_if = "Option::is_none")]
    deleted: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
}

pub(crate) async fn run(ctx: &Context, args: GcArgs) -> Result<ExitCode> {
    let age = args
        .older_than
        .as_deref()
        .map(|a| theseus_core::duration::parse(a).map_err(|e| anyhow!("--older-than {a:?}: {e}")))
        .transpose()?;
    let loaded = ctx.config()?;
    let names = hosts(&loaded.config, args.host.as_deref())?;
    let abandoned = abandoned_runs(ctx)?;
    let options = ReclaimOptions {
        older_than: age.unwrap_or(STORE_AGE),
        live: live_runs(ctx).await?,
        abandoned,
        dry_run: args.dry_run,
    };
    let helper_age = age.unwrap_or(HELPER_AGE);
    let results =
        futures::future::join_all(names.iter().map(|name| host_gc(ctx, &loaded, name, &options, helper_age))).await;

    let verb = if args.dry_run { "would remove" } else { "removed" };
    let mut items = 0;
    let mut freed = 0;
    for r in &results {
        for item in r.deleted.iter().flatten() {
            ctx.info(format!("theseus: {}: {verb} {item}", r.host));
        }
        if let Some(report) = &r.reclaim {
            describe(ctx, &r.host, verb, report);
            items += report.items.len();
            freed += report.freed_bytes;
        }
        items += r.deleted.as_ref().map_or(0, Vec::len);
        for note in &r.notes {
            ctx.info(format!("theseus: {}: {note}", r.host));
        }
        // One line per host: an unreachable host fails its leftover check and its store cleanup.
        if !r.errors.is_empty() {
            eprintln!("error: {}: {}", r.host, r.errors.join("; also: "));
        }
    }
    let freed_verb = if args.dry_run { "would free" } else { "freed" };
    ctx.info(format!("theseus: {freed_verb} {} in total", human(freed)));
    if ctx.output == OutputFormat::Json {
        crate::output::print_json(&results)?;
    } else {
        println!("{items}");
    }
    Ok(if results.iter().any(|r| !r.errors.is_empty()) { ExitCode::from(2) } else { ExitCode::SUCCESS })
}

/// Runs of this machine's ledger whose submit is over (see [`lifecycle::abandoned_run_paths`]).
fn abandoned_runs(ctx: &Context) -> Result<BTreeSet<String>> {
    Ok(lifecycle::abandoned_run_paths(&ctx.ledger()?)?)
}

/// Run paths of the ledger's runs that are submitting, pending or running, after asking their
/// backends about every unfinished one (a row whose backend does not answer keeps its state).
async fn live_runs(ctx: &Context) -> Result<BTreeSet<String>> {
    let ledger = ctx.ledger()?;
    let mut records = ledger.list(i64::MAX as usize)?;
    crate::runs::refresh_live(ctx, &ledger, &mut records).await;
    Ok(lifecycle::live_run_paths(&records))
}

async fn host_gc(
    ctx: &Context,
    loaded: &LoadedConfig,
    name: &str,
    options: &ReclaimOptions,
    helper_age: Duration,
) -> HostGc {
    let host = &loaded.config.hosts[name];
    let mut out = HostGc {
        host: name.to_owned(),
        kind: host.kind(),
        cluster: host.cluster().to_owned(),
        dry_run: options.dry_run,
        reclaim: None,
        deleted: None,
        notes: Vec::new(),
        errors: Vec::new(),
    };
    let backend = match ctx.backend(loaded, name) {
        Ok(backend) => backend,
        Err(e) => {
            out.errors.push(format!("{e:#}"));
            return out;
        }
    };
    match backend.leftovers(helper_age, options.dry_run).await {
        Ok(deleted) => out.deleted = deleted,
        Err(e) => out.errors.push(e.to_string()),
    }
    let reclaimed = backend.reclaim(options).await;
    match reclaimed {
        Ok(report) => {
            out.errors.extend(report.failed.iter().map(|f| format!("could not remove {f}")));
            out.reclaim = Some(report);
        }
        Err(Error::NotSupported { .. }) => out.notes.push(not_yet(host.kind(), "reclaimed")),
        Err(e) => out.errors.push(e.to_string()),
    }
    out.errors = distinct(std::mem::take(&mut out.errors));
    out
}

/// `errors` without repeats, in order: a host that cannot be reached fails its leftover check
/// and its store cleanup with the same sentence, which is said once.
fn distinct(errors: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    errors.into_iter().filter(|e| seen.insert(e.clone())).collect()
}

/// One line per run code dir and leftover, one for all objects, one total for the host.
fn describe(ctx: &Context, host: &str, verb: &str, report: &ReclaimReport) {
    for item in report.items.iter().filter(|i| i.kind != ReclaimKind::Object) {
        ctx.info(format!("theseus: {host}: {verb} {} {} ({})", item.kind.describe(), item.path, human(item.bytes)));
    }
    let (objects, bytes) = report.total(ReclaimKind::Object);
    if objects > 0 {
        ctx.info(format!("theseus: {host}: {verb} {objects} objects no run uses ({})", human(bytes)));
    }
    let freed = if report.dry_run { "would free" } else { "freed" };
    ctx.info(format!("theseus: {host}: {freed} {}", human(report.freed_bytes)));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_hosts_repeated_error_is_said_once() {
        let errors = ["unreachable", "other", "unreachable"].map(String::from).to_vec();
        assert_eq!(super::distinct(errors), ["unreachable", "other"]);
    }

    #[test]
    fn ages_parse_with_units() {
        let parse = theseus_core::duration::parse;
        assert_eq!(parse("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse("7d"), Ok(super::STORE_AGE));
        assert!(parse("2w").unwrap_err().contains("unknown unit"));
        assert!(parse("h").is_err());
    }
}
