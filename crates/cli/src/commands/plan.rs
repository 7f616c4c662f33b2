//! `theseus plan`: where a job would go and why, without submitting.

use std::process::ExitCode;

use anyhow::Result;
use theseus_core::solver::render;

use crate::args::{JobArgs, OutputFormat};
use crate::context::Context;

pub(crate) async fn run(ctx: &Context, args: JobArgs) -> Result<ExitCode> {
    let solved = super::prepare::solve(ctx, &args, true).await?;
    if ctx.output == OutputFormat::Json {
        super::print_json(&serde_json::json!({"request": solved.request, "plan": solved.plan}))?;
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", render::render_table(&solved.plan.considered));
    println!();
    println!("request: {}", solved.request);
    println!("chosen:  {}", render::describe_plan(&solved.plan));
    for note in &solved.plan.notes {
        println!("note:    {note}");
    }
    Ok(ExitCode::SUCCESS)
}
