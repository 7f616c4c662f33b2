//! `theseus status|logs|cancel`: jobs found in the ledger by name or run id (`list` is in
//! `list.rs`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use futures::StreamExt;
use serde_json::json;
use theseus_core::backend::{DynBackend, JobHandle, JobState, JobStatus, LogOptions};
use theseus_core::config::{self, DispatchConfig, HostKind, LoadedConfig, compat};
use theseus_core::interrupt;
use theseus_core::ledger::{Ledger, Record, is_placeholder};

use crate::args::{LogsArgs, OutputFormat, TargetArgs};
use crate::context::Context;
use crate::signals::Interrupted;

/// How long `status` and `list` wait for a backend's answer about one run.
pub(crate) const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `status` and `list` wait for `host`: a Volcano host's calls end at its `api_timeout`
/// (naming it), so the wait outlasts that; other hosts get [`STATUS_TIMEOUT`].
pub(super) fn answer_within(loaded: Option<&LoadedConfig>, host: &str) -> Duration {
    match loaded.and_then(|l| l.config.hosts.get(host)).and_then(|h| h.api_timeout()) {
        Some(t) => (t + Duration::from_secs(5)).max(STATUS_TIMEOUT),
        None => STATUS_TIMEOUT,
    }
}

/// What a run's state says when its client stopped in the middle of `submit`.
const STOPPED_DURING_SUBMIT: &str = "the client stopped during submit (interrupted)";

use super::start::{StartProgress, StartStep};

pub(crate) fn find(ctx: &Context, ledger: &Ledger, job: &str) -> Result<(Record, Arc<DynBackend>)> {
    let record = ledger
        .find(job)?
        .ok_or_else(|| anyhow!("no job or run `{job}` in the ledger (`theseus list` shows what is there)"))?;
    let loaded = ctx.config()?;
    let backend = backend_for(ctx, &loaded, ledger, &record)?;
    Ok((record, backend))
}

/// What the ledger keeps of the config for a run on `host` (see [`Ledger::set_host_config`]):
/// that host, its cluster and the GRES mapping, secrets redacted.
pub(crate) fn host_snapshot(config: &DispatchConfig, host: &str) -> Option<serde_json::Value> {
    let redacted = compat::redacted(config);
    let entry = redacted.hosts.get(host)?.clone();
    let mut one = DispatchConfig { gres_mapping: redacted.gres_mapping.clone(), ..DispatchConfig::default() };
    if let Some(cluster) = redacted.clusters.get(entry.cluster()) {
        one.clusters.insert(entry.cluster().to_owned(), cluster.clone());
    }
    one.hosts.insert(host.to_owned(), entry);
    serde_json::to_value(&one).ok()
}

/// The backend that ran `record`: the configured host when it is still the same place (type
/// and cluster as recorded), else the host as recorded at submit (a run submitted with
/// `-d FILE` is followed without it).
pub(super) fn backend_for(
    ctx: &Context,
    loaded: &LoadedConfig,
    ledger: &Ledger,
    record: &Record,
) -> Result<Arc<DynBackend>> {
    let recorded: Option<DispatchConfig> = ledger
        .host_config(&record.identity.run_id)
        .ok()
        .flatten()
        .and_then(|value| config::load::from_value(&value, ctx.host_types()).ok())
        .filter(|c: &DispatchConfig| c.hosts.contains_key(&record.host));
    let same_place = |recorded: &DispatchConfig| {
        let current = host_snapshot(&loaded.config, &record.host)
            .and_then(|v| config::load::from_value(&v, ctx.host_types()).ok());
        current.is_some_and(|current: DispatchConfig| {
            let (a, b) = (&current.hosts[&record.host], &recorded.hosts[&record.host]);
            a.kind() == b.kind() && current.clusters.get(a.cluster()) == recorded.clusters.get(b.cluster())
        })
    };
    let backend = if loaded.config.hosts.contains_key(&record.host) && recorded.as_ref().is_none_or(same_place) {
        ctx.backend(loaded, &record.host)?
    } else if let Some(recorded) = recorded {
        crate::backends::for_host(&recorded, &record.host, &ctx.home)?
    } else if record.handle.kind == HostKind::LOCAL {
        // The host left the config; a local handle carries every path it needs.
        Arc::new(theseus_core::local::LocalBackend::new(
            &record.host,
            Default::default(),
            Default::default(),
            &ctx.home,
        ))
    } else {
        return Err(anyhow!("host `{}` of run `{}` is no longer in the config", record.host, record.identity.run_id));
    };
    Ok(backend)
}

