//! Availability probes of the plain backend against hosts that do not answer: a port
//! that refuses is answered after one connection attempt (no backoff inside a probe), while
//! commands other than probes keep retrying. Loopback only; no sshd is needed.

use std::sync::Arc;

use theseus_backend_ssh::plain::PlainHost;
use theseus_backend_ssh::plain::{PlainBackend, Settings};
use theseus_backend_ssh::ssh::{RemoteCommand, SshHost};
use theseus_backend_ssh::testing::{
    cpu_request, error_chain, gpu_request, loopback_options, refused_port, unreached_cluster,
};
use theseus_core::backend::Backend;

#[tokio::test]
async fn a_refused_port_fails_a_plain_probe_after_exactly_one_connect_attempt() {
    let dir = tempfile::tempdir().unwrap();
    for request in [cpu_request(), gpu_request()] {
        let ssh = Arc::new(SshHost::new(loopback_options(refused_port(), dir.path())));
        let host = PlainHost { ssh: "theseus-probe@127.0.0.1".into(), cluster: "c".into(), ..PlainHost::default() };
        let backend = PlainBackend::with_ssh("box", host, unreached_cluster(), ssh.clone(), Settings::default());
        let err = backend.availability(&request).await.unwrap_err();
        assert_eq!(ssh.connect_attempts(), 1, "{:?}: {err:?}", request.chip);
        let chain = error_chain(&err);
        assert!(chain.to_lowercase().contains("refused"), "the reason is named: {chain}");
    }
}

#[tokio::test]
async fn commands_other_than_probes_still_retry_a_refused_connect() {
    let dir = tempfile::tempdir().unwrap();
    let ssh = SshHost::new(loopback_options(refused_port(), dir.path()));
    ssh.output(&RemoteCommand::new("true").retry_safe()).await.unwrap_err();
    assert_eq!(ssh.connect_attempts(), 5, "the backoff's 5 attempts");
    let probe = SshHost::new(loopback_options(refused_port(), dir.path()));
    probe.output(&RemoteCommand::new("true").probe()).await.unwrap_err();
    assert_eq!(probe.connect_attempts(), 1);
}
