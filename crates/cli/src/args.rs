//! Command-line arguments (clap). Raw values only; `commands::*` resolve them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use theseus_core::config::GivenFlag;

/// Send ML training jobs to the compute you already have: this machine, SSH boxes, Slurm and
/// Kubernetes + Volcano.
#[derive(Debug, Parser)]
#[command(name = "theseus", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Flags every command accepts.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Dispatch config file, instead of ~/.theseus.yaml.
    #[arg(short = 'd', long = "dispatch-config", global = true, value_name = "PATH")]
    pub(crate) dispatch_config: Option<PathBuf>,
    /// Set a config key for this command (highest layer), e.g. `--set hosts.local.processes=2`.
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
    /// Where the job ledger lives (default: $XDG_STATE_HOME/theseus or ~/.local/state/theseus).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
    /// Output format of data on stdout.
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Text)]
    pub(crate) output: OutputFormat,
    /// More logs on stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    /// For people.
    Text,
    /// For scripts.
    Json,
    /// YAML (config show).
    Yaml,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Solve for a host, ship the code and start a job.
    Submit(SubmitArgs),
    /// Show which host a job would go to, and why, without submitting.
    Plan(JobArgs),
    /// Show the state of a job.
    Status(TargetArgs),
    /// Print (or follow) a job's output.
    Logs(LogsArgs),
    /// Stop a job and confirm none of its processes is left.
    Cancel(TargetArgs),
    /// Forward a local port to a port of a running job (TensorBoard, Jupyter, a debugger), until
    /// Ctrl-C. Prints the local address on stdout.
    Forward(ForwardArgs),
    /// Run a command, or an interactive shell, in a running job's run dir and environment on
    /// one of its ranks (`theseus shell NAME -- nvidia-smi`); exits with the command's code.
    Shell(ShellArgs),
    /// Push the local code into a running job's code dir: only changed files move, deleted
    /// files are deleted; prints what changed. `--watch` keeps syncing on change.
    Sync(SyncArgs),
    /// Start Jupyter Lab on a solved host (like `submit`), open a tunnel to it and print its
    /// local URL; Ctrl-C closes the tunnel and asks whether to stop the session.
    Repl(ReplArgs),
    /// List submitted jobs, newest first.
    List(ListArgs),
    /// Serve a dashboard of every run on every host in the browser, live, until Ctrl-C. Prints
    /// the URL to open (with its token) on stdout.
    Ui(UiArgs),
    /// Write one self-contained bash script that runs the job on any machine with bash (the
    /// code inside it): `bash OUT --root PATH`. Nothing is submitted or solved.
    Bootstrap(BootstrapArgs),
    /// Show or check the dispatch config.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// List the chips theseus knows.
    Chips,
    /// Free space: code dirs of finished runs, leftovers of crashed submits and unused objects
    /// on every host (logs stay), and code-shipping helpers crashed clients left on Volcano hosts.
    Gc(GcArgs),
    /// Show the space the code store and run code dirs use on each host's cluster.
    Du(DuArgs),
    /// The original theseus package's `jobs`: run by the project's own Python (`uv run`, else
    /// `.venv`, else `python3`), as before.
    #[command(disable_help_flag = true)]
    Jobs(PassedArgs),
    /// The original theseus package's `configure`, run by the project's own Python.
    #[command(disable_help_flag = true)]
    Configure(PassedArgs),
    /// The original theseus package's `run` (a job in this process), run by the project's own
    /// Python.
    #[command(disable_help_flag = true)]
    Run(PassedArgs),
    /// The original theseus package's `checkpoints`, run by the project's own Python.
    #[command(disable_help_flag = true)]
    Checkpoints(PassedArgs),
    /// The original theseus package's `restore`, run by the project's own Python.
    #[command(disable_help_flag = true)]
    Restore(PassedArgs),
    /// Print a shell completion script (e.g. `theseus completions bash > ~/.local/share/bash-completion/completions/theseus`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (theseus.1 and one per subcommand) into DIR (`cargo xtask man`).
    #[command(hide = true)]
    Man {
        /// Where the pages go.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// Which chips and where (shared by submit, plan and repl).
#[derive(Debug, Clone, Args)]
pub(crate) struct Placement {
    /// Chip to run on (`theseus chips` lists them; `cpu` for CPU only). `--chip cpu` without
    /// `-n` runs one process (one pod on Volcano), whatever GPU count the experiment asks for.
    #[arg(long)]
    pub(crate) chip: Option<String>,
    /// Number of chips; with `--chip cpu`, the number of processes (pods on Volcano).
    #[arg(short = 'n', long = "n-chips", alias = "n_chips", value_name = "N")]
    pub(crate) n_chips: Option<u32>,
    /// Only hosts of these clusters (comma separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) cluster: Vec<String>,
    /// Never hosts of these clusters (comma separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) exclude_cluster: Vec<String>,
    /// Only this host.
    #[arg(long)]
    pub(crate) host: Option<String>,
}

/// Everything that decides where a job goes and what it runs (shared by submit and plan).
#[derive(Debug, Args)]
pub(crate) struct JobArgs {
    /// Job name (letters, digits, `.`, `_`, `-`; it becomes a directory name).
    #[arg(value_parser = name_arg)]
    pub(crate) name: String,
    /// Experiment file (YAML: entrypoint, request, env, distributed, uv_groups, config), or a job
    /// config of the original (YAML with `job:`, the registry key of a job of the shipped code).
    pub(crate) experiment: PathBuf,
    /// Overrides of the experiment's `config` section (of the whole file for a job config of the
    /// original), as dotted KEY=VALUE.
    #[arg(value_name = "KEY=VALUE")]
    pub(crate) overrides: Vec<String>,
    #[command(flatten)]
    pub(crate) place: Placement,
    /// Project (default `general`; letters, digits, `.`, `_`, `-`).
    #[arg(short = 'p', long, value_parser = name_arg)]
    pub(crate) project: Option<String>,
    /// Group (default `default`; letters, digits, `.`, `_`, `-`).
    #[arg(short = 'g', long, value_parser = name_arg)]
    pub(crate) group: Option<String>,
    /// Extra environment variable for the job (highest precedence).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub(crate) env: Vec<String>,
    /// Mark an environment variable as secret (never printed or written in plain text).
    #[arg(long = "secret-env", value_name = "KEY")]
    pub(crate) secret_env: Vec<String>,
    /// Do not ask hosts for free capacity; trust the config.
    #[arg(long)]
    pub(crate) no_check: bool,
    /// How long each host may take to report its free capacity (seconds, or e.g. `30s`, `2m`);
    /// a host that has not answered by then is "unknown". Overrides every host's
    /// `probe_timeout` key; without either, 5 seconds.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub(crate) probe_timeout: Option<Duration>,
    /// Allow more local CPU processes than this machine has CPUs (e.g. to try a multi-process
    /// job on a small machine). Without it, such a request is refused. A local host's
    /// `oversubscribe: true` config key does the same.
    #[arg(long)]
    pub(crate) oversubscribe: bool,
    /// Container image of the job's pods (Volcano hosts), instead of the host's `image`.
    #[arg(long, value_name = "IMAGE")]
    pub(crate) volcano_image: Option<String>,
    /// Namespace of the job (Volcano hosts), instead of the host's `namespace`.
    #[arg(long, value_name = "NAMESPACE")]
    pub(crate) volcano_namespace: Option<String>,
    /// CPU per pod (Volcano hosts; a Kubernetes quantity such as `16` or `500m`).
    #[arg(long, value_name = "QUANTITY")]
    pub(crate) cpu: Option<String>,
    /// Memory per pod (Volcano: a quantity such as `64Gi`) or per node (Slurm: `--mem`, e.g. `64G`).
    #[arg(long, value_name = "QUANTITY")]
    pub(crate) mem: Option<String>,
    /// Start from this checkpoint: a dir relative to the cluster's checkpoints dir (e.g.
    /// `general/default/NAME/step_40`, as in the original), or absolute. The job finds it in
    /// `THESEUS_RESTORE_FROM`; a restarted attempt that wrote its own `latest` resumes from that.
    #[arg(long, value_name = "PATH", conflicts_with = "fresh")]
    pub(crate) restore: Option<String>,
    /// Ignore the `latest` checkpoint an earlier run of the same name left (start from step 0);
    /// a restarted attempt still resumes from what this run wrote.
    #[arg(long)]
    pub(crate) fresh: bool,
    // ---- issue 28, part `standalone` ----
    /// Extra `uv sync --group` name for the job (repeatable), after the host's `uv_groups` and
    /// the experiment's (each group once).
    #[arg(long = "target", value_name = "GROUP", value_parser = group_arg)]
    pub(crate) target: Vec<String>,
    // Issue 28, part `stages`.
    /// A further stage: an experiment run after the main file (and the stages before it) in the
    /// same allocation and work dir, with its own entrypoint, `distributed` and `config`
    /// (the overrides apply to every stage); repeatable, run in order, stopping at the first
    /// that fails. Its `env` joins the job's; the main file's `request` (or --chip/-n) decides
    /// the hardware.
    #[arg(short = 's', long = "stage", value_name = "FILE")]
    pub(crate) stages: Vec<PathBuf>,
    /// The host types' own flags given (`--tpu-spot`; see `crate::host_flags`).
    #[arg(skip)]
    pub(crate) host_flags: Vec<GivenFlag>,
    // Issue 28, part `orig`: job configs of the original.
    #[command(flatten)]
    pub(crate) original: OriginalArgs,
}

/// The flags of job configs of the original (a YAML with `job:` instead of `entrypoint:`).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct OriginalArgs {
    /// The registry key of the job to run (a job config of the original; instead of its `job:`).
    #[arg(short = 'j', long = "job", value_name = "KEY")]
    pub(crate) job: Option<String>,
    /// Tensor-parallel shards of the job's topology: written into `request.n_shards` of the job
    /// config (job configs of the original only).
    #[arg(long = "n-shards", alias = "n_shards", value_name = "N")]
    pub(crate) n_shards: Option<u32>,
    /// A module of the shipped code the job imports before its registry is read (repeatable;
    /// `mod.py` is taken as `mod`; job configs of the original only).
    #[arg(long = "load", value_name = "MODULE")]
    pub(crate) load: Vec<String>,
}

