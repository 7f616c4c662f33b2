//! The backend conformance suite: `check_*` functions that every backend's tests call with a
//! [`Harness`] for that backend. The local backend runs it in core; the SSH, Slurm and Volcano
//! backends run it against their real (or simulated) targets.
//!
//! Each check submits a small Python job (see [`JOB_PY`]) and asserts what a user relies on:
//! completion, exit codes, logs, environment and config delivery, cancellation, and the
//! optional interactive parts (a port through `connect_port`, a command through `shell`, a
//! file through `sync`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

use crate::Result;
use crate::backend::{DynBackend, EnvVar, JobHandle, JobState, JobStatus, LogOptions, PreparedJob, SubmitOptions};
use crate::bootstrap::{self, BootstrapInput};
use crate::config::HostKind;
use crate::job::{Distributed, Entrypoint, Experiment, JobIdentity};
use crate::snapshot::{Snapshot, SnapshotMode};
use crate::solver::Plan;

/// The job every check runs. `python job.py MODE ...`.
pub const JOB_PY: &str = r#"
import json, os, subprocess, sys, time
mode = sys.argv[1]
if mode == "ok":
    cfg = json.load(open(os.environ["THESEUS_CONFIG"]))
    print("conformance: ok", cfg.get("greeting"), flush=True)
elif mode == "fail":
    print("conformance: failing with", sys.argv[2], flush=True)
    sys.exit(int(sys.argv[2]))
elif mode == "count":
    for i in range(int(sys.argv[2])):
        print("conformance: line", i, flush=True)
        time.sleep(0.2)
elif mode == "sleep":
    child = subprocess.Popen(["sleep", "600"])
    print("conformance: started", child.pid, flush=True)
    child.wait()
elif mode == "serve":
    import socket
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", int(sys.argv[2])))
    server.listen(8)
    print("conformance: serving", flush=True)
    while True:
        conn, _ = server.accept()
        conn.sendall(b"conformance-port\n")
        conn.close()
elif mode == "last":
    print("conformance: first", flush=True)
    time.sleep(float(sys.argv[2]))
    sys.stdout.write("conformance: last\n")
    sys.stdout.flush()
    os._exit(0)
elif mode == "env":
    names = sys.argv[2:]
    out = {"env": {n: os.environ.get(n) for n in names}, "config": json.load(open(os.environ["THESEUS_CONFIG"]))}
    print("conformance-env:", json.dumps(out, ensure_ascii=True), flush=True)
"#;

/// Tells whether processes of a job are still alive on the backend's target.
#[async_trait]
pub trait ProcessProbe: Send + Sync {
    /// Number of live processes of the job.
    async fn alive(&self, handle: &JobHandle) -> Result<usize>;
}

/// What the checks need to know about a backend.
pub struct Harness {
    /// The backend under test.
    pub backend: Arc<DynBackend>,
    /// A plan for a one-process CPU job on the backend's host.
    pub plan: Plan,
    /// Counts the job's live processes on the target.
    pub probe: Arc<dyn ProcessProbe>,
    /// How long a job may take to finish.
    pub timeout: Duration,
}

/// A plan for `processes` CPU processes on one node of `host` (of kind `kind`, in a cluster of
/// the same name): what the checks run.
pub fn cpu_plan(host: &str, kind: HostKind, processes: u32) -> Plan {
    Plan {
        host: host.into(),
        kind,
        cluster: host.into(),
        chip: None,
        nodes: 1,
        chips_per_node: 0,
        processes_per_node: processes,
        total_chips: 0,
        placement: Default::default(),
        placement_text: String::new(),
        queued: false,
        notes: vec![],
        considered: vec![],
    }
}

