//! The bootstrap each process of a job runs: a strict bash script and a small Python launcher,
//! rendered from typed data with every value shell-quoted (or JSON-encoded for Python).
//!
//! The files are placed in the run's work dir under [`BOOTSTRAP_DIR`]:
//! `bootstrap.sh` (the entry), `launcher.py`, `batch_search.py` (the batch-size search of
//! [`crate::batch_search`]), `config.json` (the experiment's `config`,
//! read by the job from `THESEUS_CONFIG`) and `env.sh` (the job's non-secret variables of
//! step 1, which [`enter::script`] sources for `theseus shell`).
//!
//! At run time `bootstrap.sh`:
//! 1. checks that every secret variable is set (secret values are never in the script) and
//!    exports the job's other variables, then `THESEUS_RUN_ID`, `THESEUS_JOB_NAME`,
//!    `THESEUS_PROJECT`, `THESEUS_GROUP`, `THESEUS_WORK_DIR`, `THESEUS_RUN_DIR`,
//!    `THESEUS_STATUS_DIR`, `THESEUS_LOG_DIR`, `THESEUS_ROOT`, `THESEUS_DATA_DIR`,
//!    `THESEUS_CHECKPOINTS_DIR`, `THESEUS_RESULTS_DIR` ([`DataDirs`]), `THESEUS_CHECKPOINT_DIR`
//!    (this job name's own, [`checkpoint_dir`]), `THESEUS_CONFIG`, `UV_CACHE_DIR` (if given) and
//!    `XLA_PYTHON_CLIENT_MEM_FRACTION=0.95` (only if unset); the paths as rendered, unless the
//!    `THESEUS_DISPATCH_{ROOT,WORK,LOG,DATA,CHECKPOINTS,RESULTS,STATUS}_OVERRIDE` variables of
//!    the job's environment move them (`paths.sh`: a moved work dir must hold the job's code;
//!    [`RUNTIME_ROOT`] demands the root override);
//! 2. `cd`s to the work dir and creates the run dir and the data dirs (best effort);
//! 3. finds its rank, the process count and the coordinator ([`Launch`]) and exports
//!    `THESEUS_PROCESS_ID`, `THESEUS_NUM_PROCESSES`, `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and, when
//!    there is a coordinator, `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`,
//!    `MASTER_ADDR`, `MASTER_PORT` (`THESEUS_COORDINATOR_ADDRESS` overrides the coordinator;
//!    `MASTER_PORT` is the coordinator's port + 1, so that a job that starts both JAX's
//!    coordinator and torch's rendezvous gets two ports: every backend's port plan leaves the
//!    next port to it);
//!    then (`resume.sh`) creates `THESEUS_CHECKPOINT_DIR` and exports `THESEUS_ATTEMPT` (1 +
//!    `THESEUS_RESTART_COUNT`, which a backend sets, else 1 + `SLURM_RESTART_COUNT`) and
//!    `THESEUS_RESTORE_FROM`: the checkpoint the `latest` marker names when it was written after
//!    this run first started (`$THESEUS_RUN_DIR/resume-base` records the marker as the first
//!    start found it), else `submit --restore` ([`Resume`]), else, unless `--fresh`, what the
//!    marker an earlier run left names, else unset; one `[theseus]` line says which and why. A
//!    marker that is empty, holds control characters, has a `..` component or names no
//!    directory is ignored with a line saying so; a `--restore` dir missing on the target stops
//!    the job. Both values are appended to `env.sh`;
//! 4. with a `pyproject.toml`, sets up once per start of the run: rank 0 runs `uv sync`
//!    (`--frozen` when `uv.lock` exists; when that fails, plain `uv sync` with a warning that
//!    the lock is stale and the job runs re-resolved, as the original did), first installing uv
//!    where it is missing into a private venv under `UV_CACHE_DIR` (else the work dir), never
//!    `pip install --user` (PEP 668 refuses it on Debian-based images). With more than one
//!    process this is phase one of a two-phase start: markers under
//!    `<work>/.theseus/start/` (an `epoch` token per start, `done`/`failed` of rank 0, one
//!    `ready` per rank) hold every rank until all are set up, so that none enters
//!    `jax.distributed.initialize` while another still syncs; a failed rank 0 stops the others
//!    with its reason, and `THESEUS_SETUP_TIMEOUT_SECONDS` (1800) bounds the wait, naming the
//!    ranks waited for. The interpreter is then `uv run --no-sync python`, else
//!    `$THESEUS_PYTHON` (default `python3`);
//! 5. writes `$THESEUS_RUN_DIR/metadata.json` (rank 0; others `metadata.rank-<i>.json`)
//!    atomically, rewritten every `THESEUS_HEARTBEAT_SECONDS` (30) while the job runs: name,
//!    project, group, run id, `job_key` (a job config's registry key, else the entrypoint line),
//!    `run_key` (`project/group/name/run`), `hardware` ([`Hardware`]),
//!    the job's `config`, rank, host, pid, `slurm_job_id` (from `SLURM_JOB_ID`), `attempt`,
//!    `restore_from`, times, status and exit code; with each write rank 0 also lists the
//!    checkpoint dir in `$THESEUS_RUN_DIR/checkpoints.json` (`checkpoints.sh`: the `latest`
//!    marker's name and the 100 newest entries with their times, for the dashboard);
//! 6. runs the entrypoint from the work dir, or from its `$THESEUS_CODE_SUBDIR` (the
//!    subdirectory of the repository `submit` ran in, as the original ran there), (through
//!    `batch_search.py` when the job asks for a batch-size search:
//!    probes, then the real run; its progress in `$THESEUS_RUN_DIR/batch-search.json`, which
//!    `metadata.json` includes as `batch_search`) as a waited child that leads its own process
//!    group (Python entrypoints through `launcher.py`, which calls `jax.distributed.initialize`
//!    before the job for `distributed: jax`, and right after the job's first `import jax` for
//!    `distributed: auto`, the default; see the launcher's own doc), and exits with its exit
//!    code, recording `completed` or `failed`;
//!    on SIGTERM/SIGINT/SIGHUP it sends TERM to the job's process group, waits up to
//!    `THESEUS_TERM_GRACE_SECONDS` (or the original's `THESEUS_MAIN_CHILD_TERM_GRACE_SECONDS`;
//!    10; a second less than `THESEUS_KILL_DEADLINE_SECONDS`,
//!    the scheduler's own KILL, when that comes sooner) then sends KILL, records `preempted` and exits
//!    143/130/129. The group reaches what the job left in the background after its parent
//!    exited, which Slurm's `proctrack/linuxproc` loses; what is left of the group when the
//!    job ends gets TERM too, as a cgroup would end it. When `THESEUS_PREEMPT_HOLD` names a
//!    script (the Slurm backend's, asked for at most 5 s) that prints a number of seconds, the
//!    signal is a preemption the scheduler ends itself after a grace: the job gets those
//!    seconds, `preempted` is recorded, and the bootstrap waits for the scheduler's next signal
//!    instead of exiting (a Slurm job that ends within its GraceTime is never requeued).
//!    With stages (`-s FILE`, [`BootstrapInput::stages`]) the entrypoint is stage 1 and each
//!    stage runs this way in turn, in the same work dir, with `THESEUS_STAGE` (1-based) and
//!    `THESEUS_NUM_STAGES`, its own `THESEUS_CONFIG` (`.theseus/stage-<i>/config.json`) and,
//!    from stage 2, its own `THESEUS_JOB_NAME` (`<name>_stage<i>`, as the original named them),
//!    `THESEUS_CHECKPOINT_DIR` and resume (`--restore` is stage 1's); the first stage that fails
//!    ends the job with its exit code. `metadata.json` gains `stage` (the current one) and
//!    `stages` (name, status, exit code, start, end of each); each stage's output is also copied
//!    to `stage-<i>.log` (rank 0; `stage-<i>.rank-<r>.log` for the others) beside it; and a stage
//!    that completed in an earlier attempt of the run (`.stages/` in the run dir) is not run again.
//!
//! Everything the bootstrap itself prints goes to stderr, prefixed `[theseus]`.

