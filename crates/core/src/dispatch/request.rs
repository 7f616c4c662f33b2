//! Pure parts of the flow: the hardware request from flags and experiment, the job's
//! environment in precedence order, and which unanswered hosts might have changed the plan.

use crate::backend::EnvVar;
use crate::chips::{self, ChipKind};
use crate::config::HostConfig;
use crate::solver::{ChipRequest, Plan, Request};
use crate::{Error, Result, shell};

use super::{JobSpec, Solved};

/// The hardware request from the flags, else the experiment's `request`, else 1 GPU of any
/// kind. `--chip cpu` without `-n` is one process: the experiment's count is of its own chip
/// (GPUs), unless that chip is a CPU too.
pub fn request(spec: &JobSpec) -> Result<Request> {
    let from_file = spec.experiment.request.clone().unwrap_or_default();
    let (chip_name, chip_source) = match (&spec.chip, &from_file.chip) {
        (Some(c), _) => (Some(c.clone()), "--chip".to_owned()),
        (None, Some(c)) => (Some(c.clone()), format!("{}: request.chip", spec.experiment_source)),
        (None, None) => (None, String::new()),
    };
    let file_count = match (&spec.chip, &from_file.chip) {
        (Some(flag), file) if is_cpu(flag) && !file.as_deref().is_some_and(is_cpu) => None,
        _ => from_file.count,
    };
    let count = spec.n_chips.or(file_count).unwrap_or(1);
    let chip = match chip_name {
        None if count == 0 => ChipRequest::Cpu,
        None => ChipRequest::AnyGpu,
        Some(name) => {
            let chip = chips::parse(&name).map_err(|e| Error::InvalidConfig(format!("{chip_source}: {e}")))?;
            // As the original: a count of 0 is CPU-only, whatever the chip.
            if chip.kind == ChipKind::Cpu || count == 0 { ChipRequest::Cpu } else { ChipRequest::Chip(chip) }
        }
    };
    let overlap: Vec<_> = spec.clusters.iter().filter(|c| spec.exclude_clusters.contains(c)).collect();
    if !overlap.is_empty() {
        return Err(Error::InvalidConfig(format!("--cluster and --exclude-cluster both name {overlap:?}")));
    }
    let trimmed =
        |v: &[String]| -> Vec<String> { v.iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect() };
    Ok(Request {
        chip,
        count,
        preferred_clusters: trimmed(&spec.clusters),
        forbidden_clusters: trimmed(&spec.exclude_clusters),
        host: spec.host.clone(),
    })
}

/// Whether a chip name names the CPU (`cpu`, `CPU`).
fn is_cpu(name: &str) -> bool {
    chips::parse(name).is_ok_and(|c| c.kind == ChipKind::Cpu)
}

/// The job's environment, lowest precedence first: cluster (W&B, HF), host `env`, experiment
/// `env`, then `--env`. Secrets: the cluster's W&B key and HF token, the experiment's
/// `secret_env`, and `--secret-env` (whose value comes from `--env` or this process's
/// environment).
pub fn environment(solved: &Solved) -> Result<Vec<EnvVar>> {
    let (config, spec) = (&solved.loaded.config, &solved.spec);
    let host: &HostConfig = &config.hosts[&solved.plan.host];
    let mut env: Vec<EnvVar> = Vec::new();
    let mut set = |name: &str, value: String, secret: bool| {
        if let Some(v) = env.iter_mut().find(|v| v.name == name) {
            v.value = value;
            v.secret |= secret;
        } else {
            env.push(EnvVar { name: name.to_owned(), value, secret });
        }
    };
    if let Some(cluster) = config.cluster_of(host) {
        for (name, value, secret) in cluster.derived_env() {
            set(name, value, secret);
        }
    }
    for (name, value) in host.env() {
        set(name, value.clone(), false);
    }
    for (name, value) in &spec.experiment.env {
        set(name, value.clone(), spec.experiment.secret_env.contains(name));
    }
    for pair in &spec.env {
        let (name, value) =
            pair.split_once('=').ok_or_else(|| Error::InvalidConfig(format!("--env {pair:?}: expected KEY=VALUE")))?;
        if !shell::is_env_name(name) {
            return Err(Error::InvalidConfig(format!(
                "--env {pair:?}: `{name}` is not a valid environment variable name"
            )));
        }
        set(name, value.to_owned(), spec.secret_env.iter().any(|s| s == name));
    }
    for name in &spec.secret_env {
        if !shell::is_env_name(name) {
            return Err(Error::InvalidConfig(format!("--secret-env {name:?}: not a valid environment variable name")));
        }
        if !spec.env.iter().any(|p| p.split_once('=').is_some_and(|(n, _)| n == name)) {
            let value = std::env::var(name).map_err(|_| {
                Error::InvalidConfig(format!(
                    "--secret-env {name}: no --env {name}=... and `{name}` is not set in this shell"
                ))
            })?;
            set(name, value, true);
        }
    }
    Ok(env)
}

/// The hosts that did not answer and that the solver would have looked at before the one it
/// chose: had they answered, the job might have gone there.
pub fn unanswered_before_chosen<'a>(plan: &Plan, unanswered: &'a [(String, String)]) -> Vec<(&'a str, &'a str)> {
    let chosen = plan.considered.iter().position(|c| c.host == plan.host);
    unanswered
        .iter()
        .filter(|(host, _)| {
            let at = plan.considered.iter().position(|c| &c.host == host);
            matches!((at, chosen), (Some(at), Some(chosen)) if at < chosen)
        })
        .map(|(host, reason)| (host.as_str(), reason.as_str()))
        .collect()
}
