//! Plain-SSH and Slurm backends for theseus.
//!
//! So far this crate holds only the pure part: no SSH, no `Backend` impl yet (see issue 4), so
//! the CLI still reports plain and slurm hosts as unsupported. What exists:
//!
//! - [`nodelist`]: expands Slurm host lists (`node[01-03],gpu5`);
//! - [`parse`]: parsers for `sinfo`, `squeue`, `sacct` and `nvidia-smi` output, each with the
//!   exact command the backend will run as a constant;
//! - [`sbatch`]: typed `#SBATCH` directives and the rendered batch script.

pub mod nodelist;
pub mod parse;
pub mod plain;
pub mod sbatch;
pub mod ssh;
