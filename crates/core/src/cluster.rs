//! The filesystem layout and credentials of one cluster ([`ClusterConfig`], the `clusters:`
//! table of the config), and how run code dirs are made there ([`Materialize`]).

use serde::{Deserialize, Serialize};

/// Filesystem layout and credentials of one cluster. Paths are as seen on that cluster's machines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Root for data, checkpoints, results and status.
    pub root: String,
    /// Scratch dir; per-run code dirs are `<work>/<project>/<group>/<name>/<run-id>`.
    pub work: String,
    /// Where job logs go (default `<work>/logs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// Data dir (default `<root>/data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Checkpoints dir (default `<root>/checkpoints`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<String>,
    /// Results dir (default `<root>/results`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<String>,
    /// Status dir (default `<root>/status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Dir visible to login and compute nodes (default `<work>/.dispatch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    /// JuiceFS metadata URL (mounted at `root` by the bootstrap; ignored for Volcano).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<String>,
    /// `juicefs mount --cache-size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_size: Option<String>,
    /// `juicefs mount --cache-dir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<String>,
    /// `juicefs mount --all-squash UID:GID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_squash: Option<String>,
    /// Exported as `UV_CACHE_DIR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uv_dir: Option<String>,
    /// W&B API key, exported as `WANDB_API_KEY` (a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wandb: Option<String>,
    /// Exported as `WANDB_ENTITY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wandb_entity: Option<String>,
    /// Exported as `WANDB_PROJECT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wandb_project: Option<String>,
    /// Hugging Face token, exported as `HF_TOKEN` (a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf_token: Option<String>,
    /// How run code dirs are made from the cluster's object store: `link` (default, hard
    /// links to read-only objects) or `copy` (private writable copies, for filesystems without
    /// hard links or jobs that write into their sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub materialize: Option<Materialize>,
}

/// How a run's code dir is made from the store's objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Materialize {
    /// Hard links to the read-only objects: no extra space per run.
    #[default]
    Link,
    /// Private, writable copies: for filesystems without hard links, or jobs that write into
    /// their own sources.
    Copy,
}

impl std::fmt::Display for Materialize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Materialize::Link => "link",
            Materialize::Copy => "copy",
        })
    }
}

impl ClusterConfig {
    /// The log dir: `log`, else `<work>/logs`.
    pub fn log_dir(&self) -> String {
        self.log.clone().unwrap_or_else(|| join(&self.work, "logs"))
    }

    /// The share dir: `share`, else `<work>/.dispatch`.
    pub fn share_dir(&self) -> String {
        self.share.clone().unwrap_or_else(|| join(&self.work, ".dispatch"))
    }

    /// The data dir: `data`, else `<root>/data`.
    pub fn data_dir(&self) -> String {
        self.data.clone().unwrap_or_else(|| join(&self.root, "data"))
    }

    /// The checkpoints dir: `checkpoints`, else `<root>/checkpoints`.
    pub fn checkpoints_dir(&self) -> String {
        self.checkpoints.clone().unwrap_or_else(|| join(&self.root, "checkpoints"))
    }

    /// The results dir: `results`, else `<root>/results`.
    pub fn results_dir(&self) -> String {
        self.results.clone().unwrap_or_else(|| join(&self.root, "results"))
    }

    /// The status dir: `status`, else `<root>/status`.
    pub fn status_dir(&self) -> String {
        self.status.clone().unwrap_or_else(|| join(&self.root, "status"))
    }

    /// Environment derived from the cluster: W&B and Hugging Face settings, when set.
    /// The second element of each pair says whether the value is a secret.
    pub fn derived_env(&self) -> Vec<(&'static str, String, bool)> {
        let mut env = Vec::new();
        for (key, value, secret) in [
            ("WANDB_API_KEY", &self.wandb, true),
            ("WANDB_ENTITY", &self.wandb_entity, false),
            ("WANDB_PROJECT", &self.wandb_project, false),
            ("HF_TOKEN", &self.hf_token, true),
        ] {
            if let Some(v) = value {
                env.push((key, v.clone(), secret));
            }
        }
        env
    }
}

/// Joins two remote path pieces with exactly one `/`.
pub fn join(base: &str, rest: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), rest.trim_start_matches('/'))
}
