//! `cargo xtask e2e` (kind) as a real process against stub `docker`, `kind`, `kubectl`, `helm`
//! and `cargo` that record their argv and answer like the real tools: a failed setup exports
//! diagnostics before it deletes the cluster, and SIGINT in the middle of `helm install` stops
//! helm, deletes the cluster and exits 130. No Docker is needed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One script for every tool: logs `tool args...`, then answers by its arguments.
/// `STUB_HELM=fail|hang` picks how `helm install` behaves.
const STUB: &str = r#"#!/bin/sh
tool=$(basename "$0")
echo "$tool $*" >> "$STUB_LOG"
case "$tool $*" in
  "docker version"*) echo "28.2.2 1.50 linux/amd64" ;;
  "docker info"*) echo '[["driver-type","io.containerd.snapshotter.v1"]]' ;;
  "kind version"*) echo "kind v0.31.0 go1.25.5 linux/amd64" ;;
  "kind get clusters"*) echo "kind" ;;
  "kind export logs"*) mkdir -p "$3" ;;
  "kubectl version"*) echo '{"clientVersion":{"gitVersion":"v1.35.0"}}' ;;
  "kubectl "*" describe "*) echo "described: $*" ;;
  "helm version"*) echo "v3.19.0+g3d8990f" ;;
  "helm install"*)
    if [ "$STUB_HELM" = hang ]; then
      # Written whole, then renamed: the test polls for the file and reads it at once.
      echo $$ > "$STUB_LOG.helm-pid.part" && mv "$STUB_LOG.helm-pid.part" "$STUB_LOG.helm-pid"
      exec sleep 300
    fi
    echo "Error: INSTALLATION FAILED: context deadline exceeded" >&2; exit 1 ;;
esac
exit 0
"#;

struct Stubs {
    dir: PathBuf,
    log: PathBuf,
}

fn stubs(name: &str) -> Stubs {
    let dir = std::env::temp_dir().join(format!("xtask-kind-stubs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["docker", "kind", "kubectl", "helm", "cargo"] {
        let path = bin.join(tool);
        std::fs::write(&path, STUB).unwrap();
        let mode = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755);
        std::fs::set_permissions(&path, mode).unwrap();
    }
    Stubs { log: dir.join("calls.log"), dir }
}

fn xtask(stubs: &Stubs, helm: &str) -> Child {
    let bin = stubs.dir.join("bin");
    // Its own process group, so that a test can signal the group as a terminal's Ctrl-C does.
    std::os::unix::process::CommandExt::process_group(&mut Command::new(env!("CARGO_BIN_EXE_xtask")), 0)
        .args(["e2e"])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("CARGO", bin.join("cargo"))
        .env("CARGO_TARGET_DIR", stubs.dir.join("target"))
        .env("STUB_LOG", &stubs.log)
        .env("STUB_HELM", helm)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(str::to_owned).collect()
}

fn position(calls: &[String], prefix: &str) -> Option<usize> {
    calls.iter().position(|c| c.starts_with(prefix))
}

#[test]
fn a_failed_setup_exports_diagnostics_then_deletes_the_cluster() {
    let stubs = stubs("fail");
    let out = xtask(&stubs, "fail").wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("context deadline exceeded") && stderr.contains("pull rate limit"), "{stderr}");
    let calls = calls(&stubs.log);
    let create =
        position(&calls, "kind create cluster --name theseus-e2e --image kindest/node:v1.35.0@sha256:").unwrap();
    let helm = position(&calls, "helm install volcano volcano --repo").unwrap();
    let export = position(&calls, "kind export logs").unwrap();
    let describe = position(&calls, "kubectl --kubeconfig").filter(|&i| calls[i].contains(" describe vcjobs")).unwrap();
    let delete = position(&calls, "kind delete cluster --name theseus-e2e").unwrap();
    assert!(create < helm && helm < export && export < describe && describe < delete, "{calls:#?}");
    assert!(!calls.iter().any(|c| c.contains("helm repo")), "{calls:#?}");
    let scratch = stderr.lines().find_map(|l| l.split("diagnostics are in ").nth(1)).expect(&stderr).trim();
    let saved = std::fs::read_to_string(Path::new(scratch).join("vcjobs.txt")).unwrap();
    assert!(saved.starts_with("described: "), "{saved}");
    let _ = std::fs::remove_dir_all(&stubs.dir);
}

#[test]
fn sigint_during_helm_install_stops_it_deletes_the_cluster_and_exits_130() {
    interrupted_during_helm("sigint", false);
}

/// A terminal's Ctrl-C signals the whole foreground group: helm dies of it too, and the main
/// flow must leave the teardown to the signal thread (no diagnostics, exit 130).
#[test]
fn ctrl_c_to_the_whole_group_during_helm_install_is_the_same() {
    interrupted_during_helm("group", true);
}

fn interrupted_during_helm(name: &str, group: bool) {
    let stubs = stubs(name);
    let mut child = xtask(&stubs, "hang");
    let pid_file = PathBuf::from(format!("{}.helm-pid", stubs.log.display()));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pid_file.exists() {
        assert!(Instant::now() < deadline, "helm install never started: {:#?}", calls(&stubs.log));
        assert!(child.try_wait().unwrap().is_none(), "xtask ended early: {:#?}", calls(&stubs.log));
        std::thread::sleep(Duration::from_millis(50));
    }
    let helm_pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    if group {
        rustix::process::kill_process_group(pid, rustix::process::Signal::INT).unwrap();
    } else {
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("SIGINT: stopping and cleaning up"), "{stderr}");
    let calls = calls(&stubs.log);
    let helm = position(&calls, "helm install").unwrap();
    let delete = position(&calls, "kind delete cluster --name theseus-e2e").unwrap();
    assert!(helm < delete, "{calls:#?}");
    assert!(position(&calls, "kind export logs").is_none(), "an interrupt is no failure to diagnose: {calls:#?}");
    assert!(!calls.iter().any(|c| c.contains("--dry-run=server")), "the setup went on: {calls:#?}");
    // The stub helm (`sleep`) got the signal: within a few seconds it is gone or a zombie, not
    // sleeping on for its ten minutes (it may still be on its way out when xtask has exited).
    let state_of = || {
        let stat = std::fs::read_to_string(format!("/proc/{helm_pid}/stat")).unwrap_or_default();
        stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).unwrap_or("gone").to_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut state = state_of();
    while !matches!(state.as_str(), "gone" | "Z" | "X") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        state = state_of();
    }
    assert!(matches!(state.as_str(), "gone" | "Z" | "X"), "the interrupted helm is still {state}");
    let _ = std::fs::remove_dir_all(&stubs.dir);
}
