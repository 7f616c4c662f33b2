//! Jobs: the experiment file, job identity and run ids, `KEY=VALUE` overrides of the experiment's
//! `config` section, and names that are valid Kubernetes object names.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::keys;
use crate::{Error, Result, chips};

pub mod stages;

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
    /// Search the per-device batch size before the run (issue 28, part batch): the entrypoint
    /// reads `THESEUS_DISPATCH_BATCH_SIZE`. Set for a job config of the original whose
    /// `training.per_device_batch_size` is `-1` ([`crate::batch_search`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub batch_search: bool,
    /// Stages 2, 3, ... (`-s/--stage FILE`, [`stages`]); never read from the file itself.
    #[serde(skip)]
    pub stages: Vec<stages::Stage>,
    /// The registry key of a job config of the original ([`crate::original`]), which this
    /// experiment runs; never read from an experiment file.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub job_key: Option<String>,
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

/// How the processes of a job find each other. Every mode exports the coordinator variables
/// (JAX and torch style); the modes differ in whether theseus initialises JAX distributed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distributed {
    /// The default (issue 28, as the original did): a Python entrypoint of a multi-process job
    /// gets `jax.distributed.initialize` right after its first `import jax`, before it can use
    /// a device; a job that never imports jax is untouched.
    #[default]
    Auto,
    /// Never: the job initialises (or not) itself.
    None,
    /// Call `jax.distributed.initialize` before the entrypoint's code runs.
    Jax,
}

impl Experiment {
    /// Reads and validates an experiment file. Errors name the file and the key.
    ///
    /// Strict: unknown keys, a missing or empty `entrypoint`, unknown chips, negative counts,
    /// invalid env names, `secret_env` names that are not keys of `env` and unknown
    /// `distributed` values are errors. `request.chip` is canonicalized (`H100` → `h100`).
    /// Only a regular file of at most [`crate::files::CONFIG_LIMIT`] bytes is read.
    pub fn load(path: &Path) -> Result<Experiment> {
        let text = crate::files::read_bounded(path, crate::files::CONFIG_LIMIT, "experiment file")?;
        Experiment::from_yaml(&text, &path.display().to_string())
    }

    /// Parses and validates experiment YAML; `source` names it in errors.
    pub fn from_yaml(text: &str, source: &str) -> Result<Experiment> {
        let fail = |path: &str, message: &str| {
            Error::InvalidConfig(if path.is_empty() {
                format!("{source}: {message}")
            } else {
                format!("{source}: {path}: {message}")
            })
        };
        let value: serde_json::Value = serde_saphyr::from_str(text)
            .map_err(|e| fail("", &format!("invalid YAML: {}", crate::keys::yaml_message(&e.to_string()))))?;
        let map = match &value {
            serde_json::Value::Object(map) => map,
            serde_json::Value::Null => return Err(fail("", "missing required key \"entrypoint\"")),
            other => {
                return Err(fail("", &format!("expected a map, found {}", keys::kind_of(other))));
            }
        };
        match map.get("entrypoint") {
            Some(serde_json::Value::String(_)) | None => {}
            Some(serde_json::Value::Array(words)) if words.iter().all(serde_json::Value::is_string) => {}
            Some(_) => {
                return Err(fail("entrypoint", "expected a command line or a list of words"));
            }
        }
        if let Some(serde_json::Value::Object(request)) = map.get("request") {
            for key in ["count", "min_chips"] {
                if let Some(n) = request.get(key).and_then(serde_json::Value::as_i64).filter(|n| *n < 0) {
                    return Err(fail(
                        &format!("request.{key}"),
                        &format!("invalid count {n}: counts must be 0 or more"),
                    ));
                }
            }
        }
        let mut experiment: Experiment = keys::de_strict(value, "").map_err(|e| fail(&e.path, &e.message))?;
        let empty = match &experiment.entrypoint {
            Entrypoint::Line(line) => line.trim().is_empty(),
            Entrypoint::Words(words) => words.is_empty() || words[0].is_empty(),
        };
        if empty {
            return Err(fail("entrypoint", "the entrypoint is empty"));
        }
        experiment.entrypoint_words().map_err(|e| fail("", &e.to_string()))?;
        if let Some(chip) = experiment.request.as_mut().and_then(|r| r.chip.as_mut()) {
            *chip = chips::parse(chip).map_err(|e| fail("request.chip", &e.to_string()))?.name.to_owned();
        }
        for key in experiment.env.keys() {
            if !crate::shell::is_env_name(key) {
                return Err(fail(&format!("env.{key}"), &format!("invalid environment variable name {key:?}")));
            }
        }
        for (i, name) in experiment.secret_env.iter().enumerate() {
            if !experiment.env.contains_key(name) {
                return Err(fail(&format!("secret_env[{i}]"), &format!("{name:?} is not a key of `env`")));
            }
        }
        Ok(experiment)
    }

    /// The entrypoint as words.
    pub fn entrypoint_words(&self) -> Result<Vec<String>> {
        match &self.entrypoint {
            Entrypoint::Words(w) => Ok(w.clone()),
            Entrypoint::Line(l) => {
                crate::shell::split(l).map_err(|e| crate::Error::InvalidConfig(format!("entrypoint: {e}")))
            }
        }
    }

