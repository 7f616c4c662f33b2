//! Where a run stands on its VM, and its restart after a preemption: a VM theseus created is
//! created anew (with the settings of the submit) and the run starts again on it from what the
//! client kept (`super::spool`), as the next attempt.

use std::time::Duration;

use theseus_core::Result;
use theseus_core::backend::{JobHandle, JobState, JobStatus, PreparedJob, SubmitOptions};
use theseus_core::snapshot::Snapshot;
use theseus_core::solver::Plan;

use super::{KIND, TpuBackend, TpuHandleData, VmNode, WorkerRun, spool};
use crate::config::run_label;

/// Whether the run of a handle still stands on the VM, and where.
pub(super) enum Standing {
    /// On `node`, as `runs` (one per worker), started for the `attempt`-th time.
    Live { node: VmNode, runs: Vec<WorkerRun>, attempt: u32 },
    /// Not on any worker now: what `status` answers.
    Report(JobStatus),
}

/// What [`TpuBackend::resume`] did.
pub(super) enum Resume {
    /// The run runs again.
    Started,
    /// Another client is at it.
    Busy,
    /// Nothing was kept to start it from.
    NotKept,
}

/// How long a client's resume lock holds off others (a recreation takes minutes).
const RESUME_LOCK: Duration = Duration::from_secs(1800);

impl TpuBackend {
    /// Where the run of `data` stands: on the node it started on, or on the node created anew
    /// after a preemption where it was started again; else what `status` answers. With
    /// `may_resume`, a run interrupted by a preemption of a VM theseus created is started again
    /// first (the VM created anew, see [`TpuBackend::resume`]).
    pub(super) async fn standing(
        &self,
        handle: &JobHandle,
        data: &TpuHandleData,
        may_resume: bool,
    ) -> Result<Standing> {
        let report = |state: JobState, message: String| {
            Ok(Standing::Report(JobStatus {
                state,
                exit_code: None,
                message: Some(message),
                ranks: vec![],
                attempt: None,
            }))
        };
        let spool = self.spool(&handle.id);
        let mut node = self.vm.node().await?;
        // Created anew for this run by a resume whose client stopped before it started the run
        // again (its status was given up on): READY, labelled with this run, not started on.
        let unstarted = |n: &VmNode, spool: &spool::Spool| {
            n.state == "READY"
                && n.id != data.node_id
                && n.labels.get("theseus-run").is_some_and(|r| *r == run_label(&handle.id))
                && spool.incarnation(&n.id).is_none()
        };
        if may_resume
            && let Some(n) = &node
            && let Some(spool) = &spool
            && n.created_by_theseus
            && (n.is_interrupted() || unstarted(n, spool))
        {
            // What the run is if the restart fails, even after the VM is gone.
            let interrupted = |why: String| JobStatus {
                state: JobState::Preempted,
                exit_code: None,
                message: Some(why),
                ranks: vec![],
                attempt: Some(spool.restarts() + 1),
            };
            if n.is_interrupted() {
                spool.save_final(&interrupted(format!(
                    "VM `{}` was {} and the run stopped; submit it again to resume from its latest checkpoint",
                    n.name, n.state
                )));
            }
            let resumed = match self.resume(data, spool).await {
                Ok(r) => r,
                Err(e) => {
                    let why = format!(
                        "VM `{}` was {}; starting the run again failed: {e}; submit it again to resume from its \
                         latest checkpoint",
                        n.name, n.state
                    );
                    spool.save_final(&interrupted(why.clone()));
                    spool.forget_job();
                    return Ok(Standing::Report(interrupted(why)));
                }
            };
            match resumed {
                Resume::Started => {
                    // Running again: the interrupted status above is not its end.
                    spool.clear_final();
                    let state = n.state.to_lowercase();
                    spool.save_restart_reason(&format!("VM `{}` was {state} ({})", n.name, n.state));
                    node = self.vm.node().await?;
                }
                Resume::Busy => {
                    return report(
                        JobState::Running,
                        format!("VM `{}` was {}; it is being created again to restart the run", n.name, n.state),
                    );
                }
                Resume::NotKept => {}
            }
        }
        match node {
            None => match spool.as_ref().and_then(spool::Spool::final_status) {
                Some(mut last) => {
                    let was = last.message.take().map(|m| format!("; {m}")).unwrap_or_default();
                    last.message = Some(format!("VM `{}` is deleted since the run ended{was}", data.node));
                    Ok(Standing::Report(last))
                }
                None => report(
                    JobState::Unknown,
                    format!(
                        "VM `{}` no longer exists (deleted when run `{}` ended, by cancel, or by hand): its workers' \
                         files, exit codes and logs went with it; to keep them, follow a run to its end \
                         (`submit --follow`, `logs -f`) or submit with `--keep`",
                        data.node, handle.id
                    ),
                ),
            },
            Some(n) if n.is_interrupted() => {
                let again = if n.created_by_theseus && spool.as_ref().is_some_and(|s| s.load().is_some()) {
                    ""
                } else {
                    "; submit it again to resume from its latest checkpoint"
                };
                report(
                    JobState::Preempted,
                    format!("VM `{}` is {}: the run was interrupted on every worker{again}", n.name, n.state),
                )
            }
            Some(n) if n.state != "READY" => {
                let health = n.health.as_deref().map(|h| format!(" ({h})")).unwrap_or_default();
                let why = if n.state == "DELETING" && data.created && !data.keep {
                    " (worker 0 deletes the VM the run created once the run has ended)"
                } else {
                    ""
                };
                report(
                    JobState::Unknown,
                    format!("VM `{}` is {}{health}: its workers cannot be asked now{why}", n.name, n.state),
                )
            }
            Some(n) if n.id == data.node_id => Ok(Standing::Live { node: n, runs: data.workers.clone(), attempt: 1 }),
            Some(n) => match spool.as_ref().and_then(|s| s.incarnation(&n.id).map(|runs| (runs, s.restarts()))) {
                Some((runs, restarts)) => Ok(Standing::Live { node: n, runs, attempt: restarts + 1 }),
                None => report(
                    JobState::Preempted,
                    format!(
                        "VM `{}` was created again since run `{}` started: the run's processes are gone",
                        n.name, handle.id
                    ),
                ),
            },
        }
    }

