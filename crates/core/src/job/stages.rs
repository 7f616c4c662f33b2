//! Stages (`-s/--stage FILE`, issue 28): further experiments that run in order after the main
//! one, in the same allocation and work dir, as the original's multi-stage jobs did. The main
//! file is stage 1; each `-s FILE` adds the next.
//!
//! One allocation means one hardware request and one environment: [`attach`] merges each
//! stage's `env`, `secret_env` and `uv_groups` into the main experiment's (a key two files set
//! differently is an error naming both), and refuses a stage whose `request` differs from the
//! main file's unless `--chip`/`-n` decide for all (the original silently ran every stage on the
//! main file's hardware; a stage that asks for other hardware would get it silently wrong).
//! What each stage runs (its entrypoint, `distributed` and `config`) stays its own ([`Stage`]);
//! the bootstrap runs them one after the other and stops at the first that fails.
//!
//! Pure: no IO (checked by `cargo xtask tidy`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Distributed, Experiment};
use crate::{Error, Result};

/// One stage after the first: what it runs, from its own file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    /// The file, as given (`-s FILE`).
    pub source: String,
    /// What it runs, for people: the entrypoint line.
    pub label: String,
    /// The entrypoint as words.
    pub entrypoint: Vec<String>,
    /// Its own distributed mode.
    pub distributed: Distributed,
    /// Its own `config` (overrides applied), its `THESEUS_CONFIG`.
    pub config: serde_json::Value,
    /// It asks for the batch-size search ([`Experiment::batch_search`]).
    pub batch_search: bool,
}

impl Stage {
    /// The stage that `experiment`, loaded from `source`, runs.
    ///
    /// # Errors
    /// An entrypoint that cannot be split into words.
    pub fn of(source: &str, experiment: &Experiment) -> Result<Stage> {
        let entrypoint = experiment.entrypoint_words().map_err(|e| Error::InvalidConfig(format!("{source}: {e}")))?;
        Ok(Stage {
            source: source.to_owned(),
            label: label(experiment, &entrypoint),
            entrypoint,
            distributed: experiment.distributed,
            config: experiment.config.clone(),
            batch_search: experiment.batch_search,
        })
    }
}

/// What a stage runs, for people: the entrypoint line, or `job KEY` for a job config of the
/// original ([`crate::original`]).
fn label(experiment: &Experiment, entrypoint: &[String]) -> String {
    match &experiment.job_key {
        Some(key) => format!("job {key}"),
        None => crate::shell::join(entrypoint),
    }
}

/// One line of the stage list `plan` and `--dry-run` show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    /// 1-based.
    pub stage: usize,
    /// The file.
    pub file: String,
    /// What it runs.
    pub runs: String,
}

/// Every stage of `main` (loaded from `main_source`), the main one first; empty when `main`
/// has no further stages (a job of one stage shows none).
pub fn list(main: &Experiment, main_source: &str) -> Vec<Listed> {
    if main.stages.is_empty() {
        return Vec::new();
    }
    let first = main.entrypoint_words().map(|w| label(main, &w)).unwrap_or_default();
    std::iter::once((main_source.to_owned(), first))
        .chain(main.stages.iter().map(|s| (s.source.clone(), s.label.clone())))
        .enumerate()
        .map(|(i, (file, runs))| Listed { stage: i + 1, file, runs })
        .collect()
}

/// The current stage of a run as its `metadata.json` says it (`stage 2 of 3 (b.yaml)`), for
/// `status`; `None` for a job of one stage or metadata without the fields.
pub fn current(metadata: &serde_json::Value) -> Option<String> {
    let stages = metadata.get("stages")?.as_array()?;
    let stage = metadata.get("stage")?.as_u64()?;
    let index = usize::try_from(stage).ok()?.checked_sub(1)?;
    let name = stages.get(index)?.get("name")?.as_str()?.replace(char::is_control, "?");
    Some(format!("stage {stage} of {} ({name})", stages.len()))
}

/// Adds `stages` (each file as given, and its experiment with the overrides applied) to `main`
/// as stages 2, 3, ...: their environments, secrets and uv groups merge into `main`'s; see the
/// module docs. `hardware_from_flags`: `--chip` or `-n` was given (it decides for every stage).
///
/// # Errors
/// [`Error::InvalidConfig`] naming both files for an `env` key they set differently, and naming
/// the stage for a `request` that differs from the main file's or an entrypoint that cannot be
/// split.
pub fn attach(
    main: &mut Experiment,
    main_source: &str,
    stages: Vec<(String, Experiment)>,
    hardware_from_flags: bool,
) -> Result<()> {
    let mut set_by: BTreeMap<String, String> = main.env.keys().map(|k| (k.clone(), main_source.to_owned())).collect();
    for (source, stage) in stages {
        if !hardware_from_flags && stage.request.is_some() && stage.request != main.request {
            return Err(Error::InvalidConfig(format!(
                "{source}: request: the stage asks for {}, the main file {main_source} for {}; every stage runs in \
                 the one allocation the main file's request (or --chip/-n) decides: give the stage the same \
                 request, drop its `request`, or pass --chip/-n",
                describe(stage.request.as_ref()),
                describe(main.request.as_ref())
            )));
        }
        for (key, value) in &stage.env {
            match main.env.get(key) {
                Some(old) if old != value => {
                    let first = set_by.get(key).map_or(main_source, String::as_str);
                    // Values are not shown: either may be a secret.
                    return Err(Error::InvalidConfig(format!(
                        "{source}: env.{key}: set differently by {first} and {source}; the stages share one \
                         environment: give it the same value in both, or set it in one file only"
                    )));
                }
                Some(_) => {}
                None => {
                    main.env.insert(key.clone(), value.clone());
                    set_by.insert(key.clone(), source.clone());
                }
            }
        }
        for name in &stage.secret_env {
            if !main.secret_env.contains(name) {
                main.secret_env.push(name.clone());
            }
        }
        for group in &stage.uv_groups {
            if !main.uv_groups.contains(group) {
                main.uv_groups.push(group.clone());
            }
        }
        main.stages.push(Stage::of(&source, &stage)?);
    }
    Ok(())
}

