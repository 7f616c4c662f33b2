//! `theseus plan`: where a job would go and why, without submitting, and which hosts did not
//! answer their availability probe (`unknown: HOST: REASON` lines; `unanswered` in JSON).

use std::process::ExitCode;

use anyhow::Result;
use theseus_core::solver::render;

use crate::args::{JobArgs, OutputFormat};
use crate::context::Context;

pub(crate) async fn run(ctx: &Context, args: JobArgs) -> Result<ExitCode> {
    let (dispatcher, _) = super::prepare::dispatcher(ctx);
    let code = super::prepare::Code { dir: None, clean: false };
    let solved = super::prepare::solve(ctx, &dispatcher, &args, None, &code, true).await?;
    if ctx.output == OutputFormat::Json {
        let unanswered: Vec<_> = solved
            .unanswered
            .iter()
            .map(|(host, reason)| serde_json::json!({"host": host, "reason": reason}))
            .collect();
        super::print_json(
            &serde_json::json!({"request": solved.request, "plan": solved.plan, "unanswered": unanswered}),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", render::render_table(&solved.plan.considered));
    println!();
    println!("request: {}", solved.request);
    println!("chosen:  {}", render::describe_plan(&solved.plan));
    for note in &solved.plan.notes {
        println!("note:    {note}");
    }
    print!("{}", super::prepare::render_unanswered(&solved.unanswered));
    Ok(ExitCode::SUCCESS)
}
