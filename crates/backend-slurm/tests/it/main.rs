//! Integration tests of the Slurm backend against the Slurm lab ([`slurm`]), and of the parsers
//! against recorded Slurm output ([`recorded`]); [`slurm_site`] runs it through the lab's site
//! traits (an sbatch wrapper, site formats, node-local `work`); [`slurm_preempt`] through its
//! preemption (the other team's partition requeues a JAX training, which resumes).

mod probe;
mod reclaim;
mod recorded;
mod slurm;
mod slurm_lifecycle;
mod slurm_login_env;
mod slurm_preempt;
mod slurm_site;
mod store;