use serde::Serialize;

use crate::job::stages::Stage;
use crate::job::{Distributed, EnvVar, JobIdentity};
use crate::{Error, Result};

pub mod enter;
mod paths;
mod script;

pub use paths::{PATHS as PATHS_SH, RUNTIME_ROOT, render_path_values};
pub use script::describe_distributed;
#[cfg(test)]
mod tests;

/// Dir of the bootstrap files, relative to the work dir.
pub const BOOTSTRAP_DIR: &str = ".theseus";

/// How the processes of a job learn their rank, the process count and the coordinator.
/// Shown as `{"scheme": NAME, "coordinator_port": PORT}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// One process, nothing to wire.
    Single,
    /// N processes on this machine: rank in `THESEUS_LOCAL_RANK`, count in
    /// `THESEUS_LOCAL_WORLD_SIZE` (set by the local backend), coordinator on 127.0.0.1.
    Local {
        /// Coordinator port on 127.0.0.1.
        coordinator_port: u16,
    },
    /// Processes wired by their host type's own shell ([`Wiring`]); the coordinator is the
    /// first host it finds.
    Wired {
        /// Coordinator port on the first host.
        coordinator_port: u16,
        /// The host type's wiring.
        wiring: Wiring,
    },
}

/// How a host type's processes find their rank: `shell` is bash that the bootstrap runs (as
/// the function `theseus_wire`) to set `theseus_rank`, `theseus_count`, `theseus_local_rank`
/// (else 0) and `theseus_first_host`, the coordinator's host; it may stop with
/// `theseus_die MESSAGE`. `scheme` names it in the log and the layout. A wiring whose hosts
/// each have their own disk (no work dir shared between hosts) also sets
/// `theseus_private_dirs=1`: then the first local rank of each host sets up that host's dir
/// (`uv sync`), the host's other ranks wait for it, and no rank waits for another host (the
/// job's own `jax.distributed.initialize` is the barrier across hosts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wiring {
    /// The scheme's name (`[a-z_]+`).
    pub scheme: &'static str,
    /// The bash that wires the ranks.
    pub shell: &'static str,
}

