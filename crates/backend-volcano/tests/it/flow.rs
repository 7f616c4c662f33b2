//! Whole flows of the Volcano backend against the cluster simulator (`theseus-kube-sim`): the
//! conformance suite, the submit flow step by step (helper created, code shipped, helper deleted,
//! gang job created), pending reasons, `--replace`, and cleanup when a step fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use theseus_backend_volcano::VolcanoHost;
use theseus_backend_volcano::{Cluster, HandleData, RetryPolicy, Settings, VolcanoBackend};
use theseus_core::backend::{EnvVar, JobHandle, JobState, SubmitOptions};
use theseus_core::chips;
use theseus_core::config::ClusterConfig;
use theseus_core::solver::Plan;
use theseus_core::testing::{self, Harness, ProcessProbe};
use theseus_kube_sim::{NodeConfig, Sim, SimConfig};

/// Counts live processes carrying `THESEUS_RUN_ID=<run id>` (the bootstrap exports it, so the
/// job's Python and its children have it).
pub(crate) struct RunProbe;

#[async_trait]
impl ProcessProbe for RunProbe {
    async fn alive(&self, handle: &JobHandle) -> theseus_core::Result<usize> {
        let data: HandleData = serde_json::from_value(handle.data.clone()).expect("volcano handle");
        let marker = format!("THESEUS_RUN_ID={}", data.run_id.expect("run id in handle"));
        let mut count = 0;
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(env) = std::fs::read(entry.path().join("environ")) else { continue };
            if env.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()) {
                count += 1;
            }
        }
        Ok(count)
    }
}

/// A simulator with `nodes` nodes of 4 GPUs, and a volcano host whose PVC is a temp dir.
pub(crate) struct World {
    pub(crate) sim: Sim,
    pub(crate) pvc: tempfile::TempDir,
    pub(crate) host: VolcanoHost,
    pub(crate) cluster: ClusterConfig,
}

impl World {
    pub(crate) async fn start(nodes: usize) -> World {
        World::start_with(nodes, |_| {}).await
    }

    /// [`World::start`], with the simulator's configuration changed by `change`.
    pub(crate) async fn start_with(nodes: usize, change: impl FnOnce(&mut SimConfig)) -> World {
        let mut config = SimConfig {
            nodes: (0..nodes).map(|i| NodeConfig::new(&format!("gpu-node-{i}"), 4)).collect(),
            ..SimConfig::default()
        };
        change(&mut config);
        let sim = Sim::start(config).await.expect("simulator starts");
        let pvc = tempfile::tempdir().unwrap();
        let mount = pvc.path().display().to_string();
        let host: VolcanoHost = serde_json::from_value(serde_json::json!({
            "cluster": "sim",
            "namespace": "default",
            "queue": "default",
            "image": "theseus-test:local",
            "pvc_name": "work",
            "pvc_mount_path": mount,
            "chips": {"h100": 4},
        }))
        .expect("a valid volcano host");
        let cluster = ClusterConfig {
            root: mount.clone(),
            work: format!("{mount}/work"),
            log: Some(format!("{mount}/logs")),
            status: Some(format!("{mount}/status")),
            ..ClusterConfig::default()
        };
        World { sim, pvc, host, cluster }
    }

    /// A cluster over the simulator's HTTPS, trusting its CA, with the settings of
    /// `client::client_for_url` (no kube-level retries: the policy is theseus's).
    pub(crate) fn connection(&self) -> Cluster {
        Cluster::from_client(sim_client(&self.sim), "default")
            .with_server(self.sim.url())
            .with_retry(RetryPolicy::fast())
    }

    pub(crate) fn backend(&self) -> VolcanoBackend {
        let settings = Settings {
            // Races start several helpers on a 1-node simulator: the losers' helpers hold the
            // node's memory until they are deleted, so the winner's may wait that long.
            helper_start_timeout: Duration::from_secs(60),
            ship_timeout: Duration::from_secs(120),
            delete_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(200),
            ..Settings::default()
        };
        VolcanoBackend::with_cluster("sim", self.host.clone(), self.cluster.clone(), self.connection())
            .with_settings(settings)
    }

    pub(crate) fn pvc(&self) -> &Path {
        self.pvc.path()
    }
}

/// Every object theseus sent drew no `Warning`: no field the CRDs do not know (the simulator
/// prunes such fields as an API server does, so they would be lost silently on a real cluster).
impl Drop for World {
    fn drop(&mut self) {
        let warnings = self.sim.warnings();
        if !std::thread::panicking() {
            assert!(warnings.is_empty(), "the simulator warned about what theseus sent: {warnings:?}");
        }
    }
}

