//! Runs whose vcjob Volcano's garbage collector deleted after its `ttlSecondsAfterFinished`
//! (the simulator collects it as Volcano does): `list`, `status` and `logs` still answer, from
//! the ledger and the run's files on the PVC, say that the job is gone, and leave no helper pod
//! behind; `submit --follow` and `logs -f` of a job collected as it ends finish with its end.

use std::time::{Duration, Instant};

use crate::volcano::SimWorld;
use crate::{TestContext, text};

/// Sets `ttl_seconds_after_finished` on the `k8s` host (the last key of the dispatch config).
fn set_ttl(ctx: &TestContext, ttl: &str) {
    let path = ctx.home().join(".theseus.yaml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&format!("    ttl_seconds_after_finished: {ttl}\n"));
    std::fs::write(path, config).unwrap();
}

/// The vcjobs and pods the simulator holds.
fn left(world: &SimWorld) -> (Vec<String>, Vec<String>) {
    let names = |api: &str, kind: &str| -> Vec<String> {
        world.sim.objects(api, kind).iter().map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_owned()).collect()
    };
    (names("batch.volcano.sh/v1alpha1", "Job"), names("v1", "Pod"))
}

/// Waits until the simulator holds no vcjob and no pod (the gang job collected after its TTL,
/// the helpers deleted once they were done).
fn wait_collected(world: &SimWorld) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (jobs, pods) = left(world);
        if jobs.is_empty() && pods.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "never collected: jobs {jobs:?}, pods {pods:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn submit(ctx: &TestContext, world: &SimWorld, name: &str, extra: &[&str]) -> std::process::Output {
    let exp = world.exp("exp.yaml");
    let mut args = vec!["submit", name, &exp, "--code", world.code(), "--host", "k8s", "--chip", "cpu"];
    args.extend_from_slice(extra);
    ctx.run(&args)
}

