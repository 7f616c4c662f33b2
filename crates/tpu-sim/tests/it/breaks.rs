//! Attempts to break the simulator: two at once, a delete racing a create's worker start,
//! SIGTERM of the binary while a node is CREATING or its workers start. Nothing may be left:
//! no network namespace, no sshd.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Fixture, PARENT, curl};
use crate::workers::{Ssh, client_key, test_user, workers};

fn namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Processes whose command line names `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|s| s.contains(") Z "));
        if cmdline.contains(needle) && !zombie {
            found.push(format!("{name}: {cmdline}"));
        }
    }
    found
}

fn ssh_body(user: &str, public: &str) -> Value {
    json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base", "metadata": {"ssh-keys": format!("{user}:{public}")}})
}

#[tokio::test]
async fn two_simulators_run_side_by_side() {
    let user = test_user();
    let quick = |c: &mut theseus_tpu_sim::SimConfig| c.create_seconds = Duration::from_millis(100);
    let (a, b) = (Fixture::start(quick).await, Fixture::start(quick).await);
    assert_ne!(a.sim.info().prefix, b.sim.info().prefix);
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = client_key(dir.path());
    for fx in [&a, &b] {
        let done = fx.create_node("same", ssh_body(&user, &public)).await;
        assert_eq!(done["response"]["state"], "READY", "{done}");
    }
    let kh_b = dir.path().join("known_hosts_b");
    let list_b = workers(&b, "same", &kh_b).await;
    let ip_b = list_b[0]["ip"].as_str().unwrap().to_owned();
    let ssh_b = Ssh { key, known_hosts: kh_b, proxy: b.sim.info().ssh_proxy.clone().unwrap(), user };
    let prefix_a = a.sim.info().prefix.clone();
    a.sim.shutdown().await;
    assert!(namespaces().iter().all(|n| !n.starts_with(&prefix_a)), "{:?}", namespaces());
    let (code, out) = ssh_b.run(&ip_b, "echo alive").await;
    assert_eq!((code, out.as_str()), (0, "alive"), "the other simulator's worker is untouched");
}

#[tokio::test]
async fn a_delete_racing_the_worker_start_leaves_no_worker() {
    let user = test_user();
    let fx = Fixture::start(|c| {
        c.create_seconds = Duration::ZERO;
        c.delete_seconds = Duration::from_millis(50);
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = client_key(dir.path());
    for (i, delay) in [0u64, 20, 80, 200].into_iter().enumerate() {
        let id = format!("race-{i}");
        let (_, create) = fx.api("POST", &format!("{PARENT}/nodes?nodeId={id}"), Some(ssh_body(&user, &public))).await;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let (status, delete) = fx.api("DELETE", &format!("{PARENT}/nodes/{id}"), None).await;
        assert_eq!(status, 200, "{delete}");
        fx.wait_op(&create).await;
        fx.wait_op(&delete).await;
        // The start may end after the node is gone: wait until its workers are stopped.
        let needle = format!("{}-{id}-", fx.sim.info().prefix);
        for _ in 0..100 {
            if namespaces().iter().all(|n| !n.starts_with(&needle)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(namespaces().iter().all(|n| !n.starts_with(&needle)), "delay {delay}: {:?}", namespaces());
    }
    // Addresses freed by the races are usable again: a new node starts and answers.
    let done = fx.create_node("after", ssh_body(&user, &public)).await;
    assert_eq!(done["response"]["state"], "READY", "{done}");
    let kh = dir.path().join("known_hosts");
    let list = workers(&fx, "after", &kh).await;
    let ssh = Ssh { key, known_hosts: kh, proxy: fx.sim.info().ssh_proxy.clone().unwrap(), user };
    assert_eq!(ssh.run(list[0]["ip"].as_str().unwrap(), "echo up").await.1, "up");
    // The same id in another zone would share the workers' names and directories: refused.
    let other_zone = "v2/projects/p1/locations/us-east5-a/nodes?nodeId=after";
    let (status, err) = fx.api("POST", other_zone, Some(ssh_body(&ssh.user, &public))).await;
    assert_eq!((status, err["error"]["status"].as_str()), (409, Some("ALREADY_EXISTS")), "{err}");
    assert_eq!(ssh.run(list[0]["ip"].as_str().unwrap(), "echo still").await.1, "still");
}

/// Starts the binary, makes a node, SIGTERMs the binary `after` the create; then nothing of
/// it may be left.
async fn sigterm_during_create(create_seconds: &str, after: Duration) {
    let root = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_theseus-tpu-sim"))
        .args(["--root", root.path().to_str().unwrap(), "--create-seconds", create_seconds])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let info: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert!(info["ssh_host_pattern"].as_str().is_some_and(|p| p.starts_with("10.") && p.ends_with(".*")), "{info}");
    let (endpoint, ca, prefix) =
        (info["endpoint"].as_str().unwrap(), Path::new(info["ca"].as_str().unwrap()), info["prefix"].as_str().unwrap());
    let (_, token) =
        curl(ca, "POST", &format!("{endpoint}sim/v1/tokens"), Some("{}".into()), &[], "application/json").await;
    let auth = format!("Authorization: Bearer {}", token["access_token"].as_str().unwrap());
    let body = json!({"acceleratorType": "v4-32", "runtimeVersion": "tpu-vm-base", "metadata": {"ssh-keys": "root:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl x"}});
    let (status, op) = curl(
        ca,
        "POST",
        &format!("{endpoint}{PARENT}/nodes?nodeId=doomed"),
        Some(body.to_string()),
        &[&auth],
        "application/json",
    )
    .await;
    assert_eq!(status, 200, "{op}");
    tokio::time::sleep(after).await;
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
    assert!(namespaces().iter().all(|n| !n.starts_with(prefix)), "after {after:?}: {:?}", namespaces());
    let left = processes_naming(&root.path().display().to_string());
    assert!(left.is_empty(), "after {after:?}: {left:?}");
}

#[tokio::test]
async fn sigterm_while_creating_or_starting_workers_leaves_nothing() {
    // While CREATING (the workers do not exist yet).
    sigterm_during_create("2", Duration::from_millis(300)).await;
    // While the four workers of a v4-32 start, and just after.
    for ms in [0, 100, 400] {
        sigterm_during_create("0", Duration::from_millis(ms)).await;
    }
}

#[tokio::test]
async fn the_next_simulator_removes_what_a_killed_one_left() {
    let root = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_theseus-tpu-sim"))
        .args(["--root", root.path().to_str().unwrap(), "--create-seconds", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let info: Value = serde_json::from_str(&line).unwrap();
    let (endpoint, ca, prefix) = (
        info["endpoint"].as_str().unwrap(),
        Path::new(info["ca"].as_str().unwrap()),
        info["prefix"].as_str().unwrap().to_owned(),
    );
    let (_, token) =
        curl(ca, "POST", &format!("{endpoint}sim/v1/tokens"), Some("{}".into()), &[], "application/json").await;
    let auth = format!("Authorization: Bearer {}", token["access_token"].as_str().unwrap());
    let body = json!({"acceleratorType": "v4-8", "runtimeVersion": "tpu-vm-base"});
    curl(
        ca,
        "POST",
        &format!("{endpoint}{PARENT}/nodes?nodeId=orphan"),
        Some(body.to_string()),
        &[&auth],
        "application/json",
    )
    .await;
    for _ in 0..200 {
        let (_, node) = curl(ca, "GET", &format!("{endpoint}{PARENT}/nodes/orphan"), None, &[&auth], "").await;
        if node["state"] == "READY" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        namespaces().iter().any(|n| n.starts_with(&format!("{prefix}-orphan-"))),
        "SIGKILL leaves the worker: {:?}",
        namespaces()
    );
    let next = Fixture::start(|c| c.create_seconds = Duration::from_millis(100)).await;
    assert!(namespaces().iter().all(|n| !n.starts_with(&prefix)), "{:?}", namespaces());
    assert!(processes_naming(&root.path().display().to_string()).is_empty());
    next.sim.shutdown().await;
}

#[tokio::test]
async fn a_node_made_right_after_a_delete_gets_new_addresses_and_answers() {
    let user = test_user();
    let fx = Fixture::start(|c| {
        c.create_seconds = Duration::ZERO;
        c.delete_seconds = Duration::ZERO;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = client_key(dir.path());
    let kh = dir.path().join("known_hosts");
    let proxy = fx.sim.info().ssh_proxy.clone().unwrap();
    let ssh = Ssh { key, known_hosts: kh.clone(), proxy, user: user.clone() };
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..5 {
        let id = format!("again-{round}");
        let done = fx.create_node(&id, ssh_body(&user, &public)).await;
        assert_eq!(done["response"]["state"], "READY", "{done}");
        let list = workers(&fx, &id, &kh).await;
        let ip0 = list[0]["ip"].as_str().unwrap().to_owned();
        assert!(seen.insert(ip0.clone()), "round {round}: {ip0} was handed out before");
        let (code, out) = ssh.run(&ip0, "hostname").await;
        assert_eq!(code, 0, "round {round}: {out}");
        // Delete and, without waiting for anything else, the next round creates.
        let (_, op) = fx.api("DELETE", &format!("{PARENT}/nodes/{id}"), None).await;
        fx.wait_op(&op).await;
    }
}