/// A kube client for the simulator's HTTPS URL that trusts its CA.
pub(crate) fn sim_client(sim: &Sim) -> kube::Client {
    let mut config = kube::Config::new(sim.url().parse().expect("a URL"));
    config.root_cert = Some(vec![sim.ca_der()]);
    config.connect_timeout = Some(theseus_backend_volcano::client::CONNECT_TIMEOUT);
    config.default_retry = false;
    kube::Client::try_from(config).expect("a client")
}

pub(crate) fn plan(nodes: u32, gpus_per_node: u32) -> Plan {
    Plan {
        host: "sim".into(),
        kind: theseus_backend_volcano::KIND,
        cluster: "sim".into(),
        chip: (gpus_per_node > 0).then(|| chips::parse("h100").expect("h100 is known")),
        nodes,
        chips_per_node: gpus_per_node,
        processes_per_node: 1,
        total_chips: nodes * gpus_per_node,
        placement: Default::default(),
        placement_text: String::new(),
        queued: false,
        notes: vec![],
        considered: vec![],
    }
}

fn harness(world: &World, plan: Plan) -> Harness {
    Harness { backend: Arc::new(world.backend()), plan, probe: Arc::new(RunProbe), timeout: Duration::from_secs(90) }
}

/// Helper jobs, helper pods and theseus Secrets once deletions have settled (pods of a deleted
/// job are garbage-collected a moment later).
async fn theseus_objects(world: &World) -> (Vec<String>, Vec<String>, Vec<String>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let found = theseus_objects_now(world).await;
        let empty = found.0.is_empty() && found.1.is_empty();
        if empty || tokio::time::Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn theseus_objects_now(world: &World) -> (Vec<String>, Vec<String>, Vec<String>) {
    let c = world.connection();
    let helpers = c.list_jobs("theseus.dev/role=helper").await.unwrap();
    let pods = c.list_pods("theseus.dev/role=helper").await.unwrap();
    let secrets = c.list_secrets("theseus.dev/run-id").await.unwrap();
    let names = |m: Vec<Option<String>>| m.into_iter().flatten().collect::<Vec<_>>();
    (
        names(helpers.into_iter().map(|j| j.metadata.name).collect()),
        names(pods.into_iter().map(|p| p.metadata.name).collect()),
        names(secrets.into_iter().map(|s| s.metadata.name).collect()),
    )
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_backend_passes_the_conformance_suite_on_the_simulator() {
    let world = World::start(1).await;
    testing::run_all(&harness(&world, plan(1, 0))).await;
    let (helpers, helper_pods, _) = theseus_objects(&world).await;
    assert!(helpers.is_empty() && helper_pods.is_empty(), "helpers left: {helpers:?} {helper_pods:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_ships_the_code_deletes_the_helper_and_starts_the_gang() {
    let world = World::start(2).await;
    let h = harness(&world, plan(2, 4));
    let secret = EnvVar { name: "HF_TOKEN".into(), value: "hf_s3cr3t".into(), secret: true };
    let (job, code) =
        testing::prepare(&h, "flow", &["env", "HF_TOKEN", "VC_TASK_INDEX"], vec![secret], serde_json::json!({}))
            .await
            .unwrap();
    let notes = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let options = SubmitOptions {
        replace: false,
        progress: Some({
            let sent = sent.clone();
            Arc::new(move |bytes, _total| sent.store(bytes, std::sync::atomic::Ordering::SeqCst))
        }),
        status: Some({
            let notes = notes.clone();
            Arc::new(move |n: &str| notes.lock().unwrap().push(n.to_owned()))
        }),
        ..SubmitOptions::default()
    };
    let handle = h.backend.submit(&job, &options).await.expect("submit");
    let data: HandleData = serde_json::from_value(handle.data.clone()).unwrap();
    assert_eq!(handle.kind, theseus_backend_volcano::KIND);
    assert_eq!(data.namespace, "default");
    assert!(sent.load(std::sync::atomic::Ordering::SeqCst) > 0, "progress reported the bytes shipped");
    let notes = notes.lock().unwrap().clone();
    assert!(notes.iter().any(|n| n.contains("waiting for helper pod")), "notes: {notes:?}");

    // The code and the bootstrap are on the PVC, byte for byte.
    let work = PathBuf::from(&world.backend().run_layout(&job.identity).unwrap().work_dir);
    assert_eq!(std::fs::read(work.join("job.py")).unwrap(), std::fs::read(code.path().join("job.py")).unwrap());
    for file in &job.bootstrap.files {
        let found = std::fs::read_to_string(work.join(&file.path)).unwrap();
        assert_eq!(crate::fixtures::as_shipped(&file.path, found), file.contents, "{}", file.path);
    }
    assert!(!files_under(&work).iter().any(|p| p.to_string_lossy().contains("theseus-ship")), "no temp archive left");

    // The helper is gone; the gang job and its owned Secret exist, and no secret value is in the job.
    let (helpers, _, secrets) = theseus_objects(&world).await;
    assert!(helpers.is_empty(), "helper left: {helpers:?}");
    assert_eq!(secrets.len(), 1, "one Secret for the job: {secrets:?}");
    let c = world.connection();
    let gang = c.get_job(&data.job).await.unwrap().expect("gang job exists");
    assert_eq!(gang.spec.min_available, Some(2));
    assert!(!serde_json::to_string(&gang).unwrap().contains("hf_s3cr3t"), "secret value in the job manifest");
    let secret = c.list_secrets("theseus.dev/run-id").await.unwrap().remove(0);
    let owner = secret.metadata.owner_references.unwrap_or_default();
    assert_eq!(owner.first().map(|o| o.uid.clone()), gang.metadata.uid.clone(), "the job owns the Secret");

    // Both ranks run and see the secret through the Secret, and their own index.
    let status = testing::wait_terminal(&h, &handle).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    assert_eq!(status.ranks.len(), 2);
    let stream = h.backend.logs(&handle, &Default::default()).await.unwrap();
    let lines: Vec<_> = futures::StreamExt::collect::<Vec<_>>(stream).await.into_iter().map(Result::unwrap).collect();
    let env_lines: Vec<_> = lines.iter().filter(|l| l.text.starts_with("conformance-env: ")).collect();
    assert_eq!(env_lines.len(), 2, "one env line per rank: {lines:?}");
    for line in env_lines {
        let source = line.source.clone().expect("lines carry their pod");
        let seen: serde_json::Value =
            serde_json::from_str(line.text.strip_prefix("conformance-env: ").unwrap()).unwrap();
        assert_eq!(seen["env"]["HF_TOKEN"], "hf_s3cr3t");
        assert_eq!(format!("worker-{}", seen["env"]["VC_TASK_INDEX"].as_str().unwrap()), source);
    }

    // Cancel of a finished job removes it and its Secret.
    h.backend.cancel(&handle).await.expect("cancel");
    assert!(c.get_job(&data.job).await.unwrap().is_none());
    assert!(theseus_objects(&world).await.2.is_empty(), "the Secret goes with the job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_larger_than_the_cluster_stays_pending_and_says_why() {
    let world = World::start(2).await;
    let h = harness(&world, plan(3, 4));
    let (job, _code) = testing::prepare(&h, "too-big", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        let status = h.backend.status(&handle).await.unwrap();
        if status.message.as_deref().is_some_and(|m| m.contains("overused")) || tokio::time::Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status.state, JobState::Pending, "{status:?}");
    // Volcano's enqueue action rejects it: no pods, no PodGroup condition, only a Normal event
    // of the overcommit plugin on the `<job>-<uid>` PodGroup names what is missing.
    let message = status.message.unwrap_or_default();
    assert_eq!(message, "waiting for queue default: resource in cluster is overused: overused nvidia.com/gpu");
    let cancelled = h.backend.cancel(&handle).await.expect("cancel");
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert!(matches!(h.backend.status(&handle).await, Err(theseus_core::Error::NotFound { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_of_the_same_job_blocks_submit_unless_replace() {
    let world = World::start(1).await;
    let h = harness(&world, plan(1, 0));
    let (first, _c1) = testing::prepare(&h, "twice", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    let first_handle = h.backend.submit(&first, &SubmitOptions::default()).await.expect("first submit");
    let (second, _c2) = testing::prepare(&h, "twice", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let err = h.backend.submit(&second, &SubmitOptions::default()).await.expect_err("a live run blocks");
    let text = err.to_string();
    // Typed so that the CLI adds how to replace it and forgets the refused run.
    assert!(matches!(err, theseus_core::Error::AlreadyExists { .. }), "{err:?}");
    assert!(text.contains("live run of job `twice`") && text.contains(&first_handle.id), "{text}");
    assert!(theseus_objects(&world).await.0.is_empty(), "the refused submit started no helper");

    let replaced = SubmitOptions { replace: true, ..SubmitOptions::default() };
    let second_handle = h.backend.submit(&second, &replaced).await.expect("--replace submit");
    assert!(matches!(h.backend.status(&first_handle).await, Err(theseus_core::Error::NotFound { .. })));
    assert_eq!(testing::wait_terminal(&h, &second_handle).await.state, JobState::Completed);
    assert_eq!(RunProbe.alive(&first_handle).await.unwrap(), 0, "the replaced run's processes are gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpullable_helper_image_fails_fast_and_leaves_nothing() {
    let world = World::start(1).await;
    world.sim.faults().make_image_unpullable("busybox:1.36");
    let h = harness(&world, plan(1, 0));
    let (job, _code) = testing::prepare(&h, "no-pull", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let err = h.backend.submit(&job, &SubmitOptions::default()).await.expect_err("cannot pull");
    let text = err.to_string();
    assert!(text.contains("ImagePullBackOff") || text.contains("ErrImagePull"), "{text}");
    assert!(text.contains("busybox:1.36"), "names the image: {text}");
    let (helpers, pods, secrets) = theseus_objects(&world).await;
    assert!(helpers.is_empty() && pods.is_empty() && secrets.is_empty(), "{helpers:?} {pods:?} {secrets:?}");
    assert!(world.connection().list_jobs("theseus.dev/name=no-pull").await.unwrap().is_empty(), "no gang job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_shipping_takes_back_the_secret_and_the_helper() {
    let world = World::start(1).await;
    let h = harness(&world, plan(1, 0));
    let secret = EnvVar { name: "WANDB_API_KEY".into(), value: "k".into(), secret: true };
    let (job, _code) = testing::prepare(&h, "no-gang", &["ok"], vec![secret], serde_json::json!({})).await.unwrap();
    // Every ownership patch of the Secret fails: the job and the Secret must be taken back.
    world.sim.faults().fail_requests("patch", "secrets", 100, 403);
    let err = h.backend.submit(&job, &SubmitOptions::default()).await.expect_err("patch refused");
    assert!(err.to_string().contains("secrets"), "{err}");
    let (helpers, pods, secrets) = theseus_objects(&world).await;
    assert!(helpers.is_empty() && pods.is_empty() && secrets.is_empty(), "{helpers:?} {pods:?} {secrets:?}");
    assert!(world.connection().list_jobs("theseus.dev/name=no-gang").await.unwrap().is_empty(), "no gang job left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_failure_is_an_error_and_the_helper_is_deleted() {
    let world = World::start(1).await;
    let h = harness(&world, plan(1, 0));
    let (job, _code) = testing::prepare(&h, "no-exec", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    world.sim.faults().fail_requests("*", "pods/exec", 100, 500);
    let err = h.backend.submit(&job, &SubmitOptions::default()).await.expect_err("exec refused");
    assert!(!err.to_string().is_empty());
    let (helpers, pods, _) = theseus_objects(&world).await;
    assert!(helpers.is_empty() && pods.is_empty(), "{helpers:?} {pods:?}");
    assert!(world.connection().list_jobs("theseus.dev/name=no-exec").await.unwrap().is_empty(), "no gang job");
    let _ = world.pvc();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_that_never_starts_times_out_with_the_reason_and_is_deleted() {
    let world = World::start(1).await;
    world.sim.faults().delay_scheduling(Some(Duration::from_secs(120)));
    let settings = Settings {
        helper_start_timeout: Duration::from_secs(2),
        poll_interval: Duration::from_millis(200),
        ..Settings::default()
    };
    let backend = world.backend().with_settings(settings);
    let h = Harness {
        backend: Arc::new(backend),
        plan: plan(1, 0),
        probe: Arc::new(RunProbe),
        timeout: Duration::from_secs(30),
    };
    let (job, _code) = testing::prepare(&h, "slow-helper", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let err = h.backend.submit(&job, &SubmitOptions::default()).await.expect_err("the helper cannot start in time");
    let text = err.to_string();
    assert!(text.contains("timed out") && text.contains("helper pod"), "{text}");
    assert!(text.contains("waiting"), "the error says what the pod waits for: {text}");
    world.sim.faults().delay_scheduling(None);
    let (helpers, pods, _) = theseus_objects(&world).await;
    assert!(helpers.is_empty() && pods.is_empty(), "{helpers:?} {pods:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_refusing_the_pod_watch_is_reported_at_once_and_the_helper_is_deleted() {
    let world = World::start(1).await;
    let h = harness(&world, plan(1, 0));
    let (job, _code) = testing::prepare(&h, "no-watch", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    // The first pod list is the watcher's initial list of the helper's pods.
    world.sim.faults().fail_requests("list", "pods", 1, 403);
    let started = std::time::Instant::now();
    let err = h.backend.submit(&job, &SubmitOptions::default()).await.expect_err("RBAC refuses");
    let text = err.to_string();
    assert!(text.contains("watch") && text.contains("pods") && text.contains("default"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(15), "no wait for the start timeout: {:?}", started.elapsed());
    let (helpers, pods, _) = theseus_objects(&world).await;
    assert!(helpers.is_empty() && pods.is_empty(), "{helpers:?} {pods:?}");
}
