//! Real-site kubeconfigs (issue 23): TLS failures against a real TLS server on loopback (another
//! cluster's CA, a certificate without the server's IP, an expired one), names that do not
//! resolve, `KUBECONFIG` lists with a missing file, and the context's namespace.

use theseus_backend_volcano::client::{KubeconfigSource, connect_with};
use theseus_backend_volcano::{Cluster, RetryPolicy};

use crate::site_support::{host_with, make_ca, make_cert, tls_server, write_kubeconfig};

/// The error of one call through `kubeconfig`: one line, naming the server.
async fn call_error(kubeconfig: &std::path::Path) -> String {
    let host = host_with(kubeconfig, serde_json::json!({}));
    let cluster = Cluster::connect(&host).await.expect("the kubeconfig loads").with_retry(RetryPolicy::fast());
    let err = cluster.get_queue("q").await.expect_err("the call must fail");
    let text = err.to_string();
    assert!(!text.contains('\n'), "one line: {text}");
    text
}

#[tokio::test]
async fn tls_failures_say_what_failed_against_which_server_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = make_ca(d, "ca");
    let other_ca = make_ca(d, "other-ca");
    let (good, good_key) = make_cert(d, "ca", "good", "IP:127.0.0.1", 2);
    let (named, named_key) = make_cert(d, "ca", "named", "DNS:kube.internal", 2);
    let (expired, expired_key) = make_cert(d, "ca", "expired", "IP:127.0.0.1", -1);
    let kubeconfig = d.join("config");

    // Another cluster's CA (a stale kubeconfig): kubectl says `certificate signed by unknown authority`.
    let (url, _server) = tls_server(&good, &good_key);
    write_kubeconfig(&kubeconfig, &url, &format!("certificate-authority: {}", other_ca.display()), "", None);
    let text = call_error(&kubeconfig).await;
    assert!(
        text.contains(&url) && text.contains("unknown authority") && text.contains("refresh the kubeconfig"),
        "{text}"
    );
    assert!(!text.contains("RBAC") && !text.contains("cluster-scoped"), "{text}");

    // The certificate names kube.internal, the kubeconfig says 127.0.0.1.
    let (url, _server) = tls_server(&named, &named_key);
    write_kubeconfig(&kubeconfig, &url, &format!("certificate-authority: {}", ca.display()), "", None);
    let text = call_error(&kubeconfig).await;
    assert!(text.contains(&url) && text.contains("kube.internal") && text.contains("tls-server-name"), "{text}");

    // Expired.
    let (url, _server) = tls_server(&expired, &expired_key);
    write_kubeconfig(&kubeconfig, &url, &format!("certificate-authority: {}", ca.display()), "", None);
    let text = call_error(&kubeconfig).await;
    assert!(text.contains(&url) && text.contains("expired") && text.contains("renew"), "{text}");

    // The right CA works up to the HTTP answer (s_server is no API server): TLS itself passed.
    let (url, _server) = tls_server(&good, &good_key);
    write_kubeconfig(&kubeconfig, &url, &format!("certificate-authority: {}", ca.display()), "", None);
    let text = call_error(&kubeconfig).await;
    assert!(!text.contains("TLS") && !text.contains("certificate"), "{text}");
}

#[tokio::test]
async fn refused_and_unresolvable_servers_are_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    let port = crate::site_support::free_port();
    let url = format!("https://127.0.0.1:{port}");
    write_kubeconfig(&kubeconfig, &url, "", "", None);
    let text = call_error(&kubeconfig).await;
    assert!(text.contains(&url) && text.contains("connection refused") && text.contains("server address"), "{text}");

    let url = "https://theseus-no-such-host.invalid:6443";
    write_kubeconfig(&kubeconfig, url, "", "", None);
    let text = call_error(&kubeconfig).await;
    assert!(text.contains(url) && text.contains("no such host") && text.contains("DNS"), "{text}");
    assert!(
        text.contains("1 attempt") || !text.contains("attempts"),
        "a name that does not resolve is not retried: {text}"
    );
}

#[tokio::test]
async fn a_kubeconfig_list_skips_missing_files_as_kubectl_does() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    write_kubeconfig(&good, "http://127.0.0.1:1", "", "", None);
    let missing = dir.path().join("gone");
    let source = KubeconfigSource::Env(vec![missing.clone(), good.clone()]);
    let conn = connect_with(&source, None).await.expect("a missing file in KUBECONFIG is skipped");
    assert_eq!(conn.context.as_deref(), Some("ctx"));

    let also_missing = dir.path().join("gone-too");
    let err = connect_with(&KubeconfigSource::Env(vec![missing.clone(), also_missing.clone()]), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&missing.display().to_string()) && err.contains(&also_missing.display().to_string()), "{err}");
    assert!(err.contains("none of the KUBECONFIG files exists"), "{err}");
}

#[tokio::test]
async fn the_context_namespace_is_the_default_for_a_host_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    write_kubeconfig(&kubeconfig, "http://127.0.0.1:1", "", "", Some("team-a"));
    let cluster = Cluster::connect(&host_with(&kubeconfig, serde_json::json!({}))).await.unwrap();
    assert_eq!(cluster.namespace(), "team-a");
    let cluster = Cluster::connect(&host_with(&kubeconfig, serde_json::json!({"namespace": "ml"}))).await.unwrap();
    assert_eq!(cluster.namespace(), "ml", "the host's own namespace wins");
    write_kubeconfig(&kubeconfig, "http://127.0.0.1:1", "", "", None);
    let cluster = Cluster::connect(&host_with(&kubeconfig, serde_json::json!({}))).await.unwrap();
    assert_eq!(cluster.namespace(), "default");
}
