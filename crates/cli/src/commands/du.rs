//! `theseus du`: the space the code store and the run code dirs use on each host's cluster, as a
//! table or JSON (see `theseus_core::store::reclaim::USAGE`).

use std::process::ExitCode;

use anyhow::Result;
use serde::Serialize;
use theseus_core::Error;
use theseus_core::backend::StoreUsage;
use theseus_core::config::HostKind;

use crate::args::{DuArgs, OutputFormat};
use crate::context::Context;
use crate::hosts::{hosts, not_yet};
use crate::progress::human;

/// One host's answer.
#[derive(Debug, Serialize)]
struct HostUsage {
    host: String,
    kind: HostKind,
    cluster: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<StoreUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub(crate) async fn run(ctx: &Context, args: DuArgs) -> Result<ExitCode> {
    let loaded = ctx.config()?;
    let config = &loaded.config;
    let names = hosts(config, args.host.as_deref())?;
    let asks = names.iter().map(|name| {
        let loaded = &loaded;
        async move {
            let host = &config.hosts[name];
            let mut row = HostUsage {
                host: name.clone(),
                kind: host.kind(),
                cluster: host.cluster().to_owned(),
                usage: None,
                note: None,
                error: None,
            };
            match ctx.backend(loaded, name) {
                Err(e) => row.error = Some(format!("{e:#}")),
                Ok(backend) => match backend.usage().await {
                    Ok(usage) => row.usage = Some(usage),
                    Err(Error::NotSupported { .. }) => row.note = Some(not_yet(host.kind(), "measured")),
                    Err(e) => row.error = Some(e.to_string()),
                },
            }
            row
        }
    });
    let rows = futures::future::join_all(asks).await;
    for row in &rows {
        if let Some(note) = &row.note {
            ctx.info(format!("theseus: {}: {note}", row.host));
        }
        if let Some(error) = &row.error {
            eprintln!("error: {}: {error}", row.host);
        }
    }
    if ctx.output == OutputFormat::Json {
        crate::output::print_json(&rows)?;
    } else {
        println!(
            "{:<16} {:<12} {:>8} {:>10} {:>8} {:>10} {:>9} {:>10} {:>10}",
            "HOST", "CLUSTER", "OBJECTS", "SIZE", "UNUSED", "SIZE", "RUN DIRS", "OWN SIZE", "LEFTOVERS"
        );
        for row in &rows {
            let Some(u) = &row.usage else {
                println!(
                    "{:<16} {:<12} {}",
                    row.host,
                    row.cluster,
                    if row.note.is_some() { "not measured" } else { "error" }
                );
                continue;
            };
            println!(
                "{:<16} {:<12} {:>8} {:>10} {:>8} {:>10} {:>9} {:>10} {:>10}",
                row.host,
                row.cluster,
                u.objects,
                human(u.object_bytes),
                u.unused_objects,
                human(u.unused_object_bytes),
                u.run_dirs,
                human(u.run_dir_bytes),
                human(u.leftover_bytes)
            );
        }
    }
    Ok(if rows.iter().any(|r| r.error.is_some()) { ExitCode::from(2) } else { ExitCode::SUCCESS })
}