/// Builds a prepared job that runs `python job.py <args>` from a fresh snapshot of [`JOB_PY`].
pub async fn prepare(
    h: &Harness,
    name: &str,
    args: &[&str],
    env: Vec<EnvVar>,
    config: serde_json::Value,
) -> Result<(PreparedJob, tempfile_dir::TempDir)> {
    let dir = tempfile_dir::TempDir::new(name)?;
    std::fs::write(dir.path().join("job.py"), JOB_PY).map_err(|e| crate::Error::io("write", dir.path(), e))?;
    let snapshot = Snapshot::collect(dir.path(), SnapshotMode::Dirty)?;
    let identity = JobIdentity::new(name, Some("conformance"), None);
    let mut words = vec!["python".to_owned(), "job.py".to_owned()];
    words.extend(args.iter().map(|s| s.to_string()));
    let experiment = Experiment {
        entrypoint: Entrypoint::Words(words.clone()),
        env: env.iter().map(|v| (v.name.clone(), v.value.clone())).collect(),
        secret_env: env.iter().filter(|v| v.secret).map(|v| v.name.clone()).collect(),
        config: config.clone(),
        ..Experiment::default()
    };
    let layout = h.backend.layout(&identity, &h.plan)?;
    let input = BootstrapInput::for_layout(identity.clone(), &layout, env.clone(), words, Distributed::None, config);
    let bootstrap = bootstrap::render(&input)?;
    let job = PreparedJob { identity, experiment, env, plan: h.plan.clone(), snapshot, bootstrap };
    Ok((job, dir))
}

