//! What `plan` and `submit` share: loading the experiment, building the request, asking hosts
//! for free capacity and solving; and, for submit, the job's environment.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow, bail};
use theseus_core::availability::Availability;
use theseus_core::backend::{DynBackend, EnvVar};
use theseus_core::chips::{self, ChipKind};
use theseus_core::config::{HostConfig, LoadedConfig};
use theseus_core::job::Experiment;
use theseus_core::shell;
use theseus_core::solver::{self, ChipRequest, Plan, Request, render};

use crate::args::JobArgs;
use crate::context::Context;

/// A solved job: config, experiment (overrides applied), request and plan.
pub(crate) struct Solved {
    pub(crate) loaded: LoadedConfig,
    pub(crate) experiment: Experiment,
    pub(crate) request: Request,
    pub(crate) plan: Plan,
    pub(crate) backend: Arc<DynBackend>,
    /// Hosts that did not answer their availability probe, with the reason, by name.
    pub(crate) unanswered: Vec<(String, String)>,
}

/// Loads everything and solves. On failure, prints what was considered to stderr.
pub(crate) async fn solve(ctx: &Context, args: &JobArgs, probe: bool) -> Result<Solved> {
    solve_with(ctx, args, None, probe).await
}

/// [`solve`] with the experiment given (`theseus repl`), else loaded from `args.experiment`.
pub(crate) async fn solve_with(
    ctx: &Context,
    args: &JobArgs,
    experiment: Option<Experiment>,
    probe: bool,
) -> Result<Solved> {
    let mut loaded = ctx.config()?;
    apply_resource_flags(&mut loaded, args)?;
    if args.oversubscribe {
        for host in loaded.config.hosts.values_mut() {
            if let HostConfig::Local(local) = host {
                local.oversubscribe = true;
            }
        }
    }
    theseus_core::job::validate_name("job name", &args.name)?;
    let mut experiment = match experiment {
        Some(experiment) => experiment,
        None => Experiment::load(&args.experiment)?,
    };
    experiment.apply_overrides(&args.overrides)?;
    let request = request(args, &experiment)?;

    let candidates: Vec<String> = loaded
        .config
        .ordered_hosts()
        .into_iter()
        .map(|(name, _)| name.to_owned())
        .filter(|name| args.host.as_ref().is_none_or(|h| h == name))
        .collect();
    // The probed backends are kept: the chosen one submits over the connection its probe made.
    let mut targets = Vec::new();
    let mut availability: BTreeMap<String, Availability> = if args.no_check || !probe {
        BTreeMap::new()
    } else {
        for name in &candidates {
            // Each host's own budget: --probe-timeout, else its `probe_timeout`, else 5 s.
            let budget = theseus_core::probe::budget(args.probe_timeout, &loaded.config.hosts[name]);
            targets.push((name.clone(), ctx.backend(&loaded, name)?, budget));
        }
        theseus_core::probe::gather(&targets, &request).await
    };
    let unanswered = theseus_core::probe::unanswered(&availability);
    // Counting this machine's CPUs asks no host: the local CPU rule needs it in a dry run and
    // with --no-check too.
    for name in &candidates {
        if matches!(loaded.config.hosts.get(name), Some(HostConfig::Local(_))) && !availability.contains_key(name) {
            let measured = ctx.backend(&loaded, name)?.availability(&request).await?;
            availability.insert(name.clone(), measured);
        }
    }
    let plan = match solver::solve(&loaded.config, &request, &availability) {
        Ok(plan) => plan,
        Err(e) => {
            if !e.considered.is_empty() {
                eprint!("{}", render::render_table(&e.considered));
            }
            eprint!("{}", render_unanswered(&unanswered));
            return Err(e.into());
        }
    };
    let backend = match targets.into_iter().find(|(name, _, _)| *name == plan.host) {
        Some((_, backend, _)) => backend,
        None => ctx.backend(&loaded, &plan.host)?,
    };
    Ok(Solved { loaded, experiment, request, plan, backend, unanswered })
}

/// One line per host that did not answer its probe: `unknown: HOST: REASON`.
pub(crate) fn render_unanswered(unanswered: &[(String, String)]) -> String {
    unanswered.iter().map(|(host, reason)| format!("unknown: {host}: {reason}\n")).collect()
}

/// The hosts that did not answer and that the solver would have looked at before the one it
/// chose: had they answered, the job might have gone there.
pub(crate) fn unanswered_before_chosen(solved: &Solved) -> Vec<&(String, String)> {
    let chosen = solved.plan.considered.iter().position(|c| c.host == solved.plan.host);
    solved
        .unanswered
        .iter()
        .filter(|(host, _)| {
            let at = solved.plan.considered.iter().position(|c| &c.host == host);
            matches!((at, chosen), (Some(at), Some(chosen)) if at < chosen)
        })
        .collect()
}

