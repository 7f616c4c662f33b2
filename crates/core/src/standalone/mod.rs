//! `theseus bootstrap`: one self-contained bash script that runs a job on any machine with
//! bash, as the original's command did. The script carries the code (the snapshot `submit`
//! ships, as a base64 gzipped tar in a heredoc) and the job's bootstrap files (rendered as for
//! a submit, [`crate::dispatch::submit::render_bootstrap`]); run, it reads `--root/--work/--log`
//! (else the values given when it was made; the `THESEUS_DISPATCH_*_OVERRIDE` variables of its
//! environment count too), extracts the code into `<work>/<project>/<group>/<name>`, writes the
//! bootstrap files with a run id of this start, and runs the bootstrap as one process (its
//! status under `<root>/status/<project>/<group>/<name>/<run>`). Without a root given when it
//! was made, it demands `--root` (exit 2 with a usage line). Pure: the caller archives,
//! compresses and encodes the code, and writes the file.

use std::fmt::Write as _;

use crate::backend::EnvVar;
use crate::bootstrap::{DataDirs, Hardware, Launch, RUNTIME_ROOT, RenderedBootstrap, Resume, RunLayout};
use crate::job::{Experiment, JobIdentity};
use crate::shell::quote;
use crate::{Error, Result};

/// The run id the files are rendered with; the script puts a fresh one in its place each start.
pub const RUN_ID_TOKEN: &str = "__THESEUS_RUN_ID__";

/// The static part of the script.
const WRAPPER: &str = include_str!("wrapper.sh");

/// What a standalone script runs.
#[derive(Debug, Clone)]
pub struct Standalone {
    /// Job name.
    pub name: String,
    /// Project (default `general`).
    pub project: Option<String>,
    /// Group (default `default`).
    pub group: Option<String>,
    /// The experiment (overrides applied).
    pub experiment: Experiment,
    /// Where the experiment came from, for messages.
    pub experiment_source: String,
    /// The job's environment (secret values are not written: the script checks they are set).
    pub env: Vec<EnvVar>,
    /// The chip (`None`: CPU) and count, for `metadata.json`.
    pub chip: Option<String>,
    /// Chips.
    pub count: u32,
    /// `--root` (`None`: demanded at run time).
    pub root: Option<String>,
    /// `--work` (default `<root>/work`).
    pub work: Option<String>,
    /// `--log` (default `<work>/logs`).
    pub log: Option<String>,
    /// `uv sync --group` names.
    pub uv_groups: Vec<String>,
    /// `--restore` (absolute, or relative to `<root>/checkpoints`) and `--fresh`.
    pub resume: Resume,
}

/// `path` without trailing slashes, checked absolute (the script does not expand `~`).
fn dir(flag: &str, path: &str) -> Result<String> {
    let bad = |why: &str| Error::InvalidConfig(format!("--{flag} {path:?}: {why}"));
    if path.chars().any(char::is_control) {
        return Err(bad("the path holds control characters"));
    }
    crate::paths::check_cluster_path(path).map_err(|e| bad(&e))?;
    if !path.starts_with('/') {
        return Err(bad("give an absolute path (`~` is not expanded in the script)"));
    }
    let trimmed = path.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/".to_owned() } else { trimmed.to_owned() })
}

/// The job's identity (run id [`RUN_ID_TOKEN`]) and layout.
pub fn layout(job: &Standalone) -> Result<(JobIdentity, RunLayout)> {
    let mut identity = JobIdentity::new(&job.name, job.project.as_deref(), job.group.as_deref());
    identity.run_id = RUN_ID_TOKEN.to_owned();
    let root = match &job.root {
        Some(r) => dir("root", r)?,
        None => RUNTIME_ROOT.to_owned(),
    };
    let under = |base: &str, rel: &str| if base == "/" { format!("/{rel}") } else { format!("{base}/{rel}") };
    let work = match &job.work {
        Some(w) => dir("work", w)?,
        None => under(&root, "work"),
    };
    let log = match &job.log {
        Some(l) => dir("log", l)?,
        None => under(&work, "logs"),
    };
    let job_rel = format!("{}/{}/{}", identity.project, identity.group, identity.name);
    let layout = RunLayout {
        work_dir: under(&work, &job_rel),
        run_dir: under(&root, &format!("status/{}", identity.run_path())),
        log_file: under(&log, &format!("{}.log", identity.run_path())),
        root_dir: root.clone(),
        uv_cache_dir: None,
        data_dirs: DataDirs {
            data: under(&root, "data"),
            checkpoints: under(&root, "checkpoints"),
            results: under(&root, "results"),
        },
        launch: Launch::Single,
    };
    Ok((identity, layout))
}

