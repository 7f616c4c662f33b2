//! The remote run-dir scripts the plain and Slurm backends share, written once: the start of a
//! run (under its name's lock, secrets from stdin, the run's marker, from its code dir), the
//! log reads, and the secrets' stdin records.
//!
//! Every script is a constant run as `sh -c SCRIPT sh ARGS...` (`bash -c` where bash is
//! needed): values arrive as positional parameters, never as shell text.

use theseus_core::backend::PreparedJob;
use theseus_core::{Error, Result};

use crate::ssh::RemoteCommand;

/// The first part of a start script (bash), `RUN_DIR LOG_FILE WORK_DIR RUN_ID NAME_DIR PROGRAM`,
/// secrets on stdin as NUL-terminated `NAME=VALUE` records: creates the run and log dirs (Slurm
/// does not create its output file's dir); under the name's lock, and only while the run still
/// owns its name ([`crate::claim`]), exports the secrets and the run's marker and enters the
/// code dir. The backend's part follows, with `PROGRAM` in `$prog` and the lock held on fd 9.
#[doc(hidden)]
#[macro_export]
macro_rules! __start_prologue {
    () => {
        concat!(
            r#"set -e
run_dir=$1; log=$2; work=$3; me=$4; namedir=$5; prog=$6
mkdir -p -- "$run_dir" "$(dirname -- "$log")"
"#,
            $crate::claim::start_check!(),
            r#"
while IFS= read -r -d '' kv; do export "$kv"; done
export THESEUS_LOCAL_RUN="$me"
cd -- "$work"
"#
        )
    };
}
#[doc(inline)]
pub use __start_prologue as start_prologue;

/// Where a run starts: the arguments of a script made with [`start_prologue!`].
pub struct Start<'a> {
    pub run_dir: &'a str,
    pub log_file: &'a str,
    pub work_dir: &'a str,
    pub run_id: &'a str,
    pub name_dir: &'a str,
    /// The program the backend's part starts (the supervisor, the batch script).
    pub program: &'a str,
}

impl Start<'_> {
    /// `bash -c SCRIPT bash ARGS...` of `script` (a [`start_prologue!`] script).
    pub fn command(&self, script: &'static str) -> RemoteCommand {
        RemoteCommand::new("bash").arg("-c").arg(script).arg("bash").args([
            self.run_dir.to_owned(),
            self.log_file.to_owned(),
            self.work_dir.to_owned(),
            self.run_id.to_owned(),
            self.name_dir.to_owned(),
            self.program.to_owned(),
        ])
    }
}

/// The job's secrets as the start scripts read them: `NAME=VALUE` records, each ended by NUL.
pub fn secret_records(job: &PreparedJob) -> Result<Vec<u8>> {
    let mut secrets = Vec::new();
    for var in job.env.iter().filter(|v| v.secret) {
        if !theseus_core::shell::is_env_name(&var.name) || var.value.contains('\0') {
            return Err(Error::InvalidConfig(format!("secret `{}` cannot be passed to a process", var.name)));
        }
        secrets.extend_from_slice(format!("{}={}", var.name, var.value).as_bytes());
        secrets.push(0);
    }
    Ok(secrets)
}

/// `RUN_DIR NAME`: `present` and the file's first MiB ([`theseus_core::backend::RUN_FILE_LIMIT`]),
/// or `absent` (see [`theseus_core::backend::Backend::run_file`]).
pub const READ_RUN_FILE: &str = r#"[ -f "$1/$2" ] || { echo absent; exit 0; }
echo present
exec head -c 1048576 -- "$1/$2"
"#;

/// `LOG_FILE`: the log so far (nothing when it does not exist yet).
pub const CAT_LOG: &str = r#"[ -e "$1" ] || exit 0
exec cat -- "$1"
"#;