/// `--volcano-image`, `--volcano-namespace`, `--cpu` and `--mem` applied to every host they
/// concern (the solver has not picked one yet), each checked like the config key it replaces.
fn apply_resource_flags(loaded: &mut LoadedConfig, args: &JobArgs) -> Result<()> {
    for (name, host) in loaded.config.hosts.iter_mut() {
        match host {
            HostConfig::Volcano(v) => {
                if let Some(image) = &args.volcano_image {
                    v.image = image.clone();
                }
                if let Some(ns) = &args.volcano_namespace {
                    v.namespace = ns.clone();
                }
                if let Some(cpu) = &args.cpu {
                    v.cpu = Some(cpu.clone());
                    v.cpu_cpu = Some(cpu.clone());
                }
                if let Some(mem) = &args.mem {
                    v.memory = Some(mem.clone());
                    v.cpu_memory = Some(mem.clone());
                }
                if args.volcano_image.is_some()
                    || args.volcano_namespace.is_some()
                    || args.cpu.is_some()
                    || args.mem.is_some()
                {
                    theseus_backend_volcano::validate_host(name, v).map_err(|e| {
                        anyhow!(
                            "{e} (after --volcano-image/--volcano-namespace/--cpu/--mem were applied; fix the flag)"
                        )
                    })?;
                }
            }
            HostConfig::Slurm(s) => {
                if let Some(mem) = &args.mem {
                    s.mem = Some(mem.clone());
                }
            }
            HostConfig::Plain(_) | HostConfig::Local(_) => {}
        }
    }
    Ok(())
}

/// The hardware request from flags, else the experiment's `request`, else 1 GPU of any kind.
fn request(args: &JobArgs, experiment: &Experiment) -> Result<Request> {
    let from_file = experiment.request.clone().unwrap_or_default();
    let (chip_name, chip_source) = match (&args.chip, &from_file.chip) {
        (Some(c), _) => (Some(c.clone()), "--chip".to_owned()),
        (None, Some(c)) => (Some(c.clone()), format!("{}: request.chip", args.experiment.display())),
        (None, None) => (None, String::new()),
    };
    // `--chip cpu` without `-n` is one process: the experiment's count is of its own chip (GPUs),
    // unless that chip is a CPU too.
    let file_count = match (&args.chip, &from_file.chip) {
        (Some(flag), file) if is_cpu(flag) && !file.as_deref().is_some_and(is_cpu) => None,
        _ => from_file.count,
    };
    let count = args.n_chips.or(file_count).unwrap_or(1);
    let chip = match chip_name {
        None if count == 0 => ChipRequest::Cpu,
        None => ChipRequest::AnyGpu,
        Some(name) => {
            let chip = chips::parse(&name).map_err(|e| anyhow!("{chip_source}: {e}"))?;
            match chip.kind {
                ChipKind::Cpu => ChipRequest::Cpu,
                ChipKind::Tpu => bail!("{chip_source}: TPU chips are not supported yet (chip \"{}\")", chip.name),
                ChipKind::Gpu if count == 0 => ChipRequest::Cpu,
                ChipKind::Gpu => ChipRequest::Chip(chip),
            }
        }
    };
    let overlap: Vec<_> = args.cluster.iter().filter(|c| args.exclude_cluster.contains(c)).collect();
    if !overlap.is_empty() {
        bail!("--cluster and --exclude-cluster both name {overlap:?}");
    }
    Ok(Request {
        chip,
        count,
        preferred_clusters: args.cluster.iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect(),
        forbidden_clusters: args
            .exclude_cluster
            .iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
        host: args.host.clone(),
    })
}

/// Whether a chip name names the CPU (`cpu`, `CPU`).
fn is_cpu(name: &str) -> bool {
    chips::parse(name).is_ok_and(|c| c.kind == ChipKind::Cpu)
}

/// The job's environment, lowest precedence first: cluster (W&B, HF), host `env`, experiment
/// `env`, then `--env`. Secrets: the cluster's W&B key and HF token, the experiment's
/// `secret_env`, and `--secret-env` (whose value comes from `--env` or this shell's environment).
pub(crate) fn environment(solved: &Solved, args: &JobArgs) -> Result<Vec<EnvVar>> {
    let config = &solved.loaded.config;
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
    for (name, value) in &solved.experiment.env {
        set(name, value.clone(), solved.experiment.secret_env.contains(name));
    }
    for pair in &args.env {
        let (name, value) = pair.split_once('=').ok_or_else(|| anyhow!("--env {pair:?}: expected KEY=VALUE"))?;
        if !shell::is_env_name(name) {
            bail!("--env {pair:?}: `{name}` is not a valid environment variable name");
        }
        set(name, value.to_owned(), args.secret_env.iter().any(|s| s == name));
    }
    for name in &args.secret_env {
        if !shell::is_env_name(name) {
            bail!("--secret-env {name:?}: not a valid environment variable name");
        }
        if !args.env.iter().any(|p| p.split_once('=').is_some_and(|(n, _)| n == name)) {
            let value = std::env::var(name).with_context(|| {
                format!("--secret-env {name}: no --env {name}=... and `{name}` is not set in this shell")
            })?;
            set(name, value, true);
        }
    }
    Ok(env)
}
