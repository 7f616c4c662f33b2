//! The availability probe of the Slurm backend against a host that does not answer: a port that
//! refuses is answered after one connection attempt (no backoff inside a probe). Loopback only;
//! no sshd is needed.

use std::sync::Arc;
use std::time::Duration;

use theseus_backend_slurm::slurm::{Settings, SlurmBackend};
use theseus_backend_ssh::ssh::{Backoff, KnownHostsPolicy, SshHost, SshOptions};
use theseus_core::backend::Backend;
use theseus_core::config::{ClusterConfig, SlurmHost};
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

fn gpu_request() -> Request {
    Request { chip: ChipRequest::AnyGpu, count: 1, preferred_clusters: vec![], forbidden_clusters: vec![], host: None }
}

fn cluster() -> ClusterConfig {
    ClusterConfig { root: "/r".into(), work: "/w".into(), ..ClusterConfig::default() }
}

#[tokio::test]
async fn a_refused_port_fails_a_slurm_probe_after_exactly_one_connect_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let ssh = Arc::new(SshHost::new(options(refused_port(), dir.path())));
    let host = SlurmHost { ssh: "theseus-probe@127.0.0.1".into(), cluster: "c".into(), ..SlurmHost::default() };
    let backend = SlurmBackend::with_ssh("hpc", host, cluster(), ssh.clone(), Settings::default());
    let err = backend.availability(&gpu_request()).await.unwrap_err();
    assert_eq!(ssh.connect_attempts(), 1, "{err:?}");
}
