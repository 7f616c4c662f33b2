//! The local backend against the conformance suite, plus local-only behaviour (several ranks).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::testing::{self, Harness, ProcessProbe};

struct LocalProbe;

#[async_trait]
impl ProcessProbe for LocalProbe {
    async fn alive(&self, handle: &JobHandle) -> Result<usize> {
        Ok(process::job_processes(&handle.id).len())
    }
}

fn plan(processes: u32) -> Plan {
    Plan {
        host: "local".into(),
        kind: HostKind::Local,
        cluster: "local".into(),
        chip: None,
        nodes: 1,
        chips_per_node: 0,
        processes_per_node: processes,
        total_chips: 0,
        partition: None,
        gres_type: None,
        queued: false,
        notes: vec![],
        considered: vec![],
    }
}

fn harness(root: &Path, processes: u32) -> Harness {
    let cluster = ClusterConfig {
        root: root.join("root").display().to_string(),
        work: "~/work".into(),
        ..ClusterConfig::default()
    };
    let backend = LocalBackend::new("local", LocalHost::default(), cluster, root);
    Harness { backend: Arc::new(backend), plan: plan(processes), probe: Arc::new(LocalProbe), timeout: Duration::from_secs(60) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_backend_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    testing::run_all(&harness(dir.path(), 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_get_their_own_wiring_and_prefixed_logs() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), 3);
    let (job, _code) = testing::prepare(&h, "ranks", &["env", "RANK", "WORLD_SIZE", "JAX_COORDINATOR_ADDRESS"], vec![], serde_json::json!({}))
        .await
        .unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap();
    let status = testing::wait_terminal(&h, &handle).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    assert_eq!(status.ranks.len(), 3);
    let lines: Vec<_> = futures::StreamExt::collect::<Vec<_>>(h.backend.logs(&handle, &LogOptions::default()).await.unwrap()).await;
    let mut seen = Vec::new();
    for line in lines {
        let line = line.unwrap();
        if let Some(json) = line.text.strip_prefix("conformance-env: ") {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(v["env"]["RANK"].as_str().map(|r| r.parse::<u32>().unwrap()), line.rank, "prefix matches RANK");
            assert_eq!(v["env"]["WORLD_SIZE"], "3");
            assert!(v["env"]["JAX_COORDINATOR_ADDRESS"].as_str().unwrap().starts_with("127.0.0.1:"));
            seen.push(line.rank.unwrap());
        }
    }
    seen.sort();
    assert_eq!(seen, [0, 1, 2]);
    let only_one = futures::StreamExt::collect::<Vec<_>>(h.backend.logs(&handle, &LogOptions { follow: false, rank: Some(1) }).await.unwrap()).await;
    assert!(only_one.iter().all(|l| l.as_ref().unwrap().rank == Some(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_multi_rank_job_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), 2);
    let (job, _code) = testing::prepare(&h, "cancel2", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap();
    // Both ranks each run python and a `sleep` child.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while process::job_processes(&handle.id).iter().filter(|p| is_sleep(**p)).count() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "ranks did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = h.backend.cancel(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Cancelled);
    assert!(process::job_processes(&handle.id).is_empty());
}

fn is_sleep(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).map(|c| c.starts_with(b"sleep\0")).unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_ship_leaves_no_run_dir() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), 1);
    let (mut job, code) = testing::prepare(&h, "vanish", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    // The file disappears between listing and shipping.
    std::fs::remove_file(code.path().join("job.py")).unwrap();
    job.snapshot.root = code.path().to_owned();
    let err = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap_err();
    assert!(err.to_string().contains("job.py"), "{err}");
    let work = dir.path().join("work").join(job.identity.run_path());
    assert!(!work.exists(), "no run dir");
    assert!(!work.with_extension("partial").exists(), "no partial run dir");
}