/// `request` for an error: `chip h100, count 2`, or `nothing` (the default).
fn describe(request: Option<&super::ExperimentRequest>) -> String {
    let Some(r) = request else { return "nothing (the default)".into() };
    let chip = r.chip.as_deref().unwrap_or("any");
    match r.count {
        Some(n) => format!("chip {chip}, count {n}"),
        None => format!("chip {chip}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(text: &str) -> Experiment {
        Experiment::from_yaml(text, "x.yaml").unwrap()
    }

    #[test]
    fn stages_merge_env_secrets_and_groups_and_keep_their_own_command() {
        let mut main = exp("entrypoint: python a.py\nenv: {A: '1'}\nuv_groups: [gpu]\nconfig: {lr: 1}\n");
        let two = exp(
            "entrypoint: python b.py 'x y'\ndistributed: jax\nenv: {A: '1', T: tok}\nsecret_env: [T]\nuv_groups: [gpu, \
             eval]\nconfig: {lr: 2}\n",
        );
        attach(&mut main, "a.yaml", vec![("b.yaml".into(), two)], false).unwrap();
        assert_eq!(main.env.get("T").map(String::as_str), Some("tok"));
        assert_eq!(main.secret_env, ["T"]);
        assert_eq!(main.uv_groups, ["gpu", "eval"]);
        assert_eq!(main.config, serde_json::json!({"lr": 1}));
        let stage = &main.stages[0];
        assert_eq!(stage.entrypoint, ["python", "b.py", "x y"]);
        assert_eq!((stage.distributed, stage.label.as_str()), (Distributed::Jax, "python b.py 'x y'"));
        assert_eq!(stage.config, serde_json::json!({"lr": 2}));
        let listed = list(&main, "a.yaml");
        assert_eq!(listed.len(), 2);
        assert_eq!((listed[0].stage, listed[0].file.as_str(), listed[0].runs.as_str()), (1, "a.yaml", "python a.py"));
        assert_eq!((listed[1].stage, listed[1].file.as_str()), (2, "b.yaml"));
        assert!(list(&exp("entrypoint: x\n"), "a.yaml").is_empty());
    }

    #[test]
    fn the_current_stage_is_read_from_metadata() {
        let metadata = serde_json::json!({"stage": 2, "stages": [{"name": "a.yaml"}, {"name": "b\n.yaml"}]});
        assert_eq!(current(&metadata).as_deref(), Some("stage 2 of 2 (b?.yaml)"));
        for bad in [serde_json::json!({"status": "running"}), serde_json::json!({"stage": 0, "stages": []})] {
            assert_eq!(current(&bad), None);
        }
    }

    #[test]
    fn an_env_key_set_differently_names_both_files_and_no_value() {
        let mut main = exp("entrypoint: python a.py\n");
        let two = exp("entrypoint: python b.py\nenv: {K: secret-one}\n");
        let three = exp("entrypoint: python c.py\nenv: {K: secret-two}\n");
        let err = attach(&mut main, "a.yaml", vec![("b.yaml".into(), two), ("c.yaml".into(), three)], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("env.K: set differently by b.yaml and c.yaml"), "{err}");
        assert!(!err.contains("secret-"), "{err}");
    }

    #[test]
    fn a_stage_asking_for_other_hardware_is_refused_unless_flags_decide() {
        let main = exp("entrypoint: python a.py\nrequest: {chip: h100, count: 2}\n");
        let same = exp("entrypoint: python b.py\nrequest: {chip: H100, min_chips: 2}\n");
        let none = exp("entrypoint: python b.py\n");
        let other = exp("entrypoint: python b.py\nrequest: {chip: cpu, count: 1}\n");
        let mut m = main.clone();
        attach(&mut m, "a.yaml", vec![("s.yaml".into(), same), ("n.yaml".into(), none)], false).unwrap();
        assert_eq!(m.stages.len(), 2);
        let err =
            attach(&mut main.clone(), "a.yaml", vec![("o.yaml".into(), other.clone())], false).unwrap_err().to_string();
        assert!(
            err.contains(
                "o.yaml: request: the stage asks for chip cpu, count 1, the main file a.yaml for chip h100, count 2"
            ),
            "{err}"
        );
        attach(&mut main.clone(), "a.yaml", vec![("o.yaml".into(), other)], true).unwrap();
    }
}
