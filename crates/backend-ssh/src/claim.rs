//! One live job per (project, group, name) on a host, shared by the plain and Slurm backends.
//!
//! Every job name has a dir on the host, the parent of its runs' status dirs
//! (`<status>/<project>/<group>/<name>`). In it, `.live` names the run that owns the name and
//! `.lock` is a `flock(1)` lock held by every script that reads or changes `.live`:
//!
//! - the claim ([`claim_body!`], before anything is shipped): under the lock, when `.live` names
//!   another run that is still live (the backend's `live` shell function: a process of the run on
//!   a plain host, a non-terminal Slurm job from `squeue`; a run that is claimed but not yet started
//!   counts as live while its claim is younger than the stale limit), print `held=RUN` and stop;
//!   else write our run id into `.live` (by rename) and the claim time into our run dir;
//! - the start ([`start_check!`], in the launch and sbatch scripts): under the lock, the run
//!   starts only while `.live` still names it and it was not cancelled; a run whose name was
//!   taken over (by `--replace`) while its code was shipped exits [`REPLACED`] without starting;
//! - the release ([`RELEASE`]): a submit that fails after claiming gives the name back.
//!
//! This is the lock-file-plus-record pattern of tools that must keep one instance per name on a
//! shared file system (e.g. Slurm's own `StateSaveLocation` lock, `flock`-guarded cron jobs):
//! the check and the record happen under one lock, so two submits cannot both see a free name.
//! `flock` works on local file systems and on NFSv4 (where Linux maps it to a POSIX lock).

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use theseus_core::backend::SubmitOptions;
use theseus_core::job::JobIdentity;
use theseus_core::{Error, Result};

use crate::ssh::{RemoteCommand, SshHost};

/// Exit code of the start scripts when the run no longer owns its name.
pub const REPLACED: i32 = 75;

/// How long a submit may wait for another submit's lock of the same name.
pub const LOCK_WAIT_SECONDS: u32 = 120;

/// Shell text (sh) of the claim: `NAME_DIR RUN_ID STALE_SECONDS`. Needs a shell function
/// `live RUN_ID` (status 0 when that run is still live) defined before it; `$dir` and `$stale`
/// are set for it. Prints `claimed=RUN_ID`, or `held=RUN` plus `job=SLURM_JOB` (when known) and
/// `submitting=1` (when the holder has not started yet).
#[doc(hidden)]
#[macro_export]
macro_rules! __claim_body {
    () => {
        r#"
dir=$1; me=$2; stale=$3
fresh() {
  t=$(cat -- "$1/claimed" 2>/dev/null || true)
  case $t in ''|*[!0-9]*) return 1 ;; esac
  [ $(( $(date +%s) - t )) -lt "$stale" ]
}
mkdir -p -- "$dir"
exec 9>>"$dir/.lock"
flock -w 120 9 || { echo "waited 120 s for the lock $dir/.lock" >&2; exit 5; }
cur=$(cat -- "$dir/.live" 2>/dev/null || true)
if [ -n "$cur" ] && [ "$cur" != "$me" ] && live "$cur"; then
  echo "held=$cur"
  [ -r "$dir/$cur/slurm_job" ] && echo "job=$(cat -- "$dir/$cur/slurm_job")"
  [ -e "$dir/$cur/supervisor.pid" ] || [ -e "$dir/$cur/slurm_job" ] || echo "submitting=1"
  exit 0
fi
mkdir -p -- "$dir/$me"
date +%s > "$dir/$me/claimed"
printf '%s\n' "$me" > "$dir/.live.$me"
mv -f -- "$dir/.live.$me" "$dir/.live"
echo "claimed=$me"
"#
    };
}
#[doc(inline)]
pub use __claim_body as claim_body;

