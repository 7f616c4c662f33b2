//! HTTPS with a CA of the endpoint's own (as the simulator's): trusted when named by
//! `CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE` or `SSL_CERT_FILE`, refused with a hint otherwise; and
//! through an `HTTPS_PROXY` (a CONNECT tunnel) unless `NO_PROXY` names the host.

use std::path::Path;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use theseus_backend_tpu::api::Retry;
use theseus_backend_tpu::api::transport::Http;
use theseus_backend_tpu::api::{AccessToken, ErrorKind};
use theseus_backend_tpu::auth::{Env, StaticToken};
use theseus_backend_tpu::cloud::Cloud;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

use crate::cloud::settings;

/// An HTTPS server on 127.0.0.1 answering every request with a READY node; returns its
/// endpoint and writes its CA's PEM to `ca`.
async fn https_server(ca: &Path) -> String {
    format!("https://127.0.0.1:{}", https_server_for(ca, "127.0.0.1").await)
}

/// As [`https_server`], with a certificate for `name`; returns the port.
async fn https_server_for(ca: &Path, name: &str) -> u16 {
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = params.self_signed(&ca_key).unwrap();
    std::fs::write(ca, ca_cert.pem()).unwrap();
    let issuer = Issuer::new(params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![name.to_owned()]).unwrap().signed_by(&key, &issuer).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())))
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = service_fn(|_request| async {
                    let node =
                        serde_json::json!({"name": "projects/p/locations/us-central2-b/nodes/t", "state": "READY"});
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(node.to_string()))))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
            });
        }
    });
    port
}

fn cloud(endpoint: &str, env: &Env) -> Result<Cloud, theseus_backend_tpu::api::TpuError> {
    let http = Http::new(env.extra_ca().as_deref(), None)?;
    let tokens = Arc::new(StaticToken(AccessToken::new("tok")));
    Cloud::with_tokens("t", &settings(endpoint), env, http, tokens)
}

#[tokio::test]
async fn the_endpoints_own_ca_is_trusted_when_named() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let endpoint = https_server(&ca).await;
    for variable in ["CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", "SSL_CERT_FILE"] {
        let env = Env::default().with(variable, ca.display().to_string());
        let node = cloud(&endpoint, &env).unwrap().node().await.unwrap().unwrap();
        assert!(node.is_ready(), "{variable}");
    }
}

#[tokio::test]
async fn an_unknown_ca_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = https_server(&dir.path().join("ca.pem")).await;
    let e = cloud(&endpoint, &Env::default()).unwrap().node().await.unwrap_err();
    // Not retried: a certificate that does not verify will not on the next attempt.
    assert_eq!(e.kind, ErrorKind::Other);
    assert!(e.message.contains("certificate") && e.message.contains("CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE"), "{e}");
}

#[tokio::test]
async fn a_ca_file_without_certificates_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("not-a-ca.pem");
    std::fs::write(&bad, "hello").unwrap();
    let env = Env::default().with("CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", bad.display().to_string());
    let e = cloud("https://127.0.0.1:1", &env).unwrap_err();
    assert!(e.message.contains("not-a-ca.pem") && e.message.contains("no PEM certificate"), "{e}");
}

/// A CONNECT proxy that sends every tunnel to 127.0.0.1:`target` and keeps the request lines.
async fn connect_proxy(target: u16) -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let kept = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                kept.lock().unwrap().push(head.lines().next().unwrap_or_default().to_owned());
                let mut server = tokio::net::TcpStream::connect(("127.0.0.1", target)).await.unwrap();
                client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    (port, seen)
}

#[tokio::test]
async fn https_goes_through_the_proxy_unless_no_proxy_names_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let target = https_server_for(&ca, "tpu.test").await;
    let (proxy, seen) = connect_proxy(target).await;
    let tokens = Arc::new(StaticToken(AccessToken::new("tok")));
    let fast = Retry {
        attempts: 2,
        first_wait: std::time::Duration::from_millis(1),
        max_wait: std::time::Duration::from_millis(1),
    };

    let matcher = Matcher::builder().https(format!("http://127.0.0.1:{proxy}")).build();
    let http = Http::new(Some(&ca), Some(matcher)).unwrap();
    let cloud = Cloud::with_tokens("t", &settings("https://tpu.test"), &Env::default(), http, tokens.clone()).unwrap();
    assert!(cloud.node().await.unwrap().unwrap().is_ready());
    assert_eq!(seen.lock().unwrap().clone(), ["CONNECT tpu.test:443 HTTP/1.1"]);

    let matcher = Matcher::builder().https(format!("http://127.0.0.1:{proxy}")).no("tpu.test").build();
    let http = Http::new(Some(&ca), Some(matcher)).unwrap();
    let cloud =
        Cloud::with_tokens("t", &settings("https://tpu.test"), &Env::default(), http, tokens).unwrap().with_retry(fast);
    // Direct: the name does not resolve here.
    let e = cloud.node().await.unwrap_err();
    assert!(e.message.starts_with("could not reach tpu.test"), "{e}");
    assert_eq!(seen.lock().unwrap().len(), 1, "NO_PROXY's host went direct");
}