/// The loop of a log follow script (bash), after the backend's part has set `log` (the log
/// file), `watch` (a dir whose changes may mean the end: the run dir) and a `finished`
/// function: sends the bytes of `$log` after `$off` as they are written, and stops after the
/// read that followed the end. The end is decided *before* each read, so everything written
/// before the run ended is sent.
///
/// `finished COSTLY` says whether the run is over; `COSTLY` is 1 at most once a second (and in
/// the first round), when a costly check (a process scan, `squeue`) may run. It may set
/// `hurry=1` when the end is near: the next round then comes after 0.1 s.
///
/// Between rounds the loop waits for a change of the log (or of its dir while there is none)
/// or of `$watch`, seen by `inotifywait -m` where the host has it, for at most `$tick` seconds
/// (default 1; a backend whose files are written on other machines, which inotify does not
/// see, sets 0.2). A burst of writes makes one round. Without inotifywait, or when it cannot
/// watch (the inotify limits reached) or stops, a round comes every 0.2 s. A reader that goes
/// away ends the loop at its next write.
#[doc(hidden)]
#[macro_export]
macro_rules! __follow_loop {
    () => {
        r#"off=0; last=-1; hurry=0; watching=; tick=${tick:-1}
# (coproc needs bash 4; the eval keeps an older bash from parsing it.)
if [ "${BASH_VERSINFO[0]:-0}" -ge 4 ] && command -v inotifywait > /dev/null 2>&1; then
  target=$log; [ -e "$log" ] || target=$(dirname -- "$log")
  eval 'coproc THESEUS_WATCH { exec inotifywait -m -e modify,attrib,close_write,create,moved_to,delete_self -- "$target" "$watch" 2>&1; }'
  wpid=$THESEUS_WATCH_PID
  exec 3<&"${THESEUS_WATCH[0]}"
  trap 'kill "$wpid" 2> /dev/null' EXIT
  trap 'exit 1' HUP INT TERM
  while IFS= read -r -t 10 line <&3; do
    case $line in "Watches established"*) watching=1; break ;; esac
  done
  [ -n "$watching" ] || { kill "$wpid" 2> /dev/null; exec 3<&-; }
fi
pause() {
  if [ "$hurry" = 1 ] || [ -z "$watching" ]; then
    if [ "$hurry" = 1 ]; then sleep 0.1; else sleep 0.2; fi
    return 0
  fi
  if IFS= read -r -t "$tick" _ <&3; then
    # The events of a burst of writes make one round.
    sleep 0.05
    n=0
    while [ "$n" -lt 100000 ] && IFS= read -r -t 0.001 _ <&3; do n=$((n + 1)); done
  elif [ $? -le 128 ]; then
    # inotifywait stopped: a round every 0.2 s from now on.
    watching=
  fi
  return 0
}
while :; do
  over=0; costly=0
  if [ "$SECONDS" != "$last" ]; then costly=1; last=$SECONDS; fi
  if finished "$costly"; then over=1; fi
  size=$(stat -c %s -- "$log" 2>/dev/null || echo 0)
  if [ "$size" -gt "$off" ]; then
    tail -c +$((off + 1)) -- "$log" | head -c $((size - off)) || exit 1
    off=$size
  fi
  [ "$over" = 1 ] && exit 0
  pause
done
"#
    };
}
#[doc(inline)]
pub use __follow_loop as follow_loop;

/// `bash -c SCRIPT bash ARGS...` of a log follow script (one ending in [`follow_loop!`]).
pub fn follow_command<I, S>(script: &'static str, args: I) -> RemoteCommand
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    RemoteCommand::new("bash").arg("-c").arg(script).arg("bash").args(args)
}