#[test]
fn list_status_and_logs_of_a_collected_run_answer_from_the_ledger_and_the_pvc() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    set_ttl(&ctx, "1");
    let out = submit(&ctx, &world, "brief", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run_id = text(&out.stdout).trim().to_owned();
    // Nobody looked while it ran: the ledger still has it pending when its vcjob is collected.
    wait_collected(&world);

    let list = ctx.run(&["list", "--output", "json"]);
    assert!(list.status.success(), "{}", text(&list.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let row = rows.as_array().unwrap().iter().find(|r| r["identity"]["run_id"] == run_id.as_str()).expect("listed");
    assert_eq!((row["state"].as_str(), row["exit_code"].as_i64()), (Some("completed"), Some(0)), "{row}");
    let said = row["message"].as_str().unwrap_or_default();
    assert!(said.contains("is gone: collected 1 s after it finished (ttlSecondsAfterFinished 1)"), "{said}");
    assert!(said.contains("every rank completed, as ") && said.contains("/status/"), "{said}");
    // The helper that read the files was deleted: its pod goes too.
    wait_collected(&world);

    let status = ctx.run(&["status", "brief"]);
    let stdout = text(&status.stdout);
    assert!(status.status.success(), "{stdout}{}", text(&status.stderr));
    assert!(stdout.contains(&format!("brief {run_id} on k8s: completed (exit code 0)")), "{stdout}");
    assert!(stdout.contains("last known state (as of ") && stdout.contains("no longer exists"), "{stdout}");
    assert!(stdout.contains("ttlSecondsAfterFinished, here 1 s"), "says why the job is gone: {stdout}");

    let logs = ctx.run(&["logs", "brief"]);
    let stdout = text(&logs.stdout);
    assert!(logs.status.success(), "{stdout}{}", text(&logs.stderr));
    assert!(stdout.contains("no longer exists; its log file on the PVC"), "{stdout}");
    assert!(stdout.contains("rank 0 of 1"), "the job's own line, from the PVC: {stdout}");
    let by_rank = ctx.run(&["logs", "brief", "--rank", "0"]);
    assert!(!by_rank.status.success());
    assert!(text(&by_rank.stderr).contains("without --rank 0"), "{}", text(&by_rank.stderr));

    let follow = ctx.run(&["logs", "-f", "brief"]);
    let (stdout, stderr) = (text(&follow.stdout), text(&follow.stderr));
    assert!(follow.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("rank 0 of 1") && stderr.contains("completed (exit code 0)"), "{stdout}{stderr}");
    // No helper pod is left behind.
    wait_collected(&world);
    drop(world);
}

#[test]
fn a_follow_whose_job_is_collected_as_it_ends_reports_its_end() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    // Collected the moment it finishes.
    set_ttl(&ctx, "0");
    let out = submit(&ctx, &world, "instant", &["--follow"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    // Its pods may go (with their logs) before the follow read them to the end: then it says so.
    assert!(stdout.contains("rank 0 of 1") || stdout.contains("may be missing here"), "{stdout}");
    assert!(stderr.contains("completed (exit code 0)"), "{stderr}");
    wait_collected(&world);
    let status = ctx.run(&["status", "instant", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["status"]["state"], "completed", "{v}");
    let logs = text(&ctx.run(&["logs", "instant"]).stdout);
    assert!(logs.contains("rank 0 of 1"), "the whole log, from the PVC: {logs}");
}

#[test]
fn the_ttl_is_on_every_job_by_default_and_shown_in_the_dry_run() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    let dry = ctx.run(&["submit", "dry", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "cpu", "--dry-run"]);
    let stdout = text(&dry.stdout);
    assert!(dry.status.success(), "{stdout}{}", text(&dry.stderr));
    assert!(stdout.contains("ttlSecondsAfterFinished: 86400"), "a day by default: {stdout}");
    assert!(stdout.contains("Volcano deletes it and its pods 86400 s after it finishes"), "{stdout}");
    assert!(stdout.contains("ttlSecondsAfterFinished: 300"), "the helper's own: {stdout}");

    set_ttl(&ctx, "never");
    let dry = ctx.run(&["submit", "dry", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "cpu", "--dry-run"]);
    let stdout = text(&dry.stdout);
    assert!(stdout.contains("kept after it finishes (ttl_seconds_after_finished: never)"), "{stdout}");
    assert_eq!(stdout.matches("ttlSecondsAfterFinished").count(), 1, "only the helper's: {stdout}");

    let path = ctx.home().join(".theseus.yaml");
    let config = std::fs::read_to_string(&path)
        .unwrap()
        .replace("ttl_seconds_after_finished: never", "ttl_seconds_after_finished: soon");
    std::fs::write(&path, config).unwrap();
    let out = ctx.run(&["config", "check"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(".theseus.yaml")
            && stderr.contains("hosts.k8s.ttl_seconds_after_finished")
            && stderr.contains("\"soon\"")
            && stderr.contains("`never` to keep finished vcjobs"),
        "{stderr}"
    );
    drop(world);
}

#[test]
fn a_failed_run_collected_before_anyone_looked_is_failed_with_its_exit_code() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    set_ttl(&ctx, "1s");
    let code = std::path::Path::new(world.code());
    std::fs::write(code.join("fail.py"), "import sys\nprint('failing now', flush=True)\nsys.exit(3)\n").unwrap();
    std::fs::write(code.join("fail.yaml"), "entrypoint: python fail.py\n").unwrap();
    let exp = world.exp("fail.yaml");
    let out = ctx.run(&["submit", "broken", &exp, "--code", world.code(), "--host", "k8s", "--chip", "cpu"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_collected(&world);
    let status = ctx.run(&["status", "broken", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!((v["status"]["state"].as_str(), v["status"]["exit_code"].as_i64()), (Some("failed"), Some(3)), "{v}");
    let said = v["status"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("is gone: collected 1 s after it finished") && said.contains("rank 0 failed"), "{said}");
    let logs = text(&ctx.run(&["logs", "broken"]).stdout);
    assert!(logs.contains("failing now") && logs.contains("the job exited with 3"), "{logs}");
    wait_collected(&world);
}