/// The bootstrap files of `job`, rendered as for a submit.
pub fn bootstrap(job: &Standalone) -> Result<RenderedBootstrap> {
    let (identity, layout) = layout(job)?;
    let resume = Resume {
        restore: match &job.resume.restore {
            Some(p) if p.starts_with('/') => Some(dir("restore", p)?),
            Some(p) if p.split('/').any(|part| part == "..") || p.chars().any(char::is_control) => {
                return Err(Error::InvalidConfig(format!(
                    "--restore {p:?}: a relative path is under <root>/checkpoints and may not leave it with `..`"
                )));
            }
            Some(p) => {
                Some(format!("{}/{}", layout.data_dirs.checkpoints, p.trim_start_matches("./").trim_end_matches('/')))
            }
            None => None,
        },
        fresh: job.resume.fresh,
    };
    crate::dispatch::submit::render_bootstrap(&crate::dispatch::submit::Bootstrap {
        identity: &identity,
        layout: &layout,
        env: job.env.clone(),
        experiment: &job.experiment,
        experiment_source: &job.experiment_source,
        uv_groups: job.uv_groups.clone(),
        resume,
        // One process on a machine that is not a TPU host: the search runs when the job asks.
        batch_search: &|experiment| {
            Ok(experiment.batch_search && !job.env.iter().any(|v| v.name == crate::batch_search::SIZE_VARIABLE))
        },
        hardware: Hardware { chip: job.chip.clone(), count: job.count, nodes: 1, host: "bootstrap".into() },
        cluster: "bootstrap".into(),
    })
}

/// The script: a header, the values of `job`, `paths.sh`, the static part, and the payloads.
/// `code` is the code as a gzipped tar, base64-encoded by the caller; `encode` base64-encodes
/// the bootstrap files. Lines of base64 are at most 76 characters.
pub fn script(
    job: &Standalone,
    files: &RenderedBootstrap,
    code: &str,
    encode: &dyn Fn(&[u8]) -> String,
) -> Result<String> {
    let (identity, layout) = layout(job)?;
    let mut s = String::new();
    let _ = write!(
        s,
        "#!/usr/bin/env bash\n\
         # Generated by `theseus bootstrap`: job {name} (project {project}, group {group}), from {source}.\n\
         #\n\
         # Usage: bash {{this file}} [--root PATH] [--work PATH] [--log PATH]   (-h for help)\n\
         #\n\
         # Runs the job on this machine, as one process: the code (a gzipped tar of the files\n\
         # `theseus submit` would ship, base64-encoded below; `theseus_payload | base64 -d | tar -tz`\n\
         # lists it) is extracted into <work>/<project>/<group>/<name>, then theseus's bootstrap\n\
         # runs the job there (uv sync when there is a pyproject.toml) and keeps its status in\n\
         # <root>/status/<project>/<group>/<name>/<run>/metadata.json. Exit code: the job's.\n\
         set -Eeuo pipefail\n\
         theseus_log() {{ local m=\"$*\"; printf '[theseus] %s\\n' \"${{m//[[:cntrl:]]/?}}\" >&2; }}\n\
         theseus_die() {{ theseus_log \"error: $*\"; exit 2; }}\n\
         \n# ---- values (generated) ----\n",
        name = identity.name.replace('\n', " "),
        project = identity.project,
        group = identity.group,
        source = job.experiment_source.replace(['\n', '\r'], " "),
    );
    let input = crate::bootstrap::BootstrapInput::for_layout(
        identity,
        &layout,
        Vec::new(),
        vec!["true".into()],
        crate::job::Distributed::None,
        serde_json::Value::Null,
    );
    crate::bootstrap::render_path_values(&mut s, &input);
    let _ = writeln!(s, "theseus_run_id_token={}", quote(RUN_ID_TOKEN));
    let _ = writeln!(s, "theseus_entry={}", quote(&files.entry));
    let names: Vec<String> = files.files.iter().map(|f| quote(&f.path).into_owned()).collect();
    let _ = writeln!(s, "theseus_files=({})", names.join(" "));
    s.push_str("\n# ---- payloads (generated) ----\n");
    heredoc(&mut s, "theseus_payload", code);
    for (i, file) in files.files.iter().enumerate() {
        heredoc(&mut s, &format!("theseus_file_{i}"), &encode(file.contents.as_bytes()));
    }
    s.push_str("\n# ---- paths (static) ----\n");
    s.push_str(crate::bootstrap::PATHS_SH);
    s.push_str("\n# ---- the run (static) ----\n");
    s.push_str(WRAPPER);
    Ok(s)
}

/// A function `name` that prints `base64` (already encoded) from a quoted heredoc, in lines of
/// at most 76 characters.
fn heredoc(s: &mut String, name: &str, base64: &str) {
    let _ = writeln!(s, "{name}() {{\n  cat << 'THESEUS_BASE64'");
    let clean: String = base64.chars().filter(|c| !c.is_whitespace()).collect();
    for chunk in clean.as_bytes().chunks(76) {
        s.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        s.push('\n');
    }
    s.push_str("THESEUS_BASE64\n}\n");
}
