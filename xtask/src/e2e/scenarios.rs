//! The scenarios of the Volcano end-to-end test, each a sequence of real `theseus`
//! commands plus checks through the cluster API and on the PVC:
//!
//! 1. a 2-node JAX job (2 pods x 4 GPUs, JAX on CPU; no `distributed` key, so JAX is initialised
//!    on the job's import of jax) completes and both ranks log an allgather;
//! 2. a job larger than the cluster stays pending, `status` says why, `cancel` removes it;
//! 3. a submit whose helper image cannot be pulled fails clearly and leaves no helper;
//! 4. 20 parallel submits all complete, with distinct job names and run dirs;
//! 5. to 7. what a cluster refuses and how it recovers (`refusals.rs`): a queue that does not
//!    exist, a Closed queue, an evicted pod that restarts the job;
//! 8. to 10. a cluster many teams share (`shared.rs`): a training preempted by a higher
//!    PriorityClass resumes from its checkpoint to the same final parameters; a borrowed share is
//!    reclaimed; a node selector no node matches keeps a job pending with the scheduler's reason;
//! 11. no helper job or pod and no orphaned Secret or coordinator Service of theseus remains.
//!
//! Then, against the simulator, `kubectl get vcjob,pods -A` (NOT RUN without kubectl, or a
//! failure when it is required, as `cargo xtask test` requires it).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::api::names;
use super::{BROKEN_HOST, HOST, World, text, wait_for, wait_seen};
use super::{refusals, shared};

/// Number of parallel submits in scenario 4.
const PARALLEL: usize = 20;
/// How long a job may take to finish.
const JOB_TIMEOUT: Duration = Duration::from_secs(600);
/// How long deleted helper pods may take to go: a pod's default grace period is 30 s, and a
/// real cluster adds the kubelet's and the garbage collector's delays.
const HELPER_GONE_TIMEOUT: Duration = Duration::from_secs(120);

type Scenario = fn(&World) -> Result<()>;

/// Scenario number, title, body.
const SCENARIOS: [(u32, &str, Scenario); 11] = [
    (1, "2-node JAX job (2 pods x 4 GPUs) completes", two_node_jax),
    (2, "job larger than the cluster: pending with a reason, cancelled", too_big),
    (3, "unpullable helper image: clear error, no helper left", unpullable_helper),
    (4, "20 parallel submits complete with distinct names and run dirs", parallel_submits),
    (5, "queue that does not exist: passed over, submit refused before anything is created", refusals::missing_queue),
    (6, "Closed queue: submit refused before anything is created", refusals::closed_queue),
    (7, "evicted pod: the job restarts and status counts it, then cancel", refusals::evicted_pod_restarts),
    (
        8,
        "training preempted by a higher PriorityClass resumes to the same final parameters",
        shared::preempted_training_resumes,
    ),
    (9, "a borrowed share is reclaimed by its queue's owner, and status says so", shared::borrowed_share_is_reclaimed),
    (
        10,
        "node selector no node matches: pending with the scheduler's reason, cancelled",
        shared::unmatched_node_selector_stays_pending,
    ),
    (11, "no helper job, pod, or orphaned Secret or Service of theseus remains", nothing_left),
];

/// The commands each scenario runs, for `--dry-run`.
pub(crate) fn describe() -> String {
    let mut out = String::new();
    for (n, title, _) in SCENARIOS {
        out.push_str(&format!("# scenario {n}: {title}\n"));
        for line in commands(n) {
            // A step of the harness itself is a comment, not a theseus command.
            let prefix = if line.first().is_some_and(|w| w.starts_with('#')) { "" } else { "theseus " };
            out.push_str(&format!("{prefix}{}\n", line.join(" ")));
        }
    }
    out
}

