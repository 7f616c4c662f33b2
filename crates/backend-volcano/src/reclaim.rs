//! Reclaiming space on a Volcano host's PVC, and measuring it: core's store scripts
//! ([`theseus_core::store::reclaim`]) run through the [`ExecShell`] of a short-lived helper pod
//! that mounts the PVC (the client cannot see the PVC otherwise).
//!
//! The runs the cluster sees live are added to the caller's: the run ids of gang vcjobs not in a
//! final phase (`Completed`, `Failed`, `Terminated`; an `Aborted` job may be resumed), of helper
//! vcjobs (a submit shipping), and of name claims not yet bound to a job and renewed within
//! their lease (a submit between its ship and its gang job). Kubernetes knows run ids, not run paths (label values are
//! sanitised), so the helper first lists `<work>/*/*/*/<run id>` for them ([`LIVE_PATHS`]).
//! The helper is deleted on every path, Ctrl-C included, as the submit's is. A reclaim first
//! drops the index of code trees the store holds (`prebuilt.rs`).

use std::collections::BTreeSet;
use std::future::Future;

use k8s_openapi::jiff::Timestamp;
use theseus_core::backend::{ReclaimOptions, ReclaimReport, StoreUsage};
use theseus_core::job::{JobIdentity, k8s_name};
use theseus_core::store::reclaim::{self, ReclaimTarget};
use theseus_core::store::{ScriptCall, Shell};

use crate::api::Cluster;
use crate::backend::VolcanoBackend;
use crate::backend::submit::{HelperGuard, wait_running};
use crate::error::VolcanoError;
use crate::helper::{HELPER_TASK, render_helper};
use crate::render::{LABEL_ROLE, LABEL_RUN_ID};
use crate::store_shell::ExecShell;

/// `WORK RUN_ID...`: prints the run dirs `*/*/*/<run id>` (relative to `WORK`) that exist.
pub const LIVE_PATHS: &str = r#"set -u
cd -- "$1" 2>/dev/null || exit 0
shift
for id in "$@"; do
  for d in */*/*/"$id"; do
    [ -d "$d" ] && printf '%s\n' "$d"
  done
done
exit 0
"#;

/// Phases of a vcjob after which its run needs its code no more.
const FINAL_PHASES: [&str; 3] = ["Completed", "Failed", "Terminated"];

impl VolcanoBackend {
    /// The cluster's dirs as the helper pod sees them (the PVC is mounted at the same paths in
    /// every pod).
    fn reclaim_target(&self) -> theseus_core::Result<ReclaimTarget> {
        ReclaimTarget::of_cluster(&self.cluster_config, |p| Ok(p.to_owned()))
    }

    /// Frees space on the PVC: code dirs of runs that are neither in `options.live` nor live on
    /// the cluster and older than `options.older_than` (logs and status stay), leftovers of
    /// crashed submits, and objects no run links; with `options.dry_run`, only lists them with
    /// their sizes. See the module docs for what counts as live.
    ///
    /// # Errors
    /// When the cluster cannot be reached, the helper cannot start, or the script fails.
    pub async fn reclaim_store(&self, options: &ReclaimOptions) -> theseus_core::Result<ReclaimReport> {
        let target = self.reclaim_target()?;
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        let ids = live_run_ids(cluster).await.map_err(|e| self.err(e))?;
        if !options.dry_run {
            // Any tree may go: the index of what the store holds is dropped first, so no later
            // submit skips its ship on the word of a reclaimed tree (`prebuilt.rs`).
            // Best effort: a pod that finds its tree gone still fails with a message saying so.
            if let Err(e) = crate::prebuilt::forget_all(cluster).await {
                tracing::warn!("cannot drop the code store's index: {e}");
            }
        }
        let options = options.clone();
        self.with_store_helper("reclaim", move |shell| async move {
            let mut options = options;
            options.live.extend(live_paths(&shell, &target.work, &ids).await?);
            reclaim::reclaim(&shell, &target, &options).await
        })
        .await
    }

    /// Space used on the PVC: the object store, run code dirs and leftovers.
    ///
    /// # Errors
    /// When the cluster cannot be reached, the helper cannot start, or the script fails.
    pub async fn store_usage(&self) -> theseus_core::Result<StoreUsage> {
        let target = self.reclaim_target()?;
        self.with_store_helper("usage", move |shell| async move { reclaim::usage(&shell, &target).await }).await
    }

    /// Starts a helper pod mounting the PVC, runs `work` with a shell in it, and deletes the
    /// helper on every path (an interrupt included).
    pub(crate) async fn with_store_helper<T, F, Fut>(&self, purpose: &str, work: F) -> theseus_core::Result<T>
    where
        F: FnOnce(ExecShell) -> Fut,
        Fut: Future<Output = theseus_core::Result<T>>,
    {
        self.with_store_helper_within(purpose, self.settings.helper_start_timeout, work).await
    }