/// `theseus gc`.
#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Only what is older than this (e.g. `30m`, `2h`, `7d`): run code dirs and objects unchanged
    /// for that long, Volcano helpers started that long ago. Default: 7d for run code dirs and
    /// objects, 1h for Volcano helpers. Runs the ledger or their host says are live are never
    /// touched, whatever their age.
    #[arg(long, value_name = "AGE")]
    pub(crate) older_than: Option<String>,
    /// Only this host (default: every host of the config).
    #[arg(long)]
    pub(crate) host: Option<String>,
    /// List what would be removed, with sizes; remove nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// `theseus du`.
#[derive(Debug, Args)]
pub(crate) struct DuArgs {
    /// Only this host (default: every host of the config).
    #[arg(long)]
    pub(crate) host: Option<String>,
}

/// `theseus submit`.
#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    #[command(flatten)]
    pub(crate) job: JobArgs,
    /// Ship the working tree: tracked files as modified plus untracked, not ignored files (default).
    #[arg(long, conflicts_with = "clean")]
    pub(crate) dirty: bool,
    /// Ship the files of HEAD only.
    #[arg(long)]
    pub(crate) clean: bool,
    /// Directory (or git repository) to ship (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) code: Option<PathBuf>,
    /// Print what would be shipped and the rendered bootstrap; touch nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Stream the job's output and wait for it to end; exit with its exit code.
    #[arg(short, long)]
    pub(crate) follow: bool,
    /// Replace an existing job of the same name (backends with named jobs).
    #[arg(long)]
    pub(crate) replace: bool,
    #[command(flatten)]
    pub(crate) create: CreateArgs,
}

