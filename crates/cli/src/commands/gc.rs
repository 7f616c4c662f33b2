//! `theseus gc`: deletes what crashed clients left on Volcano hosts (helper vcjobs and pods,
//! Secrets of runs that have no vcjob, stale name claims), found by theseus's labels and older
//! than a threshold.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use serde_json::json;
use theseus_backend_volcano::VolcanoBackend;
use theseus_core::config::HostConfig;

use crate::args::{GcArgs, OutputFormat};
use crate::context::Context;

pub(crate) async fn run(ctx: &Context, args: GcArgs) -> Result<ExitCode> {
    let older_than = parse_age(&args.older_than).map_err(|e| anyhow!("--older-than {:?}: {e}", args.older_than))?;
    let loaded = ctx.config()?;
    let config = &loaded.config;
    let hosts: Vec<(&String, &HostConfig)> = config
        .hosts
        .iter()
        .filter(|(name, host)| matches!(host, HostConfig::Volcano(_)) && args.host.as_ref().is_none_or(|h| h == *name))
        .collect();
    if let Some(h) = &args.host
        && hosts.is_empty()
    {
        bail!("--host {h}: no volcano host of that name in the config");
    }
    let mut report = Vec::new();
    let mut failed = false;
    for (name, host) in hosts {
        let HostConfig::Volcano(volcano) = host else { continue };
        let cluster = config
            .clusters
            .get(&volcano.cluster)
            .ok_or_else(|| anyhow!("host `{name}` names unknown cluster `{}`", volcano.cluster))?;
        let backend = VolcanoBackend::new(name, volcano.clone(), cluster.clone());
        match backend.gc(older_than, args.dry_run).await {
            Ok(removed) => {
                for item in &removed {
                    ctx.info(format!("theseus: {}{name}: {item}", if args.dry_run { "would delete on " } else { "deleted on " }));
                }
                report.push(json!({"host": name, "deleted": removed, "dry_run": args.dry_run}));
            }
            Err(e) => {
                failed = true;
                eprintln!("error: {name}: {e}");
                report.push(json!({"host": name, "error": e.to_string()}));
            }
        }
    }
    if ctx.output == OutputFormat::Json {
        super::print_json(&report)?;
    } else {
        let total: usize = report.iter().filter_map(|r| r["deleted"].as_array()).map(Vec::len).sum();
        println!("{total}");
    }
    Ok(if failed { ExitCode::from(2) } else { ExitCode::SUCCESS })
}

/// `90s`, `30m`, `2h`, `1d`, or plain seconds: the core's one duration parser.
fn parse_age(text: &str) -> Result<Duration, String> {
    theseus_core::duration::parse(text)
}

#[cfg(test)]
mod tests {
    use super::parse_age;
    use std::time::Duration;

    #[test]
    fn ages_parse_with_units() {
        assert_eq!(parse_age("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_age("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_age("2w").unwrap_err().contains("unknown unit"));
        assert!(parse_age("h").is_err());
    }
}
