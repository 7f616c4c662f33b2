//! Real workers: a node's workers are sshd in their own network namespaces, reached through
//! the simulator's proxy with a key given in the node's `ssh-keys` metadata; they see each
//! other, read their TPU metadata, have their own homes; preemption kills what runs there.
//! Needs root (network namespaces): without it these tests fail, loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{Fixture, PARENT};

/// The local account the tests log in as (made by `cargo xtask lab up`).
pub(crate) fn test_user() -> String {
    let user = std::env::var("THESEUSTEST_SSH_USER").unwrap_or_else(|_| "theseus-test".into());
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    assert!(
        passwd.lines().any(|l| l.starts_with(&format!("{user}:"))),
        "the worker tests log in as `{user}`, who does not exist here: run `cargo xtask lab up` once (it makes the user)"
    );
    user
}

/// A client key pair in `dir`: (private key path, public key line).
pub(crate) fn client_key(dir: &Path) -> (PathBuf, String) {
    let key = dir.join("client_key");
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "tpu-sim-test", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(ok.success());
    let public = std::fs::read_to_string(dir.join("client_key.pub")).unwrap().trim().to_owned();
    (key, public)
}

pub(crate) struct Ssh {
    pub(crate) key: PathBuf,
    pub(crate) known_hosts: PathBuf,
    pub(crate) proxy: String,
    pub(crate) user: String,
}

impl Ssh {
    /// Runs `command` on the worker at `ip`: (exit code, stdout).
    pub(crate) async fn run(&self, ip: &str, command: &str) -> (i32, String) {
        let (code, out, _) = self.run_full(ip, command).await;
        (code, out)
    }

    /// Runs `command` on the worker at `ip`: (exit code, stdout, stderr).
    pub(crate) async fn run_full(&self, ip: &str, command: &str) -> (i32, String, String) {
        let mut cmd = Command::new("ssh");
        cmd.args(["-F", "/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", self.known_hosts.display()))
            .args(["-o", "StrictHostKeyChecking=yes", "-o"])
            .arg(format!("ProxyCommand={}", self.proxy))
            .arg("-i")
            .arg(&self.key)
            .arg(format!("{}@{ip}", self.user))
            .arg(command);
        let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    }
}

/// Workers of a READY node, as the admin API lists them, and a known_hosts file for them.
pub(crate) async fn workers(fx: &Fixture, node: &str, known_hosts: &Path) -> Vec<Value> {
    let (status, list) =
        fx.admin("GET", &format!("projects/p1/locations/us-central2-b/nodes/{node}/workers"), json!({})).await;
    assert_eq!(status, 200, "{list}");
    let list = list["workers"].as_array().unwrap().clone();
    let lines: String =
        list.iter().map(|w| format!("{} {}\n", w["ip"].as_str().unwrap(), w["hostKey"].as_str().unwrap())).collect();
    std::fs::write(known_hosts, lines).unwrap();
    list
}

/// Running (a zombie nobody reaped yet is dead: PID 1 of a container may not reap).
fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

fn netns_exists(name: &str) -> bool {
    Path::new(&format!("/run/netns/{name}")).exists()
}

