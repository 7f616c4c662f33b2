//! One module per subcommand; [`run`] dispatches. A command parses, calls core, prints and
//! chooses the exit code; what several commands share lives in the crate's other modules
//! (`runs`, `output`, `follow`, `prepare`, ...), never in a sibling command module.

mod bootstrap;
mod chips;
mod config;
mod docs;
mod du;
mod forward;
mod gc;
mod jobs;
mod list;
mod original;
mod plan;
mod repl;
mod shell;
mod submit;
mod sync;
mod ui;

use std::process::ExitCode;

use anyhow::Result;
use theseus_core::config::HostTypes;

use crate::args::{Cli, Command};
use crate::context::Context;
use crate::signals;

/// Runs the parsed command line with the host types `host_types`.
pub(crate) async fn run(cli: Cli, host_types: HostTypes) -> Result<ExitCode> {
    // These read no config and touch no state.
    match &cli.command {
        Command::Completions { shell } => return docs::completions(*shell, &host_types),
        Command::Man { out } => return docs::man(out, &host_types),
        _ => {}
    }
    // The original package's own commands run in the project's Python, before any config is
    // read (they read their own).
    let original = match &cli.command {
        Command::Jobs(a) => Some(("jobs", a)),
        Command::Configure(a) => Some(("configure", a)),
        Command::Run(a) => Some(("run", a)),
        Command::Checkpoints(a) => Some(("checkpoints", a)),
        Command::Restore(a) => Some(("restore", a)),
        _ => None,
    };
    if let Some((name, args)) = original {
        return original::run(name, &args.args);
    }
    let ctx = Context::new(&cli.global, host_types)?;
    match cli.command {
        // These handle a signal in each of their phases (see `crate::signals`).
        Command::Submit(args) => submit::run(&ctx, args).await,
        Command::Logs(args) if args.follow => jobs::logs(&ctx, args).await,
        Command::Forward(args) => forward::run(&ctx, args).await,
        Command::Shell(args) => shell::run(&ctx, args).await,
        Command::Sync(args) => sync::run(&ctx, args).await,
        Command::Repl(args) => repl::run(&ctx, args).await,
        // Serves until a signal, which is its normal end.
        Command::Ui(args) => ui::run(&ctx, args).await,
        // The others create nothing that a signal would have to take back.
        command => {
            signals::or_interrupted(async {
                match command {
                    Command::Submit(_)
                    | Command::Forward(_)
                    | Command::Shell(_)
                    | Command::Sync(_)
                    | Command::Repl(_)
                    | Command::Ui(_) => {
                        unreachable!("handled above")
                    }
                    Command::Plan(args) => plan::run(&ctx, args).await,
                    Command::Status(args) => jobs::status(&ctx, args).await,
                    Command::Logs(args) => jobs::logs(&ctx, args).await,
                    Command::Cancel(args) => jobs::cancel(&ctx, args).await,
                    Command::List(args) => list::list(&ctx, args).await,
                    Command::Config(cmd) => config::run(&ctx, cmd),
                    Command::Chips => chips::run(&ctx),
                    Command::Bootstrap(args) => bootstrap::run(&ctx, args),
                    Command::Gc(args) => gc::run(&ctx, args).await,
                    Command::Du(args) => du::run(&ctx, args).await,
                    Command::Completions { .. }
                    | Command::Man { .. }
                    | Command::Jobs(_)
                    | Command::Configure(_)
                    | Command::Run(_)
                    | Command::Checkpoints(_)
                    | Command::Restore(_) => unreachable!("handled above"),
                }
            })
            .await
        }
    }
}
