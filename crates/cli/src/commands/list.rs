//! `theseus list`: the ledger's runs, newest first, with every live run's state asked of its
//! host; a host that does not answer is named once and its rows are marked.

use std::collections::HashMap;
use std::process::ExitCode;

use anyhow::Result;
use theseus_core::ledger::Record;

use crate::args::{ListArgs, OutputFormat};
use crate::context::Context;
use crate::output::print_json;
use crate::runs::refresh_live;

pub(crate) async fn list(ctx: &Context, args: ListArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger_for_reading()?;
    let mut records = ledger.list(args.limit)?;
    let unanswered = if args.no_refresh { HashMap::new() } else { refresh_live(ctx, &ledger, &mut records).await };
    if ctx.output == OutputFormat::Json {
        let rows: Vec<ListRow<'_>> = records
            .iter()
            .map(|record| ListRow { record, unanswered: unanswered.get(&record.identity.run_id).map(String::as_str) })
            .collect();
        print_json(&rows)?;
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