// ---- issue 28, part `standalone` ----
/// `theseus bootstrap`: OUT is the first word after the experiment (the original's order).
#[derive(Debug, Args)]
#[command(override_usage = "theseus bootstrap [OPTIONS] <NAME> <EXPERIMENT> <OUT> [KEY=VALUE]...")]
pub(crate) struct BootstrapArgs {
    #[command(flatten)]
    pub(crate) job: JobArgs,
    /// The root dir on the machine that runs the script (data, checkpoints, results, status).
    /// Without it the script demands `--root PATH` when run.
    #[arg(long, value_name = "PATH")]
    pub(crate) root: Option<String>,
    /// The work root (default `<root>/work`); the code goes to `<work>/<project>/<group>/<name>`.
    #[arg(long, value_name = "PATH")]
    pub(crate) work: Option<String>,
    /// The log dir (default `<work>/logs`), the job's `THESEUS_LOG_DIR`.
    #[arg(long, value_name = "PATH")]
    pub(crate) log: Option<String>,
    /// Ship the working tree: tracked files as modified plus untracked, not ignored files (default).
    #[arg(long, conflicts_with = "clean")]
    pub(crate) dirty: bool,
    /// Ship the files of HEAD only.
    #[arg(long)]
    pub(crate) clean: bool,
    /// Directory (or git repository) to put in the script (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) code: Option<PathBuf>,
    /// Replace OUT when it exists.
    #[arg(long)]
    pub(crate) force: bool,
}

