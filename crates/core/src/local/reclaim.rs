//! `reclaim` and `usage` of the local backend: the store's scripts ([`crate::store::reclaim`])
//! run by this machine's `sh`, with the runs this machine sees live added to the caller's.
//!
//! A local run is live while a process of it is (its supervisor's session or its marker, see
//! [`super::process`]), and while a `submit` of it has claimed its name and not yet started its
//! supervisor: the claim file `<status>/<project>/<group>/<name>/.submit.lock` names the last run
//! that claimed the name, and such a run without `supervisor.json` is still being shipped (or its
//! client died mid-submit, which keeps its code until the next submit of the name).

use std::path::Path;

use super::LocalBackend;
use super::process::{ProcTable, Session};
use super::supervisor::files;
use crate::Result;
use crate::backend::{ReclaimOptions, ReclaimReport, StoreUsage};
use crate::store::LocalShell;
use crate::store::reclaim::{self, ReclaimTarget};

impl LocalBackend {
    fn reclaim_target(&self) -> Result<ReclaimTarget> {
        ReclaimTarget::of_cluster(&self.cluster, |p| super::path_str(&self.expand(p)))
    }
}

/// See [`crate::backend::Backend::reclaim`].
pub(super) async fn reclaim(backend: &LocalBackend, options: &ReclaimOptions) -> Result<ReclaimReport> {
    let target = backend.reclaim_target()?;
    let status = backend.expand(&backend.cluster.status_dir());
    let mut options = options.clone();
    let live = tokio::task::spawn_blocking(move || live_runs(&status))
        .await
        .map_err(|e| crate::Error::backend(backend, format!("looking for live runs failed: {e}")))?;
    options.live.extend(live);
    reclaim::reclaim(&LocalShell, &target, &options).await
}

/// See [`crate::backend::Backend::usage`].
pub(super) async fn usage(backend: &LocalBackend) -> Result<StoreUsage> {
    reclaim::usage(&LocalShell, &backend.reclaim_target()?).await
}

/// Run paths (`<project>/<group>/<name>/<run>`) of the runs under the status dir `status` that
/// are live (see the module docs).
pub(crate) fn live_runs(status: &Path) -> Vec<String> {
    let table = ProcTable::scan();
    let mut live = Vec::new();
    for name_dir in dirs_at_depth(status, 3) {
        let rel = |run: &str| {
            let name = name_dir.strip_prefix(status).unwrap_or(&name_dir);
            format!("{}/{run}", name.to_string_lossy())
        };
        let claimed = std::fs::read_to_string(name_dir.join(super::claim::LOCK_FILE)).unwrap_or_default();
        let claimed = claimed.trim();
        if !claimed.is_empty() && !name_dir.join(claimed).join(files::SUPERVISOR_JSON).exists() {
            live.push(rel(claimed));
        }
        for run_dir in dirs_at_depth(&name_dir, 1) {
            let Some(run) = run_dir.file_name().and_then(|n| n.to_str()).map(str::to_owned) else { continue };
            if !table.of_run(&run, Session::read(&run_dir).as_ref()).is_empty() {
                live.push(rel(&run));
            }
        }
    }
    live
}

/// The dirs `depth` levels below `dir` whose names do not start with `.` (no symlinks followed).
fn dirs_at_depth(dir: &Path, depth: usize) -> Vec<std::path::PathBuf> {
    let mut level = vec![dir.to_path_buf()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for d in &level {
            let Ok(entries) = std::fs::read_dir(d) else { continue };
            for entry in entries.flatten() {
                let hidden = entry.file_name().to_string_lossy().starts_with('.');
                if !hidden && entry.file_type().is_ok_and(|t| t.is_dir()) {
                    next.push(entry.path());
                }
            }
        }
        level = next;
    }
    level
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::backend::{JobState, ReclaimKind, SubmitOptions};
    use crate::config::{ClusterConfig, HostKind};
    use crate::local::LocalHost;
    use crate::testing::{self, Harness, ProcessProbe};

    struct NoProbe;

    #[async_trait::async_trait]
    impl ProcessProbe for NoProbe {
        async fn alive(&self, handle: &crate::backend::JobHandle) -> Result<usize> {
            Ok(super::super::process::job_processes(&handle.id).len())
        }
    }

    fn harness(root: &Path) -> Harness {
        let cluster = ClusterConfig {
            root: root.join("root").display().to_string(),
            work: "~/work".into(),
            ..ClusterConfig::default()
        };
        let plan = testing::cpu_plan("local", HostKind::LOCAL, 1);
        let backend = LocalBackend::new("local", LocalHost::default(), cluster, root);
        Harness { backend: Arc::new(backend), plan, probe: Arc::new(NoProbe), timeout: Duration::from_secs(60) }
    }

    fn work_dir(handle: &crate::backend::JobHandle) -> std::path::PathBuf {
        serde_json::from_value::<super::super::LocalHandleData>(handle.data.clone()).unwrap().work_dir
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_this_machine_sees_running_is_kept_even_when_nobody_says_it_is_live() {
        let dir = tempfile::tempdir().unwrap();
        let h = harness(dir.path());
        let (sleeper, _a) =
            testing::prepare(&h, "reclaim-sleeper", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
        let (done, _b) = testing::prepare(&h, "reclaim-done", &["ok"], vec![], serde_json::json!({})).await.unwrap();
        let running = h.backend.submit(&sleeper, &SubmitOptions::default()).await.unwrap();
        let finished = h.backend.submit(&done, &SubmitOptions::default()).await.unwrap();
        assert_eq!(testing::wait_terminal(&h, &finished).await.state, JobState::Completed);

        let options = ReclaimOptions { older_than: Duration::ZERO, ..ReclaimOptions::default() };
        let report = h.backend.reclaim(&options).await.unwrap();
        let runs: Vec<_> =
            report.items.iter().filter(|i| i.kind == ReclaimKind::RunDir).map(|i| i.path.clone()).collect();
        assert_eq!(runs, [work_dir(&finished).to_str().unwrap()], "{report:?}");
        assert!(work_dir(&running).join("job.py").exists(), "the running run's code stays");
        assert!(!work_dir(&finished).exists());
        let data: super::super::LocalHandleData = serde_json::from_value(finished.data.clone()).unwrap();
        assert!(data.log_file.exists() && data.run_dir.join("exit_code").exists(), "log and status stay");
        let used = h.backend.usage().await.unwrap();
        assert_eq!(used.run_dirs, 1, "{used:?}");

        h.backend.cancel(&running).await.unwrap();
    }
}