/// Shell text of the start check, for scripts that set `$namedir`, `$run_dir` and `$me`: takes
/// the name's lock (held on fd 9 until the script ends: close it in what it starts, `9>&-`) and
/// exits [`REPLACED`] printing `held=RUN` on stderr unless `.live` still names `$me` and the run was not
/// cancelled.
#[doc(hidden)]
#[macro_export]
macro_rules! __start_check {
    () => {
        r#"
exec 9>>"$namedir/.lock"
flock -w 120 9 || { echo "waited 120 s for the lock $namedir/.lock" >&2; exit 5; }
owner=$(cat -- "$namedir/.live" 2>/dev/null || true)
if [ -e "$run_dir/cancelled" ]; then echo "cancelled=1" >&2; exit 75; fi
if [ "$owner" != "$me" ]; then echo "held=$owner" >&2; exit 75; fi
"#
    };
}
#[doc(inline)]
pub use __start_check as start_check;

/// `NAME_DIR RUN_ID`: gives the name back when `.live` still names the run.
pub const RELEASE: &str = r#"dir=$1
[ -d "$dir" ] || exit 0
exec 9>>"$dir/.lock"
flock -w 120 9 || exit 5
[ "$(cat -- "$dir/.live" 2>/dev/null || true)" = "$2" ] && rm -f -- "$dir/.live"
exit 0
"#;

/// Where and how a backend claims a name.
pub struct ClaimSpec<'a> {
    /// The backend, for errors.
    pub backend: &'a (dyn Display + Sync),
    /// The host's name in the config, for messages.
    pub host: &'a str,
    /// The connection.
    pub ssh: &'a SshHost,
    /// The backend's claim script (a `live` function followed by [`claim_body!`]).
    pub script: &'static str,
    /// The dir of the job's name on the host.
    pub dir: &'a str,
    /// [`ClaimSpec::script`]'s stale limit.
    pub stale: Duration,
    /// Timeout of a short remote command (the lock wait is added).
    pub timeout: Duration,
}

/// Claims `identity`'s name before anything is shipped. When a live run holds it: without
/// `options.replace`, fails with [`already_running`]; with it, `stop(run, slurm_job)` stops
/// that run (confirmed) and the claim is tried again, also when another replacing submit took
/// the name meanwhile (which then loses it, see [`start_check!`]).
pub async fn take<F, Fut>(spec: &ClaimSpec<'_>, identity: &JobIdentity, options: &SubmitOptions, stop: F) -> Result<()>
where
    F: Fn(String, Option<String>) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    const ATTEMPTS: usize = 5;
    let name = &identity.name;
    let stale = spec.stale.as_secs().max(1).to_string();
    let cmd = RemoteCommand::script(spec.script, [spec.dir.to_owned(), identity.run_id.clone(), stale])
        .label(format!("the claim of job name `{name}` (flock {}/.lock)", spec.dir))
        .timeout(spec.timeout + Duration::from_secs(LOCK_WAIT_SECONDS.into()));
    for _ in 0..ATTEMPTS {
        let out = spec.ssh.run(&cmd).await.map_err(|e| Error::Backend {
            backend: spec.backend.to_string(),
            message: format!("failed to claim job name `{name}`"),
            source: Some(Box::new(e)),
        })?;
        let (run, job, submitting) = match parse_claim(&out.stdout_text()) {
            Some(Claim::Claimed) => return Ok(()),
            Some(Claim::Held { run, job, submitting }) => (run, job, submitting),
            None => {
                return Err(Error::backend(
                    spec.backend,
                    format!("the claim of job name `{name}` printed nothing usable: `{}`", out.stdout_text().trim()),
                ));
            }
        };
        if !options.replace {
            return Err(already_running(name, &run, spec.host, submitting));
        }
        options.note(&format!("stopping run {run} of job `{name}` (--replace)"));
        match stop(run, job).await {
            Ok(()) | Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Err(Error::backend(
        spec.backend,
        format!(
            "could not take job name `{name}` after {ATTEMPTS} attempts: other submits with --replace keep taking it"
        ),
    ))
}

/// What the claim printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The name is ours.
    Claimed,
    /// Another live run holds it.
    Held {
        /// Its run id.
        run: String,
        /// Its Slurm job id, when it has one.
        job: Option<String>,
        /// Whether it is still being submitted (claimed, not started).
        submitting: bool,
    },
}

/// Reads the claim's output; `None` when it printed neither line.
pub fn parse_claim(text: &str) -> Option<Claim> {
    let mut held = None;
    let (mut job, mut submitting) = (None, false);
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once('=') else { continue };
        match key {
            "claimed" => return Some(Claim::Claimed),
            "held" if !value.is_empty() => held = Some(value.to_owned()),
            "job" if !value.is_empty() => job = Some(value.to_owned()),
            "submitting" => submitting = value == "1",
            _ => {}
        }
    }
    held.map(|run| Claim::Held { run, job, submitting })
}

