//! Plain-SSH and Slurm backends for theseus.
//!
//! - [`ssh`]: the SSH transport (one multiplexed `openssh` session per host, argv commands,
//!   retries, a per-host command limit, stdin and stdout streaming);
//! - [`plain`]: the `Backend` of `type: plain` hosts, over [`ssh`];
//! - [`slurm`]: the `Backend` of `type: slurm` hosts, over [`ssh`], [`sbatch`] and [`parse`];
//! - [`remote`]: [`remote::SshBackend`], what both backends are made of (a host entry over one
//!   SSH connection, its cluster's dirs, the middle of a submit);
//! - `ship` (internal): shipping a run's code through the cluster's store, shared by both
//!   backends; `run_dir` (internal): the run-dir scripts both share;
//! - `claim` (internal): one live job per name on a host, shared by both backends;
//! - `reclaim` (internal): `reclaim` and `usage` of both backends, through core's store scripts;
//! - [`nodelist`]: expands Slurm host lists (`node[01-03],gpu5`);
//! - [`parse`]: parsers for `sinfo`, `squeue`, `sacct` and `nvidia-smi` output, each with the
//!   exact command the backend will run as a constant;
//! - [`sbatch`]: typed `#SBATCH` directives and the rendered batch script.

mod claim;
mod logs;
mod never;
pub mod nodelist;
pub mod parse;
mod paths;
pub mod plain;
mod reclaim;
pub mod remote;
mod run_dir;
pub mod sbatch;
mod ship;
pub mod slurm;
pub mod ssh;
pub mod store_shell;
