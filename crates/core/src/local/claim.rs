//! One name, one live job: the claim a local `submit` holds on a job name while it checks for a
//! live run, ships and starts.
//!
//! The claim is an advisory lock (`flock`, through [`std::fs::File::try_lock`]) on
//! `<status>/<project>/<group>/<name>/.submit.lock`, taken before anything is shipped and
//! released when `submit` returns (or its process dies: the kernel drops the lock with the open
//! file, so a crashed client never leaves a stale claim). Holding it, `submit` looks for a live
//! run of the name among the run dirs next to the lock; a second `submit` of the name that finds
//! the lock taken fails at once. This is what `git` does with `index.lock`, with a kernel lock
//! instead of `O_EXCL` so that a crash cannot leave it behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// File name of the lock in a job name's status dir.
pub const LOCK_FILE: &str = ".submit.lock";

/// A held claim on one job name; released on drop.
#[derive(Debug)]
pub(crate) struct NameClaim {
    _file: File,
}

/// Why a claim could not be taken.
#[derive(Debug)]
pub(crate) enum Busy {
    /// Another process holds it, submitting this run (as far as it wrote its id).
    Held { run_id: String },
}

impl NameClaim {
    /// Takes the claim on the name whose status dir is `name_dir`, for run `run_id`, without
    /// waiting.
    pub(crate) fn try_acquire(name_dir: &Path, run_id: &str) -> Result<std::result::Result<NameClaim, Busy>> {
        std::fs::create_dir_all(name_dir).map_err(|e| Error::io("create", name_dir, e))?;
        let path: PathBuf = name_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("open", &path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Ok(Err(Busy::Held { run_id: holder.trim().to_owned() }));
            }
            Err(TryLockError::Error(e)) => return Err(Error::io("lock", &path, e)),
        }
        // Who holds it, for the message of the one that finds it taken.
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = file.write_all(run_id.as_bytes());
        Ok(Ok(NameClaim { _file: file }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_claim_fails_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = NameClaim::try_acquire(dir.path(), "run-1").unwrap().unwrap();
        match NameClaim::try_acquire(dir.path(), "run-2").unwrap() {
            Err(Busy::Held { run_id }) => assert_eq!(run_id, "run-1"),
            Ok(_) => panic!("two claims of one name"),
        }
        drop(first);
        assert!(NameClaim::try_acquire(dir.path(), "run-3").unwrap().is_ok());
    }
}
