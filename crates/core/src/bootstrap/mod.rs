//! The bootstrap each process of a job runs: a strict bash script and a small Python launcher,
//! rendered from typed data with every value shell-quoted (or JSON-encoded for Python).
//!
//! The files are placed in the run's work dir under [`BOOTSTRAP_DIR`]:
//! `bootstrap.sh` (the entry), `launcher.py` and `config.json` (the experiment's `config`,
//! read by the job from `THESEUS_CONFIG`).

use serde::Serialize;

use crate::backend::EnvVar;
use crate::job::{Distributed, JobIdentity};
use crate::Result;

/// Dir of the bootstrap files, relative to the work dir.
pub const BOOTSTRAP_DIR: &str = ".theseus";

/// How the processes of a job learn their rank, the process count and the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "scheme", rename_all = "snake_case")]
pub enum Launch {
    /// One process, nothing to wire.
    Single,
    /// N processes on this machine: rank in `THESEUS_LOCAL_RANK`, count in
    /// `THESEUS_LOCAL_WORLD_SIZE` (set by the local backend), coordinator on 127.0.0.1.
    Local {
        /// Coordinator port on 127.0.0.1.
        coordinator_port: u16,
    },
    /// Volcano pods: `VC_WORKER_HOSTS` (else `/etc/volcano/worker.host`) and `VC_TASK_INDEX`.
    Volcano {
        /// Coordinator port on the first pod.
        coordinator_port: u16,
    },
    /// Slurm tasks: `SLURM_JOB_NODELIST` (first host is the coordinator), `SLURM_NTASKS`,
    /// `SLURM_PROCID`.
    Slurm {
        /// Coordinator port on the first node.
        coordinator_port: u16,
    },
}

/// Everything the bootstrap is rendered from.
#[derive(Debug, Clone)]
pub struct BootstrapInput {
    /// Who the job is.
    pub identity: JobIdentity,
    /// Absolute path of the run's work dir (where the code is) on the target.
    pub work_dir: String,
    /// Absolute path of the run's status dir (`metadata.json`) on the target.
    pub run_dir: String,
    /// The cluster root, exported as `THESEUS_ROOT`.
    pub root_dir: String,
    /// `UV_CACHE_DIR`, when the cluster sets one.
    pub uv_cache_dir: Option<String>,
    /// Environment. Secret values are not written into the script: the backend passes them
    /// to the process, and the script checks that they are set.
    pub env: Vec<EnvVar>,
    /// `uv sync --group` names.
    pub uv_groups: Vec<String>,
    /// The entrypoint as words (`python train.py --lr 3`).
    pub entrypoint: Vec<String>,
    /// Whether to call `jax.distributed.initialize` first.
    pub distributed: Distributed,
    /// How ranks are wired.
    pub launch: Launch,
    /// The experiment's `config` section.
    pub config: serde_json::Value,
}

/// One rendered file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RenderedFile {
    /// Path relative to the work dir (e.g. `.theseus/bootstrap.sh`).
    pub path: String,
    /// Content.
    pub contents: String,
    /// Needs the executable bit.
    pub executable: bool,
}

/// The rendered bootstrap: files to write into the work dir, and which one to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RenderedBootstrap {
    /// Files, relative to the work dir.
    pub files: Vec<RenderedFile>,
    /// The script to run with bash, relative to the work dir.
    pub entry: String,
}

/// Renders the bootstrap for one job.
pub fn render(input: &BootstrapInput) -> Result<RenderedBootstrap> {
    let _ = input;
    Err(crate::Error::InvalidConfig("bootstrap not written yet".into()))
}
