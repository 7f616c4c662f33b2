//! `theseus list`: the ledger's runs, newest first, with every live run's state asked of its
//! host; a host that does not answer is named once and its rows are marked.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use theseus_core::backend::DynBackend;
use theseus_core::ledger::{Ledger, Record};

use super::jobs::{answer_within, backend_for, refresh};
use crate::args::{ListArgs, OutputFormat};
use crate::context::Context;

pub(crate) async fn list(ctx: &Context, args: ListArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger_for_reading()?;
    let mut records = ledger.list(args.limit)?;
    let unanswered = if args.no_refresh { HashMap::new() } else { refresh_live(ctx, &ledger, &mut records).await };
    if ctx.output == OutputFormat::Json {
        let rows: Vec<ListRow<'_>> = records
            .iter()
            .map(|record| ListRow { record, unanswered: unanswered.get(&record.identity.run_id).map(String::as_str) })
            .collect();
        super::print_json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<24} {:<20} {:<5} {:<12} {:<10} {:<10} SUBMITTED", "RUN ID", "NAME", "KIND", "HOST", "STATE", "EXIT");
    for r in &records {
        let exit = r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
        let mark = if unanswered.contains_key(&r.identity.run_id) { "?" } else { "" };
        println!(
            "{:<24} {:<20} {:<5} {:<12} {:<10} {:<10} {}",
            r.identity.run_id,
            r.identity.name,
            r.kind.as_str(),
            r.host,
            format!("{}{mark}", r.state.as_str()),
            exit,
            r.submitted_at
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A row of `list --output json`: the record, and why its live state could not be asked.
#[derive(serde::Serialize)]
struct ListRow<'a> {
    #[serde(flatten)]
    record: &'a Record,
    /// Set when the row's host did not answer: the row shows its last known state.
    #[serde(skip_serializing_if = "Option::is_none")]
    unanswered: Option<&'a str>,
}

/// Asks the backends about every row that is not terminal, all at once, each within
/// [`super::jobs::answer_within`]: a row is never shown live when its backend no longer has the run. Rows
/// whose backend cannot be asked (or does not answer in time) keep their last known state; they
/// are returned (run id to reason), and each such host is named once on stderr.
pub(crate) async fn refresh_live(ctx: &Context, ledger: &Ledger, records: &mut [Record]) -> HashMap<String, String> {
    let mut unanswered = HashMap::new();
    if records.iter().all(|r| r.state.is_terminal()) {
        return unanswered;
    }
    let Ok(loaded) = ctx.config() else { return unanswered };
    let mut backends: HashMap<String, std::result::Result<Arc<DynBackend>, String>> = HashMap::new();
    let mut asks = Vec::new();
    // Per host: why it could not be asked, and how many rows that leaves as they were.
    let mut silent: std::collections::BTreeMap<String, (String, usize)> = Default::default();
    for (i, record) in records.iter().enumerate().filter(|(_, r)| !r.state.is_terminal()) {
        let backend = backends
            .entry(record.host.clone())
            .or_insert_with(|| backend_for(ctx, &loaded, ledger, record).map_err(|e| format!("{e:#}")))
            .clone();
        match backend {
            Ok(backend) => {
                let within = answer_within(Some(&loaded), &record.host);
                asks.push(async move { (i, refresh(ledger, record, &backend, within).await) })
            }
            Err(reason) => {
                silent.entry(record.host.clone()).or_insert((reason.clone(), 0)).1 += 1;
                unanswered.insert(record.identity.run_id.clone(), reason);
            }
        }
    }
    for (i, answer) in futures::future::join_all(asks).await {
        let record = &mut records[i];
        match answer {
            Ok(status) => {
                record.state = status.state;
                record.exit_code = status.exit_code;
                record.message = status.message;
            }
            Err(e) => {
                let reason = format!("{e:#}");
                tracing::debug!("list: {reason}");
                silent.entry(record.host.clone()).or_insert((reason.clone(), 0)).1 += 1;
                unanswered.insert(record.identity.run_id.clone(), reason);
            }
        }
    }
    for (host, (reason, rows)) in silent {
        let rows = if rows == 1 { "its live run is".to_owned() } else { format!("its {rows} live runs are") };
        eprintln!(
            "theseus: warning: host `{host}` did not answer ({reason}); {rows} shown in the last known state, marked `?`"
        );
    }
    unanswered
}