/// Whether `record` is a run whose client stopped in the middle of `submit`: still
/// `submitting` with nobody holding its submit lock, or already settled as such.
fn stopped_during_submit(ledger: &Ledger, record: &Record) -> bool {
    match record.state {
        JobState::Submitting => !ledger.submit_in_progress(&record.identity.run_id),
        JobState::Unknown => record.message.as_deref().is_some_and(|m| m.starts_with(STOPPED_DURING_SUBMIT)),
        _ => false,
    }
}

fn status_of(state: JobState, message: String) -> JobStatus {
    JobStatus { state, exit_code: None, message: Some(message), ranks: Vec::new() }
}

/// The state of a run now: asks its backend (within `within`, see [`answer_within`]), settles a
/// record left `submitting` by a client that stopped, and stores what it learned in the ledger.
pub(super) async fn refresh(
    ledger: &Ledger,
    record: &Record,
    backend: &Arc<DynBackend>,
    within: Duration,
) -> Result<JobStatus> {
    let run_id = &record.identity.run_id;
    if record.state == JobState::Submitting {
        if ledger.submit_in_progress(run_id) {
            return Ok(status_of(JobState::Submitting, "another theseus is submitting it right now".into()));
        }
        if is_placeholder(&record.handle) {
            let status = status_of(
                JobState::Unknown,
                format!(
                    "{STOPPED_DURING_SUBMIT}; host `{}` cannot look the run up from what was recorded before submit",
                    record.host
                ),
            );
            save(ledger, run_id, &status)?;
            return Ok(status);
        }
    }
    let answer = tokio::time::timeout(within, backend.status(&record.handle)).await.map_err(|_| {
        anyhow!("host `{}` did not answer within {}s about run {run_id}", record.host, within.as_secs())
    })?;
    let status = match answer {
        Ok(status) => status,
        // Backends that delete finished, cancelled or replaced jobs (Volcano) cannot report them
        // any more: the ledger's last known state is the answer, and says so.
        Err(theseus_core::Error::NotFound { what }) => {
            let status = match record.state {
                state if state.is_terminal() => JobStatus {
                    state,
                    exit_code: record.exit_code,
                    message: Some(format!("last known state; {what} no longer exists")),
                    ranks: Vec::new(),
                },
                JobState::Submitting => status_of(
                    JobState::Unknown,
                    format!("{STOPPED_DURING_SUBMIT}; host `{}` has no such run ({what} not found)", record.host),
                ),
                JobState::Unknown => status_of(
                    JobState::Unknown,
                    record.message.clone().unwrap_or_else(|| format!("{what} no longer exists")),
                ),
                _ => status_of(
                    JobState::Unknown,
                    format!("{what} no longer exists on host `{}` (replaced, deleted or cleaned up)", record.host),
                ),
            };
            if !record.state.is_terminal() {
                save(ledger, run_id, &status)?;
            }
            return Ok(status);
        }
        Err(e) => return Err(e.into()),
    };
    let mut status = status;
    if status.state == JobState::Submitting && stopped_during_submit(ledger, record) {
        // The backend sees a submit under way (its claim, its helper); the ledger knows that
        // the client doing it is gone (its lock is free), so it will never finish.
        let seen = status.message.take().unwrap_or_else(|| "the submit had started".into());
        status = status_of(JobState::Unknown, format!("{STOPPED_DURING_SUBMIT}; host `{}` says: {seen}", record.host));
    }
    if record.state.is_terminal() && status.state == record.state && record.message.is_some() {
        // The ledger's reason ("replaced by run R") says more than the backend's ("cancelled").
        status.message = record.message.clone();
    }
    save(ledger, run_id, &status)?;
    Ok(status)
}

fn save(ledger: &Ledger, run_id: &str, status: &JobStatus) -> Result<()> {
    ledger.update_state(run_id, status.state, status.exit_code, status.message.as_deref())?;
    Ok(())
}