impl Launch {
    /// The scheme's name.
    pub fn scheme(&self) -> &'static str {
        match self {
            Launch::Single => "single",
            Launch::Local { .. } => "local",
            Launch::Wired { wiring, .. } => wiring.scheme,
        }
    }

    /// The coordinator's port, for launches that have one.
    pub fn coordinator_port(&self) -> Option<u16> {
        match self {
            Launch::Single => None,
            Launch::Local { coordinator_port } | Launch::Wired { coordinator_port, .. } => Some(*coordinator_port),
        }
    }
}

impl Serialize for Launch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let port = self.coordinator_port();
        let mut map = serializer.serialize_map(Some(1 + usize::from(port.is_some())))?;
        map.serialize_entry("scheme", self.scheme())?;
        if let Some(port) = port {
            map.serialize_entry("coordinator_port", &port)?;
        }
        map.end()
    }
}

/// Paths of one run on the target and the rank wiring, as a backend lays them out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunLayout {
    /// Absolute work dir (the code) on the target.
    pub work_dir: String,
    /// Absolute status dir (`metadata.json`) on the target.
    pub run_dir: String,
    /// Absolute log file on the target.
    pub log_file: String,
    /// The cluster root on the target.
    pub root_dir: String,
    /// `UV_CACHE_DIR`, when the cluster sets one.
    pub uv_cache_dir: Option<String>,
    /// The cluster's data, checkpoints and results dirs on the target.
    pub data_dirs: DataDirs,
    /// Rank wiring.
    pub launch: Launch,
}

