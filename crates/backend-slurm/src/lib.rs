//! The Slurm backend of theseus, over the SSH transport and remote run dirs of
//! `theseus-backend-ssh`.
//!
//! - [`host`]: the `slurm` host type ([`host::SlurmType`], one line of the CLI's registry) over
//!   the settings of [`config`] and the solver rule of [`fit`];
//! - [`slurm`]: the `Backend` of `type: slurm` hosts, over [`sbatch`] and [`parse`];
//! - [`nodelist`]: expands Slurm host lists (`node[01-03],gpu5`);
//! - [`parse`]: parsers for `sinfo`, `squeue` and `sacct` output, each with the exact command the
//!   backend will run as a constant;
//! - [`sbatch`]: typed `#SBATCH` directives and the rendered batch script.

pub mod config;
pub mod fit;
pub mod host;
pub mod nodelist;
pub mod parse;
pub mod placement;
pub mod sbatch;
pub mod slurm;

pub use config::{KIND, SlurmHost};
pub use host::SlurmType;