fn print_status(ctx: &Context, record: &Record, status: &JobStatus) -> Result<()> {
    if ctx.output == OutputFormat::Json {
        return super::print_json(
            &json!({"name": record.identity.name, "run_id": record.identity.run_id, "host": record.host, "status": status}),
        );
    }
    let code = status.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
    println!("{} {} on {}: {}{}", record.identity.name, record.identity.run_id, record.host, status.state, code);
    if let Some(m) = &status.message {
        println!("  {m}");
    }
    if status.ranks.len() > 1 {
        for r in &status.ranks {
            let code = r.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
            println!("  rank {}: {}{}", r.rank, r.state, code);
        }
    }
    Ok(())
}

pub(crate) async fn status(ctx: &Context, args: TargetArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger_for_reading()?;
    let (record, backend) = find(ctx, &ledger, &args.job)?;
    let status = refresh(&ledger, &record, &backend, answer_within(ctx.config().ok().as_ref(), &record.host)).await?;
    print_status(ctx, &record, &status)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn logs(ctx: &Context, args: LogsArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger_for_reading()?;
    let (record, backend) = find(ctx, &ledger, &args.job)?;
    if args.follow {
        // Following an existing run says why it has not started but never cancels it.
        let run = (&record.handle, record.identity.run_id.as_str());
        return follow(ctx, &backend, &ledger, run, args.rank, (None, false)).await;
    }
    let mut stream = backend.logs(&record.handle, &LogOptions { follow: false, rank: args.rank }).await?;
    while let Some(line) = stream.next().await {
        print_line(&line?);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_line(line: &theseus_core::backend::LogLine) {
    match (&line.source, line.rank) {
        (Some(source), _) => println!("[{source}] {}", line.text),
        (None, Some(r)) => println!("[rank-{r}] {}", line.text),
        (None, None) => println!("{}", line.text),
    }
}

/// Streams a job's output until it ends, stores the final state and returns the exit code: 0
/// when completed, the job's exit code (else 1) otherwise. A signal (SIGINT, SIGTERM) stops
/// following and leaves the job running, as `kubectl logs -f` and `docker logs -f` do: the
/// program ends with [`Interrupted`], which says how to follow again or stop the job. A job that
/// does not start within its backend's start timeout, or can never start, is cancelled (`submit --follow`).
pub(crate) async fn follow_to_end(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    ledger: &Ledger,
    handle: &JobHandle,
    run_id: &str,
    rank: Option<u32>,
) -> Result<ExitCode> {
    follow(ctx, backend, ledger, (handle, run_id), rank, (backend.start_timeout(), true)).await
}

/// [`follow_to_end`], cancelling the job when it has not started after `start_timeout`.
async fn follow(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    ledger: &Ledger,
    (handle, run_id): (&JobHandle, &str),
    rank: Option<u32>,
    (start_timeout, give_up_never): (Option<std::time::Duration>, bool),
) -> Result<ExitCode> {
    let detached = |signal| Interrupted {
        signal,
        what: format!(
            "stopped following run {run_id}, which keeps running (`theseus logs -f {run_id}` follows it again, `theseus cancel {run_id}` stops it)"
        ),
    };
    let options = LogOptions { follow: true, rank };
    let mut stream = tokio::select! {
        biased;
        signal = interrupt::wait() => return Err(detached(signal).into()),
        stream = backend.logs(handle, &options) => stream?,
    };
    // Until the job starts, its status says why it waits (see `start.rs`).
    let mut start = StartProgress::new(start_timeout);
    let began = std::time::Instant::now();
    let mut look = tokio::time::interval(std::time::Duration::from_secs(2));
    loop {
        tokio::select! {
            biased;
            signal = interrupt::wait() => return Err(detached(signal).into()),
            line = stream.next() => match line {
                Some(line) => {
                    start.mark_started();
                    print_line(&line?);
                }
                None => break,
            },
            _ = look.tick(), if !start.started() => {
                let status = match backend.status(handle).await {
                    Ok(status) => status,
                    Err(e) => {
                        tracing::debug!("status while waiting for {run_id} to start: {e}");
                        continue;
                    }
                };
                match start.observe(&status, began.elapsed()) {
                    StartStep::Say(reason) => {
                        ctx.info(format!("theseus: not started yet: {reason}"));
                        // A job that can never start is given up now, not after the start timeout.
                        if give_up_never && status.state == JobState::Pending
                            && let Ok(Ok(Some(never))) =
                                tokio::time::timeout(STATUS_TIMEOUT, backend.never_starts(handle)).await
                        {
                            return give_up_never_starts(ctx, backend, ledger, handle, run_id, &never).await;
                        }
                    }
                    StartStep::TimedOut(reason) => return give_up_start(ctx, backend, ledger, handle, run_id, &start, &reason).await,
                    StartStep::Nothing | StartStep::Started => {}
                }
            }
        }
    }
    let status = backend.status(handle).await?;
    save(ledger, run_id, &status)?;
    let code = status.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
    ctx.info(format!("theseus: run {run_id} {}{code}", status.state));
    if let Some(m) = &status.message {
        ctx.info(format!("theseus: {m}"));
    }
    Ok(match status.state {
        JobState::Completed => ExitCode::SUCCESS,
        _ => ExitCode::from(status.exit_code.filter(|c| (1..=255).contains(c)).unwrap_or(1) as u8),
    })
}

/// A followed job that can never start as its cluster is: cancelled at once with the reason,
/// recorded, exit 1.
async fn give_up_never_starts(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    ledger: &Ledger,
    handle: &JobHandle,
    run_id: &str,
    reason: &str,
) -> Result<ExitCode> {
    ctx.info(format!("theseus: run {run_id} can never start: {reason}"));
    ctx.info(format!("theseus: cancelling run {run_id}"));
    let cancelled = backend.cancel(handle).await?;
    let status = JobStatus {
        state: JobState::Cancelled,
        exit_code: None,
        message: Some(format!("can never start: {reason}")),
        ranks: cancelled.ranks,
    };
    save(ledger, run_id, &status)?;
    Ok(ExitCode::from(1))
}

/// A followed job that did not start within its backend's start timeout: cancelled (nothing of
/// it is left), recorded with the reason, exit 1.
async fn give_up_start(
    ctx: &Context,
    backend: &Arc<DynBackend>,
    ledger: &Ledger,
    handle: &JobHandle,
    run_id: &str,
    start: &StartProgress,
    reason: &str,
) -> Result<ExitCode> {
    let secs = start.timeout().map(|t| t.as_secs()).unwrap_or_default();
    ctx.info(format!("theseus: run {run_id} did not start within {secs} s: {reason}"));
    ctx.info(format!("theseus: cancelling run {run_id}"));
    let cancelled = backend.cancel(handle).await?;
    let status = JobStatus {
        state: JobState::Cancelled,
        exit_code: None,
        message: Some(format!("did not start within {secs} s: {reason}")),
        ranks: cancelled.ranks,
    };
    save(ledger, run_id, &status)?;
    Ok(ExitCode::from(1))
}

pub(crate) async fn cancel(ctx: &Context, args: TargetArgs) -> Result<ExitCode> {
    let ledger = ctx.ledger()?;
    let (record, backend) = find(ctx, &ledger, &args.job)?;
    if record.state == JobState::Submitting && ledger.submit_in_progress(&record.identity.run_id) {
        return Err(anyhow!(
            "run {} is being submitted right now; cancel it once its submit has returned",
            record.identity.run_id
        ));
    }
    if is_placeholder(&record.handle) {
        let status =
            refresh(&ledger, &record, &backend, answer_within(ctx.config().ok().as_ref(), &record.host)).await?;
        print_status(ctx, &record, &status)?;
        return Ok(ExitCode::SUCCESS);
    }
    let status = match backend.cancel(&record.handle).await {
        // Stopped, and nothing will start it again: its client is gone.
        Ok(status) if !status.state.is_terminal() && stopped_during_submit(&ledger, &record) => status_of(
            JobState::Cancelled,
            format!(
                "{STOPPED_DURING_SUBMIT}; stopped what it had started (host `{}` said: {})",
                record.host,
                status.message.as_deref().unwrap_or(status.state.as_str())
            ),
        ),
        Ok(status) => status,
        // A client killed before it made anything: nothing runs, and nothing ever will (no
        // client works on it), so the run is settled as cancelled.
        Err(theseus_core::Error::NotFound { what }) if stopped_during_submit(&ledger, &record) => status_of(
            JobState::Cancelled,
            format!("{STOPPED_DURING_SUBMIT} before it started anything ({what} not found); nothing to stop"),
        ),
        Err(e) => return Err(e.into()),
    };
    save(&ledger, &record.identity.run_id, &status)?;
    print_status(ctx, &record, &status)?;
    Ok(ExitCode::SUCCESS)
}
