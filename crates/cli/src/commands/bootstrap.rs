//! `theseus bootstrap NAME EXPERIMENT OUT [KEY=VALUE...]`: one self-contained bash script that
//! runs the job on any machine with bash ([`theseus_core::standalone`]), with the code `submit`
//! would ship inside it. No config is read and no host is solved: the flags that choose a host
//! are refused. The script is written with mode 0755 into an existing dir, under a temp name
//! first; an existing OUT is replaced only with `--force`. Its path goes to stdout.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use theseus_core::backend::EnvVar;
use theseus_core::bootstrap::Resume;
use theseus_core::dispatch::JobSpec;
use theseus_core::snapshot::{Snapshot, SnapshotMode};
use theseus_core::solver::ChipRequest;
use theseus_core::standalone::{self, Standalone};

use crate::args::{BootstrapArgs, JobArgs};
use crate::context::Context;

pub(crate) fn run(ctx: &Context, args: BootstrapArgs) -> Result<ExitCode> {
    let mut job = args.job;
    if job.overrides.is_empty() {
        bail!("theseus bootstrap needs OUT, the script to write: theseus bootstrap NAME EXPERIMENT OUT [KEY=VALUE...]");
    }
    let out = PathBuf::from(job.overrides.remove(0));
    refuse_host_flags(&job)?;
    theseus_core::job::validate_name("job name", &job.name)?;
    let target = check_out(&out, args.force)?;
    let experiment = crate::prepare::load_experiment(&job, None)?;
    let (chip, count) = hardware(&job, &experiment)?;
    let env = environment(&job, &experiment)?;
    let spec = Standalone {
        name: job.name.clone(),
        project: job.project.clone(),
        group: job.group.clone(),
        uv_groups: dedup(&experiment.uv_groups),
        experiment,
        experiment_source: job.experiment.display().to_string(),
        env,
        chip,
        count,
        root: args.root,
        work: args.work,
        log: args.log,
        resume: Resume { restore: job.restore.clone(), fresh: job.fresh },
    };
    let files = standalone::bootstrap(&spec)?;
    let code_dir = match &args.code {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let mode = if args.clean { SnapshotMode::Clean } else { SnapshotMode::Dirty };
    let snapshot = Snapshot::collect(&code_dir, mode)?;
    crate::prepare::check_sizes(ctx, &snapshot)?;
    let code = archive(&snapshot)?;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let script = standalone::script(&spec, &files, &b64(&code), &b64)?;
    write(&target, script.as_bytes())?;
    ctx.info(format!(
        "theseus: wrote {} ({} files of {}, {} compressed); run it with: bash {}{}",
        target.display(),
        snapshot.file_count(),
        snapshot.root.display(),
        crate::progress::human(code.len() as u64),
        target.display(),
        if spec.root.is_none() { " --root PATH" } else { "" }
    ));
    println!("{}", target.display());
    Ok(ExitCode::SUCCESS)
}

/// The flags that choose or shape a host mean nothing here: refused rather than ignored.
fn refuse_host_flags(job: &JobArgs) -> Result<()> {
    let given: Vec<&str> = [
        ("--host", job.place.host.is_some()),
        ("--cluster", !job.place.cluster.is_empty()),
        ("--exclude-cluster", !job.place.exclude_cluster.is_empty()),
        ("--no-check", job.no_check),
        ("--probe-timeout", job.probe_timeout.is_some()),
        ("--oversubscribe", job.oversubscribe),
        ("--volcano-image", job.volcano_image.is_some()),
        ("--volcano-namespace", job.volcano_namespace.is_some()),
        ("--cpu", job.cpu.is_some()),
        ("--mem", job.mem.is_some()),
        ("a host type's flag", !job.host_flags.is_empty()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if !given.is_empty() {
        bail!(
            "theseus bootstrap solves no host, so {} mean(s) nothing here; leave them out (--chip and -n are \
             recorded in the job's metadata)",
            given.join(", ")
        );
    }
    Ok(())
}

/// `out` checked before any work: its dir exists, it is not a dir, and it exists only with `--force`.
fn check_out(out: &Path, force: bool) -> Result<PathBuf> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        bail!("{}: the directory {} does not exist; create it first", out.display(), dir.display());
    }
    if out.is_dir() {
        bail!("{}: is a directory; name the script to write", out.display());
    }
    if out.exists() && !force {
        bail!("{} exists; pass --force to replace it", out.display());
    }
    Ok(out.to_owned())
}

/// The chip and chip count for `metadata.json`, by the same rules as `submit` (flags, else the
/// experiment's `request`): a CPU job has no chip and 0 chips.
fn hardware(job: &JobArgs, experiment: &theseus_core::job::Experiment) -> Result<(Option<String>, u32)> {
    let spec = JobSpec {
        experiment: experiment.clone(),
        experiment_source: job.experiment.display().to_string(),
        chip: job.place.chip.clone(),
        n_chips: job.place.n_chips,
        ..JobSpec::default()
    };
    let request = theseus_core::dispatch::request::request(&spec)?;
    Ok(match request.chip {
        ChipRequest::Chip(chip) => (Some(chip.name.to_owned()), request.count),
        ChipRequest::AnyGpu => (None, request.count),
        ChipRequest::Cpu => (None, 0),
    })
}

/// The job's environment: the experiment's `env`, then `--env`. Secrets (the experiment's
/// `secret_env`, `--secret-env`) are never written: the script checks that whoever runs it set
/// them, so `--secret-env NAME` needs no value here.
fn environment(job: &JobArgs, experiment: &theseus_core::job::Experiment) -> Result<Vec<EnvVar>> {
    let mut env: Vec<EnvVar> = Vec::new();
    let mut set = |name: &str, value: &str, secret: bool| {
        let value = if secret { String::new() } else { value.to_owned() };
        match env.iter_mut().find(|v| v.name == name) {
            Some(v) => {
                v.value = value;
                v.secret |= secret;
            }
            None => env.push(EnvVar { name: name.to_owned(), value, secret }),
        }
    };
    for (name, value) in &experiment.env {
        set(name, value, experiment.secret_env.contains(name));
    }
    for pair in &job.env {
        let Some((name, value)) = pair.split_once('=') else { bail!("--env {pair:?}: expected KEY=VALUE") };
        set(name, value, job.secret_env.iter().any(|s| s == name));
    }
    for name in &job.secret_env {
        set(name, "", true);
    }
    Ok(env)
}

/// Each group once, in order.
fn dedup(groups: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for g in groups {
        if !out.contains(g) {
            out.push(g.clone());
        }
    }
    out
}

/// The code as a gzipped tar.
fn archive(snapshot: &Snapshot) -> Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    snapshot.write_tar(&mut gz, &mut |_| {})?;
    gz.finish().context("cannot compress the code")
}

/// Writes `bytes` to `target` (mode 0755) under a temp name in its dir, then renames it.
fn write(target: &Path, bytes: &[u8]) -> Result<()> {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = target.with_file_name(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o755))?;
        file.sync_all()?;
        std::fs::rename(&tmp, target)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", target.display()));
    }
    Ok(())
}