/// The `held=` line (stderr) of a start script that exited [`REPLACED`].
pub fn parse_held(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.trim().strip_prefix("held=")).filter(|v| !v.is_empty()).map(str::to_owned)
}

/// The dir of a job name: the parent of `run_dir`, which must end in `/<run_id>`.
pub fn name_dir<'a>(run_dir: &'a str, run_id: &str) -> Option<&'a str> {
    run_dir.strip_suffix(run_id)?.strip_suffix('/').filter(|d| !d.is_empty())
}

/// The error of a submit whose name is held by live run `run` on `host`.
pub fn already_running(name: &str, run: &str, host: &str, submitting: bool) -> Error {
    // Worded like the local backend's; the CLI adds how to replace it.
    let how = if submitting { " (being submitted right now)" } else { "" };
    Error::AlreadyExists { what: format!("live run `{run}` of job `{name}` on host `{host}`{how}") }
}

/// The error of a submit whose start script exited [`REPLACED`] (stderr `stderr`): the run was
/// cancelled while its code was shipped, or another run took its name.
pub fn lost(backend: &dyn Display, name: &str, run: &str, host: &str, stderr: &str) -> Error {
    if stderr.lines().any(|l| l.trim() == "cancelled=1") {
        return Error::backend(
            backend,
            format!(
                "run {run} of job `{name}` was cancelled on host `{host}` while it was being submitted; nothing was started"
            ),
        );
    }
    let by = parse_held(stderr).map_or_else(|| "another run".to_owned(), |b| format!("run {b}"));
    Error::AlreadyExists {
        what: format!(
            "{by} of job `{name}` on host `{host}`, which took the name while run {run} was being submitted \
             (run {run} was not started)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLURM_LIVE: &str = "live() { return 0; }\n";

    #[test]
    fn scripts_are_valid_shell() {
        let claim = format!("{SLURM_LIVE}{}", claim_body!());
        let start = format!("namedir=$1; run_dir=$2; me=$3\n{}", start_check!());
        for (name, script) in [("claim", claim.as_str()), ("start", start.as_str()), ("release", RELEASE)] {
            let out = std::process::Command::new("sh").arg("-n").arg("-c").arg(script).output().unwrap();
            assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        }
        assert!(start_check!().contains(&format!("exit {REPLACED}")));
        assert!(claim_body!().contains(&format!("flock -w {LOCK_WAIT_SECONDS} ")));
    }

    #[test]
    fn claim_outputs() {
        assert_eq!(parse_claim("claimed=r1\n"), Some(Claim::Claimed));
        assert_eq!(
            parse_claim("held=r0\njob=12\n"),
            Some(Claim::Held { run: "r0".into(), job: Some("12".into()), submitting: false })
        );
        assert_eq!(
            parse_claim("held=r0\nsubmitting=1\n"),
            Some(Claim::Held { run: "r0".into(), job: None, submitting: true })
        );
        assert_eq!(parse_claim("noise\n"), None);
        assert_eq!(parse_held("held=r2\n").as_deref(), Some("r2"));
        assert_eq!(parse_held("held=\n"), None);
    }

    #[test]
    fn name_dirs() {
        assert_eq!(name_dir("/s/p/g/n/r1", "r1"), Some("/s/p/g/n"));
        assert_eq!(name_dir("/s/p/g/n/xr1", "r1"), None);
        assert_eq!(name_dir("/r1", "r1"), None);
    }

    #[test]
    fn the_message_names_the_live_run() {
        let text = already_running("train", "20261124-1-abc", "gpu1", false).to_string();
        assert_eq!(text, "live run `20261124-1-abc` of job `train` on host `gpu1` already exists");
        let text = already_running("train", "r2", "gpu1", true).to_string();
        assert!(text.contains("(being submitted right now)"), "{text}");
    }
}
