//! Integration tests of the SSH transport and the plain backend against a real sshd on
//! 127.0.0.1 (see [`support`]), of the Slurm backend against the Slurm lab ([`slurm`]), and of
//! the parsers against recorded Slurm output ([`recorded`]); [`slurm_site`] runs it through the
//! lab's site traits (an sbatch wrapper, site formats, node-local `work`).

mod login_shell;
mod plain;
mod plain_lifecycle;
mod probe;
mod reclaim;
mod recorded;
mod slurm;
mod slurm_lifecycle;
mod slurm_login_env;
mod slurm_site;
mod store;
mod support;
mod transport;
mod user_config;
