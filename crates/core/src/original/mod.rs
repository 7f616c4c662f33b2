//! Job configs of the original theseus: a YAML map with a string `job:` registry key and no
//! `entrypoint:` (the model, training and `request:` sections the original's registered job
//! classes read). Loading one gives an ordinary [`Experiment`] that runs the static runner
//! `.theseus/job.py`, which does what the original's `bootstrap.py` did with the job's own
//! `theseus` package: registry, configuration, hardware, topology, restore.

use std::path::Path;

use serde_json::Value;

use crate::job::{Distributed, Entrypoint, Experiment, ExperimentRequest};
use crate::{Error, Result, chips, keys};

#[cfg(test)]
mod tests;

/// The runner's path relative to the work dir (the bootstrap writes it with its other files).
pub const RUNNER: &str = ".theseus/job.py";

/// The variable naming the `--load` modules (comma separated) the runner imports first.
pub const LOAD_ENV: &str = "THESEUS_JOB_LOAD";

/// What the command line adds to a job config: `-j KEY`, `--n_shards N` and `--load MODULE`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// `-j/--job KEY`: the registry key, instead of (or in place of a missing) `job:`.
    pub job: Option<String>,
    /// `--n_shards N`: written into `request.n_shards`.
    pub n_shards: Option<u32>,
    /// `--load MODULE`, as given (normalised by [`normalize_module`]).
    pub load: Vec<String>,
    /// A further stage (`-s FILE`): `--n_shards` and `--load` apply to it only if it is a job
    /// config (an experiment stage is loaded without them, not refused).
    pub stage: bool,
}

impl Options {
    /// Whether any option of job configs was given.
    pub fn any(&self) -> bool {
        self.job.is_some() || self.n_shards.is_some() || !self.load.is_empty()
    }
}

/// Reads `path`: an experiment comes back as it is (with `overrides` applied to its `config`),
/// a job config of the original as the [`Experiment`] that runs it (with those of `overrides`
/// whose dotted path the job config has applied to it, as the original applied them). Only a regular file of at most [`crate::files::CONFIG_LIMIT`] bytes is
/// read.
///
/// # Errors
/// [`Error::InvalidConfig`] naming the file and the key (or the flag) that is wrong.
pub fn load(path: &Path, options: &Options, overrides: &[String]) -> Result<Experiment> {
    let text = crate::files::read_bounded(path, crate::files::CONFIG_LIMIT, "experiment file")?;
    from_yaml(&text, &path.display().to_string(), options, overrides)
}

