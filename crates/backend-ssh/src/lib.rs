//! The SSH transport, the remote run dirs it serves, and the plain-SSH backend of theseus.
//!
//! - [`ssh`]: the SSH transport (one multiplexed `openssh` session per host, argv commands,
//!   retries, a per-host command limit, stdin and stdout streaming);
//! - [`plain`]: the `Backend` of `type: plain` hosts, over [`ssh`];
//! - [`remote`]: [`remote::SshBackend`], what every backend reached over SSH is made of (a host
//!   entry over one SSH connection, its cluster's dirs, the middle of a submit); the plain
//!   backend here and the Slurm backend of `theseus-backend-slurm` are built on it;
//! - `ship` (internal): shipping a run's code through the cluster's store, for
//!   [`remote::SshBackend`]; [`run_dir`]: the run-dir scripts every SSH backend shares;
//!   [`paths`]: where a run's dirs are on the remote side;
//! - [`claim`]: one live job per name on a host;
//! - [`reclaim`]: `reclaim` and `usage` through core's store scripts, with the runs the host sees
//!   live;
//! - [`store_shell`]: core's store scripts over the SSH connection;
//! - [`parse`]: parsers for remote command output (`nvidia-smi`), each with the exact command
//!   the backend will run as a constant;
//! - `testing` (feature `testing`): helpers the tests of every backend reached over SSH share.

pub mod claim;
mod logs;
pub mod parse;
pub mod paths;
pub mod plain;
pub mod reclaim;
pub mod remote;
pub mod run_dir;
mod ship;
pub mod ssh;
pub mod store_shell;
#[cfg(feature = "testing")]
pub mod testing;
