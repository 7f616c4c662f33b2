//! A kubeconfig's `proxy-url` through real proxies on loopback (issue 23): Debian's tinyproxy
//! (HTTP CONNECT; installed with apt-get when missing and running as root) and `ssh -D` against
//! the lab's sshd (a real SOCKS5 server). Each proxy's own log proves the traffic went through it.

use std::process::{Command, Stdio};

use theseus_backend_volcano::client::{KubeconfigSource, connect_env};
use theseus_backend_volcano::proxy::ProxyEnv;
use theseus_backend_volcano::{Cluster, RetryPolicy};
use theseus_kube_sim::Tinyproxy;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::site_support::{Running, free_port, host_with, wait_listening, write_kubeconfig};

async fn api() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(404).set_body_json(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404
        })))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn a_kubeconfig_http_proxy_url_goes_through_tinyproxy() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = Tinyproxy::start(dir.path()).expect("tinyproxy");
    let (proxy, log) = (tiny.url().to_owned(), tiny.log().to_owned());
    let server = api().await;
    let kubeconfig = dir.path().join("config");
    write_kubeconfig(&kubeconfig, &server.uri(), &format!("proxy-url: '{proxy}'"), "", None);
    let cluster = Cluster::connect(&host_with(&kubeconfig, serde_json::json!({}))).await.unwrap();
    let cluster = cluster.with_retry(RetryPolicy::fast());
    assert!(cluster.get_queue("q").await.expect("the call goes through the proxy").is_none());
    let authority = server.uri().trim_start_matches("http://").to_owned();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains(&format!("CONNECT {authority}")), "tinyproxy saw no CONNECT {authority}:\n{logged}");
}

#[tokio::test]
async fn a_dead_proxy_is_named_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = api().await;
    let proxy = format!("http://127.0.0.1:{}", free_port());
    let kubeconfig = dir.path().join("config");
    write_kubeconfig(&kubeconfig, &server.uri(), &format!("proxy-url: '{proxy}'"), "", None);
    let cluster = Cluster::connect(&host_with(&kubeconfig, serde_json::json!({}))).await.unwrap();
    let cluster = cluster.with_retry(RetryPolicy { max_attempts: 2, ..RetryPolicy::fast() });
    let text = cluster.get_queue("q").await.unwrap_err().to_string();
    assert!(text.contains(&proxy) && text.contains("proxy") && !text.contains('\n'), "{text}");
}

/// The lab's sshd (`cargo xtask lab up`), or `None` after saying the test did not run.
fn lab_ssh() -> Option<(String, String, String, String, String)> {
    let get = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (
        get("THESEUSTEST_SSH_HOST"),
        get("THESEUSTEST_SSH_PORT"),
        get("THESEUSTEST_SSH_USER"),
        get("THESEUSTEST_SSH_KEY"),
        get("THESEUSTEST_SSH_KNOWN_HOSTS"),
    ) {
        (Some(h), Some(p), Some(u), Some(k), Some(kh)) => Some((h, p, u, k, kh)),
        _ => {
            let why = "THESEUSTEST_SSH_* is not set (`cargo xtask lab up` and its env)";
            eprintln!("NOT RUN: no sshd for `ssh -D`: {why}");
            assert!(std::env::var("THESEUSTEST_REQUIRE_ALL").as_deref() != Ok("1"), "THESEUSTEST_REQUIRE_ALL=1: {why}");
            None
        }
    }
}

