//! The dispatch flow as a library: what `theseus submit`, `plan` and `repl` do between parsing
//! their arguments and printing, with progress reported as [`Event`]s rather than printed.
//!
//! 1. [`Dispatcher::solve`]: the experiment and flags become a [`Request`]; every candidate
//!    host is asked for free capacity at once, each within its budget ([`crate::probe`]); the
//!    solver picks the plan ([`Event::Considered`], [`Event::Chosen`]).
//! 2. [`Dispatcher::prepare`]: the job's environment ([`request::environment`]), the code
//!    snapshot and the rendered bootstrap: a [`PreparedJob`] and its [`RunLayout`].
//! 3. [`Dispatcher::submit`]: the run is recorded in the ledger as `submitting` first, the
//!    backend ships and starts it ([`Event::Progress`], [`Event::Step`], [`Event::Shipped`]),
//!    and the record is settled; an interrupt takes back a job that started anyway.
//!
//! Backends are made by a [`BackendFactory`] the caller gives (core knows no backend crate),
//! and the config is the caller's, already loaded and adjusted (flags that concern one kind
//! of host are applied by the caller, who can check them).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::availability::Availability;
use crate::backend::{DynBackend, JobHandle, PreparedJob, RunLayout, SubmitOptions};
use crate::config::{DispatchConfig, LoadedConfig};
use crate::interrupt::InterruptSignal;
use crate::job::Experiment;
use crate::snapshot::SnapshotMode;
use crate::solver::{self, Consideration, Plan, Request, SolveError};
use crate::store::ShipReport;

pub mod request;
pub(crate) mod submit;

/// Makes the backend of a configured host.
pub trait BackendFactory: Send + Sync {
    /// The backend of host `name` of `config`.
    fn backend(&self, config: &DispatchConfig, name: &str) -> crate::Result<Arc<DynBackend>>;
}

/// What the caller asks for: a job, its hardware and where its code is.
#[derive(Debug, Clone, Default)]
pub struct JobSpec {
    /// Job name.
    pub name: String,
    /// Project (default `general`).
    pub project: Option<String>,
    /// Group (default `default`).
    pub group: Option<String>,
    /// The experiment, overrides applied.
    pub experiment: Experiment,
    /// Where the experiment came from, for messages (its file).
    pub experiment_source: String,
    /// Chip name (`--chip`), over the experiment's.
    pub chip: Option<String>,
    /// Chip count (`-n`), over the experiment's.
    pub n_chips: Option<u32>,
    /// Only hosts of these clusters.
    pub clusters: Vec<String>,
    /// Never hosts of these clusters.
    pub exclude_clusters: Vec<String>,
    /// Only this host.
    pub host: Option<String>,
    /// Extra variables, `KEY=VALUE` (highest precedence).
    pub env: Vec<String>,
    /// Names of secret variables.
    pub secret_env: Vec<String>,
    /// Ask hosts for free capacity (off: trust the config; a dry run asks nobody).
    pub probe: bool,
    /// Each host's probe budget, over its `probe_timeout`.
    pub probe_timeout: Option<Duration>,
    /// The code dir (default: the current one).
    pub code: Option<PathBuf>,
    /// Which files of it.
    pub snapshot_mode: SnapshotMode,
    /// Where file hashes are remembered between ships.
    pub hash_cache: Option<PathBuf>,
    /// `--restore PATH`: the checkpoint to start from, relative to the cluster's checkpoints
    /// dir (as in the original) or absolute.
    pub restore: Option<String>,
    /// `--fresh`: ignore the `latest` marker an earlier run of the name left.
    pub fresh: bool,
}