/// Checks that each `(name, script, shell)` parses (`shell -n`).
#[cfg(test)]
fn assert_valid_shell(scripts: &[(&str, &str, &str)]) {
    for (name, script, shell) in scripts {
        let out = std::process::Command::new(shell).arg("-n").arg("-c").arg(script).output().unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every remote script of the plain backend parses.
    #[test]
    fn scripts_are_valid_shell() {
        use crate::plain;
        const FOLLOW: &str = concat!("log=$1; watch=$2\nfinished() { return 0; }\n", follow_loop!());
        assert_valid_shell(&[
            ("prologue", start_prologue!(), "bash"),
            ("cat", CAT_LOG, "sh"),
            ("read run file", READ_RUN_FILE, "sh"),
            ("follow loop", FOLLOW, "bash"),
            ("plain launch", plain::scripts::LAUNCH, "bash"),
            ("plain claim", plain::scripts::CLAIM, "sh"),
            ("plain status", plain::scripts::STATUS, "sh"),
            ("plain cancel", plain::scripts::CANCEL, "sh"),
            ("plain follow", plain::scripts::FOLLOW_LOG, "bash"),
        ]);
    }

    /// The follow loop, run here with `inotifywait` on `PATH` (where this host has it) and
    /// without: it sends the last line, written right before the end, and ends although the log
    /// is never written again; with inotifywait it waits on it (and leaves no watcher behind).
    #[test]
    fn the_follow_loop_sends_the_last_line_and_ends_without_another_write() {
        use std::io::Read as _;
        const SCRIPT: &str = concat!(
            "log=$1; watch=$2; rounds=$3\n",
            "finished() { echo \"${watching:-poll} ${wpid:-}\" >> \"$rounds\"; [ -e \"$watch/end\" ]; }\n",
            follow_loop!()
        );
        let which = |tool: &str| {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join(tool))
                .find(|p| p.is_file())
        };
        for inotify in [false, true] {
            let tools = tempfile::tempdir().unwrap();
            let mut names = vec!["stat", "tail", "head", "sleep", "dirname"];
            if inotify {
                if which("inotifywait").is_none() {
                    eprintln!("no inotifywait on this host (inotify-tools): only the polling loop was run");
                    continue;
                }
                names.push("inotifywait");
            }
            for name in names {
                std::os::unix::fs::symlink(which(name).unwrap(), tools.path().join(name)).unwrap();
            }
            let dir = tempfile::tempdir().unwrap();
            let (log, watch, rounds) = (dir.path().join("log"), dir.path().join("run"), dir.path().join("rounds"));
            std::fs::create_dir(&watch).unwrap();
            std::fs::write(&log, "first\n").unwrap();
            let mut child = std::process::Command::new(which("bash").unwrap())
                .args(["-c", SCRIPT, "bash"])
                .args([&log, &watch, &rounds])
                .env("PATH", tools.path())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdout = child.stdout.take().unwrap();
            let reader = std::thread::spawn(move || {
                let mut out = String::new();
                stdout.read_to_string(&mut out).map(|_| out)
            });
            let first_round = || std::fs::read_to_string(&rounds).unwrap_or_default();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while first_round().is_empty() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            // The last line, and the end right after it; nothing is written after.
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            std::io::Write::write_all(&mut f, b"last\n").unwrap();
            drop(f);
            std::fs::write(watch.join("end"), "0\n").unwrap();
            while child.try_wait().unwrap().is_none() {
                if std::time::Instant::now() > deadline {
                    child.kill().unwrap();
                    panic!("the follow loop did not end (inotify: {inotify}): rounds {:?}", first_round());
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert_eq!(reader.join().unwrap().unwrap(), "first\nlast\n", "inotify: {inotify}");
            let rounds = first_round();
            let watcher = rounds.lines().last().and_then(|l| l.strip_prefix("1 ")).map(str::to_owned);
            if !inotify {
                assert!(rounds.lines().all(|l| l.starts_with("poll")), "{rounds}");
                continue;
            }
            let pid = watcher.unwrap_or_else(|| panic!("the loop did not watch with inotifywait: {rounds}"));
            let proc = std::path::Path::new("/proc").join(pid.trim());
            while proc.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(!proc.exists(), "the loop left its inotifywait behind");
        }
    }
}
