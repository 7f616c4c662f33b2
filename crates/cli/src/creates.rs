//! What a submit would create that is billed or outlives the job (a cloud VM:
//! `Backend::creates`): `plan` and `submit --dry-run` list it under `will create:`, and
//! `submit` and `repl` create it only when the user confirmed: `--yes`, or `y` typed at the
//! `Create? [y/N]` question when stdin and stderr are terminals. Otherwise the submit is
//! refused before anything is shipped, naming `--yes`.

use std::io::IsTerminal as _;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use theseus_core::backend::{DynBackend, PreparedJob};

use crate::context::Context;

/// How long the host may take to say what it would create.
const TIMEOUT: Duration = Duration::from_secs(60);

/// How long the question waits for an answer (no answer: no).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

/// The backend's list for `job`, bounded by [`TIMEOUT`]; an error as one line.
pub(crate) async fn listed(backend: &DynBackend, job: &PreparedJob) -> Result<Vec<String>, String> {
    bounded(backend.creates(job)).await
}

/// `work` (a `creates` call) within [`TIMEOUT`]; an error as one line.
pub(crate) async fn bounded<E: std::fmt::Display>(
    work: impl std::future::Future<Output = Result<Vec<String>, E>>,
) -> Result<Vec<String>, String> {
    match tokio::time::timeout(TIMEOUT, work).await {
        Ok(Ok(lines)) => Ok(lines),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {}s", TIMEOUT.as_secs())),
    }
}

/// The `will create:` lines of `plan` and the dry run (`prefix` starts each line), or the
/// line saying why they are not known; nothing when nothing would be created.
pub(crate) fn render(listed: &Result<Vec<String>, String>, prefix: &str) -> String {
    match listed {
        Ok(lines) if lines.is_empty() => String::new(),
        Ok(lines) => {
            let mut out = format!("{prefix}will create:\n");
            for line in lines {
                out.push_str(&format!("{prefix}  - {line}\n"));
            }
            out
        }
        Err(e) => format!("{prefix}will create: unknown, the host did not say: {e}\n"),
    }
}

/// Before a submit to `backend`: what it would create, confirmed by `yes` (`--yes`) or by the
/// user on a terminal. `Ok(true)`: confirmed; `Ok(false)`: it creates nothing, so nothing was
/// confirmed. An error (nothing shipped or created yet): the host could not say, the user
/// said no, or there is no terminal to ask on and no `--yes`.
pub(crate) async fn confirm(ctx: &Context, backend: &DynBackend, job: &PreparedJob, yes: bool) -> Result<bool> {
    let lines = listed(backend, job).await.map_err(|e| {
        anyhow!("cannot tell what submitting to {} would create: {e}; nothing was created", job.plan.host)
    })?;
    if lines.is_empty() {
        return Ok(yes);
    }
    if yes {
        for line in &lines {
            ctx.info(format!("theseus: creating (--yes): {line}"));
        }
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        bail!(
            "submitting to {} would create: {}; pass --yes to create it (there is no terminal to ask on); nothing \
             was created",
            job.plan.host,
            lines.join("; ")
        );
    }
    eprint!("{}", render(&Ok(lines), "theseus: "));
    eprint!("Create? [y/N] ");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    });
    let answer = crate::signals::or_interrupted(async {
        Ok(match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
            Ok(Ok(Ok(line))) => line,
            _ => String::new(),
        })
    })
    .await?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES") {
        return Ok(true);
    }
    bail!("not confirmed: nothing was created (answer `y`, or pass --yes)")
}
