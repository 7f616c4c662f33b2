//! The backend factory: turns a host of the config into an `Arc<dyn Backend>`.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Result};
use async_trait::async_trait;
use theseus_core::availability::Availability;
use theseus_core::backend::{
    not_supported, Backend, DynBackend, JobHandle, JobStatus, LogOptions, LogStream, PreparedJob, RunLayout,
    SubmitOptions,
};
use theseus_core::config::{DispatchConfig, HostConfig, HostKind};
use theseus_core::job::JobIdentity;
use theseus_core::local::LocalBackend;
use theseus_core::solver::{Plan, Request};

/// The backend of host `name`.
pub(crate) fn for_host(config: &DispatchConfig, name: &str, home: &Path) -> Result<Arc<DynBackend>> {
    let host = config.hosts.get(name).ok_or_else(|| anyhow!("unknown host `{name}`"))?;
    let cluster = config
        .clusters
        .get(host.cluster())
        .ok_or_else(|| anyhow!("host `{name}` names unknown cluster `{}`", host.cluster()))?;
    Ok(match host {
        HostConfig::Local(local) => Arc::new(LocalBackend::new(name, local.clone(), cluster.clone(), home)),
        other => Arc::new(Unavailable { host: name.to_owned(), kind: other.kind() }),
    })
}

/// A host whose backend this build does not have yet: every operation is a typed
/// "not supported" error, so the solver passes the host over with that reason.
#[derive(Debug)]
struct Unavailable {
    host: String,
    kind: HostKind,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}) [backend not in this build yet]", self.kind, self.host)
    }
}

#[async_trait]
impl Backend for Unavailable {
    fn kind(&self) -> HostKind {
        self.kind
    }
    fn layout(&self, _: &JobIdentity, _: &Plan) -> theseus_core::Result<RunLayout> {
        Err(not_supported("layout", self))
    }
    async fn availability(&self, _: &Request) -> theseus_core::Result<Availability> {
        Err(not_supported("availability", self))
    }
    async fn submit(&self, _: &PreparedJob, _: &SubmitOptions) -> theseus_core::Result<JobHandle> {
        Err(not_supported("submit", self))
    }
    async fn status(&self, _: &JobHandle) -> theseus_core::Result<JobStatus> {
        Err(not_supported("status", self))
    }
    async fn logs(&self, _: &JobHandle, _: &LogOptions) -> theseus_core::Result<LogStream> {
        Err(not_supported("logs", self))
    }
    async fn cancel(&self, _: &JobHandle) -> theseus_core::Result<JobStatus> {
        Err(not_supported("cancel", self))
    }
}
