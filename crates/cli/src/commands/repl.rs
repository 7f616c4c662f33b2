//! `theseus repl [EXPERIMENT] [--chip C] [-n N] [--host H] [--port 8888] [--detach] [--sync]`:
//! a Jupyter Lab session, submitted like a job (solve, ship, the same bootstrap with the
//! experiment's env and uv groups) with Jupyter as its entrypoint and recorded in the ledger as
//! kind `repl`. It waits for Jupyter's URL in the log, failing at once with the log's last
//! lines when the session ends first (or after `--startup-timeout`, cancelling it), then
//! listens on `127.0.0.1:PORT` and forwards each connection to Jupyter through the backend's
//! tunnel (`Backend::connect_port`; the local host needs none), printing the local URL on
//! stdout. Ctrl-C closes the tunnel and asks (on a terminal) whether to stop the session;
//! `--follow` shows Jupyter's log on stderr meanwhile, `--sync` pushes local edits.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use futures::StreamExt as _;
use theseus_core::backend::{DynBackend, JobHandle, JobState, LogOptions, SubmitOptions};
use theseus_core::config::HostKind;
use theseus_core::job::{Distributed, Entrypoint, Experiment};
use theseus_core::ledger::{Ledger, RunKind};
use theseus_core::lifecycle::{self, Stopped};
use theseus_core::session::jupyter_entrypoint;
use theseus_core::snapshot::SnapshotMode;

use crate::args::{JobArgs, ReplArgs};
use crate::context::Context;
use crate::signals::{self, Interrupted};

pub(crate) async fn run(ctx: &Context, args: ReplArgs) -> Result<ExitCode> {
    if let Some(n) = args.n_shards {
        ctx.info(format!(
            "theseus: warning: --n-shards {n}: a session runs no job config, so it changes nothing (as in the original)"
        ));
    }
    let job_args = job_args(&args);
    let mut experiment = match &args.experiment {
        Some(path) => Experiment::load(path)?,
        None => Experiment::default(),
    };
    experiment.entrypoint = Entrypoint::Words(jupyter_entrypoint());
    experiment.distributed = Distributed::None;
    let code = crate::prepare::Code { dir: args.code.clone(), clean: args.clean };
    let (dispatcher, _) = crate::prepare::dispatcher(ctx);
    let prepared = crate::prepare::prepare_job(ctx, &dispatcher, &job_args, &code, Some(experiment), true);
    let (solved, job, _layout) = signals::or_interrupted(prepared).await?;
    let backend = solved.backend.clone();
    let name = job.identity.name.clone();
    let create_confirmed = crate::creates::confirm(ctx, &*backend, &job, args.create.yes).await?;
    let choices = SubmitOptions { create_confirmed, keep: args.create.keep, ..SubmitOptions::default() };
    let ledger = ctx.ledger()?;
    let handle = crate::prepare::submit_recorded(
        &dispatcher,
        &ledger,
        &solved.loaded.config,
        &backend,
        &job,
        RunKind::Repl,
        choices,
    )
    .await?;
    ctx.info(format!(
        "theseus: started session {name} (run {}) on {}; waiting for Jupyter Lab (up to {}s)",
        job.identity.run_id,
        solved.plan.host,
        args.startup_timeout.as_secs()
    ));
    let url = tokio::select! {
        url = lifecycle::wait_for_url(&backend, &handle, args.startup_timeout) => url,
        signal = theseus_core::interrupt::wait() => {
            let what = stop(&ledger, &backend, &handle, &job.identity.run_id, "interrupted while starting").await;
            return Err(Interrupted { signal, what }.into());
        }
    };
    let url = match url {
        Ok(url) => url,
        Err(e) => {
            let what = stop(&ledger, &backend, &handle, &job.identity.run_id, "Jupyter did not start").await;
            return Err(anyhow!("{e:#}\n{what}"));
        }
    };
    if backend.kind() == HostKind::LOCAL || args.detach {
        let shown = if backend.kind() == HostKind::LOCAL { url.local(url.port) } else { url.local(args.port) };
        println!("{shown}");
        if backend.kind() != HostKind::LOCAL {
            ctx.info(format!(
                "theseus: session {name} runs on; open the URL after `theseus forward {name} {}:{}`; stop it with \
                 `theseus cancel {name}`",
                args.port, url.port
            ));
            return Ok(ExitCode::SUCCESS);
        }
        ctx.info(format!("theseus: session {name} runs on this machine; stop it with `theseus cancel {name}`"));
        if args.detach {
            return Ok(ExitCode::SUCCESS);
        }
        return attend(ctx, &ledger, &backend, &handle, &job.identity.run_id, &name, None, &args).await;
    }
    let listener = crate::tunnel::listen(ctx, args.port, args.port == 0).await?;
    let local = listener.local_addr()?.port();
    println!("{}", url.local(local));
    ctx.info(format!("theseus: tunnel 127.0.0.1:{local} -> port {} of session {name}; Ctrl-C closes it", url.port));
    let tunnel = crate::tunnel::serve(ctx, listener, backend.clone(), handle.clone(), 0, url.port);
    attend(ctx, &ledger, &backend, &handle, &job.identity.run_id, &name, Some(Box::pin(tunnel)), &args).await
}

