//! Lifecycle races against the cluster simulator: one name has at most one live vcjob, whatever
//! the number of concurrent submits (with and without `--replace`); a refused submit ships
//! nothing; a run recorded from its planned handle can be looked at and cancelled.

use std::sync::Arc;
use std::time::Duration;

use theseus_backend_volcano::{HandleData, RetryPolicy, Settings, VolcanoBackend};
use theseus_core::backend::{JobHandle, SubmitOptions};
use theseus_core::testing::{self, Harness, ProcessProbe};

use crate::flow::{World, plan};

struct NoProbe;

#[async_trait::async_trait]
impl ProcessProbe for NoProbe {
    async fn alive(&self, _handle: &JobHandle) -> theseus_core::Result<usize> {
        Ok(0)
    }
}

fn harness(world: &World) -> Harness {
    Harness {
        backend: Arc::new(world.backend()),
        plan: plan(1, 0),
        probe: Arc::new(NoProbe),
        timeout: Duration::from_secs(60),
    }
}

/// Gang vcjobs of `name` that are not terminal.
async fn live_jobs(world: &World, name: &str) -> Vec<String> {
    let jobs = world.connection().list_jobs(&format!("theseus.dev/name={name},!theseus.dev/role")).await.unwrap();
    jobs.into_iter()
        .filter(|j| {
            let phase = j.status.as_ref().and_then(|s| s.state.as_ref()).and_then(|s| s.phase.clone());
            !phase.is_some_and(|p| ["Completed", "Failed", "Terminated", "Aborted"].contains(&p.as_str()))
        })
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .filter_map(|j| j.metadata.name)
        .collect()
}

/// How many vcjobs (helpers and gang jobs) were created so far, from the simulator's request log.
fn job_creations(world: &World) -> usize {
    world
        .sim
        .requests()
        .iter()
        .filter(|(m, p)| m == "POST" && p.contains("/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"))
        .filter(|(_, p)| !p.contains("dryRun=All"))
        .count()
}