/// [`load`] of text; `source` names it in errors.
pub fn from_yaml(text: &str, source: &str, options: &Options, overrides: &[String]) -> Result<Experiment> {
    let fail = |message: String| Error::InvalidConfig(format!("{source}: {message}"));
    let value: Value = serde_saphyr::from_str(text)
        .map_err(|e| fail(format!("invalid YAML: {}", keys::yaml_message(&e.to_string()))))?;
    let Some(map) = value.as_object().filter(|m| !m.contains_key("entrypoint")) else {
        // An experiment (or not a map, which the experiment's loader explains).
        if options.any() && !(options.stage && options.job.is_none()) {
            let flags: Vec<&str> = [
                options.job.as_ref().map(|_| "-j/--job"),
                options.n_shards.map(|_| "--n_shards"),
                (!options.load.is_empty()).then_some("--load"),
            ]
            .into_iter()
            .flatten()
            .collect();
            return Err(fail(format!(
                "{} only apply to a job config of the original (a `job:` key and no `entrypoint:`); this file is an \
                 experiment (it has `entrypoint:`): drop the flag, or give a job config",
                flags.join(", ")
            )));
        }
        let mut experiment = Experiment::from_yaml(text, source)?;
        experiment.apply_overrides(overrides)?;
        return Ok(experiment);
    };
    match (map.get("job"), &options.job) {
        (_, Some(key)) if !key.trim().is_empty() => {}
        (_, Some(_)) => return Err(Error::InvalidConfig("-j/--job: the job key is empty".into())),
        (Some(Value::String(key)), None) if !key.trim().is_empty() => {}
        (Some(Value::String(_)), None) => return Err(fail("job: the job key is empty".into())),
        (Some(other), None) => {
            return Err(fail(format!(
                "job: expected the job's registry key (a string), found {}",
                keys::kind_of(other)
            )));
        }
        (None, None) => {
            return Err(fail(
                "neither `entrypoint:` (an experiment) nor `job:` (a job config of the original): add `job: KEY` (or \
                 give -j KEY) to run a registered job of the shipped code, or `entrypoint:` to run a command"
                    .into(),
            ));
        }
    }
    let mut config = value.clone();
    if let Some(key) = &options.job {
        config["job"] = Value::String(key.trim().to_owned());
    }
    if let Some(n) = options.n_shards {
        if n == 0 {
            return Err(Error::InvalidConfig("--n_shards: the shard count must be 1 or more".into()));
        }
        match config.get_mut("request") {
            None | Some(Value::Null) => config["request"] = serde_json::json!({}),
            Some(Value::Object(_)) => {}
            Some(other) => {
                return Err(fail(format!("request: expected a map, found {}", keys::kind_of(other))));
            }
        }
        config["request"]["n_shards"] = Value::from(n);
    }
    // As the original: an override applies where this file has its path (a stage that is a
    // data job has no `training:`); one that no file of the submit has is the caller's to refuse.
    let present: Vec<String> =
        overrides.iter().filter(|o| crate::job::override_path_exists(&config, o)).cloned().collect();
    let mut carrier = Experiment { config, ..Experiment::default() };
    carrier.apply_overrides(&present)?;
    let config = carrier.config;
    let key = config["job"].as_str().map(str::trim).unwrap_or_default().to_owned();
    if key.is_empty() {
        return Err(fail("job: the job key is not a non-empty string after the overrides".into()));
    }
    let request = request(&config, &fail)?;
    let mut load = Vec::new();
    for module in &options.load {
        let module = normalize_module(module)?;
        if !load.contains(&module) {
            load.push(module);
        }
    }
    let mut experiment = Experiment {
        entrypoint: Entrypoint::Words(vec!["python".into(), RUNNER.into()]),
        request,
        distributed: Distributed::Jax,
        batch_search: crate::batch_search::asks_for_search(&config),
        config,
        job_key: Some(key),
        ..Experiment::default()
    };
    if !load.is_empty() {
        experiment.env.insert(LOAD_ENV.into(), load.join(","));
    }
    Ok(experiment)
}

/// The hardware request of a job config: `request.chip` (canonical name), `request.min_chips`
/// and `request.n_shards` checked.
fn request(config: &Value, fail: &dyn Fn(String) -> Error) -> Result<Option<ExperimentRequest>> {
    let request = match config.get("request") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) => map,
        Some(other) => return Err(fail(format!("request: expected a map, found {}", keys::kind_of(other)))),
    };
    let count = |key: &str, min: u64| -> Result<Option<u32>> {
        match request.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64().filter(|n| *n >= min).and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Ok(Some(n)),
                None => Err(fail(format!("request.{key}: expected a whole number of at least {min}, found {v}"))),
            },
        }
    };
    let min_chips = count("min_chips", 0)?;
    count("n_shards", 1)?;
    let chip = match request.get("chip") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => {
            Some(chips::parse(name).map_err(|e| fail(format!("request.chip: {e}")))?.name.to_owned())
        }
        Some(other) => return Err(fail(format!("request.chip: expected a chip name, found {}", keys::kind_of(other)))),
    };
    Ok(Some(ExperimentRequest { chip, count: min_chips }))
}

/// A `--load` module as the original normalised it for a remote run: `mod.py` becomes `mod`;
/// the result must be dotted Python identifiers (a module of the shipped code, not a path).
///
/// # Errors
/// [`Error::InvalidConfig`] naming `--load` and the value.
pub fn normalize_module(given: &str) -> Result<String> {
    let trimmed = given.trim();
    let stem = trimmed.strip_suffix(".py").unwrap_or(trimmed);
    let module = stem.to_owned();
    let identifier = |part: &str| {
        let mut chars = part.chars();
        chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
    };
    if module.is_empty() || !module.split('.').all(identifier) {
        return Err(Error::InvalidConfig(format!(
            "--load {given:?}: expected a dotted module name importable from the shipped code (`pkg.mod`; `mod.py` is taken as `mod`)"
        )));
    }
    Ok(module)
}
