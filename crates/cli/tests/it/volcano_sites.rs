//! The binary against Volcano hosts set up as at real sites (issue 23): proxy variables (a real
//! tinyproxy on loopback, `NO_PROXY` in either case), an exec credential plugin holding secrets in
//! its `env` and arguments, a certificate from another CA, the kubeconfig context's namespace, and
//! an API server that hangs longer than the default status wait.

use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use theseus_kube_sim::{Authz, Outage, Tinyproxy};

use crate::volcano::SimWorld;
use crate::{TestContext, run_bounded, text};

const SECRET: &str = "vault-s3cr3t-4c5d6e";

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn wait_listening(addr: &str) {
    let started = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kubeconfig_path(ctx: &TestContext) -> PathBuf {
    ctx.home().join(".kube/config")
}

/// Rewrites the kubeconfig's `server:` (and appends `user` entries / a context namespace).
fn edit_kubeconfig(ctx: &TestContext, edit: impl FnOnce(String) -> String) {
    let path = kubeconfig_path(ctx);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, edit(text)).unwrap();
}

fn plan(ctx: &TestContext, world: &SimWorld, env: &[(&str, &str)]) -> Output {
    let mut cmd = ctx.cmd();
    cmd.args(["plan", "p", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "h100", "-n", "4"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn proxy_variables_work_as_kubectl_reads_them() {
    let ctx = TestContext::new();
    // Environment proxies never apply to `localhost` or a loopback IP (kubectl's rule): the
    // simulator is named by the machine's host name, which resolves to a loopback address.
    let (host, ip) = theseus_kube_sim::loopback_host_name().expect(
        "the proxy test needs the machine's host name to resolve to a loopback address \
         (as /etc/hosts has it on Debian); it never listens beyond loopback",
    );
    let world = SimWorld::start_at(&ctx, None, Some((&host, ip)));
    let dir = tempfile::tempdir().unwrap();
    let tiny = Tinyproxy::start(dir.path()).expect("tinyproxy");
    let proxy = tiny.url().to_owned();
    let sim = world.sim.url();
    let port = sim.rsplit(':').next().unwrap().trim_end_matches('/').to_owned();
    let named = format!("{host}:{port}");
    edit_kubeconfig(&ctx, |t| t.replace(&sim, &format!("https://{named}")));
    let dead = format!("http://127.0.0.1:{}", free_port());
    let connects = || tiny.connects_to(&named);

    // An https:// server goes through HTTPS_PROXY (never HTTP_PROXY); tinyproxy's log shows the tunnel.
    let out = plan(&ctx, &world, &[("HTTPS_PROXY", &proxy), ("HTTP_PROXY", &dead)]);
    assert!(out.status.success(), "through HTTPS_PROXY: {}", text(&out.stderr));
    assert!(
        connects() > 0,
        "tinyproxy saw no CONNECT {named}:\n{}",
        std::fs::read_to_string(tiny.log()).unwrap_or_default()
    );

    // The lower-case variable too.
    let before = connects();
    let out = plan(&ctx, &world, &[("https_proxy", &proxy)]);
    assert!(out.status.success(), "through https_proxy: {}", text(&out.stderr));
    assert!(connects() > before, "https_proxy was not used");

    // NO_PROXY by name, by name and port, and `*`, in either case: the (dead) proxy is bypassed.
    let with_port = format!("example.invalid,{named}");
    for (name, value) in [("NO_PROXY", host.as_str()), ("no_proxy", with_port.as_str()), ("NO_PROXY", "*")] {
        let out = plan(&ctx, &world, &[("HTTP_PROXY", &dead), ("HTTPS_PROXY", &dead), (name, value)]);
        assert!(out.status.success(), "{name}={value} bypasses the proxy: {}", text(&out.stderr));
    }

    // A dead proxy that is not bypassed is named.
    let out = plan(&ctx, &world, &[("HTTPS_PROXY", &dead)]);
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(all.contains(&dead) && all.contains("HTTPS_PROXY"), "{all}");
}

/// An exec plugin that counts its runs, needs `VAULT_TOKEN`, and prints `token` (or fails).
fn write_plugin(dir: &Path, runs: &Path, token: &str, exit: i32) -> PathBuf {
    let path = dir.join("get-token");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho run >> '{}'\n[ \"$VAULT_TOKEN\" = '{SECRET}' ] || exit 9\n\
             echo '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\",\"expirationTimestamp\":\"2099-01-01T00:00:00Z\"}}}}'\nexit {exit}\n",
            runs.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn use_plugin(ctx: &TestContext, plugin: &Path) {
    let user = format!(
        "{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: '{}', args: [--secret, '{SECRET}'], \
         env: [{{name: VAULT_TOKEN, value: '{SECRET}'}}], interactiveMode: Never, installHint: 'see the wiki'}}}}",
        plugin.display()
    );
    edit_kubeconfig(ctx, |t| t.replace("user: {token: t-exec}", &format!("user: {user}")));
}

#[test]
fn exec_plugin_secrets_never_reach_any_output_and_it_runs_once() {
    let ctx = TestContext::new();
    let authz = Authz::from_files(
        "t-exec,researcher,1\n",
        &std::fs::read_to_string(crate::repo_root().join("docs/rbac.yaml")).unwrap(),
    )
    .unwrap();
    let world = SimWorld::start_with(&ctx, Some((authz, "t-exec")));
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let plugin = write_plugin(dir.path(), &runs, "t-exec", 0);
    use_plugin(&ctx, &plugin);
    let count = || std::fs::read_to_string(&runs).map_or(0, |t| t.lines().count());

    let mut cmd = ctx.cmd();
    cmd.args(["-v", "plan", "p", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "h100", "-n", "4"]);
    let out = cmd.env("RUST_LOG", "trace").output().unwrap();
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{all}");
    assert!(!all.contains(SECRET), "the plugin's secret reached the output");
    assert_eq!(count(), 1, "the plugin runs once per command");

    // A failing plugin: one error line, no secret, at any verbosity; the failed submit leaves no run.
    let failing = write_plugin(dir.path(), &runs, "t-exec", 3);
    assert_eq!(failing, plugin);
    for args in [
        &["plan", "p", &world.exp("exp.yaml")][..],
        &["-vv", "submit", "s", &world.exp("exp.yaml"), "--code", world.code()][..],
    ] {
        let mut cmd = ctx.cmd();
        cmd.args(args).args(["--host", "k8s", "--chip", "h100"]);
        let out = cmd.env("RUST_LOG", "trace").output().unwrap();
        let all = text(&out.stdout) + &text(&out.stderr);
        assert!(args[0] == "plan" || !out.status.success(), "{all}");
        assert!(!all.contains(SECRET), "the plugin's secret reached the output:\n{all}");
        assert!(all.contains(&plugin.display().to_string()) && all.contains("exited with 3"), "{all}");
    }
    let list = ctx.run(&["list", "--output", "json"]);
    assert!(!text(&list.stdout).contains("\"s\""), "a submit that created nothing is no run: {}", text(&list.stdout));
}

#[test]
fn a_submit_against_another_clusters_certificate_says_so_and_leaves_no_run() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    let dir = tempfile::tempdir().unwrap();
    // Another cluster's CA signed the server's certificate (a leaf for 127.0.0.1, as kind's).
    let openssl = |args: &[&str]| {
        let made = Command::new("openssl").current_dir(dir.path()).args(args).output().unwrap();
        assert!(made.status.success(), "openssl {args:?}: {}", text(&made.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(
        &[&["req", "-x509"][..], &ec, &["-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=other-ca", "-days", "2"]]
            .concat(),
    );
    openssl(&[&["req"][..], &ec, &["-keyout", "k.pem", "-out", "c.csr", "-subj", "/CN=apiserver"]].concat());
    std::fs::write(dir.path().join("ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "c.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "c.pem",
        "-days",
        "2",
        "-extfile",
        "ext",
    ]);
    let port = free_port();
    let server = Command::new("openssl")
        .current_dir(dir.path())
        .args(["s_server", "-quiet", "-www", "-cert", "c.pem", "-key", "k.pem", "-accept"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Running(server);
    wait_listening(&format!("127.0.0.1:{port}"));
    let url = format!("https://127.0.0.1:{port}");
    let sim = world.sim.url();
    edit_kubeconfig(&ctx, |t| t.replace(&sim, &url));
    let out =
        ctx.run(&["submit", "tls", &world.exp("exp.yaml"), "--code", world.code(), "--host", "k8s", "--chip", "cpu"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].contains(&url) && errors[0].contains("unknown authority"), "{stderr}");
    assert!(!stderr.contains("caused by"), "{stderr}");
    let list = ctx.run(&["list", "--output", "json"]);
    assert!(
        !text(&list.stdout).contains("\"tls\""),
        "a submit that created nothing is no failed run: {}",
        text(&list.stdout)
    );
}

#[test]
fn a_host_without_namespace_uses_the_kubeconfig_contexts() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    let config = ctx.home().join(".theseus.yaml");
    let text_config = std::fs::read_to_string(&config).unwrap().replace("    namespace: default\n", "");
    std::fs::write(&config, text_config).unwrap();
    edit_kubeconfig(&ctx, |t| {
        assert!(t.contains("namespace: \"default\""), "the context names its namespace: {t}");
        t.replace("namespace: \"default\"", "namespace: \"team-a\"")
    });
    let out = ctx.run(&[
        "submit",
        "ns",
        &world.exp("exp.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
        "--dry-run",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("namespace: team-a") && !stdout.contains("namespace: default"), "{stdout}");
}

#[test]
fn status_against_a_hung_api_gives_up_after_the_hosts_api_timeout() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    crate::volcano_faults::set_api_timeout(&ctx, "14s");
    let out = ctx.run(&[
        "submit",
        "hung",
        &world.exp("sleep.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    world.sim.faults().outage(Outage::Hang, None);
    let mut cmd = ctx.cmd();
    cmd.args(["status", "hung"]);
    let out = run_bounded(cmd, Duration::from_secs(120));
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("within 14s") && stderr.contains(&world.sim.url()), "the host's api_timeout: {stderr}");
}