    /// Applies `KEY=VALUE` overrides to `config`: `KEY` is a dotted path, `VALUE` is parsed as a
    /// YAML scalar or flow value (`3`, `true`, `[1, 2]`, `"text"`).
    ///
    /// Missing intermediate maps are created; a parent that exists and is not a map is an error.
    /// An empty `VALUE` is the empty string.
    pub fn apply_overrides(&mut self, overrides: &[String]) -> Result<()> {
        for item in overrides {
            apply_override(&mut self.config, item)
                .map_err(|m| Error::InvalidConfig(format!("invalid override {item:?}: {m}")))?;
        }
        Ok(())
    }
}

/// Whether the dotted path of the override `item` (`KEY=VALUE`) names a value in `config`.
pub fn override_path_exists(config: &serde_json::Value, item: &str) -> bool {
    let key = item.split_once('=').map_or(item, |(k, _)| k).trim();
    let mut current = config;
    for segment in key.split('.') {
        match current.get(segment) {
            Some(next) => current = next,
            None => return false,
        }
    }
    true
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

    /// Checks name, project, group and run id with [`validate_name`].
    ///
    /// # Errors
    /// The first part that breaks the rule.
    pub fn validate(&self) -> Result<()> {
        validate_name("job name", &self.name)?;
        validate_name("project", &self.project)?;
        validate_name("group", &self.group)?;
        validate_name("run id", &self.run_id)
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
///
/// Valid names come back unchanged, so the function is idempotent; the empty text gives `job`.
pub fn k8s_name(text: &str) -> String {
    const MAX: usize = 63;
    if text.is_empty() {
        return "job".into();
    }
    let mut out = String::with_capacity(text.len().min(MAX));
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-');
    if out == text && out.len() <= MAX {
        return out.to_owned();
    }
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    let hash = &digest[..8];
    // Room for `-` and the hash; the sanitized text is ASCII, so byte slicing is safe.
    let base = out[..out.len().min(MAX - hash.len() - 1)].trim_end_matches('-');
    if base.is_empty() { format!("job-{hash}") } else { format!("{base}-{hash}") }
}

/// Sets one `a.b.c=VALUE` override in `config`.
fn apply_override(config: &mut serde_json::Value, item: &str) -> std::result::Result<(), String> {
    let (key, raw) = item.split_once('=').ok_or("expected KEY=VALUE")?;
    let key = key.trim();
    if key.is_empty() {
        return Err("empty key".into());
    }
    let segments: Vec<&str> = key.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(format!("empty segment in key {key:?}"));
    }
    let value = if raw.is_empty() {
        serde_json::Value::String(String::new())
    } else {
        serde_saphyr::from_str::<serde_json::Value>(raw)
            .map_err(|e| format!("invalid YAML value: {}", crate::keys::yaml_message(&e.to_string())))?
    };
    if config.is_null() {
        *config = serde_json::Value::Object(serde_json::Map::new());
    }
    let mut current = config;
    for (i, segment) in segments.iter().enumerate() {
        let serde_json::Value::Object(map) = current else {
            let parent = if i == 0 { "config".to_owned() } else { format!("config.{}", segments[..i].join(".")) };
            return Err(format!("{parent} is not a map"));
        };
        if i + 1 == segments.len() {
            map.insert((*segment).to_owned(), value);
            return Ok(());
        }
        current = map.entry((*segment).to_owned()).or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    }
    Ok(())
}

/// The longest job, project or group name: 100 characters.
pub const MAX_NAME_LEN: usize = 100;

/// Checks a job, project or group name against the one rule for names that become path parts
/// on every backend (local dirs, cluster dirs, the Volcano PVC): 1 to [`MAX_NAME_LEN`] of
/// `[A-Za-z0-9._-]`, not starting with `-` or `.`. `what` names it in the error, e.g.
/// `job name` or `--project`.
///
/// # Errors
/// [`Error::InvalidConfig`] saying which character (or why) and what is allowed.
pub fn validate_name(what: &str, name: &str) -> Result<()> {
    match name_problem(name) {
        None => Ok(()),
        Some(problem) => Err(Error::InvalidConfig(format!("{what} {name:?}: {problem}"))),
    }
}

/// What is wrong with a name under the rule of [`validate_name`], if anything.
pub fn name_problem(name: &str) -> Option<String> {
    const ALLOWED: &str = "names may use letters, digits, `.`, `_` and `-`";
    if name.is_empty() {
        return Some("a name cannot be empty".into());
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        let which = if c == '/' {
            "`/` is not allowed (a name is one directory level)".to_owned()
        } else if c.is_control() {
            format!("a control character (U+{:04X}) is not allowed", u32::from(c))
        } else {
            format!("the character {c:?} (U+{:04X}) is not allowed", u32::from(c))
        };
        return Some(format!("{which}; {ALLOWED}"));
    }
    if let Some(first @ ('-' | '.')) = name.chars().next() {
        return Some(format!("a name cannot start with `{first}`; {ALLOWED}"));
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!("{} characters, more than the limit of {MAX_NAME_LEN}", name.len()));
    }
    None
}

/// One environment variable of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
    /// A secret: never written in plain text to scripts, manifests, logs or dry-run output.
    pub secret: bool,
}

impl EnvVar {
    /// The value as it may be shown: secrets are redacted.
    pub fn display_value(&self) -> &str {
        if self.secret { "<redacted>" } else { &self.value }
    }
}

#[cfg(test)]
mod tests;