/// Runs the selected scenarios (all when `only` is empty), printing PASS/FAIL with timings.
/// Fails if any failed. A missing kubectl is NOT RUN, or a failure with `require_kubectl`
/// (`--require-kubectl`, which `cargo xtask test` passes) or `THESEUSTEST_REQUIRE_ALL=1`.
pub(crate) fn run_all(world: &World, only: &[u32], require_kubectl: bool) -> Result<()> {
    let started = Instant::now();
    let mut failed = Vec::new();
    for (n, title, scenario) in SCENARIOS {
        if !only.is_empty() && !only.contains(&n) {
            continue;
        }
        let total = SCENARIOS.len();
        eprintln!("e2e: [{n}/{total}] {title} ...");
        let t = Instant::now();
        match scenario(world) {
            Ok(()) => eprintln!("e2e: [{n}/{total}] PASS ({:.1}s) {title}", t.elapsed().as_secs_f64()),
            Err(e) => {
                eprintln!("e2e: [{n}/{total}] FAIL ({:.1}s) {title}\n{e:#}", t.elapsed().as_secs_f64());
                failed.push(n);
            }
        }
    }
    if let Some(server) = &world.kubectl_server {
        let t = Instant::now();
        let required = require_kubectl || std::env::var_os("THESEUSTEST_REQUIRE_ALL").is_some_and(|v| v == "1");
        let jax_ran = only.is_empty() || only.contains(&1);
        let checked = kubectl_against_sim(world, server, jax_ran).and_then(|found| {
            if !found {
                return Ok(false);
            }
            kubectl_validates_the_dry_run(world, server)?;
            super::forward::kubectl_port_forward(world, server)?;
            Ok(true)
        });
        let (line, ok) = kubectl_verdict(checked, required);
        eprintln!("e2e: [kubectl] {line} ({:.1}s)", t.elapsed().as_secs_f64());
        if !ok {
            failed.push(0);
        }
    }
    let total = started.elapsed().as_secs_f64();
    if !failed.is_empty() {
        bail!("e2e: scenarios {failed:?} failed ({total:.1}s)");
    }
    eprintln!("e2e: all scenarios passed ({total:.1}s)");
    Ok(())
}

/// The line to print for the kubectl check, and whether it counts as passed: a missing kubectl
/// (`Ok(false)`) is NOT RUN, or FAIL when `required`.
fn kubectl_verdict(outcome: Result<bool>, required: bool) -> (String, bool) {
    match outcome {
        Ok(true) => (
            "PASS kubectl get vcjob,pods -A; kubectl apply --validate=strict --dry-run=server of theseus's --dry-run \
             output; kubectl port-forward to a job's pod"
                .to_owned(),
            true,
        ),
        Ok(false) if required => (
            "FAIL: kubectl is not installed and is required here (`apt-get install kubectl`, or \
             `kubernetes-client` on Debian)"
                .to_owned(),
            false,
        ),
        Ok(false) => (
            "NOT RUN: kubectl is not installed (`apt-get install kubectl`, or `kubernetes-client` on Debian)"
                .to_owned(),
            true,
        ),
        Err(e) => (format!("FAIL: {e:#}"), false),
    }
}

/// Whether a pending message names what the job is missing: the resource, or Volcano's
/// words for a gang that does not fit (the overcommit plugin's "resource in cluster is
/// overused", proportion's "queue resource quota insufficient", the scheduler's
/// "Unschedulable" and "Insufficient nvidia.com/gpu"). theseus's own fallback, "waiting for
/// Volcano to admit the gang ...", names nothing and does not count.
pub(crate) fn names_what_is_missing(message: &str) -> bool {
    let lower = message.to_lowercase();
    ["nvidia.com/gpu", "overused", "insufficient", "unschedulable"].iter().any(|w| lower.contains(w))
}

/// The `theseus` arguments of each scenario's submits (relative to the code dir).
fn commands(n: u32) -> Vec<Vec<String>> {
    let args = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    match n {
        1 => vec![
            jax_submit(),
            args("status e2e-jax --output json   # until terminal; must be completed"),
            args("logs e2e-jax   # both ranks: process_count=2 allgather=[1, 11]"),
        ],
        2 => {
            vec![
                too_big_submit(),
                args("status e2e-too-big --output json   # until pending with a reason naming what is missing (120 s)"),
                args("cancel e2e-too-big"),
            ]
        }
        3 => vec![broken_submit(), args("...   # fails naming the image; then no helper vcjob left (120 s)")],
        4 => vec![
            parallel_submit(0),
            args(&format!("...   # e2e-par-0 .. e2e-par-{} at once", PARALLEL - 1)),
            args("list --output json --limit 100   # until every run is completed"),
        ],
        5..=7 => refusals::commands(n).iter().map(|c| args(c)).collect(),
        8..=10 => shared::commands(n).iter().map(|c| args(c)).collect(),
        _ => vec![args(
            "gc --older-than 0s --dry-run   # prints 0; before it, helper jobs and pods must be gone (120 s) and no Secret orphaned",
        )],
    }
}

