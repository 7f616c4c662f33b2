//! The backend conformance suite (`theseus_core::testing`) on the sandbox backend.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use theseus_core::backend::{Backend as _, JobHandle, SubmitOptions};
use theseus_core::config::ClusterConfig;
use theseus_core::testing::{Harness, ProcessProbe, cpu_plan, prepare, run_all};
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
        creates: None,
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

/// Defence in depth: a backend that would create something billed refuses a submit the user
/// did not confirm, and says nothing was created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_refuses_to_create_without_confirmation() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = ClusterConfig {
        root: dir.path().join("root").display().to_string(),
        work: dir.path().join("work").display().to_string(),
        ..ClusterConfig::default()
    };
    let host = SandboxHost {
        cluster: "sb".into(),
        slots: 1,
        dir: Some(dir.path().join("sandbox").display().to_string()),
        uv_groups: Vec::new(),
        env: Default::default(),
        creates: Some("a sandbox VM".into()),
    };
    let backend = Arc::new(SandboxBackend::new("sb", host, cluster, dir.path()));
    let harness = Harness {
        backend: backend.clone(),
        plan: cpu_plan("sb", KIND, 1),
        probe: Arc::new(SessionProbe(backend.clone())),
        timeout: Duration::from_secs(60),
    };
    let (job, _code) = prepare(&harness, "refused", &["0"], vec![], serde_json::json!({})).await.unwrap();
    assert_eq!(backend.creates(&job).await.unwrap(), ["a sandbox VM"]);
    let err = backend.submit(&job, &SubmitOptions::default()).await.unwrap_err();
    assert!(err.nothing_created(), "{err}");
    assert!(err.to_string().contains("will not create a sandbox VM without the user's confirmation"), "{err}");
    assert!(!dir.path().join("sandbox").exists(), "nothing was shipped");
    let confirmed = SubmitOptions { create_confirmed: true, ..SubmitOptions::default() };
    let handle = backend.submit(&job, &confirmed).await.unwrap();
    backend.cancel(&handle).await.unwrap();
}