/// The cluster's shared dirs a job reads and writes, as paths on the target; exported as
/// `THESEUS_DATA_DIR`, `THESEUS_CHECKPOINTS_DIR` and `THESEUS_RESULTS_DIR`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DataDirs {
    /// Datasets (`data`, default `<root>/data`).
    pub data: String,
    /// Checkpoints (`checkpoints`, default `<root>/checkpoints`).
    pub checkpoints: String,
    /// Results (`results`, default `<root>/results`).
    pub results: String,
}

/// What the job was given, recorded in `metadata.json` as `hardware`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hardware {
    /// The chip (`h100`), `None` for a CPU-only job.
    pub chip: Option<String>,
    /// Chips in total.
    pub count: u32,
    /// Machines (pods, Slurm nodes) the job spans.
    pub nodes: u32,
    /// The configured host the job runs on.
    pub host: String,
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
    /// The cluster root, exported as `THESEUS_ROOT` ([`RUNTIME_ROOT`]: given at run time).
    pub root_dir: String,
    /// The cluster's log dir, exported as `THESEUS_LOG_DIR` (`None`: not exported unless
    /// `THESEUS_DISPATCH_LOG_OVERRIDE` names one).
    pub log_dir: Option<String>,
    /// `UV_CACHE_DIR`, when the cluster sets one.
    pub uv_cache_dir: Option<String>,
    /// The cluster's data, checkpoints and results dirs.
    pub data_dirs: DataDirs,
    /// The hardware of the plan, for `metadata.json` (`None`: not recorded).
    pub hardware: Option<Hardware>,
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
    /// Resuming: `submit --restore` and `--fresh` ([`Resume`]).
    pub resume: Resume,
    /// Stages 2, 3, ... (`-s FILE`), run after the entrypoint above (stage 1) in order; each
    /// with its config in `.theseus/stage-<i>/config.json` (see the module docs, step 6).
    pub stages: Vec<Stage>,
    /// The main file (stage 1's name in `metadata.json` when there are stages).
    pub source: String,
    /// Run the command through the batch-size search (`batch_search.py`, see
    /// [`crate::batch_search`]).
    pub batch_search: bool,
    /// A job config of the original, run through `job.py` (`None`: an experiment).
    pub job_config: Option<JobConfigRun>,
}

/// A job config of the original that the bootstrap runs through the static runner `job.py`
/// ([`crate::original`]): its registry key becomes `job_key` in `metadata.json`, and the runner
/// finds it, the cluster's name and the hardware in `THESEUS_JOB_KEY`, `THESEUS_CLUSTER`,
/// `THESEUS_CHIP`, `THESEUS_TOTAL_CHIPS`, `THESEUS_NODES` and `THESEUS_HOST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobConfigRun {
    /// The job's registry key.
    pub key: String,
    /// The name of the host's cluster (the original's `Cluster.name`).
    pub cluster: String,
}

/// What the job resumes from, besides its own progress (see the module docs, step 3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Resume {
    /// `submit --restore PATH`, as an absolute path on the target (a relative PATH is joined to
    /// the checkpoints dir before it gets here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore: Option<String>,
    /// `submit --fresh`: the `latest` marker of an earlier run of the same name is ignored.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fresh: bool,
}

impl Resume {
    /// One line for `plan` and `--dry-run`: where the job resumes from, given its
    /// `THESEUS_CHECKPOINT_DIR`.
    pub fn describe(&self, checkpoint_dir: &str) -> String {
        match (&self.restore, self.fresh) {
            (Some(path), _) => format!(
                "from {path} (--restore), or from this run's own latest checkpoint once it wrote one; checkpoints \
                 in {checkpoint_dir}"
            ),
            (None, true) => format!(
                "from step 0 (--fresh: the latest marker an earlier run left in {checkpoint_dir} is ignored), or \
                 from this run's own latest checkpoint once it wrote one"
            ),
            (None, false) => format!("from the latest checkpoint in {checkpoint_dir} when there is one"),
        }
    }
}

impl BootstrapInput {
    /// `THESEUS_CHECKPOINT_DIR`: `<checkpoints>/<project>/<group>/<name>`, by the job's name
    /// (not its run id), so that every run of the name finds the checkpoints of the earlier
    /// ones, as the original's `RestoreableJob` did.
    pub fn checkpoint_dir(&self) -> String {
        checkpoint_dir(&self.data_dirs.checkpoints, &self.identity)
    }

