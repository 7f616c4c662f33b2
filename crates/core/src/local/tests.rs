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
    testing::cpu_plan("local", HostKind::LOCAL, processes)
}

fn harness(root: &Path, processes: u32) -> Harness {
    let cluster = ClusterConfig {
        root: root.join("root").display().to_string(),
        work: "~/work".into(),
        ..ClusterConfig::default()
    };
    let backend = LocalBackend::new("local", LocalHost::default(), cluster, root);
    Harness {
        backend: Arc::new(backend),
        plan: plan(processes),
        probe: Arc::new(LocalProbe),
        timeout: Duration::from_secs(60),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_backend_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    testing::run_all(&harness(dir.path(), 1)).await;
}

/// Issue 25: a follow ends after the job with its last line, nothing written after the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_ends_after_the_job_with_its_last_line() {
    let dir = tempfile::tempdir().unwrap();
    testing::check_follow_keeps_the_last_line_and_ends(&harness(dir.path(), 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_get_their_own_wiring_and_prefixed_logs() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), 3);
    let (job, _code) = testing::prepare(
        &h,
        "ranks",
        &["env", "RANK", "WORLD_SIZE", "JAX_COORDINATOR_ADDRESS"],
        vec![],
        serde_json::json!({}),
    )
    .await
    .unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap();
    let status = testing::wait_terminal(&h, &handle).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    assert_eq!(status.ranks.len(), 3);
    let lines: Vec<_> =
        futures::StreamExt::collect::<Vec<_>>(h.backend.logs(&handle, &LogOptions::default()).await.unwrap()).await;
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
    let only_one = futures::StreamExt::collect::<Vec<_>>(
        h.backend.logs(&handle, &LogOptions { follow: false, rank: Some(1) }).await.unwrap(),
    )
    .await;
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

/// A job that runs `words` directly (no Python), from an empty code dir.
async fn prepare_words(
    h: &Harness,
    name: &str,
    words: &[&str],
) -> (PreparedJob, crate::testing::tempfile_dir::TempDir) {
    let (mut job, dir) = testing::prepare(h, name, &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    job.experiment.entrypoint = crate::job::Entrypoint::Words(words.clone());
    let layout = h.backend.layout(&job.identity, &h.plan).unwrap();
    let input = crate::bootstrap::BootstrapInput::for_layout(
        job.identity.clone(),
        &layout,
        vec![],
        words,
        crate::job::Distributed::None,
        serde_json::json!({}),
    );
    job.bootstrap = crate::bootstrap::render(&input).unwrap();
    (job, dir)
}

/// Busy processes (`yes > /dev/null`) that this test started; killed by PID on drop.
struct CpuHogs(Vec<std::process::Child>);

impl CpuHogs {
    fn start(n: usize) -> CpuHogs {
        CpuHogs(
            (0..n)
                .map(|_| {
                    std::process::Command::new("yes").stdout(std::process::Stdio::null()).spawn().expect("start `yes`")
                })
                .collect(),
        )
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `logs --follow` of a one-line job ends only once the job has ended: right after the stream
/// ends, `status` is terminal and the line was streamed. Under CPU load the follower used to
/// take the supervisor's start (when no process carried the marker yet) for the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_never_ends_before_the_job_under_cpu_load() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), 1);
    let runs: usize = std::env::var("THESEUSTEST_FOLLOW_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let hogs = CpuHogs::start(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2) + 1);
    let mut early = Vec::new();
    for i in 0..runs {
        let (job, _code) = prepare_words(&h, &format!("fast{i}"), &["echo", "one-line"]).await;
        let handle = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap();
        let stream = h.backend.logs(&handle, &LogOptions { follow: true, rank: None }).await.unwrap();
        let lines: Vec<_> = futures::StreamExt::collect::<Vec<_>>(stream).await;
        let status = h.backend.status(&handle).await.unwrap();
        let printed = lines.iter().any(|l| l.as_ref().is_ok_and(|l| l.text == "one-line"));
        if status.state != JobState::Completed || !printed {
            let got: Vec<String> = lines
                .iter()
                .map(|l| l.as_ref().map_or_else(|e| format!("error: {e}"), |l| format!("{:?}", l.text)))
                .collect();
            let log_file = handle.data.get("log_file").and_then(|v| v.as_str()).unwrap_or_default().to_owned();
            let log = std::fs::read_to_string(&log_file).unwrap_or_default();
            early.push(format!(
                "run {i}: {:?} after the stream ended, line streamed: {printed}; streamed {got:?}; the log now: {log:?}",
                status.state
            ));
            testing::wait_terminal(&h, &handle).await;
        }
    }
    drop(hogs);
    assert!(early.is_empty(), "{} of {runs} follows ended before the job:\n{}", early.len(), early.join("\n"));
}

fn processes_with_cmdline(cmdline: &str) -> Vec<i32> {
    let wanted: Vec<u8> = cmdline.split(' ').flat_map(|w| w.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}

/// `cancel` stops children that shed the marker variable (`env -i`) and children that left the
/// session (`setsid`): the run's processes are the union of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_children_that_shed_the_marker_or_leave_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), 1);
    let tag = std::process::id() % 1000 + 1000;
    let (no_env, no_session, plain) = (format!("sleep 417{tag}"), format!("sleep 418{tag}"), format!("sleep 419{tag}"));
    let script = format!("env -i {no_env} & setsid {no_session} & {plain}");
    let (job, _code) = prepare_words(&h, "escape", &["sh", "-c", &script]).await;
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for cmd in [&no_env, &no_session, &plain] {
        while processes_with_cmdline(cmd).is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "`{cmd}` never started");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let result = h.backend.cancel(&handle).await;
    let left: Vec<(String, Vec<i32>)> = [&no_env, &no_session, &plain]
        .into_iter()
        .map(|c| (c.clone(), processes_with_cmdline(c)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    // Whatever survived was started by this test: stop it by PID.
    for (_, pids) in &left {
        process::signal_all(pids, rustix::process::Signal::KILL);
    }
    assert_eq!(result.unwrap().state, JobState::Cancelled);
    assert!(left.is_empty(), "left running after cancel: {left:?}");
}

/// Run ids whose processes are killed by PID when the test ends, passed or not.
struct StopOnDrop(Vec<String>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        for id in &self.0 {
            process::signal_all(&process::job_processes(id), rustix::process::Signal::KILL);
        }
    }
}

/// Runs of `ids` that still have a live process.
fn live_runs<'a>(ids: impl IntoIterator<Item = &'a String>) -> Vec<&'a String> {
    ids.into_iter().filter(|id| !process::job_processes(id).is_empty()).collect()
}

/// Several submits of one name at once: exactly one starts, the others fail at once with
/// `AlreadyExists` naming the live run; with `replace`, the live run is stopped first and still
/// exactly one run is live afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submits_of_one_name_leave_one_live_run() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), 1);
    let mut all_ids = StopOnDrop(Vec::new());
    let all_ids = &mut all_ids.0;
    for round in 0..6 {
        // Even rounds start from no live run; odd rounds replace the run the round before left.
        let replace = round % 2 == 1;
        if !replace {
            for id in all_ids.iter() {
                process::stop_run(id, None, Duration::from_secs(2)).await;
            }
        }
        let mut jobs = Vec::new();
        let mut codes = Vec::new();
        for _ in 0..3 {
            let (job, code) = prepare_words(&h, "one-name", &["sleep", "300"]).await;
            jobs.push(job);
            codes.push(code);
        }
        let options = SubmitOptions { replace, ..SubmitOptions::default() };
        let results = futures::future::join_all(jobs.iter().map(|job| h.backend.submit(job, &options))).await;
        let ids: Vec<String> = jobs.iter().map(|j| j.identity.run_id.clone()).collect();
        all_ids.extend(ids.iter().cloned());
        let ok = results.iter().filter(|r| r.is_ok()).count();
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, Error::AlreadyExists { .. }), "round {round}: {e}");
                let text = e.to_string();
                assert_eq!(text.matches("already").count(), 1, "one clear sentence: {text}");
                assert!(text.contains("one-name"), "{text}");
            }
        }
        assert!(ok >= 1, "round {round}: no submit succeeded: {results:?}");
        let live = live_runs(all_ids.iter());
        assert_eq!(live.len(), 1, "round {round} (replace: {replace}): live runs {live:?}, results {results:?}");
        if !replace {
            assert_eq!(ok, 1, "round {round}: {results:?}");
        }
    }
    for id in all_ids.iter() {
        process::stop_run(id, None, Duration::from_secs(2)).await;
    }
}

/// The handle planned before `submit` finds the run as well as the one `submit` returns, and
/// before the run exists, `status` of it says "not found" (a client killed in the middle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planned_handle_finds_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), 1);
    let (job, _code) = prepare_words(&h, "planned", &["echo", "hi"]).await;
    let planned = h.backend.planned_handle(&job).expect("the local backend plans its handles");
    assert!(matches!(h.backend.status(&planned).await, Err(Error::NotFound { .. })));
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.unwrap();
    assert_eq!((&planned.id, &planned.host, &planned.kind), (&handle.id, &handle.host, &handle.kind));
    let by_plan = testing::wait_terminal(&h, &planned).await;
    assert_eq!(by_plan.state, JobState::Completed, "{by_plan:?}");
    assert_eq!(h.backend.status(&handle).await.unwrap(), by_plan);
}
