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

/// `LOG_FILE`: the log so far (nothing when it does not exist yet).
pub const CAT_LOG: &str = r#"[ -e "$1" ] || exit 0
exec cat -- "$1"
"#;

/// The loop of a log follow script: sets `over=1` when the backend's `finished` function
/// (defined before; its argument counts the rounds, so that a costly check can run every few
/// rounds only) says the run is over, then sends the bytes of `$log` after `$off`, and stops
/// after the read that followed the end. The end is decided
/// *before* each read, so everything written before the run ended is sent.
#[doc(hidden)]
#[macro_export]
macro_rules! __follow_loop {
    () => {
        r#"off=0; k=0
while :; do
  over=0
  if finished "$k"; then over=1; fi
  k=$((k + 1))
  size=$(stat -c %s -- "$log" 2>/dev/null || echo 0)
  if [ "$size" -gt "$off" ]; then
    tail -c +$((off + 1)) -- "$log" | head -c $((size - off))
    off=$size
  fi
  [ "$over" = 1 ] && exit 0
  sleep 0.2
done
"#
    };
}
#[doc(inline)]
pub use __follow_loop as follow_loop;

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
        const FOLLOW: &str = concat!("log=$1\nfinished() { return 0; }\n", follow_loop!());
        assert_valid_shell(&[
            ("prologue", start_prologue!(), "bash"),
            ("cat", CAT_LOG, "sh"),
            ("follow loop", FOLLOW, "sh"),
            ("plain launch", plain::scripts::LAUNCH, "bash"),
            ("plain claim", plain::scripts::CLAIM, "sh"),
            ("plain status", plain::scripts::STATUS, "sh"),
            ("plain cancel", plain::scripts::CANCEL, "sh"),
            ("plain follow", plain::scripts::FOLLOW_LOG, "sh"),
        ]);
    }
}
