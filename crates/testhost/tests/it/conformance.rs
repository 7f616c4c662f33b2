//! The backend conformance suite (`theseus_core::testing`) on the sandbox backend.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use theseus_core::backend::JobHandle;
use theseus_core::config::ClusterConfig;
use theseus_core::testing::{Harness, ProcessProbe, cpu_plan, run_all};
use theseus_testhost::{KIND, SandboxBackend, SandboxHost};

/// Counts the processes of a sandbox run: those of its runner's session.
struct SessionProbe(Arc<SandboxBackend>);

#[async_trait]
impl ProcessProbe for SessionProbe {
    async fn alive(&self, handle: &JobHandle) -> theseus_core::Result<usize> {
        let sid = self.0.data(handle)?.sid();
        Ok(sid.map_or(0, |sid| theseus_testhost::procs::in_session(sid).len()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_backend_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = ClusterConfig {
        root: dir.path().join("root").display().to_string(),
        work: dir.path().join("work").display().to_string(),
        ..ClusterConfig::default()
    };
    let host = SandboxHost {
        cluster: "sb".into(),
        slots: 2,
        dir: Some(dir.path().join("sandbox").display().to_string()),
        uv_groups: Vec::new(),
        env: Default::default(),
    };
    let backend = Arc::new(SandboxBackend::new("sb", host, cluster, dir.path()));
    let harness = Harness {
        backend: backend.clone(),
        plan: cpu_plan("sb", KIND, 1),
        probe: Arc::new(SessionProbe(backend)),
        timeout: Duration::from_secs(60),
    };
    run_all(&harness).await;
}