#[tokio::test]
async fn a_kubeconfig_socks5_proxy_url_goes_through_ssh_dynamic_forwarding() {
    let Some((host, port, user, key, known_hosts)) = lab_ssh() else { return };
    let dir = tempfile::tempdir().unwrap();
    let socks = free_port();
    let ssh_log = dir.path().join("ssh.log");
    let child = Command::new("ssh")
        .args(["-v", "-N", "-D", &format!("127.0.0.1:{socks}"), "-p", &port, "-i", &key])
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ExitOnForwardFailure=yes"])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={known_hosts}"))
        .arg("-E")
        .arg(&ssh_log)
        .arg(format!("{user}@{host}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ssh -D");
    let _ssh = Running(child);
    wait_listening(&format!("127.0.0.1:{socks}"), "ssh -D");
    let server = api().await;
    let kubeconfig = dir.path().join("config");
    write_kubeconfig(&kubeconfig, &server.uri(), &format!("proxy-url: 'socks5://127.0.0.1:{socks}'"), "", None);
    let cluster = Cluster::connect(&host_with(&kubeconfig, serde_json::json!({}))).await.unwrap();
    let cluster = cluster.with_retry(RetryPolicy::fast());
    assert!(cluster.get_queue("q").await.expect("the call goes through ssh -D").is_none());
    let logged = std::fs::read_to_string(&ssh_log).unwrap();
    assert!(
        logged.contains("dynamic-tcpip") || logged.contains(&format!("forwarding to socks port {socks}")),
        "ssh forwarded nothing:\n{logged}"
    );
}

/// The machine's host name and the loopback address it resolves to: environment proxies never
/// apply to `localhost` or a loopback IP (kubectl's rule), so the server is named by host name.
fn proxied_name() -> (String, std::net::IpAddr) {
    theseus_kube_sim::loopback_host_name().expect(
        "the proxy test needs the machine's host name to resolve to a loopback address \
         (as /etc/hosts has it on Debian); it never listens beyond loopback",
    )
}

#[tokio::test]
async fn https_proxy_tunnels_to_an_https_server_unless_no_proxy_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (name, ip) = proxied_name();
    crate::site_support::make_ca(d, "ca");
    let (cert, key) = crate::site_support::make_cert(d, "ca", "api", &format!("DNS:{name}"), 2);
    let port = free_port();
    let child = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept"])
        .arg(format!("{ip}:{port}"))
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Running(child);
    wait_listening(&format!("{ip}:{port}"), "openssl s_server");
    let tiny = Tinyproxy::start(d).expect("tinyproxy");
    let proxy = tiny.url().to_owned();
    let kubeconfig = d.join("config");
    let url = format!("https://{name}:{port}");
    write_kubeconfig(&kubeconfig, &url, &format!("certificate-authority: {}", d.join("ca.crt").display()), "", None);
    let source = KubeconfigSource::Host(kubeconfig);
    let call = |env: ProxyEnv| {
        let source = source.clone();
        async move {
            let conn = connect_env(&source, None, std::time::Duration::from_secs(30), &env).await.unwrap();
            let cluster = Cluster::from_client(conn.client, "default").with_server(conn.server);
            // s_server is no API server: the call fails after TLS, which is all this needs.
            cluster.with_retry(RetryPolicy { max_attempts: 1, ..RetryPolicy::fast() }).get_queue("q").await.unwrap_err()
        }
    };
    let connects = || tiny.connects_to(&format!("{name}:{port}"));

    let err = call(ProxyEnv { https: Some(proxy.clone()), http: None, no_proxy: None }).await.to_string();
    assert!(!err.contains("TLS"), "TLS through the tunnel verified the server: {err}");
    assert_eq!(connects(), 1, "HTTPS_PROXY tunnels to an https:// server");

    call(ProxyEnv { https: None, http: Some(proxy.clone()), no_proxy: None }).await;
    assert_eq!(connects(), 1, "HTTP_PROXY is not used for an https:// server");

    for no_proxy in [name.clone(), name.to_uppercase(), "*".to_owned(), format!("other.example,{name}:{port}")] {
        call(ProxyEnv { https: Some(proxy.clone()), http: None, no_proxy: Some(no_proxy.clone()) }).await;
        assert_eq!(connects(), 1, "NO_PROXY={no_proxy} bypasses the proxy");
    }
}