    /// Starts the run again on its VM created anew after a preemption, from what the spool
    /// kept: the same code and bootstrap, `THESEUS_RESTART_COUNT` counting the restarts, so that
    /// the bootstrap resumes from the run's latest checkpoint (issue 26's resume).
    pub(super) async fn resume(&self, data: &TpuHandleData, spool: &spool::Spool) -> Result<Resume> {
        let Some(kept) = spool.load() else { return Ok(Resume::NotKept) };
        let Some(_lock) = spool.lock(RESUME_LOCK) else { return Ok(Resume::Busy) };
        async {
            let labels = self.labels(&kept.identity);
            let ready = self.vm.ensure_ready_as(kept.creation.as_ref(), true, &labels, &|_| {}).await?;
            let snapshot = Snapshot::collect(&spool.code(), theseus_core::snapshot::SnapshotMode::Dirty)?;
            let plan = Plan {
                host: self.name.clone(),
                kind: KIND,
                cluster: self.cluster_name.clone(),
                chip: self.accelerator.map(|a| a.chip),
                nodes: kept.processes,
                chips_per_node: self.accelerator.map_or(0, |a| a.chips_per_worker),
                processes_per_node: 1,
                total_chips: self.accelerator.map_or(0, |a| a.chips),
                placement: Default::default(),
                placement_text: String::new(),
                queued: false,
                notes: vec![],
                considered: vec![],
            };
            let job = PreparedJob {
                identity: kept.identity.clone(),
                experiment: Default::default(),
                env: vec![],
                plan,
                snapshot,
                bootstrap: kept.bootstrap(),
            };
            let restarts = spool.restarts() + 1;
            // The run's dirs on a worker that kept its disk are this run's leftovers: they go first.
            let created = data.created || ready.created;
            let options = SubmitOptions::default();
            let started = self.start_on_workers(&job, &options, &ready, created, data.keep, restarts, true).await?;
            let runs: TpuHandleData = serde_json::from_value(started.data).expect("own handle data");
            spool.save_incarnation(&ready.node.id, &runs.workers)?;
            Ok(Resume::Started)
        }
        .await
    }
}
