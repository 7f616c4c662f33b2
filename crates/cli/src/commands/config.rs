//! `theseus config show|check`.

use std::process::ExitCode;

use anyhow::Result;
use serde::Serialize;

use crate::args::{ConfigCommand, OutputFormat};
use crate::context::Context;

#[derive(Serialize)]
struct Shown<'a> {
    config: &'a theseus_core::config::DispatchConfig,
    files: Vec<String>,
    sources: &'a [theseus_core::config::Provenance],
}

pub(crate) fn run(ctx: &Context, cmd: ConfigCommand) -> Result<ExitCode> {
    match cmd {
        ConfigCommand::Check => match ctx.config() {
            Ok(loaded) => {
                let files: Vec<_> = loaded.files.iter().map(|f| f.display().to_string()).collect();
                ctx.info(format!(
                    "config is valid: {} host(s), {} cluster(s); files: {}",
                    loaded.config.hosts.len(),
                    loaded.config.clusters.len(),
                    if files.is_empty() { "none (built-in defaults)".to_owned() } else { files.join(", ") }
                ));
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("error: {e}");
                Ok(ExitCode::from(1))
            }
        },
        ConfigCommand::Show => {
            let loaded = ctx.config()?;
            // Secrets (W&B keys, tokens, passwords) never leave in plain text.
            let redacted = theseus_core::config::compat::redacted(&loaded.config);
            let shown = Shown {
                config: &redacted,
                files: loaded.files.iter().map(|f| f.display().to_string()).collect(),
                sources: &loaded.provenance,
            };
            match ctx.output {
                OutputFormat::Json => crate::output::print_json(&shown)?,
                OutputFormat::Yaml | OutputFormat::Text => {
                    print!("{}", serde_saphyr::to_string(&redacted)?);
                    println!();
                    println!("# where each value came from:");
                    let width = loaded.provenance.iter().map(|p| p.key.len()).max().unwrap_or(0);
                    for p in &loaded.provenance {
                        println!("#   {:<width$}  {}", p.key, p.source);
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
