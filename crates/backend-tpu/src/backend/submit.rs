//! The submit of a `tpu` host: the VM made ready (created only when confirmed; taken back on an
//! interrupt), then one plain run per worker, all at once; a failure leaves nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use theseus_backend_ssh::plain::PlainHandleData;
use theseus_core::backend::{Backend, JobHandle, PreparedJob, SubmitOptions};
use theseus_core::{Error, Result};

use super::workers::{self, SelfDelete};
use super::{KIND, Progress, Ready, TpuBackend, TpuHandleData, VmNode, WorkerRun};

impl TpuBackend {
    /// Submits `job`: see the module docs. `create_confirmed`: a missing VM may be created;
    /// `keep`: a VM this submit creates stays when the run ends.
    pub(super) async fn submit_with(
        &self,
        job: &PreparedJob,
        options: &SubmitOptions,
        create_confirmed: bool,
        keep: bool,
    ) -> Result<JobHandle> {
        let note = |s: &str| options.note(s);
        let labels = self.labels(&job.identity);
        let ready = tokio::select! {
            ready = self.vm.ensure_ready(create_confirmed, &labels, &note) => ready?,
            signal = theseus_core::interrupt::wait() => {
                return Err(self.take_back_interrupted_create(&labels, signal.name(), &note).await);
            }
        };
        match self.start_on_workers(job, options, &ready, ready.created, keep, 0, false).await {
            Ok(handle) => {
                // Kept for a restart after a preemption (a VM theseus created is created anew).
                if (ready.created || ready.node.created_by_theseus)
                    && let Some(spool) = self.spool(&handle.id)
                {
                    match spool.save(job, self.vm.creation()) {
                        Ok(true) => {}
                        Ok(false) => options.note(
                            "the job has secrets, which theseus never writes to a file: after a preemption, submit it \
                             again to resume",
                        ),
                        Err(e) => options.note(&format!("cannot keep the job for a restart after a preemption: {e}")),
                    }
                }
                Ok(handle)
            }
            Err(e) => {
                if ready.created && !keep {
                    options.note(&format!("deleting VM `{}`, which this submit created", ready.node.name));
                    if let Err(d) = self.vm.delete(&note).await {
                        return Err(Error::backend(
                            self,
                            format!(
                                "{e}; and deleting the VM this submit created failed too ({d}): `theseus gc` lists it"
                            ),
                        ));
                    }
                }
                Err(e)
            }
        }
    }

    /// After an interrupt during [`Vm::ensure_ready`]: deletes the VM when this submit's create
    /// made it (labelled with its run), within two minutes; the error says what is left.
    pub(super) async fn take_back_interrupted_create(
        &self,
        labels: &BTreeMap<String, String>,
        signal: &str,
        note: Progress<'_>,
    ) -> Error {
        let ours = |n: &VmNode| n.created_by_theseus && n.labels.get("theseus-run") == labels.get("theseus-run");
        let left = match tokio::time::timeout(Duration::from_secs(120), async {
            match self.vm.node().await? {
                Some(n) if ours(&n) => {
                    note(&format!("{signal}: deleting VM `{}`, which this submit was creating", n.name));
                    self.vm.delete(note).await.map(|()| "the VM it was creating is deleted".to_owned())
                }
                _ => Ok("nothing was created".to_owned()),
            }
        })
        .await
        {
            Ok(Ok(what)) => what,
            Ok(Err(e)) => format!("deleting the VM it was creating failed ({e}): `theseus gc` lists it"),
            Err(_) => "the VM it was creating is still being deleted or created: `theseus gc` lists it".to_owned(),
        };
        Error::backend(self, format!("{signal} while the VM was being made ready: {left}"))
    }

    /// Starts `job` on the workers of `ready`'s node (see the module docs): `created`, the run's
    /// VM was created by theseus for it; `restarts`, how many times the run started before;
    /// `clear`, the run's dirs on the workers go first (a restart's leftovers).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_on_workers(
        &self,
        job: &PreparedJob,
        options: &SubmitOptions,
        ready: &Ready,
        created: bool,
        keep: bool,
        restarts: u32,
        clear: bool,
    ) -> Result<JobHandle> {
        let node = &ready.node;
        if node.workers.is_empty() {
            return Err(Error::backend(
                self,
                format!("VM `{}` is READY but the API lists no worker address", node.name),
            ));
        }
        // One process per worker, on as many workers as the plan has processes (the fit rule
        // plans the whole slice).
        let processes = job.plan.processes().max(1) as usize;
        if processes > node.workers.len() {
            return Err(Error::backend(
                self,
                format!(
                    "the plan has {processes} processes but VM `{}` has {} worker(s) (one process each)",
                    node.name,
                    node.workers.len()
                ),
            ));
        }
        let addresses = &node.workers[..processes];
        let user = self.connector.user.clone().or_else(|| node.ssh_user.clone());
        options.note(&format!("connecting to {} worker(s) of VM `{}`", addresses.len(), node.name));
        let workers = futures::future::try_join_all(
            addresses.iter().enumerate().map(|(i, a)| self.worker(&node.id, i as u32, a, user.as_deref())),
        )
        .await?;
        let template = self.layout(&job.identity, &job.plan)?;
        let delete = self
            .self_delete_after
            .filter(|_| created && !keep)
            .map(|after| SelfDelete { resource: node.resource.clone(), after: after.as_secs() });
        let mut jobs = Vec::new();
        for w in &workers {
            let dirs = workers::dirs(&self.name, &self.cluster_name, &self.cluster, &w.home);
            let layout = dirs.layout(&job.identity, template.launch.clone())?;
            if clear {
                w.plain.remove(&layout.work_dir, &[&layout.run_dir]).await;
            }
            let delete = if w.index == 0 { delete.as_ref() } else { None };
            jobs.push(workers::worker_job(job, &template, &layout, w.index == 0, delete, restarts));
        }
        let quiet = SubmitOptions { replace: options.replace, ..SubmitOptions::default() };
        let results = futures::future::join_all(workers.iter().zip(&jobs).map(|(w, j)| {
            let o = if w.index == 0 { options } else { &quiet };
            w.plain.submit(j, o)
        }))
        .await;
        let mut runs = Vec::new();
        let mut first_error = None;
        for (w, r) in workers.iter().zip(results) {
            match r {
                Ok(h) => runs.push((w, h)),
                Err(e) => {
                    first_error.get_or_insert(Error::Backend {
                        backend: self.to_string(),
                        message: format!("failed to start the run on worker {} of VM `{}`", w.index, node.name),
                        source: Some(Box::new(e)),
                    });
                }
            }
        }
        if let Some(e) = first_error {
            // Nothing half-started: the workers where it started stop again.
            for (w, h) in &runs {
                let _ = w.plain.cancel(h).await;
            }
            return Err(e);
        }
        let mut worker_runs = Vec::new();
        for ((w, h), address) in runs.iter().zip(&node.workers) {
            let run: PlainHandleData = serde_json::from_value(h.data.clone())
                .map_err(|e| Error::backend(self, format!("worker {}'s handle: {e}", w.index)))?;
            worker_runs.push(WorkerRun { address: address.clone(), user: user.clone(), run });
        }
        let data =
            TpuHandleData { node: node.name.clone(), node_id: node.id.clone(), created, keep, workers: worker_runs };
        Ok(JobHandle {
            kind: KIND,
            host: self.name.clone(),
            id: job.identity.run_id.clone(),
            data: serde_json::to_value(&data).expect("handle data serializes"),
        })
    }
}
