//! `gc` and `du` of a `tpu` host: the stores of every worker of a READY VM, through the plain
//! backend's reclaim and usage, and the host's VM as a leftover when theseus created it and its
//! run is over.

use std::time::Duration;

use theseus_core::Result;
use theseus_core::backend::{Backend, ReclaimOptions, ReclaimReport, StoreUsage};

use super::{TpuBackend, VmNode, combine};

impl TpuBackend {
    /// On every worker of a READY VM (a kept one holds old runs): what the plain backend frees
    /// there, paths prefixed with the worker. A VM that is absent or not READY holds nothing to
    /// reach.
    pub(super) async fn reclaim_on_workers(&self, options: &ReclaimOptions) -> Result<ReclaimReport> {
        let mut report = ReclaimReport { dry_run: options.dry_run, ..ReclaimReport::default() };
        let Some(node) = self.vm.node().await?.filter(|n| n.state == "READY") else { return Ok(report) };
        let user = self.connector.user.clone().or_else(|| node.ssh_user.clone());
        let workers = futures::future::try_join_all(
            node.workers.iter().enumerate().map(|(i, a)| self.worker(&node.id, i as u32, a, user.as_deref())),
        )
        .await?;
        let all = futures::future::join_all(workers.iter().map(|w| w.plain.reclaim(options))).await;
        for (w, r) in workers.iter().zip(all) {
            let r = r?;
            report.freed_bytes += r.freed_bytes;
            report.items.extend(r.items.into_iter().map(|mut i| {
                i.path = format!("worker-{}:{}", w.index, i.path);
                i
            }));
            report.failed.extend(r.failed.into_iter().map(|f| format!("worker-{}:{f}", w.index)));
        }
        Ok(report)
    }

    /// The stores of every worker of a READY VM, summed (nothing when it is absent or not READY).
    pub(super) async fn usage_on_workers(&self) -> Result<StoreUsage> {
        let mut total = StoreUsage::default();
        let Some(node) = self.vm.node().await?.filter(|n| n.state == "READY") else { return Ok(total) };
        let user = self.connector.user.clone().or_else(|| node.ssh_user.clone());
        let workers = futures::future::try_join_all(
            node.workers.iter().enumerate().map(|(i, a)| self.worker(&node.id, i as u32, a, user.as_deref())),
        )
        .await?;
        for u in futures::future::join_all(workers.iter().map(|w| w.plain.usage())).await {
            let u = u?;
            total.objects += u.objects;
            total.object_bytes += u.object_bytes;
            total.unused_objects += u.unused_objects;
            total.unused_object_bytes += u.unused_object_bytes;
            total.run_dirs += u.run_dirs;
            total.run_dir_bytes += u.run_dir_bytes;
            total.leftovers += u.leftovers;
            total.leftover_bytes += u.leftover_bytes;
        }
        Ok(total)
    }

    /// The host's VM when theseus created it and its run is over (no process of it on worker
    /// 0, or the VM preempted), older than `older_than` by its run id: deleted unless `dry_run`.
    pub(super) async fn leftover_vm(&self, older_than: Duration, dry_run: bool) -> Result<Option<Vec<String>>> {
        let Some(node) = self.vm.node().await? else { return Ok(Some(vec![])) };
        if !node.created_by_theseus {
            return Ok(Some(vec![]));
        }
        let run = node.labels.get("theseus-run").cloned().unwrap_or_default();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if !combine::started_before(&run, older_than, now) {
            return Ok(Some(vec![]));
        }
        // READY: over when no process of its run lives on worker 0. Still being made (CREATING,
        // STARTING, ...) past `older_than`: the submit that asked for it is gone (a client killed
        // during the create). Preempted or stopped: nothing runs there.
        let why = match node.state.as_str() {
            "READY" if self.run_alive(&node, &run).await? => return Ok(Some(vec![])),
            "READY" => "which is over",
            "DELETING" => return Ok(Some(vec![])),
            _ if node.is_interrupted() => "which it stopped",
            _ => "whose submit is gone",
        };
        let line = format!("TPU VM `{}` ({}; created by theseus for run `{run}`, {why})", node.name, node.state);
        if !dry_run {
            self.vm.delete(&|_| {}).await?;
        }
        Ok(Some(vec![line]))
    }

    /// Whether any process of run `run` lives on worker 0 of `node`.
    async fn run_alive(&self, node: &VmNode, run: &str) -> Result<bool> {
        let Some(address) = node.workers.first() else { return Ok(false) };
        let user = self.connector.user.clone().or_else(|| node.ssh_user.clone());
        let worker = self.worker(&node.id, 0, address, user.as_deref()).await?;
        let script = r#"grep -lzxF -- "THESEUS_LOCAL_RUN=$1" /proc/[0-9]*/environ 2>/dev/null | head -n1"#;
        let cmd = theseus_backend_ssh::ssh::RemoteCommand::script(script, [run.to_owned()]).retry_safe();
        let out = worker
            .plain
            .ssh()
            .run(&cmd)
            .await
            .map_err(|e| worker.plain.ssh_error(&format!("look for processes of run `{run}`"), e))?;
        Ok(!out.stdout_text().trim().is_empty())
    }
}
