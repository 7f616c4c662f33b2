//! Availability probes of the plain backend against hosts that do not answer: a port
//! that refuses is answered after one connection attempt (no backoff inside a probe), while
//! commands other than probes keep retrying. Loopback only; no sshd is needed.

use std::sync::Arc;
use std::time::Duration;

use theseus_backend_ssh::plain::{PlainBackend, Settings};
use theseus_backend_ssh::ssh::{Backoff, KnownHostsPolicy, RemoteCommand, SshHost, SshOptions};
use theseus_core::backend::Backend;
use theseus_core::config::{ClusterConfig, PlainHost};
use theseus_core::solver::{ChipRequest, Request};

/// A loopback port nobody listens on (bound, then closed).
fn refused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Options for `127.0.0.1:port` with the default backoff (5 attempts), no config file and a
/// control dir of their own.
fn options(port: u16, control: &std::path::Path) -> SshOptions {
    let mut o = SshOptions::new("theseus-probe@127.0.0.1");
    o.port = Some(port);
    o.config_file = Some(control.join("empty_config"));
    std::fs::write(control.join("empty_config"), "").unwrap();
    o.known_hosts = Some(KnownHostsPolicy::Off);
    o.control_dir = Some(control.to_owned());
    o.backoff = Backoff { initial: Duration::from_millis(50), max: Duration::from_millis(100), attempts: 5 };
    o
}

fn cpu_request() -> Request {
    Request { chip: ChipRequest::Cpu, count: 1, preferred_clusters: vec![], forbidden_clusters: vec![], host: None }
}

fn gpu_request() -> Request {
    Request { chip: ChipRequest::AnyGpu, ..cpu_request() }
}

/// An error and its causes on one line.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

fn cluster() -> ClusterConfig {
    ClusterConfig { root: "/r".into(), work: "/w".into(), ..ClusterConfig::default() }
}

#[tokio::test]
async fn a_refused_port_fails_a_plain_probe_after_exactly_one_connect_attempt() {
    let dir = tempfile::tempdir().unwrap();
    for request in [cpu_request(), gpu_request()] {
        let ssh = Arc::new(SshHost::new(options(refused_port(), dir.path())));
        let host = PlainHost { ssh: "theseus-probe@127.0.0.1".into(), cluster: "c".into(), ..PlainHost::default() };
        let backend = PlainBackend::with_ssh("box", host, cluster(), ssh.clone(), Settings::default());
        let err = backend.availability(&request).await.unwrap_err();
        assert_eq!(ssh.connect_attempts(), 1, "{:?}: {err:?}", request.chip);
        let chain = chain(&err);
        assert!(chain.to_lowercase().contains("refused"), "the reason is named: {chain}");
    }
}

#[tokio::test]
async fn commands_other_than_probes_still_retry_a_refused_connect() {
    let dir = tempfile::tempdir().unwrap();
    let ssh = SshHost::new(options(refused_port(), dir.path()));
    ssh.output(&RemoteCommand::new("true").retry_safe()).await.unwrap_err();
    assert_eq!(ssh.connect_attempts(), 5, "the backoff's 5 attempts");
    let probe = SshHost::new(options(refused_port(), dir.path()));
    probe.output(&RemoteCommand::new("true").probe()).await.unwrap_err();
    assert_eq!(probe.connect_attempts(), 1);
}
