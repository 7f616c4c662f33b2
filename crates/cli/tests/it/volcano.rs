//! The `theseus` binary against a Volcano cluster simulator reached through a kubeconfig:
//! plan from live queue and node capacity, submit (helper, shipping, gang job, ledger), status,
//! logs, cancel, gc, and a dry run that needs no cluster at all.

use std::path::Path;

use theseus_kube_sim::{NodeConfig, Sim, SimConfig};

use crate::{TestContext, text};

pub(crate) struct SimWorld {
    // Held for their lifetime only. Field order matters: the simulator stops before the
    // runtime that drives it.
    pub(crate) sim: Sim,
    _runtime: tokio::runtime::Runtime,
    _pvc: tempfile::TempDir,
    code: tempfile::TempDir,
}

/// Every object the binary sent drew no `Warning` (no field the CRDs do not know).
impl Drop for SimWorld {
    fn drop(&mut self) {
        let warnings = self.sim.warnings();
        if !std::thread::panicking() {
            assert!(warnings.is_empty(), "the simulator warned about what theseus sent: {warnings:?}");
        }
    }
}

impl SimWorld {
    pub(crate) fn start(ctx: &TestContext) -> SimWorld {
        SimWorld::start_with(ctx, None)
    }

    /// With `authz`, the simulator checks bearer tokens and RBAC, and the kubeconfig carries
    /// the given token. The simulator serves HTTPS; the kubeconfig trusts its CA.
    pub(crate) fn start_with(ctx: &TestContext, authz: Option<(theseus_kube_sim::Authz, &str)>) -> SimWorld {
        SimWorld::start_at(ctx, authz, None)
    }

    /// As [`SimWorld::start_with`], listening on `listen` (another loopback address) under the
    /// name `name` too (its certificate holds it).
    pub(crate) fn start_at(
        ctx: &TestContext,
        authz: Option<(theseus_kube_sim::Authz, &str)>,
        listen: Option<(&str, std::net::IpAddr)>,
    ) -> SimWorld {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let token = authz.as_ref().map(|(_, token)| (*token).to_owned());
        let config = SimConfig {
            nodes: (0..2).map(|i| NodeConfig::new(&format!("gpu-node-{i}"), 4)).collect(),
            authz: authz.map(|(authz, _)| authz),
            listen: listen.map_or(SimConfig::default().listen, |(_, ip)| ip),
            tls_names: listen.map(|(name, _)| name.to_owned()).into_iter().collect(),
            ..SimConfig::default()
        };
        let sim = runtime.block_on(Sim::start(config)).expect("simulator starts");
        let pvc = tempfile::tempdir().unwrap();
        write_kubeconfig(ctx.home(), &sim, token.as_deref());
        write_dispatch_config(ctx.home(), pvc.path());
        let code = tempfile::tempdir().unwrap();
        std::fs::write(
            code.path().join("job.py"),
            "import os, sys, time\n\
             print('rank', os.environ.get('VC_TASK_INDEX'), 'of', os.environ.get('THESEUS_NUM_PROCESSES'), flush=True)\n\
             if len(sys.argv) > 1 and sys.argv[1] == 'sleep':\n    time.sleep(600)\n",
        )
        .unwrap();
        std::fs::write(code.path().join("exp.yaml"), "entrypoint: python job.py\n").unwrap();
        std::fs::write(code.path().join("sleep.yaml"), "entrypoint: python job.py sleep\n").unwrap();
        SimWorld { sim, _runtime: runtime, _pvc: pvc, code }
    }

    /// Runs `future` on the simulator's runtime (for tests that talk to it directly).
    pub(crate) fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self._runtime.block_on(future)
    }

    pub(crate) fn code(&self) -> &str {
        self.code.path().to_str().unwrap()
    }

    pub(crate) fn exp(&self, name: &str) -> String {
        self.code.path().join(name).display().to_string()
    }
}

/// What kind writes: the simulator's HTTPS URL and `certificate-authority-data`, and the
/// user's token (none without RBAC).
fn write_kubeconfig(home: &Path, sim: &Sim, token: Option<&str>) {
    let dir = home.join(".kube");
    std::fs::create_dir_all(&dir).unwrap();
    let user = token.map_or_else(|| "{}".to_owned(), |t| format!("{{token: {t}}}"));
    std::fs::write(dir.join("config"), sim.kubeconfig(&user, "default")).unwrap();
}