/// Consent to what a host must create for a job (a cloud VM; `plan` lists it).
#[derive(Debug, Clone, Args)]
pub(crate) struct CreateArgs {
    /// Create what the host must create for the job (a cloud VM; `plan` lists it under `will
    /// create:`) without asking. Without it theseus asks on a terminal, and refuses elsewhere.
    #[arg(short = 'y', long)]
    pub(crate) yes: bool,
    /// Leave what the host created for the job (a cloud VM) when the job ends, instead of
    /// deleting it.
    #[arg(long)]
    pub(crate) keep: bool,
}

/// A job to act on.
#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// Job name (its newest run) or run id.
    pub(crate) job: String,
}

/// `theseus forward`.
#[derive(Debug, Args)]
pub(crate) struct ForwardArgs {
    /// Job name (its newest run) or run id.
    pub(crate) job: String,
    /// `REMOTE` (the same port locally, else the next free one) or `LOCAL:REMOTE` (`0:REMOTE`:
    /// any free local port).
    pub(crate) ports: String,
    /// The rank whose port to reach.
    #[arg(long, default_value_t = 0)]
    pub(crate) rank: u32,
}

/// `theseus ui`.
#[derive(Debug, Args)]
pub(crate) struct UiArgs {
    /// Address to listen on. Anything but a loopback address lets every machine that can reach
    /// it try the token (no TLS): prefer an SSH tunnel to a loopback `theseus ui`.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub(crate) bind: std::net::IpAddr,
    /// Port to listen on (0: any free port).
    #[arg(long, value_name = "N", default_value_t = 8765)]
    pub(crate) port: u16,
    /// How often the live runs are asked of their hosts in the background.
    #[arg(long, value_name = "SECONDS", value_parser = duration_arg, default_value = "10")]
    pub(crate) refresh: Duration,
}

/// `theseus shell`.
#[derive(Debug, Args)]
pub(crate) struct ShellArgs {
    /// Job name (its newest run) or run id.
    pub(crate) job: String,
    /// The rank whose host, node or pod to enter.
    #[arg(long, default_value_t = 0)]
    pub(crate) rank: u32,
    /// No terminal on the remote side, even when stdin is one.
    #[arg(short = 'T', long)]
    pub(crate) no_tty: bool,
    /// The command and its arguments (after `--`); none: an interactive shell.
    #[arg(last = true)]
    pub(crate) command: Vec<String>,
}

