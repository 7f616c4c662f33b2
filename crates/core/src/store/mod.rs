//! The content-addressed code store every backend ships through.
//!
//! Each cluster keeps, under its work root, an object store: [`OBJECTS_DIR`]
//! (`<work>/.theseus/objects/ab/cdef…`), one read-only file per distinct file content, named by
//! its sha256 (plus `.x` for executable content, so that a hard link carries the right mode).
//! Shipping a run is three steps, each a POSIX `sh` script run next to the store through a
//! [`Shell`] (the local machine, an SSH connection, a kube exec stream), with every value passed
//! as a positional argument and every data stream as a tar archive on stdin:
//!
//! 1. [`scripts::MISSING`]: the keys of the snapshot's objects go in, the ones the store lacks
//!    come out (one round trip). It also checks the tools the protocol needs; a remote without
//!    them answers [`EXIT_NO_TOOL`] and the backend falls back to a full ship, said once.
//! 2. [`scripts::UPLOAD`]: only the missing objects, as one tar stream of a length known before
//!    a byte is read (so it is read once, streamed once, and never stored whole first), land in
//!    a private temp dir of the store, are hashed there (`sha256sum`, while the stream still
//!    arrives) against their names, made read-only, and renamed into place. The client hashes
//!    each file once (the keys); a file edited since is caught by the store's check. A crashed or concurrent upload never leaves a corrupt or half
//!    object under an object's name; two uploads of the same object both succeed.
//! 3. [`scripts::MATERIALIZE`]: the run's code dir is built under `<dest>.partial` from a tar
//!    of hard-link entries into the store ([`Materialize::Link`]) or of symlinks that `cp -RL`
//!    turns into private copies ([`Materialize::Copy`]), plus symlinks, the per-run bootstrap
//!    files and a token entry; it is renamed to `<dest>` only when the token arrived.
//!
//! Objects carry mtime 0 from their archive. A job that writes into a hard-linked object in
//! place (possible only for root) gives it a current mtime; [`scripts::MISSING`] drops such
//! objects, so a tampered object is never linked into a later run.
//!
//! A link-mode ship may also leave the snapshot's tree archive in the store ([`tree`]), from
//! which a pod builds a later run dir of the same code with no upload at all.
//!
//! The pure parts (keys, which objects to send, the archives) live in [`plan`] and [`archive`];
//! [`ship()`] drives a [`Shell`]; [`LocalShell`] runs the scripts on this machine, and
//! [`ship_local`] does the same three steps in-process, for the local backend.

use std::fmt;
use std::io::{self, Write};
use std::sync::Arc;

use async_trait::async_trait;

pub mod archive;
mod local;
mod manifest;
mod native;
#[cfg(test)]
mod native_tests;
pub mod plan;
pub mod reclaim;
pub mod scripts;
mod ship;
pub mod sync;
#[cfg(test)]
mod tests;
pub mod tree;
#[cfg(test)]
mod tree_tests;

pub use archive::ExtraFile;
pub use local::LocalShell;
pub use native::ship_local;
pub use plan::{ObjectKey, StorePlan};
pub use ship::{ShipReport, ShipRequest, StoreError, plan_of, ship, ship_planned};
pub use tree::Tree;

/// The object store's dir, relative to a cluster's work root.
pub const OBJECTS_DIR: &str = ".theseus/objects";

/// Name of the last entry of a materialised run dir's archive (relative to the run dir); its
/// content is the token that proves the whole archive arrived. Removed before the rename.
pub const SENTINEL: &str = ".theseus/ship-complete";

/// Exit code of the scripts when the remote lacks a tool the protocol needs.
pub const EXIT_NO_TOOL: i32 = 40;
/// Exit code of [`scripts::UPLOAD`] when an object's content does not match its name.
pub const EXIT_CORRUPT: i32 = 41;
/// Exit code of [`scripts::MATERIALIZE`] when the run dir exists already.
pub const EXIT_EXISTS: i32 = 17;
/// Exit code of [`scripts::MATERIALIZE`] when an object it links is missing (a concurrent
/// `gc`): shipping starts over once.
pub const EXIT_OBJECT_GONE: i32 = 42;

pub use crate::cluster::Materialize;

/// A progress callback: bytes done so far, total if known.
pub type ProgressFn = Arc<dyn Fn(u64, Option<u64>) + Send + Sync>;

/// A status callback: one short line saying what is happening now ("uploading 3 objects").
pub type StatusFn = Arc<dyn Fn(&str) + Send + Sync>;

/// Writes a script's stdin. It may be called more than once (a transport that must know the
/// length of stdin first counts a pass) and writes the same bytes every time.
pub type StdinFn = Arc<dyn Fn(&mut dyn Write) -> io::Result<()> + Send + Sync>;

/// One run of a store script: `sh -c SCRIPT theseus-store ARGS...` with `stdin` fed to it.
#[derive(Clone)]
pub struct ScriptCall {
    /// The script (one of [`scripts`]).
    pub script: &'static str,
    /// Its positional arguments.
    pub args: Vec<String>,
    /// Its stdin; `None` for an empty one.
    pub stdin: Option<StdinFn>,
    /// The exact length of `stdin` when it is known without writing it. A script given one
    /// reads exactly that many bytes (`head -c`, its last argument) and checks what arrived
    /// itself (hashes of objects, a token entry), so a transport that cannot close stdin
    /// streams it once, with no counting pass and no copy on the remote disk.
    pub stdin_len: Option<u64>,
    /// Called with the bytes of stdin sent so far (the final pass only).
    pub progress: Option<ProgressFn>,
    /// What the call does, for messages ("the upload of missing objects").
    pub label: &'static str,
}

impl fmt::Debug for ScriptCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptCall").field("label", &self.label).field("args", &self.args).finish_non_exhaustive()
    }
}

/// How a script run failed.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// The script ran and exited non-zero.
    #[error("exited with status {code}: {}", stderr.trim())]
    Exit {
        /// Its exit status.
        code: i32,
        /// Its stderr (bounded by the transport).
        stderr: String,
    },
    /// The script could not be run or its connection broke.
    #[error("{0}")]
    Transport(Box<dyn std::error::Error + Send + Sync>),
}

/// The seam between the store protocol and a machine: runs a POSIX `sh` script there. The
/// local machine, an SSH connection and a kube exec stream each implement it.
#[async_trait]
pub trait Shell: Send + Sync {
    /// Runs `call` and returns its stdout.
    async fn run(&self, call: ScriptCall) -> Result<Vec<u8>, ShellError>;

    /// Where this shell runs, for messages (`host `gpu1``).
    fn describe(&self) -> String;
}
