//! `theseus chips`: the chip catalog.

use std::process::ExitCode;

use anyhow::Result;
use theseus_core::chips::CATALOG;

use crate::args::OutputFormat;
use crate::context::Context;

pub(crate) fn run(ctx: &Context) -> Result<ExitCode> {
    if ctx.output == OutputFormat::Json {
        crate::output::print_json(&CATALOG)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<16} {:<24} {:>10}  {:<5} ALIASES", "NAME", "DISPLAY NAME", "MEMORY", "KIND");
    for chip in CATALOG {
        let gib = chip.memory_bytes as f64 / (1u64 << 30) as f64;
        let kind = serde_json::to_value(chip.kind)?.as_str().unwrap_or_default().to_owned();
        println!(
            "{:<16} {:<24} {:>6.1} GiB  {:<5} {}",
            chip.name,
            chip.display_name,
            gib,
            kind,
            chip.aliases.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