/// `theseus repl`.
#[derive(Debug, Args)]
pub(crate) struct ReplArgs {
    /// Experiment file for the session's environment (`env`, `uv_groups`, `request`); its
    /// entrypoint is replaced by Jupyter Lab.
    pub(crate) experiment: Option<PathBuf>,
    /// Session name (default `repl-<chip>-<time>`).
    #[arg(long, value_parser = name_arg)]
    pub(crate) name: Option<String>,
    #[command(flatten)]
    pub(crate) place: Placement,
    /// Project (default `repl`).
    #[arg(short = 'p', long, value_parser = name_arg)]
    pub(crate) project: Option<String>,
    /// Extra environment variable for the session.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub(crate) env: Vec<String>,
    /// Local port of the tunnel (the next free one if taken; 0: any).
    #[arg(long, default_value_t = 8888)]
    pub(crate) port: u16,
    /// How long to wait for Jupyter to print its URL once the session runs (seconds, or e.g.
    /// `3m`; the time it waits in a Slurm queue does not count).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg, default_value = "180")]
    pub(crate) startup_timeout: Duration,
    /// Print the URL and leave the session running without a tunnel (reattach with
    /// `theseus forward`).
    #[arg(long)]
    pub(crate) detach: bool,
    /// Keep syncing local edits into the session (as `theseus sync --watch`).
    #[arg(long)]
    pub(crate) sync: bool,
    /// Show Jupyter's log on stderr while the tunnel is up.
    #[arg(short, long)]
    pub(crate) follow: bool,
    /// Directory (or git repository) to ship (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) code: Option<PathBuf>,
    /// Ship the files of HEAD only.
    #[arg(long)]
    pub(crate) clean: bool,
    /// Do not ask hosts for free capacity; trust the config.
    #[arg(long)]
    pub(crate) no_check: bool,
    #[command(flatten)]
    pub(crate) create: CreateArgs,
    // ---- issue 28, part `standalone` ----
    /// Extra `uv sync --group` name for the job (repeatable), after the host's `uv_groups` and
    /// the experiment's (each group once).
    #[arg(long = "target", value_name = "GROUP", value_parser = group_arg)]
    pub(crate) target: Vec<String>,
    /// On a Slurm host, cancel the session when it has waited this long in the queue (e.g.
    /// `30m`). Without it, it waits as long as it is pending (one line on stderr: the reason,
    /// the time waited); the time queued never counts against `--startup-timeout`.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub(crate) slurm_wait_timeout: Option<Duration>,
    /// The host types' own flags given (`--tpu-spot`; see `crate::host_flags`).
    #[arg(skip)]
    pub(crate) host_flags: Vec<GivenFlag>,
    // Issue 28, part `parity`: the original's `repl` flags.
    /// Ship the working tree (the default): tracked files as modified plus untracked, not
    /// ignored files.
    #[arg(long, conflicts_with = "clean")]
    pub(crate) dirty: bool,
    /// CPU per pod (Volcano hosts; a Kubernetes quantity such as `16` or `500m`).
    #[arg(long, value_name = "QUANTITY")]
    pub(crate) cpu: Option<String>,
    /// Memory per pod (Volcano: a quantity such as `64Gi`) or per node (Slurm: `--mem`, e.g.
    /// `64G`).
    #[arg(long, value_name = "QUANTITY")]
    pub(crate) mem: Option<String>,
    /// Accepted as the original's `repl` accepted it; a session runs no job config, so it
    /// changes nothing (a warning says so).
    #[arg(long = "n-shards", alias = "n_shards", value_name = "N")]
    pub(crate) n_shards: Option<u32>,
}

/// `theseus sync`.
#[derive(Debug, Args)]
pub(crate) struct SyncArgs {
    /// Job name (its newest run) or run id.
    pub(crate) job: String,
    /// Directory (or git repository) to sync from (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) code: Option<PathBuf>,
    /// Sync the files of HEAD only (default: the working tree, as `submit` ships it).
    #[arg(long)]
    pub(crate) clean: bool,
    /// Keep watching the local tree and sync after each burst of changes, until Ctrl-C.
    #[arg(long)]
    pub(crate) watch: bool,
}

/// `theseus logs`.
#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// Job name (its newest run) or run id.
    pub(crate) job: String,
    /// Keep streaming until the job ends.
    #[arg(short, long)]
    pub(crate) follow: bool,
    /// Only this rank's output.
    #[arg(long)]
    pub(crate) rank: Option<u32>,
}

/// `theseus list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// How many runs to show.
    #[arg(long, default_value_t = 20)]
    pub(crate) limit: usize,
    /// Do not refresh the state of unfinished runs from their backends.
    #[arg(long)]
    pub(crate) no_refresh: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the merged config and where each value came from.
    Show,
    /// Validate the config; exit non-zero on errors.
    Check,
}

/// Clap parser of job, project and group names: the core's one name rule.
fn name_arg(text: &str) -> Result<String, String> {
    match theseus_core::job::name_problem(text) {
        None => Ok(text.to_owned()),
        Some(problem) => Err(problem),
    }
}

/// Clap parser of `--target` groups: a uv dependency group name (letters, digits, `.`, `_`, `-`).
fn group_arg(text: &str) -> Result<String, String> {
    let ok = !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a uv dependency group name (letters, digits, `.`, `_`, `-`; as in pyproject.toml's \
             [dependency-groups])"
        ))
    }
}

/// Clap parser of durations: the core's one duration parser.
fn duration_arg(text: &str) -> Result<Duration, String> {
    theseus_core::duration::parse(text)
}

/// The arguments of a command of the original theseus package, passed to it as they are.
#[derive(Debug, Args)]
pub(crate) struct PassedArgs {
    /// Its arguments (`--help` shows the original's help).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "ARGS")]
    pub(crate) args: Vec<String>,
}
