//! The `plain` host type: a GPU box reached over SSH. Its settings ([`PlainHost`]), its fit rule
//! (one process, CPU-only or on GPUs of one type from its `chips` map) and its backend
//! ([`super::PlainBackend`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use theseus_core::availability::Availability;
use theseus_core::backend::DynBackend;
use theseus_core::cluster::ClusterConfig;
use theseus_core::config::ssh::parse_with_connection;
use theseus_core::config::validate::{canonical_chips, check_ssh_destination};
use theseus_core::config::{Gpus, HostSettings, HostType, SshSettings};
use theseus_core::fit::{Layout, Outcome, Want, not_a_gpu, one_machine};
use theseus_core::keys::KeyError;
use theseus_core::plan::HostKind;

use super::{PlainBackend, Settings};
use crate::remote::HostEntry;

/// The kind of plain hosts.
pub const KIND: HostKind = HostKind::named("plain");

/// The `plain` host type, for the registry.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainType;

impl HostType for PlainType {
    fn kind(&self) -> HostKind {
        KIND
    }

    fn required_keys(&self) -> &'static [&'static str] {
        &["ssh", "cluster"]
    }

    fn parse(&self, body: Map<String, Value>, path: &str) -> Result<Box<dyn HostSettings>, KeyError> {
        let (connection, host): (SshSettings, PlainHost) = parse_with_connection(body, path)?;
        Ok(Box::new(PlainHost { connection, ..host }))
    }
}

/// `type: plain`: a machine reached over SSH, jobs started detached.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlainHost {
    /// SSH alias or `user@host`.
    pub ssh: String,
    /// How to connect (`known_hosts`, `connect_timeout`, `max_sessions`, `identity_file`,
    /// `port`, `user`, `proxy_jump`, `ssh_options`, `login_env`), written among the host's keys; unset keys
    /// leave the decision to the user's ssh config. Read by [`PlainType`].
    #[serde(flatten, skip_deserializing)]
    pub connection: SshSettings,
    /// Cluster name.
    pub cluster: String,
    /// Chip name to GPU count on the machine. Empty: CPU-only.
    #[serde(default)]
    pub chips: BTreeMap<String, u32>,
    /// `uv sync --group` names.
    #[serde(default)]
    pub uv_groups: Vec<String>,
    /// Environment for jobs on this host.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How long this host's availability probe may take before the host counts as "unknown"
    /// (e.g. `3s`, `500ms`; default 5s, see `theseus_core::probe::DEFAULT_TIMEOUT`). `--probe-timeout`
    /// overrides it. Parsed by `theseus_core::duration::parse`; more than 0.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "theseus_core::config::duration_text"
    )]
    pub probe_timeout: Option<String>,
}

impl HostEntry for PlainHost {
    const KIND: &'static str = "plain";
    const HOST_KIND: HostKind = KIND;
    fn ssh(&self) -> &str {
        &self.ssh
    }
    fn cluster(&self) -> &str {
        &self.cluster
    }
}

impl HostSettings for PlainHost {
    theseus_core::common_host_settings!(KIND);

    fn probe_timeout(&self) -> Option<Duration> {
        self.probe_timeout.as_deref().and_then(|t| theseus_core::duration::parse(t).ok())
    }

    fn connection(&self) -> Option<&SshSettings> {
        Some(&self.connection)
    }

    fn validate(&mut self, path: &str) -> Result<(), KeyError> {
        check_ssh_destination(&self.ssh).map_err(|m| KeyError::new(format!("{path}.ssh"), m))?;
        self.chips = canonical_chips(&self.chips, &format!("{path}.chips"))?;
        Ok(())
    }

    fn gpus(&self) -> Gpus<'_> {
        Gpus::Listed(&self.chips)
    }

    fn fit(&self, _gres_mapping: &BTreeMap<String, String>, want: &Want, availability: &Availability) -> Outcome {
        fit(self, want, availability)
    }

    fn backend(&self, name: &str, cluster: &ClusterConfig, _home: &Path) -> Arc<DynBackend> {
        let ssh = crate::ssh::connect(&self.ssh, &self.connection);
        Arc::new(PlainBackend::with_ssh(name, self.clone(), cluster.clone(), ssh, Settings::default()))
    }
}

/// Rules for a `plain` host: one process, CPU-only or on `count` GPUs of one type.
fn fit(host: &PlainHost, want: &Want, avail: &Availability) -> Outcome {
    match *want {
        Want::Cpu { processes: 1 } => Outcome::Fits { layout: Layout::cpu(1, 1), reason: "runs one process".into() },
        Want::Cpu { processes } => Outcome::pass(format!("plain hosts run one process; asked for {processes}")),
        Want::Gpu { chip, count } => one_machine(&host.chips, chip, count, avail, 1),
        Want::Accelerator { chip, .. } => not_a_gpu(chip, "a plain host"),
    }
}