fn write_dispatch_config(home: &Path, pvc: &Path) {
    let pvc = pvc.display();
    std::fs::write(
        home.join(".theseus.yaml"),
        format!(
            "clusters:\n  sim:\n    root: {pvc}\n    work: {pvc}/work\n    log: {pvc}/logs\n    status: {pvc}/status\n\
             hosts:\n  k8s:\n    type: volcano\n    cluster: sim\n    namespace: default\n    queue: default\n\
             \x20   image: theseus-test:local\n    pvc_name: work\n    pvc_mount_path: {pvc}\n    chips: {{h100: 4}}\n"
        ),
    )
    .unwrap();
}

#[test]
fn plan_uses_live_capacity_and_a_two_node_job_runs_end_to_end() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);

    let plan = ctx.run(&[
        "plan",
        "p",
        &world.exp("exp.yaml"),
        "--host",
        "k8s",
        "--chip",
        "h100",
        "-n",
        "8",
        "--output",
        "json",
    ]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["plan"]["nodes"], 2, "{plan}");
    assert_eq!(plan["plan"]["chips_per_node"], 4, "{plan}");
    let too_big = ctx.run(&["plan", "p", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "h100", "-n", "16"]);
    assert!(!too_big.status.success(), "16 GPUs do not fit in 8");

    let out = ctx.run(&[
        "submit",
        "pair",
        &world.exp("exp.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "h100",
        "-n",
        "8",
        "--follow",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("[worker-0] rank 0 of 2"), "{stdout}");
    assert!(stdout.contains("[worker-1] rank 1 of 2"), "{stdout}");
    assert!(stderr.contains("waiting for helper pod"), "progress of the helper is shown: {stderr}");
    assert!(stderr.contains("completed (exit code 0)"), "{stderr}");

    let list = ctx.run(&["list", "--output", "json"]);
    let records: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let record = records.as_array().unwrap().iter().find(|r| r["identity"]["name"] == "pair").expect("in the ledger");
    assert_eq!(record["host"], "k8s");
    assert_eq!(record["handle"]["kind"], "volcano");
    let status = ctx.run(&["status", "pair", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["status"]["state"], "completed", "{v}");
    assert_eq!(v["status"]["ranks"].as_array().map(Vec::len), Some(2), "{v}");
    let logs = text(&ctx.run(&["logs", "pair", "--rank", "1"]).stdout);
    assert!(logs.contains("[worker-1] rank 1 of 2") && !logs.contains("worker-0"), "{logs}");

    let gc = ctx.run(&["gc", "--older-than", "0s", "--dry-run", "--output", "json"]);
    assert!(gc.status.success(), "{}", text(&gc.stderr));
    let report: serde_json::Value = serde_json::from_slice(&gc.stdout).unwrap();
    assert_eq!(report[0]["deleted"], serde_json::json!([]), "no helper was left behind: {report}");
    drop(world);
}

#[test]
fn cancel_removes_a_running_job_and_status_remembers_it() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    let out = ctx.run(&[
        "submit",
        "sleepy",
        &world.exp("sleep.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let again = ctx.run(&[
        "submit",
        "sleepy",
        &world.exp("sleep.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
    ]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("--replace"), "{}", text(&again.stderr));

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let status = ctx.run(&["status", "sleepy", "--output", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
        if v["status"]["state"] == "running" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never ran: {v}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let cancel = ctx.run(&["cancel", "sleepy"]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    assert!(text(&cancel.stdout).contains("cancelled"), "{}", text(&cancel.stdout));
    let status = ctx.run(&["status", "sleepy"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert!(
        text(&status.stdout).contains("cancelled") && text(&status.stdout).contains("no longer exists"),
        "{}",
        text(&status.stdout)
    );
    drop(world);
}

#[test]
fn dry_run_prints_the_manifests_without_any_cluster() {
    let ctx = TestContext::new();
    let pvc = tempfile::tempdir().unwrap();
    write_dispatch_config(ctx.home(), pvc.path());
    // No kubeconfig, no cluster: the dry run must not need either.
    let out = ctx
        .cmd()
        .env("MY_TOKEN", "tok-s3cr3t")
        .args([
            "submit",
            "dry",
            "examples/hello/experiment.yaml",
            "--host",
            "k8s",
            "--chip",
            "h100",
            "-n",
            "4",
            "--dry-run",
            "--secret-env",
            "MY_TOKEN",
            "--volcano-image",
            "repo/img:tag",
            "--cpu",
            "12",
            "--mem",
            "100Gi",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stdout.contains("tok-s3cr3t") && !stderr.contains("tok-s3cr3t"), "the secret leaked");
    for needle in
        ["kind: Job", "schedulerName: volcano", "theseus-ship-", "kind: Secret", "<redacted>", "repo/img:tag", "100Gi"]
    {
        assert!(stdout.contains(needle), "`{needle}` missing from:\n{stdout}");
    }
    // What a store hit would create instead: the gang job alone, its pods building the run dir.
    for needle in ["when the code store already holds this code", "no helper job", "theseus-build", "THESEUS_RUN_FILES"]
    {
        assert!(stdout.contains(needle), "`{needle}` missing from:\n{stdout}");
    }
    let bad =
        ctx.run(&["submit", "dry", "examples/hello/experiment.yaml", "--host", "k8s", "--dry-run", "--mem", "64Gx"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("memory") && text(&bad.stderr).contains("64Gx"), "{}", text(&bad.stderr));
}

#[test]
fn an_invalid_quantity_in_the_config_names_the_file_and_key() {
    let ctx = TestContext::new();
    let pvc = tempfile::tempdir().unwrap();
    write_dispatch_config(ctx.home(), pvc.path());
    let path = ctx.home().join(".theseus.yaml");
    let config = std::fs::read_to_string(&path).unwrap() + "    memory: 64Gx\n";
    std::fs::write(&path, config).unwrap();
    let out = ctx.run(&["config", "check"]);
    assert_eq!(out.status.code(), Some(1), "config check exits 1 on an invalid config");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(".theseus.yaml") && stderr.contains("hosts.k8s.memory") && stderr.contains("64Gx"),
        "{stderr}"
    );
}

#[test]
fn ctrl_c_while_waiting_for_the_helper_deletes_it() {
    use std::io::{BufRead as _, BufReader};
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    world.sim.faults().delay_scheduling(Some(std::time::Duration::from_secs(120)));
    let mut child = ctx
        .cmd()
        .args([
            "submit",
            "interrupted",
            &world.exp("exp.yaml"),
            "--code",
            world.code(),
            "--host",
            "k8s",
            "--chip",
            "cpu",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("submit ended before waiting for the helper:\n{seen}");
        }
        seen.push_str(&line);
        if line.contains("waiting for helper pod") {
            break;
        }
    }
    // Only the process this test started is signalled, by its PID.
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(!status.success(), "an interrupted submit fails");
    assert!(rest.contains("interrupted"), "{seen}{rest}");
    world.sim.faults().delay_scheduling(None);
    let gc = ctx.run(&["gc", "--older-than", "0s", "--dry-run"]);
    assert!(gc.status.success(), "{}", text(&gc.stderr));
    assert_eq!(text(&gc.stdout).trim(), "0", "no helper is left: {}", text(&gc.stderr));
    let list = ctx.run(&["list", "--output", "json"]);
    let records: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    // The run was recorded before anything was created, and settled as interrupted.
    let records = records.as_array().unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["state"], "cancelled", "{records:?}");
    assert!(records[0]["message"].as_str().unwrap().contains("interrupted (SIGINT) during submit"), "{records:?}");
}

#[test]
fn a_cluster_mount_is_ignored_for_volcano_hosts_with_a_warning() {
    let ctx = TestContext::new();
    let pvc = tempfile::tempdir().unwrap();
    write_dispatch_config(ctx.home(), pvc.path());
    let path = ctx.home().join(".theseus.yaml");
    let config = std::fs::read_to_string(&path).unwrap().replace("  sim:\n", "  sim:\n    mount: juicefs://meta/vol\n");
    std::fs::write(&path, config).unwrap();
    let out = ctx.run(&["config", "check"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("clusters.sim.mount is ignored") && stderr.contains("k8s"), "{stderr}");
}

#[test]
fn submit_names_the_vcjob_and_a_missing_queue_passes_the_host_over_and_creates_nothing() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    let out =
        ctx.run(&["submit", "where", &world.exp("exp.yaml"), "--code", world.code(), "--host", "k8s", "--chip", "cpu"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr.lines().find(|l| l.contains("kubectl -n")).unwrap_or_else(|| panic!("no kubectl line: {stderr}"));
    assert!(line.contains("vcjob general-default-where-") && line.contains("in namespace default"), "{line}");
    assert!(line.contains("`kubectl -n default get vcjob general-default-where-"), "{line}");

    // The same host with a queue that does not exist: passed over in the plan, with the fix.
    let config_path = ctx.home().join(".theseus.yaml");
    let config = std::fs::read_to_string(&config_path).unwrap();
    std::fs::write(&config_path, config.replace("queue: default", "queue: no-such-queue")).unwrap();
    for chip in [&["--chip", "h100", "-n", "1"][..], &["--chip", "cpu"][..]] {
        let (row, stdout, stderr) = plan_row(&ctx, &world, chip);
        assert!(
            row.contains("passed") && row.contains("\"no-such-queue\" does not exist"),
            "{chip:?}: {stdout}{stderr}"
        );
        assert!(row.contains("kubectl get queues"), "{row}");
        assert!(!stdout.contains("chosen:  k8s"), "{stdout}");
    }
    // `submit --host` to it (no probe with --no-check) fails before anything is created.
    let (code, stderr, writes) = refused_submit(&ctx, &world, "nowhere");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("\"no-such-queue\" does not exist"), "{stderr}");
    assert!(writes.is_empty(), "nothing is created for a missing queue: {writes:?}");
}

/// `plan` of exp.yaml with `chip`: the `k8s` row of the table, stdout and stderr.
fn plan_row(ctx: &TestContext, world: &SimWorld, chip: &[&str]) -> (String, String, String) {
    let exp = world.exp("exp.yaml");
    let mut args = vec!["plan", "p", exp.as_str()];
    args.extend_from_slice(chip);
    let plan = ctx.run(&args);
    let (stdout, stderr) = (text(&plan.stdout), text(&plan.stderr));
    let row = stdout.lines().chain(stderr.lines()).find(|l| l.starts_with("k8s ")).unwrap_or_default().to_owned();
    (row, stdout, stderr)
}

/// `submit NAME --host k8s --chip cpu --no-check`: its exit code, stderr, and every request
/// other than a GET it made.
fn refused_submit(ctx: &TestContext, world: &SimWorld, name: &str) -> (Option<i32>, String, Vec<(String, String)>) {
    let before = world.sim.requests().len();
    let submit = ctx.run(&[
        "submit",
        name,
        &world.exp("exp.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
        "--no-check",
    ]);
    let writes = world.sim.requests()[before..].iter().filter(|(method, _)| method != "GET").cloned().collect();
    (submit.status.code(), text(&submit.stderr), writes)
}

#[test]
fn a_closed_queue_passes_the_host_over_and_submit_to_it_creates_nothing() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    world.sim.put_queue("default", "Closed");
    for chip in [&["--chip", "h100", "-n", "1"][..], &["--chip", "cpu"][..]] {
        let (row, stdout, stderr) = plan_row(&ctx, &world, chip);
        assert!(
            row.contains("passed") && row.contains("\"default\" on cluster \"sim\" is Closed"),
            "{chip:?}: {stdout}{stderr}"
        );
        assert!(row.contains("--action open"), "{row}");
    }
    let (code, stderr, writes) = refused_submit(&ctx, &world, "shut");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is Closed: Volcano admits no job to a queue that is not Open"), "{stderr}");
    assert!(writes.is_empty(), "nothing is created for a closed queue: {writes:?}");

    // Opened again, the same submit goes through.
    world.sim.put_queue("default", "Open");
    let submit =
        ctx.run(&["submit", "shut", &world.exp("exp.yaml"), "--code", world.code(), "--host", "k8s", "--chip", "cpu"]);
    assert!(submit.status.success(), "{}", text(&submit.stderr));
}

#[test]
fn config_check_refuses_cluster_paths_off_the_pvc_of_a_volcano_host() {
    let ctx = TestContext::new();
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "clusters:\n  k8s: {root: /mnt/pvc, work: /scratch/work}\nhosts:\n  kube:\n    type: volcano\n    cluster: k8s\n    \
         namespace: ml\n    queue: q\n    image: img\n    pvc_name: shared\n    pvc_mount_path: /mnt/pvc\n",
    )
    .unwrap();
    for args in [&["config", "check"][..], &["submit", "x", "examples/hello/experiment.yaml", "--chip", "cpu"][..]] {
        let out = ctx.run(args);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("~/.theseus.yaml: clusters.k8s.work: `/scratch/work` is not under `/mnt/pvc`"),
            "{args:?}: names the file, the key and the mount: {stderr}"
        );
        assert!(stderr.contains("use a path under `/mnt/pvc`"), "{args:?}: the fix: {stderr}");
    }
}