fn jax_submit() -> Vec<String> {
    let s = format!("submit e2e-jax jax.yaml --code . --host {HOST} --chip h100 -n 8 --secret-env E2E_TOKEN");
    s.split_whitespace().map(str::to_owned).collect()
}

fn too_big_submit() -> Vec<String> {
    let s = format!(
        "submit e2e-too-big hello.yaml --code . --host {HOST} --chip h100 -n 16 --no-check --secret-env E2E_TOKEN"
    );
    s.split_whitespace().map(str::to_owned).collect()
}

/// The broken host's submit ships code of its own (`../code-broken`, written by the scenario
/// with a file no other run has): code the store already holds starts no helper at all.
fn broken_submit() -> Vec<String> {
    let s =
        format!("submit e2e-broken ../code-broken/hello.yaml --code ../code-broken --host {BROKEN_HOST} --chip cpu");
    s.split_whitespace().map(str::to_owned).collect()
}

fn parallel_submit(i: usize) -> Vec<String> {
    let s = format!("submit e2e-par-{i} hello.yaml --code . --host {HOST} --chip cpu --cpu 100m --mem 128Mi");
    s.split_whitespace().map(str::to_owned).collect()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// `status --output json` of a job.
fn status(world: &World, job: &str) -> Result<Value> {
    let out = world.theseus_ok(&["status", job, "--output", "json"])?;
    serde_json::from_str(&out).with_context(|| format!("status of {job} is not JSON: {out}"))
}

/// Waits until the job is in a terminal state and returns its status.
fn wait_terminal(world: &World, job: &str) -> Result<Value> {
    wait_for(&format!("{job} to end"), JOB_TIMEOUT, Duration::from_millis(500), || {
        let v = status(world, job)?;
        let state = v["status"]["state"].as_str().unwrap_or("");
        Ok(matches!(state, "completed" | "failed" | "cancelled" | "preempted" | "lost").then_some(v))
    })
}

fn two_node_jax(world: &World) -> Result<()> {
    world.theseus_ok(&strs(&jax_submit()))?;
    let v = wait_terminal(world, "e2e-jax")?;
    let logs = world.theseus("logs e2e-jax".split(' ').collect::<Vec<_>>().as_slice())?;
    let logs = text(&logs.stdout) + &text(&logs.stderr);
    ensure!(v["status"]["state"] == "completed", "e2e-jax ended {}:\n{v:#}\nlogs:\n{logs}", v["status"]["state"]);
    ensure!(v["status"]["ranks"].as_array().map(Vec::len) == Some(2), "two ranks expected: {v:#}");
    for rank in 0..2 {
        let line = logs
            .lines()
            .find(|l| l.starts_with(&format!("[worker-{rank}] process_index={rank} ")))
            .with_context(|| format!("no line of rank {rank} in the logs:\n{logs}"))?;
        ensure!(line.contains("process_count=2") && line.contains("allgather=[1, 11]"), "rank {rank}: {line}");
        eprintln!("e2e:       {line}");
        // jax.yaml has no `distributed` key: the launcher initialised on the job's import of jax.
        let init = format!("[worker-{rank}] [theseus] jax.distributed.initialize(");
        ensure!(
            logs.lines().any(|l| l.starts_with(&init) && l.ends_with("on the job's import of jax")),
            "rank {rank} did not initialise on import:\n{logs}"
        );
    }
    let text_status = world.theseus_ok(&["status", "e2e-jax"])?;
    ensure!(text_status.contains("completed"), "status: {text_status}");
    Ok(())
}

fn too_big(world: &World) -> Result<()> {
    world.theseus_ok(&strs(&too_big_submit()))?;
    // Real Volcano records why a job that does not fit is not enqueued only as events on its
    // PodGroup, some time after the submit; until then theseus says it waits for admission.
    let message = wait_seen(
        "a pending reason naming what is missing",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || {
            let v = status(world, "e2e-too-big")?;
            let state = v["status"]["state"].as_str().unwrap_or("");
            ensure!(matches!(state, "pending" | "queued"), "e2e-too-big should stay pending: {v:#}");
            let message = v["status"]["message"].as_str().unwrap_or("").to_owned();
            Ok(if names_what_is_missing(&message) { Ok(message) } else { Err(format!("{state}: `{message}`")) })
        },
    )?;
    eprintln!("e2e:       pending because: {message}");
    let text_status = world.theseus_ok(&["status", "e2e-too-big"])?;
    ensure!(
        names_what_is_missing(&text_status),
        "`status` does not show what is missing (the JSON status said `{message}`):\n{text_status}"
    );
    let ns = &world.namespace;
    let selector = "labelSelector=theseus.dev%2Fname%3De2e-too-big%2C%21theseus.dev%2Frole";
    let jobs = names(&world.api.list(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs?{selector}"))?);
    let [vcjob] =
        <[String; 1]>::try_from(jobs).map_err(|j| anyhow::anyhow!("one vcjob of e2e-too-big expected: {j:?}"))?;
    let secrets_before = owned_secrets(world, &vcjob)?;
    ensure!(!secrets_before.is_empty(), "the job's Secret (--secret-env) is missing");
    let cancel = world.theseus_ok(&["cancel", "e2e-too-big"])?;
    ensure!(cancel.contains("cancelled"), "cancel: {cancel}");
    wait_for("the vcjob, its pods and its Secret to go", Duration::from_secs(60), Duration::from_millis(500), || {
        let jobs = names(&world.api.list(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"))?);
        let pods =
            world.api.list(&format!("/api/v1/namespaces/{ns}/pods?labelSelector=volcano.sh/job-name%3D{vcjob}"))?;
        let secrets = owned_secrets(world, &vcjob)?;
        Ok((!jobs.contains(&vcjob) && pods.is_empty() && secrets.is_empty()).then_some(()))
    })?;
    let after = world.theseus_ok(&["status", "e2e-too-big"])?;
    ensure!(after.contains("cancelled"), "status after cancel: {after}");
    Ok(())
}

/// Names of Secrets with an owner reference to the vcjob `job`.
fn owned_secrets(world: &World, job: &str) -> Result<Vec<String>> {
    let secrets = world.api.list(&format!("/api/v1/namespaces/{}/secrets", world.namespace))?;
    let owned: Vec<Value> = secrets
        .into_iter()
        .filter(|s| s["metadata"]["ownerReferences"].as_array().is_some_and(|o| o.iter().any(|r| r["name"] == job)))
        .collect();
    Ok(names(&owned))
}

fn unpullable_helper(world: &World) -> Result<()> {
    let code = world.code.with_file_name("code-broken");
    World::write_code(&code)?;
    let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
    std::fs::write(code.join("unique.txt"), format!("{unique}\n"))?;
    let started = Instant::now();
    let out = world.theseus(&strs(&broken_submit()))?;
    let stderr = text(&out.stderr);
    ensure!(!out.status.success(), "the submit should fail:\n{stderr}");
    ensure!(started.elapsed() < Duration::from_secs(240), "took {:?} to fail", started.elapsed());
    ensure!(
        stderr.contains("ImagePullBackOff") || stderr.contains("ErrImagePull"),
        "the error does not say the image cannot be pulled:\n{stderr}"
    );
    ensure!(stderr.contains("theseus-ship-"), "the error does not name the helper:\n{stderr}");
    let error = stderr
        .lines()
        .filter(|l| l.starts_with("error") || l.contains("Caused by") || l.starts_with("  "))
        .collect::<Vec<_>>();
    eprintln!("e2e:       theseus said: {}", error.join(" / "));
    let ns = &world.namespace;
    wait_seen("the helper to go", HELPER_GONE_TIMEOUT, Duration::from_millis(500), || {
        let jobs = world.api.list(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"))?;
        let left: Vec<String> =
            names(&jobs).into_iter().filter(|n| n.starts_with("theseus-ship-") || n.contains("e2e-broken")).collect();
        Ok(if left.is_empty() { Ok(()) } else { Err(format!("vcjobs {left:?}")) })
    })?;
    // The ledger knows every run before anything is created; a failed submit stays there as
    // `failed` with its reason, never as a live run.
    let list = world.theseus_ok(&["list", "--output", "json"])?;
    let records: Vec<Value> = serde_json::from_str::<Value>(&list)?.as_array().cloned().unwrap_or_default();
    for record in records.iter().filter(|r| r["identity"]["name"] == "e2e-broken") {
        ensure!(record["state"] == "failed", "a failed submit is shown as {}: {record}", record["state"]);
        let message = record["message"].as_str().unwrap_or_default();
        ensure!(
            message.contains("ImagePullBackOff") || message.contains("ErrImagePull"),
            "its reason is lost: {record}"
        );
    }
    Ok(())
}

fn parallel_submits(world: &World) -> Result<()> {
    let mut children = Vec::new();
    for i in 0..PARALLEL {
        let child = world
            .theseus_cmd(&strs(&parallel_submit(i)))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("cannot start theseus")?;
        children.push(child);
    }
    let mut errors = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            errors.push(format!("e2e-par-{i}: {}", text(&out.stderr)));
        }
    }
    ensure!(errors.is_empty(), "{} submits failed:\n{}", errors.len(), errors.join("\n"));
    let records = wait_for("all parallel runs to end", JOB_TIMEOUT, Duration::from_secs(1), || {
        let list = world.theseus_ok(&["list", "--output", "json", "--limit", "100"])?;
        let records: Vec<Value> = serde_json::from_str::<Value>(&list)?
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r["identity"]["name"].as_str().is_some_and(|n| n.starts_with("e2e-par-")))
            .collect();
        let done = records.len() == PARALLEL
            && records
                .iter()
                .all(|r| !matches!(r["state"].as_str(), Some("pending" | "queued" | "running" | "unknown")));
        Ok(done.then_some(records))
    })?;
    let not_completed: Vec<String> = records
        .iter()
        .filter(|r| r["state"] != "completed")
        .map(|r| format!("{} {}", r["identity"]["name"], r["state"]))
        .collect();
    ensure!(not_completed.is_empty(), "not completed: {not_completed:?}");
    let distinct = |key: &dyn Fn(&Value) -> String| records.iter().map(key).collect::<BTreeSet<_>>().len();
    ensure!(distinct(&|r| r["identity"]["name"].to_string()) == PARALLEL, "job names repeat");
    ensure!(distinct(&|r| r["identity"]["run_id"].to_string()) == PARALLEL, "run ids repeat");
    ensure!(distinct(&|r| r["handle"]["id"].to_string()) == PARALLEL, "vcjob names repeat");
    let run_dirs = run_dirs(&world.pvc.join("status"), "e2e-par-")?;
    ensure!(run_dirs.len() == PARALLEL, "{} run dirs on the PVC, expected {PARALLEL}: {run_dirs:?}", run_dirs.len());
    for i in 0..PARALLEL {
        let job = format!("e2e-par-{i}");
        let logs = world.theseus_ok(&["logs", &job])?;
        ensure!(logs.contains(&format!("hello from {job} run")), "logs of {job}: {logs}");
    }
    Ok(())
}

/// Run dirs (`<status>/<project>/<group>/<name>/<run id>`) of jobs whose name starts with
/// `prefix`, each holding the bootstrap's `metadata.json`.
fn run_dirs(status_dir: &Path, prefix: &str) -> Result<BTreeSet<String>> {
    let mut found = BTreeSet::new();
    let read = |p: &Path| std::fs::read_dir(p).with_context(|| format!("cannot list {}", p.display()));
    for project in read(status_dir)? {
        for group in read(&project?.path())? {
            for name in read(&group?.path())? {
                let name = name?.path();
                if !name.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)) {
                    continue;
                }
                for run in read(&name)? {
                    let run = run?.path();
                    ensure!(run.join("metadata.json").is_file(), "no metadata.json in {}", run.display());
                    found.insert(run.display().to_string());
                }
            }
        }
    }
    Ok(found)
}

fn nothing_left(world: &World) -> Result<()> {
    let ns = &world.namespace;
    // theseus's own judgement first: no Kubernetes leftovers (finished runs' code dirs on the
    // PVC are `gc`'s to reclaim, so they are not counted). Its dry run of the PVC store starts a
    // helper pod of its own, which the checks below then see gone. Only the working host: the
    // broken host's helper image cannot start, so its store cannot be reclaimed.
    let gc = world.theseus_ok(&["gc", "--older-than", "0s", "--dry-run", "--host", HOST, "--output", "json"])?;
    let report: Value =
        serde_json::from_str(&gc).with_context(|| format!("`theseus gc --output json` printed {gc}"))?;
    let leftovers: Vec<&Value> = report
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|host| host["deleted"].as_array().into_iter().flatten())
        .collect();
    ensure!(leftovers.is_empty(), "`theseus gc` would delete Kubernetes leftovers: {leftovers:?}");
    ensure!(
        report.as_array().into_iter().flatten().any(|host| host["reclaim"]["items"].is_array()),
        "`theseus gc` did not look at the PVC's code store: {report}"
    );
    // A deleted helper pod stays (Terminating) for its grace period; wait for it to go, and on
    // timeout say which helper objects are left and in what state.
    wait_seen("helper jobs and pods to be gone", HELPER_GONE_TIMEOUT, Duration::from_millis(500), || {
        let helper_jobs = world
            .api
            .list(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs?labelSelector=theseus.dev%2Frole"))?;
        let pods = world.api.list(&format!("/api/v1/namespaces/{ns}/pods"))?;
        let helper_pods: Vec<&Value> = pods
            .iter()
            .filter(|p| {
                p["metadata"]["labels"]["theseus.dev/role"].is_string()
                    || p["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("theseus-ship-"))
            })
            .collect();
        if helper_jobs.is_empty() && helper_pods.is_empty() {
            return Ok(Ok(()));
        }
        Ok(Err(describe_left(&helper_jobs, &helper_pods)))
    })?;
    let jobs = names(&world.api.list(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"))?);
    // A run's Secret, its coordinator Service and its own files' ConfigMap are owned by its
    // vcjob: none may outlive it.
    for kind in ["secrets", "services", "configmaps"] {
        let objects = world.api.list(&format!("/api/v1/namespaces/{ns}/{kind}?labelSelector=theseus.dev%2Frun-id"))?;
        let orphans: Vec<String> = objects
            .iter()
            .filter(|s| {
                let owners = s["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
                !owners.iter().any(|o| o["name"].as_str().is_some_and(|n| jobs.iter().any(|j| j == n)))
            })
            .filter_map(|s| s["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        ensure!(orphans.is_empty(), "{kind} of theseus without a live vcjob: {orphans:?}");
    }
    Ok(())
}

/// What is left of helpers, one line: `vcjob NAME (phase)`, `pod NAME (phase, terminating)`.
fn describe_left(jobs: &[Value], pods: &[&Value]) -> String {
    let mut left = Vec::new();
    for job in jobs {
        let phase = job["status"]["state"]["phase"].as_str().unwrap_or("no phase");
        left.push(format!("vcjob {} ({phase})", job["metadata"]["name"].as_str().unwrap_or("?")));
    }
    for pod in pods {
        let phase = pod["status"]["phase"].as_str().unwrap_or("no phase");
        let deleting = if pod["metadata"]["deletionTimestamp"].is_string() { ", terminating" } else { "" };
        left.push(format!("pod {} ({phase}{deleting})", pod["metadata"]["name"].as_str().unwrap_or("?")));
    }
    left.join(", ")
}

/// `theseus submit --dry-run` for the e2e host, fed to `kubectl apply --validate=strict
/// --dry-run=server -f -`: kubectl finds in the simulator's `/openapi/v3` that the server
/// validates fields, and the simulator checks every manifest as Volcano and the API server
/// would (schema, unknown fields, admission), storing nothing.
fn kubectl_validates_the_dry_run(world: &World, server: &str) -> Result<()> {
    use std::io::Write as _;
    let manifests = world.theseus_ok(&[
        "submit",
        "e2e-manifests",
        "jax.yaml",
        "--code",
        ".",
        "--host",
        super::HOST,
        "--chip",
        "h100",
        "-n",
        "8",
        "--secret-env",
        "E2E_TOKEN",
        "--dry-run",
    ])?;
    let mut child = world
        .kubectl_sim(server)
        .args(["apply", "--validate=strict", "--dry-run=server", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("cannot run kubectl")?;
    child.stdin.take().context("no stdin")?.write_all(manifests.as_bytes())?;
    let out = child.wait_with_output()?;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    ensure!(out.status.success(), "kubectl apply --validate=strict refused theseus's manifests:\n{stdout}{stderr}");
    ensure!(stdout.matches("(server dry run)").count() >= 3, "helper job, Secret and job expected:\n{stdout}");
    Ok(())
}

/// `kubectl --server URL get vcjob,pods -A`, when kubectl is installed (`Ok(false)` if not).
/// With `jax_ran`, the output must list scenario 1's job and pods.
fn kubectl_against_sim(world: &World, server: &str, jax_ran: bool) -> Result<bool> {
    let mut cmd = world.kubectl_sim(server);
    let out = match cmd.args(["get", "vcjob,pods", "-A"]).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).context("cannot run kubectl"),
    };
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    ensure!(out.status.success(), "kubectl failed ({}):\n{stdout}{stderr}", out.status);
    let needles: &[&str] = if jax_ran {
        &["NAMESPACE", "job.batch.volcano.sh/general-default-e2e-jax-", "pod/general-default-e2e-jax-"]
    } else {
        &[]
    };
    for needle in needles {
        ensure!(stdout.contains(needle), "`{needle}` missing from kubectl's output:\n{stdout}");
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_message_counts_only_when_it_names_what_is_missing() {
        for named in [
            "waiting for resources: the scheduler cannot place the whole gang: 0/2 nodes are unavailable: 2 Insufficient nvidia.com/gpu",
            "waiting: Unschedulable on general-default-e2e-too-big-1-0f3c: resource in cluster is overused: nvidia.com/gpu overused",
            "not admitted by Volcano: queue resource quota insufficient: nvidia.com/gpu insufficient",
            "waiting: Unschedulable on pg-x: 1/2 tasks in gang unschedulable",
        ] {
            assert!(names_what_is_missing(named), "{named}");
        }
        for vague in [
            "",
            "waiting for Volcano to admit the gang of 2 pods (no pods yet, PodGroup Pending)",
            "vcjob phase Pending",
        ] {
            assert!(!names_what_is_missing(vague), "{vague}");
        }
    }

    #[test]
    fn a_missing_kubectl_fails_only_when_required() {
        assert!(kubectl_verdict(Ok(true), true).1);
        let (line, ok) = kubectl_verdict(Ok(false), false);
        assert!(ok && line.starts_with("NOT RUN"), "{line}");
        let (line, ok) = kubectl_verdict(Ok(false), true);
        assert!(!ok && line.starts_with("FAIL") && line.contains("apt-get install kubectl"), "{line}");
        assert!(!kubectl_verdict(Err(anyhow::anyhow!("boom")), false).1);
    }

    #[test]
    fn what_is_left_names_each_helper_and_its_state() {
        let job =
            serde_json::json!({"metadata": {"name": "theseus-ship-a"}, "status": {"state": {"phase": "Running"}}});
        let pod = serde_json::json!({"metadata": {"name": "theseus-ship-a-ship-0", "deletionTimestamp": "2026-11-24T15:00:00Z"}, "status": {"phase": "Running"}});
        assert_eq!(
            describe_left(&[job], &[&pod]),
            "vcjob theseus-ship-a (Running), pod theseus-ship-a-ship-0 (Running, terminating)"
        );
    }
}
