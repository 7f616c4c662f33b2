//! Jobs: the experiment file, job identity and run ids, `KEY=VALUE` overrides of the experiment's
//! `config` section, and names that are valid Kubernetes object names.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Result;

/// An experiment file (YAML): what to run and how.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// The command each process runs in the shipped code, e.g. `python train.py --lr 3e-4`
    /// (a string split like a shell would, or a list of words).
    pub entrypoint: Entrypoint,
    /// Default hardware request (CLI `--chip` / `-n` win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<ExperimentRequest>,
    /// Environment for every process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of `env` keys whose values are secrets (never written in plain text to scripts,
    /// manifests, logs or dry-run output).
    #[serde(default)]
    pub secret_env: Vec<String>,
    /// How processes find each other.
    #[serde(default)]
    pub distributed: Distributed,
    /// Extra `uv sync --group` names.
    #[serde(default)]
    pub uv_groups: Vec<String>,
    /// Free-form config the job reads from the file named by `THESEUS_CONFIG`.
    #[serde(default)]
    pub config: serde_json::Value,
}

/// The `entrypoint` of an [`Experiment`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Entrypoint {
    /// A command line, split like a POSIX shell (quotes, no expansions).
    Line(String),
    /// Words, used as they are.
    Words(Vec<String>),
}

impl Default for Entrypoint {
    fn default() -> Self {
        Entrypoint::Words(Vec::new())
    }
}

/// The `request` section of an [`Experiment`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentRequest {
    /// Chip name (catalog name or alias); absent: any GPU, or CPU when the count is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chip: Option<String>,
    /// Number of chips (`min_chips` is accepted as in the original).
    #[serde(default, alias = "min_chips", skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// How the processes of a job find each other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distributed {
    /// Only export the coordinator variables (JAX and torch style).
    #[default]
    None,
    /// Call `jax.distributed.initialize` before the entrypoint's code runs.
    Jax,
}

impl Experiment {
    /// Reads and validates an experiment file. Errors name the file and the key.
    pub fn load(path: &Path) -> Result<Experiment> {
        let _ = path;
        Err(crate::Error::InvalidConfig("experiment loading not written yet".into()))
    }

    /// The entrypoint as words.
    pub fn entrypoint_words(&self) -> Result<Vec<String>> {
        match &self.entrypoint {
            Entrypoint::Words(w) => Ok(w.clone()),
            Entrypoint::Line(l) => crate::shell::split(l)
                .map_err(|e| crate::Error::InvalidConfig(format!("entrypoint: {e}"))),
        }
    }

    /// Applies `KEY=VALUE` overrides to `config`: `KEY` is a dotted path, `VALUE` is parsed as a
    /// YAML scalar or flow value (`3`, `true`, `[1, 2]`, `"text"`).
    pub fn apply_overrides(&mut self, overrides: &[String]) -> Result<()> {
        let _ = overrides;
        Err(crate::Error::InvalidConfig("overrides not written yet".into()))
    }
}

/// Who a job is: name, project, group and a unique run id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobIdentity {
    /// Job name, as given on the command line.
    pub name: String,
    /// Project (default `general`).
    pub project: String,
    /// Group (default `default`).
    pub group: String,
    /// Unique run id (see [`new_run_id`]).
    pub run_id: String,
}

impl JobIdentity {
    /// Identity with a fresh run id; empty project or group fall back to `general` / `default`.
    pub fn new(name: &str, project: Option<&str>, group: Option<&str>) -> JobIdentity {
        let pick = |v: Option<&str>, d: &str| v.filter(|s| !s.is_empty()).unwrap_or(d).to_owned();
        JobIdentity {
            name: name.to_owned(),
            project: pick(project, "general"),
            group: pick(group, "default"),
            run_id: new_run_id(),
        }
    }

    /// `<project>/<group>/<name>/<run-id>`: the relative dir of this run under a cluster's
    /// `work`, `log` or `status` dir.
    pub fn run_path(&self) -> String {
        format!("{}/{}/{}/{}", self.project, self.group, self.name, self.run_id)
    }
}

/// A new run id: UTC time to the second plus 6 random hex digits, e.g. `20261121-134501-a1b2c3`.
/// Sorts by time; two ids made in the same second still differ.
pub fn new_run_id() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year][month][day]-[hour][minute][second]");
    let stamp = now.format(&fmt).unwrap_or_else(|_| "00000000-000000".into());
    format!("{stamp}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// Turns any text into a valid Kubernetes object name (RFC 1123 label): lowercase `[a-z0-9-]`,
/// at most 63 characters, starting and ending alphanumeric. When the text had to be shortened
/// or changed, a short hash of the original keeps distinct inputs distinct.
pub fn k8s_name(text: &str) -> String {
    let _ = text;
    String::from("x")
}

/// Checks that a job or project name is usable: not empty, no `/`, no control characters.
pub fn validate_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name.chars().any(char::is_control) || name == "." || name == ".." {
        return Err(crate::Error::InvalidConfig(format!(
            "{what} {name:?} is not usable: it must be non-empty, without `/` or control characters"
        )));
    }
    Ok(())
}