/// vcjobs one successful submit creates: a helper and the gang job, or only the gang job once
/// the store's index names the code (every round's jobs run the same code, so after the first
/// ship no helper is needed).
fn per_submit(world: &World) -> usize {
    let maps = world.sim.objects("v1", "ConfigMap");
    let known = maps.iter().any(|m| m["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("theseus-tree-")));
    if known { 1 } else { 2 }
}

/// Submits `copies` runs of `name` at once; returns the results.
async fn race(h: &Harness, name: &str, copies: usize, replace: bool) -> Vec<theseus_core::Result<JobHandle>> {
    let mut jobs = Vec::new();
    for _ in 0..copies {
        jobs.push(testing::prepare(h, name, &["sleep"], vec![], serde_json::json!({})).await.unwrap());
    }
    let options = SubmitOptions { replace, ..SubmitOptions::default() };
    let futures = jobs.iter().map(|(job, _)| h.backend.submit(job, &options));
    futures::future::join_all(futures).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submits_of_one_name_leave_one_live_job_and_the_loser_ships_nothing() {
    let world = World::start(1).await;
    let h = harness(&world);
    for round in 0..10 {
        let name = format!("race{round}");
        let (before, per_run) = (job_creations(&world), per_submit(&world));
        let results = race(&h, &name, 2, false).await;
        let won: Vec<&JobHandle> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        let lost: Vec<String> = results.iter().filter_map(|r| r.as_ref().err()).map(ToString::to_string).collect();
        assert_eq!(won.len(), 1, "round {round}: exactly one submit wins: {lost:?}");
        assert_eq!(lost.len(), 1, "round {round}");
        let message = &lost[0];
        // The CLI adds how to replace it; the backend names the live run, typed as AlreadyExists.
        assert!(
            results.iter().any(|r| matches!(r, Err(theseus_core::Error::AlreadyExists { .. }))),
            "round {round}: {message}"
        );
        assert!(message.contains("live run of job") && message.contains("already exists"), "round {round}: {message}");
        assert_eq!(message.matches("already").count(), 1, "round {round}: one clean message: {message}");
        assert_eq!(live_jobs(&world, &name).await, vec![won[0].id.clone()], "round {round}");
        assert_eq!(
            job_creations(&world) - before,
            per_run,
            "round {round}: one helper (unless the store holds the code) and one gang job, the loser created none"
        );
        h.backend.cancel(won[0]).await.expect("cancel");
    }
}

/// Concurrent `--replace` submits: one live job remains, and a replacement that loses (another
/// submit of the name is under way) creates no helper and ships nothing, as plain losers do
/// (issue 23 point 12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replacements_leave_exactly_one_live_job_and_losers_ship_nothing() {
    let world = World::start(1).await;
    let h = harness(&world);
    for round in 0..8 {
        let name = format!("rep{round}");
        let first = race(&h, &name, 1, false).await.remove(0).expect("the first run starts");
        let (before, per_run) = (job_creations(&world), per_submit(&world));
        let results = race(&h, &name, 3, true).await;
        let won: Vec<&JobHandle> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert!(!won.is_empty(), "round {round}: some replacement succeeds: {results:?}");
        let live = live_jobs(&world, &name).await;
        assert_eq!(live.len(), 1, "round {round}: one live job of {name}: {live:?}");
        assert!(live[0] != first.id, "round {round}: the replaced run is gone");
        assert!(won.iter().any(|w| w.id == live[0]), "round {round}: the live job is one a replacer reported");
        assert_eq!(
            job_creations(&world) - before,
            per_run * won.len(),
            "round {round}: a gang job (and a helper unless the store holds the code) per successful replacement, \
             none for the losers: {results:?}"
        );
        for lost in results.iter().filter_map(|r| r.as_ref().err()) {
            assert!(matches!(lost, theseus_core::Error::AlreadyExists { .. }), "round {round}: {lost}");
            let lost = lost.to_string();
            assert!(lost.contains("is being submitted"), "round {round}: {lost}");
        }
        for handle in won {
            let _ = h.backend.cancel(handle).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_handle_works_before_and_after_submit() {
    let world = World::start(1).await;
    let h = harness(&world);
    let (job, _code) = testing::prepare(&h, "planned", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    let planned = h.backend.planned_handle(&job).expect("volcano knows its handle before submit");
    // Nothing exists yet: status says so without failing on the handle; cancel finds nothing.
    let before = h.backend.status(&planned).await;
    assert!(matches!(before, Err(theseus_core::Error::NotFound { .. })), "{before:?}");
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    assert_eq!(planned.id, handle.id);
    let (p, s): (HandleData, HandleData) =
        (serde_json::from_value(planned.data.clone()).unwrap(), serde_json::from_value(handle.data.clone()).unwrap());
    assert_eq!((p.job, p.run_id, p.secret, p.log_file), (s.job, s.run_id, s.secret, s.log_file));
    let status = h.backend.status(&planned).await.expect("status from the planned handle");
    assert!(!status.state.is_terminal(), "{status:?}");
    let cancelled = h.backend.cancel(&planned).await.expect("cancel from the planned handle");
    assert_eq!(cancelled.state, theseus_core::backend::JobState::Cancelled);
    assert!(live_jobs(&world, "planned").await.is_empty());
}

/// A Lease claim of `name` held by a run that never made a job, last renewed an hour ago.
fn stale_claim(name: &str) -> k8s_openapi::api::coordination::v1::Lease {
    let mut identity = theseus_core::job::JobIdentity::new(name, Some("conformance"), None);
    identity.run_id = "20200101-000000-dead00".into();
    let hour_ago = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(3600);
    theseus_backend_volcano::claim::render_claim(&identity, "never-created", hour_ago)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_deletes_real_leftovers_and_leaves_a_live_jobs_objects_alone() {
    let world = World::start(1).await;
    let h = harness(&world);
    let c = world.connection();
    let backend = world.backend();

    // A live job with a Secret whose owner was never set (the client died in between) and a claim.
    let secret = theseus_core::backend::EnvVar { name: "HF_TOKEN".into(), value: "t".into(), secret: true };
    let (job, _code) = testing::prepare(&h, "live", &["sleep"], vec![secret], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let data: HandleData = serde_json::from_value(handle.data.clone()).unwrap();
    let live_secret = data.secret.clone().expect("a Secret");
    let patch = serde_json::json!({"metadata": {"ownerReferences": null}});
    c.secrets()
        .patch(&live_secret, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .expect("drop the owner");

    // Leftovers: a helper of a dead client, a Secret and a run-files ConfigMap whose run has no
    // job, a stale claim.
    let (dead, _dead_code) = testing::prepare(&h, "dead", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let layout = backend.run_layout(&dead.identity).unwrap();
    let helper = theseus_backend_volcano::render_helper(backend.host(), &dead.identity, &layout.work_dir).unwrap();
    c.create_job(&helper).await.expect("helper");
    let orphan_env = [theseus_core::backend::EnvVar { name: "K".into(), value: "v".into(), secret: true }];
    let labels = theseus_backend_volcano::render::run_labels(backend.host(), &dead.identity);
    let orphan = theseus_backend_volcano::render_secret("dead-job", "default", &labels, &orphan_env).unwrap();
    c.create_secret(&orphan).await.expect("orphan secret");
    let mut dead_job = theseus_backend_volcano::Job::new("dead-job", theseus_backend_volcano::JobSpec::default());
    dead_job.metadata.labels = Some(labels.clone());
    let files = theseus_backend_volcano::prebuilt::run_files_map(&dead_job, "files".into());
    c.create_run_config_map(&files).await.expect("orphan run files");
    c.create_lease(&stale_claim("stale")).await.expect("stale claim");
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let mut removed = backend.gc(Duration::from_secs(1), false).await.expect("gc");
    removed.sort();
    let helper_name = helper.metadata.name.clone().unwrap();
    let orphan_name = orphan.metadata.name.clone().unwrap();
    let stale_name = stale_claim("stale").metadata.name.unwrap();
    assert!(removed.contains(&format!("vcjob/{helper_name}")), "{removed:?}");
    assert!(removed.contains(&format!("secret/{orphan_name}")), "{removed:?}");
    assert!(removed.contains(&format!("lease/{stale_name}")), "{removed:?}");
    assert!(removed.contains(&"configmap/dead-job-files".to_owned()), "{removed:?}");
    assert_eq!(removed.len(), 4, "nothing else (the store's index is no run's): {removed:?}");
    assert!(c.get_job(&helper_name).await.unwrap().is_none());
    assert!(c.get_lease(&stale_name).await.unwrap().is_none());

    // The live job's Secret and claim are still there, and the job runs on.
    assert!(c.secrets().get_opt(&live_secret).await.unwrap().is_some(), "the live job's Secret was kept");
    assert!(c.get_lease(data.claim.as_deref().unwrap()).await.unwrap().is_some(), "the live job's claim was kept");
    assert!(!h.backend.status(&handle).await.unwrap().state.is_terminal());
    h.backend.cancel(&handle).await.expect("cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_that_never_answers_fails_the_submit_after_the_idle_deadline_and_leaves_nothing() {
    let world = World::start(1).await;
    let settings = theseus_backend_volcano::Settings {
        helper_start_timeout: Duration::from_secs(20),
        ship_timeout: Duration::from_secs(3600),
        ship_idle_timeout: Duration::from_secs(2),
        delete_timeout: Duration::from_secs(30),
        poll_interval: Duration::from_millis(200),
        ..theseus_backend_volcano::Settings::default()
    };
    let backend = world.backend().with_settings(settings);
    let h = Harness {
        backend: Arc::new(backend),
        plan: plan(1, 0),
        probe: Arc::new(NoProbe),
        timeout: Duration::from_secs(60),
    };
    let (job, _code) = testing::prepare(&h, "stuck-exec", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    world.sim.faults().hang_requests("create", "pods/exec", 1);
    let options = SubmitOptions::default();
    let submit = h.backend.submit(&job, &options);
    let err =
        tokio::time::timeout(Duration::from_secs(60), submit).await.expect("the submit ends").expect_err("exec hangs");
    let text = err.to_string();
    assert!(text.contains("no progress") && text.contains("shipping"), "{text}");
    let c = world.connection();
    assert!(c.list_jobs("theseus.dev/name=stuck-exec").await.unwrap().is_empty(), "no helper and no gang job left");
    let claims = c.list_leases("theseus.dev/name=stuck-exec").await.unwrap();
    assert!(claims.is_empty(), "the claim was given back: {claims:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_handle_shows_and_cancels_a_submit_that_has_not_finished() {
    let world = World::start(1).await;
    world.sim.faults().delay_scheduling(Some(Duration::from_secs(120)));
    let h = Arc::new(harness(&world));
    let (job, _code) = testing::prepare(&h, "unfinished", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    let planned = h.backend.planned_handle(&job).expect("planned handle");
    let submitting = {
        let (h, job) = (h.clone(), job.clone());
        tokio::spawn(async move { h.backend.submit(&job, &SubmitOptions::default()).await })
    };
    // The submit waits for its helper (scheduling is held back): the run is being submitted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match h.backend.status(&planned).await {
            Ok(s) if s.state == theseus_core::backend::JobState::Submitting => break,
            other => assert!(tokio::time::Instant::now() < deadline, "never submitting: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cancelled = h.backend.cancel(&planned).await.expect("cancel of an unfinished submit");
    assert_eq!(cancelled.state, theseus_core::backend::JobState::Cancelled, "{cancelled:?}");
    let outcome = tokio::time::timeout(Duration::from_secs(60), submitting).await.expect("the submit ends").unwrap();
    assert!(outcome.is_err(), "the cancelled submit does not create its job: {outcome:?}");
    let c = world.connection();
    assert!(c.list_jobs("theseus.dev/name=unfinished").await.unwrap().is_empty(), "no helper and no gang job");
    assert!(c.list_leases("theseus.dev/name=unfinished").await.unwrap().is_empty(), "no claim");
    assert!(matches!(h.backend.status(&planned).await, Err(theseus_core::Error::NotFound { .. })));
}

/// A harness whose API calls allow 2 s per request (`settings` with the timeouts of the world's
/// backend), for cases where the API server never answers one.
fn impatient(world: &World, settings: Settings) -> Harness {
    let quick = RetryPolicy { request_timeout: Duration::from_secs(2), ..RetryPolicy::fast() };
    let connection = world.connection().with_retry(quick);
    let backend = VolcanoBackend::with_cluster("sim", world.host.clone(), world.cluster.clone(), connection)
        .with_settings(Settings {
            helper_start_timeout: Duration::from_secs(60),
            delete_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_millis(200),
            ..settings
        });
    Harness { backend: Arc::new(backend), plan: plan(1, 0), probe: Arc::new(NoProbe), timeout: Duration::from_secs(60) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_that_never_answer_give_way_to_bounded_polls() {
    // The fault matrix found these: an API server that takes a watch's first request and never
    // answers held `submit` (waiting for its helper pod) and `cancel` (waiting for the job to
    // go) for kube-rs's 295 s read timeout. Now a watch silent for the request timeout is
    // replaced by a list, whose every request is bounded.
    let world = World::start(1).await;
    let h = impatient(&world, Settings::default());
    let (job, _code) = testing::prepare(&h, "silent-watch", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    // The helper's pod watch starts with a LIST of pods: it never answers.
    world.sim.faults().hang_requests("list", "pods", 1);
    let handle = tokio::time::timeout(Duration::from_secs(50), h.backend.submit(&job, &SubmitOptions::default()))
        .await
        .expect("the submit ends before the helper's start timeout")
        .expect("the submit succeeds");
    // The job's deletion watch starts with a LIST of jobs: it never answers.
    world.sim.faults().hang_requests("list", "jobs", 1);
    let cancelled = tokio::time::timeout(Duration::from_secs(50), h.backend.cancel(&handle))
        .await
        .expect("the cancel ends before the delete timeout")
        .expect("the cancel succeeds");
    assert_eq!(cancelled.state, theseus_core::backend::JobState::Cancelled, "{cancelled:?}");
    assert!(live_jobs(&world, "silent-watch").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_the_api_server_never_answers_fails_after_the_request_timeout_not_the_idle_deadline() {
    let world = World::start(1).await;
    let h = impatient(&world, Settings { ship_idle_timeout: Duration::from_secs(3600), ..Settings::default() });
    let (job, _code) = testing::prepare(&h, "silent-exec", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    world.sim.faults().hang_requests("create", "pods/exec", 1);
    let err = tokio::time::timeout(Duration::from_secs(50), h.backend.submit(&job, &SubmitOptions::default()))
        .await
        .expect("the submit ends long before the idle deadline")
        .expect_err("the exec never answers");
    assert!(err.to_string().contains("did not answer the exec in 2s"), "{err}");
    let c = world.connection();
    assert!(c.list_jobs("theseus.dev/name=silent-exec").await.unwrap().is_empty(), "no helper and no gang job left");
}