/// Polls `status` until the job is terminal or the harness timeout passes.
pub async fn wait_terminal(h: &Harness, handle: &JobHandle) -> JobStatus {
    let deadline = tokio::time::Instant::now() + h.timeout;
    loop {
        let status = h.backend.status(handle).await.expect("status works while the job exists");
        if status.state.is_terminal() {
            return status;
        }
        assert!(tokio::time::Instant::now() < deadline, "job did not finish within {:?}: {status:?}", h.timeout);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn all_logs(h: &Harness, handle: &JobHandle, follow: bool) -> Vec<String> {
    let stream = h.backend.logs(handle, &LogOptions { follow, rank: None }).await.expect("logs open");
    let lines = tokio::time::timeout(h.timeout, stream.collect::<Vec<_>>()).await.expect("logs end in time");
    lines.into_iter().map(|l| l.expect("log line").text).collect()
}

/// A job that exits 0 ends `completed` with exit code 0, and its output is in the logs.
pub async fn check_submit_runs_to_completion(h: &Harness) {
    let (job, _dir) = prepare(h, "conf-ok", &["ok"], vec![], serde_json::json!({"greeting": "hello"})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let status = wait_terminal(h, &handle).await;
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}");
    let logs = all_logs(h, &handle, false).await;
    assert!(logs.iter().any(|l| l == "conformance: ok hello"), "logs: {logs:?}");
}

/// A job that exits 7 ends `failed` with exit code 7.
pub async fn check_failure_reports_exit_code(h: &Harness) {
    let (job, _dir) = prepare(h, "conf-fail", &["fail", "7"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let status = wait_terminal(h, &handle).await;
    assert_eq!((status.state, status.exit_code), (JobState::Failed, Some(7)), "{status:?}");
}

/// Following the logs yields every line in order and ends when the job ends.
pub async fn check_logs_follow_until_end(h: &Harness) {
    let (job, _dir) = prepare(h, "conf-logs", &["count", "5"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let logs = all_logs(h, &handle, true).await;
    let ours: Vec<_> = logs.iter().filter(|l| l.starts_with("conformance: line")).cloned().collect();
    let expected: Vec<_> = (0..5).map(|i| format!("conformance: line {i}")).collect();
    assert_eq!(ours, expected, "all logs: {logs:?}");
    assert!(h.backend.status(&handle).await.unwrap().state.is_terminal(), "follow ended before the job");
}

/// A follow started while the job is idle ends after the job, although nothing is written to
/// the log after its end, and it has the job's last line, written right before its end (the
/// process exits at once after it).
pub async fn check_follow_keeps_the_last_line_and_ends(h: &Harness) {
    let (job, _dir) = prepare(h, "conf-last", &["last", "2"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let logs = all_logs(h, &handle, true).await;
    let ours: Vec<_> = logs.iter().filter(|l| l.starts_with("conformance: ")).cloned().collect();
    assert_eq!(ours, ["conformance: first", "conformance: last"], "all logs: {logs:?}");
    let status = h.backend.status(&handle).await.unwrap();
    assert_eq!(status.state, JobState::Completed, "the follow ended before the job: {status:?}");
}

/// Environment values (hostile ones included, secrets included) and the config reach the job
/// byte for byte.
pub async fn check_env_and_config_reach_the_job(h: &Harness) {
    let hostile = "it's \"quoted\" $(touch /tmp/theseus-pwned) `id` \\ back\nnew line ✓";
    let env = vec![
        EnvVar { name: "CONF_PLAIN".into(), value: hostile.into(), secret: false },
        EnvVar { name: "CONF_SECRET".into(), value: "s3cr3t-$HOME".into(), secret: true },
    ];
    let config = serde_json::json!({"text": hostile, "n": 3, "list": [1, "two"]});
    let (job, _dir) = prepare(h, "conf-env", &["env", "CONF_PLAIN", "CONF_SECRET"], env, config.clone()).await.unwrap();
    assert!(
        job.bootstrap.files.iter().all(|f| !f.contents.contains("s3cr3t")),
        "secret values never appear in rendered files"
    );
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let status = wait_terminal(h, &handle).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    let logs = all_logs(h, &handle, false).await;
    let line = logs
        .iter()
        .find_map(|l| l.strip_prefix("conformance-env: "))
        .unwrap_or_else(|| panic!("no env line in {logs:?}"));
    let seen: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(seen["env"]["CONF_PLAIN"], hostile);
    assert_eq!(seen["env"]["CONF_SECRET"], "s3cr3t-$HOME");
    assert_eq!(seen["config"], config);
    assert!(!Path::new("/tmp/theseus-pwned").exists(), "a value was executed by a shell");
}

/// Cancel stops every process of a running job (children included) and the job reads `cancelled`.
pub async fn check_cancel_stops_all_processes(h: &Harness) {
    let (job, _dir) = prepare(h, "conf-cancel", &["sleep"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    let mut stream = h.backend.logs(&handle, &LogOptions { follow: true, rank: None }).await.unwrap();
    let started = tokio::time::timeout(h.timeout, async {
        while let Some(line) = stream.next().await {
            if line.unwrap().text.starts_with("conformance: started") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(started, "job never printed that it started");
    assert!(h.probe.alive(&handle).await.unwrap() >= 2, "the job and its child run before cancel");
    let status = h.backend.cancel(&handle).await.expect("cancel");
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    assert_eq!(h.probe.alive(&handle).await.unwrap(), 0, "no process of the job is left after cancel");
    // Backends that delete a cancelled job (Volcano) answer NotFound; others still know it.
    match h.backend.status(&handle).await {
        Ok(status) => assert_eq!(status.state, JobState::Cancelled, "{status:?}"),
        Err(crate::Error::NotFound { .. }) => {}
        Err(e) => panic!("status after cancel: {e}"),
    }
}

/// Status of a job the backend never ran is an error, not a panic or a made-up state.
pub async fn check_unknown_job_is_an_error(h: &Harness) {
    let (job, _dir) = prepare(h, "conf-unknown", &["ok"], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    wait_terminal(h, &handle).await;
    let mut bogus = handle.clone();
    bogus.id = "no-such-run".into();
    if let Some(obj) = bogus.data.as_object_mut() {
        for v in obj.values_mut() {
            if let Some(s) = v.as_str() {
                *v = serde_json::Value::String(s.replace(&handle.id, "no-such-run"));
            }
        }
    }
    assert!(h.backend.status(&bogus).await.is_err(), "status of an unknown job must fail");
}

/// Waits until the job of `stream` prints a line starting with `marker`.
async fn wait_for_line(h: &Harness, handle: &JobHandle, marker: &str) {
    let mut stream = h.backend.logs(handle, &LogOptions { follow: true, rank: None }).await.expect("logs open");
    let seen = tokio::time::timeout(h.timeout, async {
        while let Some(line) = stream.next().await {
            if line.is_ok_and(|l| l.text.starts_with(marker)) {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(seen, "the job never printed `{marker}`");
}

/// A running job is reachable: a port it listens on through `connect_port` (retried while the
/// backend's tunnel learns of the listener), a command in its code dir with its variables and
/// exit code through `shell`, and a file added locally through `sync`, which then is there for
/// `shell` to read. Backends without these (their default `NotSupported`) fail the check.
pub async fn check_interactive_parts(h: &Harness) {
    use tokio::io::AsyncReadExt as _;
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let (job, dir) =
        prepare(h, "conf-interactive", &["serve", &port.to_string()], vec![], serde_json::json!({})).await.unwrap();
    let handle = h.backend.submit(&job, &SubmitOptions::default()).await.expect("submit");
    wait_for_line(h, &handle, "conformance: serving").await;

    // The port, through the backend's tunnel.
    let deadline = tokio::time::Instant::now() + h.timeout;
    let greeting = loop {
        let answer = async {
            let mut stream = h.backend.connect_port(&handle, 0, port).await?;
            let mut got = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await;
            Ok::<_, crate::Error>(String::from_utf8_lossy(&got).into_owned())
        };
        match answer.await {
            Ok(text) if text.contains("conformance-port") => break text,
            other => assert!(tokio::time::Instant::now() < deadline, "port {port} never answered: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(greeting, "conformance-port\n");

    // A command, its output and exit code.
    let command =
        ["sh", "-c", "echo \"run=$THESEUS_RUN_ID rank=$RANK\"; ls job.py; exit 5"].map(str::to_owned).to_vec();
    let (out, code) = run_shell(h, &handle, command.clone()).await;
    assert_eq!(code, 5, "{out}");
    assert!(out.contains(&format!("run={} rank=0", job.identity.run_id)) && out.contains("job.py"), "{out}");

    // A file added locally arrives; nothing else moves.
    std::fs::write(dir.path().join("added.txt"), "synced by the conformance suite\n").unwrap();
    let snapshot = Snapshot::collect(dir.path(), SnapshotMode::Dirty).unwrap();
    let report = h.backend.sync(&handle, &snapshot, &crate::backend::SyncOptions::default()).await.expect("sync");
    assert_eq!(
        (report.diff.added.as_slice(), report.diff.changed.len(), report.diff.deleted.len()),
        (["added.txt".to_owned()].as_slice(), 0, 0)
    );
    let (out, code) = run_shell(h, &handle, ["cat", "added.txt"].map(str::to_owned).to_vec()).await;
    assert_eq!((out.as_str(), code), ("synced by the conformance suite\n", 0));

    h.backend.cancel(&handle).await.expect("cancel");
    assert!(
        h.backend.connect_port(&handle, 0, port).await.is_err() || !port_answers(h, &handle, port).await,
        "no tunnel to a cancelled job"
    );
}

/// Whether `port` of the job still greets.
async fn port_answers(h: &Harness, handle: &JobHandle, port: u16) -> bool {
    use tokio::io::AsyncReadExt as _;
    let Ok(mut stream) = h.backend.connect_port(handle, 0, port).await else { return false };
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut got)).await;
    !got.is_empty()
}

/// Runs `command` through the backend's `shell` without a terminal; its stdout and exit code.
async fn run_shell(h: &Harness, handle: &JobHandle, command: Vec<String>) -> (String, i32) {
    use crate::session::{ShellRequest, ShellSession};
    use tokio::io::AsyncReadExt as _;
    let request = ShellRequest { rank: 0, command, tty: None };
    match h.backend.shell(handle, &request).await.expect("shell") {
        ShellSession::Program(p) => {
            let mut cmd = tokio::process::Command::new(&p.program);
            cmd.args(&p.args).envs(p.env.iter().map(|(k, v)| (k, v))).stdin(std::process::Stdio::null());
            if let Some(dir) = &p.cwd {
                cmd.current_dir(dir);
            }
            let out = tokio::time::timeout(h.timeout, cmd.output()).await.expect("in time").expect("runs");
            (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code().unwrap_or(-1))
        }
        ShellSession::Attached(mut a) => {
            drop(a.stdin);
            let mut out = Vec::new();
            let (read, code) = tokio::time::timeout(h.timeout, async {
                let read = a.stdout.read_to_end(&mut out).await;
                (read, a.exit.await)
            })
            .await
            .expect("in time");
            read.expect("stdout");
            (String::from_utf8_lossy(&out).into_owned(), code.expect("an exit code"))
        }
    }
}

/// Runs every check in turn.
pub async fn run_all(h: &Harness) {
    check_submit_runs_to_completion(h).await;
    check_failure_reports_exit_code(h).await;
    check_logs_follow_until_end(h).await;
    check_env_and_config_reach_the_job(h).await;
    check_cancel_stops_all_processes(h).await;
    check_unknown_job_is_an_error(h).await;
    check_interactive_parts(h).await;
}

/// A tiny temp dir (the suite is used from other crates' tests, without dev-dependencies).
pub mod tempfile_dir {
    use std::path::{Path, PathBuf};

    /// A directory removed on drop.
    #[derive(Debug)]
    pub struct TempDir(PathBuf);

    impl TempDir {
        /// Creates a fresh dir under the system temp dir.
        pub fn new(prefix: &str) -> crate::Result<TempDir> {
            let path = std::env::temp_dir().join(format!("theseus-{prefix}-{}", crate::job::new_run_id()));
            std::fs::create_dir_all(&path).map_err(|e| crate::Error::io("create", &path, e))?;
            Ok(TempDir(path))
        }

        /// The path.
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// What a host type's rank wiring ([`bootstrap::Wiring`]) found, run alone in bash as the
/// bootstrap runs it (`theseus_wire` with `theseus_die` defined, after the bootstrap's defaults:
/// rank 0 of 1, local rank 0) with `env` added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wired {
    /// `theseus_rank`, `theseus_count`, `theseus_local_rank` and `theseus_first_host`, as the
    /// wiring left them; empty when it died.
    pub rank: String,
    /// See [`Wired::rank`].
    pub count: String,
    /// See [`Wired::rank`].
    pub local_rank: String,
    /// See [`Wired::rank`].
    pub first_host: String,
    /// Why it died (`theseus_die`'s message), if it did.
    pub died: Option<String>,
}

/// Runs `wiring` in bash with `env` added to this process's environment (minus the variables
/// in `unset`); see [`Wired`].
pub fn run_wiring(wiring: &bootstrap::Wiring, env: &[(&str, &str)], unset: &[&str]) -> Wired {
    let script = format!(
        "theseus_die() {{ echo \"$*\" >&2; exit 2; }}\ntheseus_wire() {{\n{}\n}}\n\
         theseus_rank=0 theseus_count=1 theseus_local_rank=0 theseus_first_host=\ntheseus_wire\n\
         printf '%s\\n' \"$theseus_rank\" \"$theseus_count\" \"$theseus_local_rank\" \"$theseus_first_host\"",
        wiring.shell
    );
    // By path: `env` may set a PATH without bash on it.
    let bash = if Path::new("/bin/bash").exists() { "/bin/bash" } else { "bash" };
    let mut cmd = std::process::Command::new(bash);
    cmd.args(["-c", &script]).envs(env.iter().copied());
    for name in unset {
        cmd.env_remove(name);
    }
    let out = cmd.output().expect("bash runs");
    if !out.status.success() {
        let died = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Wired {
            rank: String::new(),
            count: String::new(),
            local_rank: String::new(),
            first_host: String::new(),
            died: Some(died),
        };
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines().map(str::to_owned);
    let mut next = || lines.next().unwrap_or_default();
    Wired { rank: next(), count: next(), local_rank: next(), first_host: next(), died: None }
}
