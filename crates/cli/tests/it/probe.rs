//! `plan` and `submit` with hosts that do not answer their availability probe: a port that
//! refuses and a TCP listener that never speaks SSH (loopback only). Each is named with its
//! reason; the silent one costs its own budget (`probe_timeout`, or `--probe-timeout`).

use std::net::TcpListener;

use serde_json::Value;

use crate::{TestContext, text};

/// Two plain hosts: `refused` (nobody listens on its port) and `silent` (a listener that
/// accepts and never answers, held by the returned value), with `probe_timeout: 1s`.
fn setup(ctx: &TestContext) -> TcpListener {
    let refused = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let ssh_config = ctx.home().join("ssh_config");
    std::fs::write(
        &ssh_config,
        format!(
            "Host refused-host\n  HostName 127.0.0.1\n  Port {refused}\nHost silent-host\n  HostName 127.0.0.1\n  Port {}\n",
            silent.local_addr().unwrap().port()
        ),
    )
    .unwrap();
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "clusters:\n  c: {root: /r, work: /w}\nhosts:\n  refused: {ssh: refused-host, cluster: c}\n  silent: {ssh: silent-host, cluster: c, probe_timeout: 1s}\n",
    )
    .unwrap();
    silent
}

fn plan(ctx: &TestContext, extra: &[&str]) -> std::process::Output {
    let mut cmd = ctx.cmd();
    cmd.env("THESEUS_SSH_CONFIG", ctx.home().join("ssh_config"));
    cmd.args(["plan", "p", "examples/hello/experiment.yaml", "--chip", "cpu", "-n", "1"]).args(extra);
    cmd.output().unwrap()
}

#[test]
fn plan_names_the_hosts_that_did_not_answer_with_their_reasons() {
    let ctx = TestContext::new();
    let _silent = setup(&ctx);
    let out = plan(&ctx, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let unknown: Vec<&str> = stdout.lines().filter(|l| l.starts_with("unknown: ")).collect();
    assert_eq!(unknown.len(), 2, "one line per host that did not answer: {stdout}");
    assert!(
        unknown[0].starts_with("unknown: refused: ") && unknown[0].to_lowercase().contains("connection refused"),
        "{stdout}"
    );
    // The host's own `probe_timeout` (1s), not the default.
    assert_eq!(unknown[1], "unknown: silent: no answer within 1s (probe timeout)", "{stdout}");

    let out = plan(&ctx, &["--output", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let unanswered = json["unanswered"].as_array().unwrap_or_else(|| panic!("{json}"));
    let hosts: Vec<&str> = unanswered.iter().map(|u| u["host"].as_str().unwrap()).collect();
    assert_eq!(hosts, ["refused", "silent"], "{json}");
    assert_eq!(unanswered[1]["reason"], "no answer within 1s (probe timeout)", "{json}");
}

#[test]
fn the_probe_timeout_flag_overrides_the_host_key() {
    let ctx = TestContext::new();
    let _silent = setup(&ctx);
    let out = plan(&ctx, &["--probe-timeout", "2s"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.lines().any(|l| l == "unknown: silent: no answer within 2s (probe timeout)"), "{stdout}");
}

#[test]
fn submit_says_on_stderr_which_host_before_its_choice_did_not_answer() {
    let ctx = TestContext::new();
    let refused = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::write(
        ctx.home().join("ssh_config"),
        format!("Host refused-host\n  HostName 127.0.0.1\n  Port {refused}\n"),
    )
    .unwrap();
    // `refused` ranks before the local host, whose one (configured, unprobed) GPU takes the job.
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "clusters:\n  c: {root: /r, work: /w}\nhosts:\n  refused: {ssh: refused-host, cluster: c, chips: {h100: 1}}\n  local: {type: local, chips: {h100: 1}}\n",
    )
    .unwrap();
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("job.py"), "print('ran')\n").unwrap();
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: python3 job.py\n").unwrap();
    let exp = code.path().join("exp.yaml").display().to_string();
    let out = ctx
        .cmd()
        .env("THESEUS_SSH_CONFIG", ctx.home().join("ssh_config"))
        .args(["submit", "probe-note", &exp, "--code", code.path().to_str().unwrap(), "--chip", "h100", "-n", "1"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("theseus: host refused did not answer"));
    let line = line.unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.to_lowercase().contains("connection refused") && line.ends_with("chose local without it"), "{line}");
    assert!(text(&out.stdout).trim().len() > 5, "the run id is printed: {}", text(&out.stdout));
}