/// The submit arguments of a session.
fn job_args(args: &ReplArgs) -> JobArgs {
    let chip = args.place.chip.clone().unwrap_or_else(|| "any".into());
    // `2026-11-25T05:00:00Z` -> `20261125-050000`.
    let stamp: String = theseus_core::ledger::now_rfc3339()
        .chars()
        .filter_map(|c| match c {
            'T' => Some('-'),
            c if c.is_ascii_digit() => Some(c),
            _ => None,
        })
        .collect();
    JobArgs {
        name: args.name.clone().unwrap_or_else(|| format!("repl-{chip}-{stamp}")),
        experiment: args.experiment.clone().unwrap_or_else(|| PathBuf::from("(repl)")),
        overrides: Vec::new(),
        place: args.place.clone(),
        host_flags: args.host_flags.clone(),
        project: Some(args.project.clone().unwrap_or_else(|| "repl".into())),
        group: Some("interactive".into()),
        env: args.env.clone(),
        secret_env: Vec::new(),
        no_check: args.no_check,
        probe_timeout: None,
        oversubscribe: false,
        volcano_image: None,
        volcano_namespace: None,
        cpu: args.cpu.clone(),
        mem: args.mem.clone(),
        restore: None,
        fresh: false,
        stages: Vec::new(),
        target: args.target.clone(),
        original: Default::default(),
    }
}

/// Cancels the session and records it; says what happened.
async fn stop(ledger: &Ledger, backend: &Arc<DynBackend>, handle: &JobHandle, run_id: &str, why: &str) -> String {
    match lifecycle::stop(ledger, backend, (handle, run_id), why, signals::CLEANUP_BOUND).await {
        Stopped::Done(_) => format!("the session (run {run_id}) was stopped"),
        Stopped::Failed(e) => {
            format!("the session (run {run_id}) could not be stopped: {e}; try `theseus cancel {run_id}`")
        }
        Stopped::TimedOut => {
            format!("stopping the session (run {run_id}) did not finish in time; try `theseus cancel {run_id}`")
        }
    }
}

/// Keeps the tunnel (if any) and `--sync` going until a signal or the session's end.
#[allow(clippy::too_many_arguments)]
async fn attend(
    ctx: &Context,
    ledger: &Ledger,
    backend: &Arc<DynBackend>,
    handle: &JobHandle,
    run_id: &str,
    name: &str,
    tunnel: Option<std::pin::Pin<Box<dyn std::future::Future<Output = std::convert::Infallible> + Send + '_>>>,
    args: &ReplArgs,
) -> Result<ExitCode> {
    let tunnel = async move {
        match tunnel {
            Some(tunnel) => match tunnel.await {},
            None => std::future::pending::<()>().await,
        }
    };
    let code_dir = match &args.code {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let mode = if args.clean { SnapshotMode::Clean } else { SnapshotMode::Dirty };
    let syncing = async {
        if args.sync {
            ctx.info(format!("theseus: syncing edits of {} into the session", code_dir.display()));
            crate::code_sync::watch_changes(ctx, backend, handle, &code_dir, mode).await;
        }
        std::future::pending::<()>().await
    };
    let following = async {
        if args.follow
            && let Ok(mut lines) = backend.logs(handle, &LogOptions { follow: true, rank: None }).await
        {
            while let Some(Ok(line)) = lines.next().await {
                eprintln!("{}", line.text);
            }
        }
        std::future::pending::<()>().await
    };
    let ended = async {
        let every = Duration::from_secs(5);
        lifecycle::wait_for_end(ledger, backend, (handle, run_id), every, Duration::from_secs(15)).await.state
    };
    tokio::select! {
        () = tunnel => unreachable!("the tunnel serves until dropped"),
        () = syncing => unreachable!("the sync watch runs until dropped"),
        () = following => unreachable!("the log follow waits once the log ends"),
        state = ended => {
            ctx.info(format!("theseus: session {name} ended ({state}); the tunnel is closed"));
            Ok(if state == JobState::Completed || state == JobState::Cancelled { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        signal = theseus_core::interrupt::wait() => {
            let stop_it = signal == theseus_core::interrupt::InterruptSignal::Int && ask_to_stop(name).await;
            let what = if stop_it {
                stop(ledger, backend, handle, run_id, "stopped from `theseus repl`").await
            } else {
                format!("the tunnel is closed; session {name} keeps running (`theseus forward {name} PORT` reattaches, `theseus cancel {name}` stops it)")
            };
            Err(Interrupted { signal, what }.into())
        }
    }
}

/// On a terminal, asks whether to stop the session (default no).
async fn ask_to_stop(name: &str) -> bool {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return false;
    }
    eprint!("\ntheseus: stop session {name}? [y/N] ");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    });
    match tokio::time::timeout(Duration::from_secs(60), answer).await {
        Ok(Ok(Ok(line))) => matches!(line.trim(), "y" | "Y" | "yes" | "Yes"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::args::{Cli, Command};

    fn repl(args: &[&str]) -> Result<ReplArgs, clap::Error> {
        let argv = ["theseus", "repl"].into_iter().chain(args.iter().copied());
        match Cli::try_parse_from(argv)?.command {
            Command::Repl(repl) => Ok(repl),
            other => panic!("not repl: {other:?}"),
        }
    }

    /// The original's `repl` flags are taken: `--dirty` (the default), `--mem` and `--cpu` as
    /// `submit` takes them, `--n_shards` (which a session has no use for).
    #[test]
    fn the_originals_repl_flags_are_accepted() {
        let args = repl(&["--dirty", "--mem", "64G", "--cpu", "8", "--n_shards", "2", "--chip", "h100"]).unwrap();
        assert!(args.dirty && !args.clean);
        assert_eq!(args.n_shards, Some(2));
        let job = job_args(&args);
        assert_eq!((job.mem.as_deref(), job.cpu.as_deref()), (Some("64G"), Some("8")));
        assert_eq!(repl(&["--n-shards", "4"]).unwrap().n_shards, Some(4));
        let both = repl(&["--dirty", "--clean"]).unwrap_err().to_string();
        assert!(both.contains("cannot be used with"), "{both}");
        let plain = job_args(&repl(&[]).unwrap());
        assert_eq!((plain.mem, plain.cpu), (None, None));
    }
}