#[tokio::test]
async fn two_workers_log_in_see_each_other_and_die_with_a_preemption() {
    let user = test_user();
    let fx = Fixture::start(|c| {
        c.create_seconds = std::time::Duration::from_millis(200);
        c.preempt_grace = std::time::Duration::from_millis(500);
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = client_key(dir.path());
    let body = json!({
        "acceleratorType": "v4-16", "runtimeVersion": "tpu-ubuntu2204-base",
        "schedulingConfig": {"preemptible": true},
        "metadata": {"ssh-keys": format!("{user}:{public}\nnobody-here:{public}"), "team": "jax"},
    });
    let done = fx.create_node("w2", body).await;
    assert_eq!(done["response"]["state"], "READY", "{done}");
    let known_hosts = dir.path().join("known_hosts");
    let list = workers(&fx, "w2", &known_hosts).await;
    assert_eq!(list.len(), 2);
    let ip = |i: usize| list[i]["ip"].as_str().unwrap().to_owned();
    let endpoints: Vec<String> = done["response"]["networkEndpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["ipAddress"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(endpoints, [ip(0), ip(1)], "worker 0 first");
    // The host keys as gcloud learns them: guest attributes `hostkeys/`, one per worker.
    let (status, attrs) =
        fx.api("POST", &format!("{PARENT}/nodes/w2:getGuestAttributes"), Some(json!({"queryPath": "hostkeys/"}))).await;
    assert_eq!(status, 200, "{attrs}");
    for (i, w) in list.iter().enumerate() {
        let item = &attrs["guestAttributes"][i]["queryValue"]["items"][0];
        assert_eq!(
            format!("{} {}", item["key"].as_str().unwrap(), item["value"].as_str().unwrap()),
            w["hostKey"].as_str().unwrap()
        );
    }
    let ssh = Ssh { key, known_hosts, proxy: fx.sim.info().ssh_proxy.clone().unwrap(), user: user.clone() };

    let meta = "curl -sf -H Metadata-Flavor:Google http://$GCE_METADATA_HOST/computeMetadata/v1/instance/attributes";
    for i in 0..2 {
        let (code, out) = ssh
            .run(
                &ip(i),
                &format!(
                    "{meta}/agent-worker-number; echo; {meta}/worker-network-endpoints; echo; {meta}/team; echo; \
                     {meta}/tpu-env | grep WORKER_ID"
                ),
            )
            .await;
        assert_eq!(code, 0, "worker {i}: {out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], i.to_string());
        // As JAX reads it: `worker.split(':')[2]` of each comma-separated entry.
        let ips: Vec<&str> = lines[1].split(',').map(|e| e.split(':').nth(2).unwrap()).collect();
        assert_eq!(ips, [ip(0), ip(1)], "{out}");
        assert_eq!(lines[2], "jax", "the node's own metadata is there too");
        assert_eq!(lines[3], format!("WORKER_ID: '{i}'"));
    }

    // Each worker is named as its instance, and names resolve to workers' addresses (what
    // Gloo and JAX's coordinator publish), worker 0's too from worker 1.
    let (code, out) = ssh.run(&ip(1), "hostname; getent hosts $(hostname) | cut -d' ' -f1; getent hosts t1v-n-$(hostname | cut -d- -f3)-w-0 | cut -d' ' -f1; getent hosts metadata.google.internal | cut -d' ' -f1").await;
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert!(lines[0].starts_with("t1v-n-") && lines[0].ends_with("-w-1"), "{out}");
    assert_eq!(lines[1..], [ip(1).as_str(), ip(0).as_str(), "169.254.169.254"], "{out}");
    let (_, name0) = fx.api("GET", &format!("{PARENT}/nodes/w2"), None).await;
    assert!(name0["state"] == "READY");
    let host_name = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    assert!(!host_name.contains("t1v-n-"), "the host keeps its own name");

    // Each worker has its own /tmp.
    let (_, t0) = ssh.run(&ip(0), "echo zero > /tmp/scratch-w; echo ${TMPDIR:-unset}").await;
    assert_eq!(t0, "unset");
    let (_, t1) = ssh.run(&ip(1), "cat /tmp/scratch-w 2>/dev/null || echo none").await;
    assert_eq!(t1, "none");
    assert!(!Path::new("/tmp/scratch-w").exists(), "nor is it the host's /tmp");

    // A worker calls the API (as worker 0 deleting its own VM does) with the metadata
    // server's token, through the endpoint and CA its sessions are given.
    let call = "t=$(curl -sf -H Metadata-Flavor:Google http://$GCE_METADATA_IP/computeMetadata/v1/instance/service-accounts/default/token \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])') && \
        curl -sf --cacert \"$CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE\" -H \"Authorization: Bearer $t\" \
        \"${CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU}v2/projects/p1/locations/us-central2-b/nodes/w2\"";
    let (code, out) = ssh.run(&ip(1), call).await;
    assert_eq!(code, 0, "{out}");
    let seen: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(seen["state"], "READY");
    let first = ip(0);
    let net: Vec<&str> = first.split('.').take(2).collect();
    assert_eq!(Some(format!("https://{}.0.1/", net.join("."))), fx.sim.info().worker_endpoint);

    // A TPU VM image greets every connection (on ssh's stderr), as real ones do.
    let (_, _, stderr) = ssh.run_full(&ip(0), "true").await;
    assert!(stderr.contains("Cloud TPU VM"), "{stderr}");

    // Each worker has its own home, backed by the simulator's directory.
    let (code, _) = ssh.run(&ip(0), "echo zero > ~/marker").await;
    assert_eq!(code, 0);
    let (code, out) = ssh.run(&ip(1), "cat ~/marker 2>/dev/null || echo none; echo $HOME").await;
    assert_eq!((code, out.lines().next()), (0, Some("none")), "{out}");
    let home0 = PathBuf::from(list[0]["dir"].as_str().unwrap()).join("home").join(&user).join("marker");
    assert_eq!(std::fs::read_to_string(&home0).unwrap().trim(), "zero");

    // Worker 1 reaches a port on worker 0 (what JAX's coordinator needs).
    let (code, pid) = ssh
        .run(&ip(0), "setsid nohup socat TCP-LISTEN:8476,fork,reuseaddr SYSTEM:'echo coordinator' >/dev/null 2>&1 </dev/null & echo $!")
        .await;
    assert_eq!(code, 0);
    let pid: i64 = pid.parse().unwrap();
    let (code, out) = ssh
        .run(
            &ip(1),
            &format!("for i in 1 2 3 4 5 6 7 8 9 10; do socat -T2 - TCP:{}:8476 && break; sleep 0.2; done", ip(0)),
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "coordinator"));
    assert!(alive(pid));
    let netns: Vec<String> = list.iter().map(|w| w["netns"].as_str().unwrap().to_owned()).collect();
    assert!(netns.iter().all(|n| n.starts_with(&fx.sim.info().prefix)));

    let (status, node) = fx.admin("POST", "projects/p1/locations/us-central2-b/nodes/w2:preempt", json!({})).await;
    assert_eq!((status, node["state"].as_str()), (200, Some("PREEMPTED")));
    assert!(!alive(pid), "the worker's processes are killed");
    assert!(netns.iter().all(|n| !netns_exists(n)), "the workers' namespaces are gone");
    let (code, _) = ssh.run(&ip(0), "true").await;
    assert_ne!(code, 0, "sshd is gone");

    assert!(home0.exists(), "a preempted node keeps its disks until it is deleted");
    let (_, op) = fx.api("DELETE", &format!("{PARENT}/nodes/w2"), None).await;
    fx.wait_op(&op).await;
    assert!(!home0.exists(), "a deleted node's disks are wiped");
    let vpc = format!("{}-vpc", fx.sim.info().prefix);
    assert!(netns_exists(&vpc));
    fx.sim.shutdown().await;
    assert!(!netns_exists(&vpc), "shutdown removes the simulator's network");
}