    /// The input for a run laid out by a backend (`Backend::layout`).
    pub fn for_layout(
        identity: JobIdentity,
        layout: &RunLayout,
        env: Vec<EnvVar>,
        entrypoint: Vec<String>,
        distributed: Distributed,
        config: serde_json::Value,
    ) -> BootstrapInput {
        let log_dir = paths::log_dir(&layout.log_file, &identity);
        BootstrapInput {
            identity,
            work_dir: layout.work_dir.clone(),
            run_dir: layout.run_dir.clone(),
            log_dir: Some(log_dir),
            root_dir: layout.root_dir.clone(),
            uv_cache_dir: layout.uv_cache_dir.clone(),
            data_dirs: layout.data_dirs.clone(),
            hardware: None,
            env,
            uv_groups: Vec::new(),
            entrypoint,
            distributed,
            launch: layout.launch.clone(),
            config,
            resume: Resume::default(),
            stages: Vec::new(),
            source: String::new(),
            batch_search: false,
            job_config: None,
        }
    }
}

/// `<checkpoints>/<project>/<group>/<name>` of `identity` (see [`BootstrapInput::checkpoint_dir`]).
pub fn checkpoint_dir(checkpoints: &str, identity: &JobIdentity) -> String {
    let base = paths::trim_dir(checkpoints).trim_end_matches('/');
    format!("{base}/{}/{}/{}", identity.project, identity.group, identity.name)
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

/// The Python launcher, a static file: values reach it through argv and the environment.
const LAUNCHER: &str = include_str!("launcher.py");

/// The runner of job configs of the original, a static file: values reach it through the
/// environment and `config.json`.
const JOB_RUNNER: &str = include_str!("job.py");
/// The batch-size search driver, a static file: values reach it through argv and the environment.
const BATCH_SEARCH: &str = include_str!("batch_search.py");

/// Renders the bootstrap for one job.
///
/// # Errors
/// [`Error::InvalidConfig`] for an invalid environment variable name, an empty work dir or
/// entrypoint, or `distributed: jax` with an entrypoint that is not `python ...`.
pub fn render(input: &BootstrapInput) -> Result<RenderedBootstrap> {
    if input.work_dir.is_empty() || input.run_dir.is_empty() {
        return Err(Error::InvalidConfig("the bootstrap needs a work dir and a run dir".into()));
    }
    let script = script::render(input)?;
    let json = |config: &serde_json::Value| {
        serde_json::to_string_pretty(config)
            .map(|text| text + "\n")
            .map_err(|e| Error::InvalidConfig(format!("cannot encode the experiment's config as JSON: {e}")))
    };
    let file = |name: &str, contents: String, executable: bool| RenderedFile {
        path: format!("{BOOTSTRAP_DIR}/{name}"),
        contents,
        executable,
    };
    let mut files = vec![
        file("bootstrap.sh", script, true),
        file("launcher.py", LAUNCHER.to_owned(), false),
        file("batch_search.py", BATCH_SEARCH.to_owned(), false),
        file("config.json", json(&input.config)?, false),
        file("env.sh", script::render_env_file(input)?, false),
    ];
    for (i, stage) in input.stages.iter().enumerate() {
        files.push(file(&format!("stage-{}/config.json", i + 2), json(&stage.config)?, false));
    }
    // The runner, when the job or one of its stages is a job config of the original.
    let runs_job_config = |words: &[String]| words.get(1).is_some_and(|w| w == crate::original::RUNNER);
    if input.job_config.is_some()
        || runs_job_config(&input.entrypoint)
        || input.stages.iter().any(|s| runs_job_config(&s.entrypoint))
    {
        files.push(file("job.py", JOB_RUNNER.to_owned(), false));
    }
    Ok(RenderedBootstrap { files, entry: format!("{BOOTSTRAP_DIR}/bootstrap.sh") })
}