    /// [`Self::with_store_helper`], the helper given at most `start_timeout` to start.
    pub(crate) async fn with_store_helper_within<T, F, Fut>(
        &self,
        purpose: &str,
        start_timeout: std::time::Duration,
        work: F,
    ) -> theseus_core::Result<T>
    where
        F: FnOnce(ExecShell) -> Fut,
        Fut: Future<Output = theseus_core::Result<T>>,
    {
        let root = self.cluster_config.work.trim_end_matches('/').to_owned();
        let identity = JobIdentity::new(purpose, Some("theseus"), Some("store"));
        let mut helper = render_helper(&self.host, &identity, &format!("{root}/.theseus/{purpose}"))?;
        let name = k8s_name(&format!("theseus-{purpose}-{}", identity.run_id));
        helper.metadata.name = Some(name.clone());
        let cluster = self.cluster().await.map_err(|e| self.err(e))?;
        cluster.create_job(&helper).await.map_err(|e| self.err(e))?;
        let mut guard = HelperGuard { cluster: cluster.clone(), name: name.clone(), armed: true };
        let timeout = self.settings.ship_timeout;
        let run = async {
            let pod = wait_running(cluster, &helper, start_timeout).await.map_err(|e| self.err(e))?;
            let shell = ExecShell::new(cluster.pods(), &pod, Some(HELPER_TASK), &root)
                .with_open_timeout(cluster.watch_silence());
            tokio::time::timeout(timeout, work(shell)).await.map_err(|_| {
                self.err(VolcanoError::Timeout { what: format!("the {purpose} script in pod {pod}"), after: timeout })
            })?
        };
        let result = tokio::select! {
            result = run => result,
            _ = theseus_core::interrupt::wait() => Err(self.err(VolcanoError::Interrupted)),
        };
        crate::delete::delete_helper(cluster, &name).await;
        guard.armed = false;
        result
    }
}

/// Run ids the cluster sees live (see the module docs).
async fn live_run_ids(cluster: &Cluster) -> Result<BTreeSet<String>, VolcanoError> {
    let mut ids = BTreeSet::new();
    for job in cluster.list_jobs(LABEL_RUN_ID).await? {
        let labels = job.metadata.labels.clone().unwrap_or_default();
        let helper = labels.get(LABEL_ROLE).is_some_and(|r| r == "helper");
        let phase =
            job.status.as_ref().and_then(|s| s.state.as_ref()).and_then(|s| s.phase.clone()).unwrap_or_default();
        if (helper || !FINAL_PHASES.contains(&phase.as_str()))
            && let Some(run) = labels.get(LABEL_RUN_ID)
        {
            ids.insert(run.clone());
        }
    }
    let now = Timestamp::now();
    for lease in cluster.list_leases(&format!("{LABEL_ROLE}=claim")).await? {
        // A claim bound to its job (an owner reference) is judged by that job's phase above.
        let bound = lease.metadata.owner_references.as_ref().is_some_and(|o| !o.is_empty());
        if !bound
            && crate::claim::fresh(&lease, now)
            && let Some(run) = crate::claim::holder(&lease)
        {
            ids.insert(run.to_owned());
        }
    }
    // Run ids are `[0-9a-z-]`; anything else (a hand-made label) is not ours to glob for.
    ids.retain(|id| {
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    });
    Ok(ids)
}

/// The run paths (`<project>/<group>/<name>/<run>`) of `ids` on the PVC.
async fn live_paths(shell: &ExecShell, work: &str, ids: &BTreeSet<String>) -> theseus_core::Result<Vec<String>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec![work.to_owned()];
    args.extend(ids.iter().cloned());
    let out = shell
        .run(ScriptCall {
            script: LIVE_PATHS,
            args,
            stdin: None,
            stdin_len: None,
            progress: None,
            label: "the live run dirs' listing",
        })
        .await
        .map_err(|e| {
            theseus_core::Error::backend("store", format!("listing live run dirs on {} failed: {e}", shell.describe()))
        })?;
    Ok(String::from_utf8_lossy(&out).lines().filter(|l| !l.is_empty()).map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_paths_script_lists_existing_run_dirs_only() {
        let work = tempfile::tempdir().unwrap();
        for d in
            ["p/g/n/20260101-000000-aaaaaa", "p/g/m/20260101-000000-bbbbbb", "p/g/n/20260101-000000-cccccc.partial"]
        {
            std::fs::create_dir_all(work.path().join(d)).unwrap();
        }
        let out = std::process::Command::new("sh")
            .args(["-c", LIVE_PATHS, "theseus-store", work.path().to_str().unwrap()])
            .args(["20260101-000000-aaaaaa", "20260101-000000-cccccc", "20260101-000000-dddddd"])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout), "p/g/n/20260101-000000-aaaaaa\n");
    }
}