/// Progress of the flow, for the caller to show.
#[derive(Debug)]
pub enum Event<'a> {
    /// Every host looked at, with its verdict (before the job is prepared).
    Considered(&'a [Consideration]),
    /// The plan.
    Chosen(&'a Plan),
    /// A host that did not answer and that the solver would have looked at before the chosen
    /// one: had it answered, the job might have gone there.
    SkippedUnanswered {
        /// The host.
        host: &'a str,
        /// Why it did not answer.
        reason: &'a str,
        /// The host chosen without it.
        chosen: &'a str,
    },
    /// No host fits: what was looked at and who did not answer (the error follows).
    Unsolved {
        /// Every host looked at.
        considered: &'a [Consideration],
        /// Hosts that did not answer, with the reason.
        unanswered: &'a [(String, String)],
    },
    /// A step of the backend's submit ("waiting for the helper pod").
    Step(&'a str),
    /// Bytes of code shipped so far, and the total when known.
    Progress {
        /// Sent.
        done: u64,
        /// To send.
        total: Option<u64>,
    },
    /// What shipping the code did.
    Shipped(&'a ShipReport),
}

/// Where events go.
pub type EventFn = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// Why the flow stopped.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// No host fits the request.
    #[error(transparent)]
    Unsolvable(#[from] SolveError),
    /// A signal stopped the submit; `what` says what was taken back.
    #[error("interrupted ({}); {what}", signal.name())]
    Interrupted {
        /// The signal.
        signal: InterruptSignal,
        /// What happened to the run.
        what: String,
    },
    /// Anything else.
    #[error(transparent)]
    Failed(#[from] crate::Error),
}

/// A solved job: the experiment, the request, the plan and the chosen host's backend.
pub struct Solved {
    /// The config it was solved against.
    pub loaded: LoadedConfig,
    /// The spec.
    pub spec: JobSpec,
    /// The request.
    pub request: Request,
    /// The plan.
    pub plan: Plan,
    /// The chosen host's backend (the one its probe used, with its connection).
    pub backend: Arc<DynBackend>,
    /// Hosts that did not answer their availability probe, with the reason.
    pub unanswered: Vec<(String, String)>,
}

impl Solved {
    /// The job's `uv sync --group` names: the chosen host's `uv_groups`, then the experiment's
    /// (which hold `--target`'s last), each once, in that order.
    pub fn uv_groups(&self) -> Vec<String> {
        let host = self.loaded.config.hosts.get(&self.plan.host).map(|h| h.uv_groups()).unwrap_or_default();
        let mut groups: Vec<String> = Vec::new();
        for group in host.iter().chain(&self.spec.experiment.uv_groups) {
            if !groups.contains(group) {
                groups.push(group.clone());
            }
        }
        groups
    }
}

/// Runs the flow against one loaded config.
pub struct Dispatcher {
    factory: Arc<dyn BackendFactory>,
    events: EventFn,
}

impl Dispatcher {
    /// A dispatcher that makes backends with `factory` and reports to `events`.
    pub fn new(factory: Arc<dyn BackendFactory>, events: EventFn) -> Dispatcher {
        Dispatcher { factory, events }
    }

    fn emit(&self, event: &Event<'_>) {
        (self.events)(event);
    }

    /// Builds the request, asks the candidate hosts (unless `spec.probe` is off) and solves.
    pub async fn solve(&self, loaded: LoadedConfig, spec: JobSpec) -> Result<Solved, DispatchError> {
        crate::job::validate_name("job name", &spec.name)?;
        let request = request::request(&spec)?;
        // Hosts that could never serve the request are not asked (an impossible request is
        // the solver's to refuse: then every host is).
        let want = crate::fit::Want::of(&request).ok();
        let candidates: Vec<String> = loaded
            .config
            .ordered_hosts()
            .into_iter()
            .filter(|(_, host)| want.as_ref().is_none_or(|w| host.probes_for(w)))
            .map(|(name, _)| name.to_owned())
            .filter(|name| spec.host.as_ref().is_none_or(|h| h == name))
            .collect();
        // The probed backends are kept: the chosen one submits over the connection its probe made.
        let mut targets = Vec::new();
        let mut availability = std::collections::BTreeMap::<String, Availability>::new();
        if spec.probe {
            for name in &candidates {
                let budget = crate::probe::budget(spec.probe_timeout, &loaded.config.hosts[name]);
                targets.push((name.clone(), self.factory.backend(&loaded.config, name)?, budget));
            }
            availability = crate::probe::gather(&targets, &request).await;
        }
        let unanswered = crate::probe::unanswered(&availability);
        // Counting this machine's CPUs asks no host: the local CPU rule needs it in a dry run
        // and without probes too.
        for name in &candidates {
            if loaded.config.hosts.get(name).is_some_and(|h| h.kind() == crate::config::HostKind::LOCAL)
                && !availability.contains_key(name)
            {
                let measured = self.factory.backend(&loaded.config, name)?.availability(&request).await?;
                availability.insert(name.clone(), measured);
            }
        }
        let plan = match solver::solve(&loaded.config, &request, &availability) {
            Ok(plan) => plan,
            Err(e) => {
                self.emit(&Event::Unsolved { considered: &e.considered, unanswered: &unanswered });
                return Err(e.into());
            }
        };
        let backend = match targets.into_iter().find(|(name, _, _)| *name == plan.host) {
            Some((_, backend, _)) => backend,
            None => self.factory.backend(&loaded.config, &plan.host)?,
        };
        let mut solved = Solved { loaded, spec, request, plan, backend, unanswered };
        // A batch-size search that cannot run is refused before anything starts; one that runs
        // is said in the plan.
        let env = request::environment(&solved).unwrap_or_default();
        if let Some(note) = crate::batch_search::decide(&solved.spec.experiment, &env, &solved.plan)? {
            solved.plan.notes.push(note);
        }
        Ok(solved)
    }

    /// Reports the plan ([`Event::Considered`], [`Event::Chosen`], [`Event::SkippedUnanswered`]).
    pub fn report_plan(&self, solved: &Solved) {
        self.emit(&Event::Considered(&solved.plan.considered));
        self.emit(&Event::Chosen(&solved.plan));
        for (host, reason) in request::unanswered_before_chosen(&solved.plan, &solved.unanswered) {
            self.emit(&Event::SkippedUnanswered { host, reason, chosen: &solved.plan.host });
        }
    }

    /// The job as the backend gets it: environment, snapshot, rendered bootstrap; and its
    /// layout.
    pub fn prepare(&self, solved: &Solved) -> Result<(PreparedJob, RunLayout), DispatchError> {
        Ok(submit::prepare(solved)?)
    }

    /// What the job resumes from besides its own progress: `--restore` as an absolute path on
    /// the target, and `--fresh` (see [`submit::resume`]).
    pub fn resume(&self, solved: &Solved, layout: &RunLayout) -> Result<crate::bootstrap::Resume, DispatchError> {
        Ok(submit::resume(solved, layout)?)
    }

    /// Records, submits and settles `job` (see the module docs); `kind` says what the ledger
    /// shows it as; `choices` are the caller's [`SubmitOptions`] (`replace`, `create_confirmed`,
    /// `keep`), to which the dispatcher adds its progress reports.
    pub async fn submit(
        &self,
        ledger: &crate::ledger::Ledger,
        backend: &Arc<DynBackend>,
        job: &PreparedJob,
        kind: crate::ledger::RunKind,
        choices: SubmitOptions,
    ) -> Result<JobHandle, DispatchError> {
        submit::submit_recorded(self, ledger, backend, job, kind, choices).await
    }

    /// What submitting `solved` would create that is billed ([`crate::backend::Backend::creates`]),
    /// for `plan`, which prepares no code: asked with the job's identity, experiment, environment
    /// and plan, its snapshot and bootstrap left empty.
    pub async fn creates(&self, solved: &Solved) -> Result<Vec<String>, DispatchError> {
        let job = submit::outline(solved);
        Ok(solved.backend.creates(&job).await?)
    }
}

#[cfg(test)]
mod tests;
