//! The availability probe of the Slurm backend against a host that does not answer: a port that
//! refuses is answered after one connection attempt (no backoff inside a probe). Loopback only;
//! no sshd is needed.

use std::sync::Arc;

use theseus_backend_slurm::SlurmHost;
use theseus_backend_slurm::slurm::{Settings, SlurmBackend};
use theseus_backend_ssh::ssh::SshHost;
use theseus_backend_ssh::testing::{gpu_request, loopback_options, refused_port, unreached_cluster};
use theseus_core::backend::Backend;

#[tokio::test]
async fn a_refused_port_fails_a_slurm_probe_after_exactly_one_connect_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let ssh = Arc::new(SshHost::new(loopback_options(refused_port(), dir.path())));
    let host = SlurmHost { ssh: "theseus-probe@127.0.0.1".into(), cluster: "c".into(), ..SlurmHost::default() };
    let backend = SlurmBackend::with_ssh("hpc", host, unreached_cluster(), ssh.clone(), Settings::default());
    let err = backend.availability(&gpu_request()).await.unwrap_err();
    assert_eq!(ssh.connect_attempts(), 1, "{err:?}");
}
