//! The `local` host type: this machine. Its settings ([`LocalHost`]), its fit rule (CPU jobs
//! bounded by the machine's CPUs unless `oversubscribe`, GPU jobs from its `chips` map) and its
//! backend ([`super::LocalBackend`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::LocalBackend;
use crate::availability::Availability;
use crate::backend::DynBackend;
use crate::cluster::ClusterConfig;
use crate::config::validate::{canonical_chips, check_count};
use crate::config::{Gpus, HostSettings, HostType};
use crate::fit::{Layout, Outcome, Want, not_a_gpu, one_machine, plural_es};
use crate::keys::{KeyError, de_strict};
use crate::plan::HostKind;

/// The `local` host type, for the registry.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalType;

impl HostType for LocalType {
    fn kind(&self) -> HostKind {
        HostKind::LOCAL
    }

    fn required_keys(&self) -> &'static [&'static str] {
        &[]
    }

    fn overrides(&self) -> &'static [(&'static str, &'static [&'static str])] {
        &[("oversubscribe", &["oversubscribe"])]
    }

    fn parse(&self, body: Map<String, Value>, path: &str) -> Result<Box<dyn HostSettings>, KeyError> {
        let host: LocalHost = de_strict(Value::Object(body), path)?;
        Ok(Box::new(host))
    }
}

/// `type: local`: this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalHost {
    /// Cluster name (default `local`, a built-in cluster under the user's data dir).
    #[serde(default = "local_cluster")]
    pub cluster: String,
    /// GPUs on this machine, by chip (empty: CPU only).
    #[serde(default)]
    pub chips: BTreeMap<String, u32>,
    /// Processes to start as one distributed job (default 1; `-n N` for CPU jobs overrides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
    /// Port of the JAX coordinator on 127.0.0.1 (default: a free port chosen at submit);
    /// torch's `MASTER_PORT` is the next one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator_port: Option<u16>,
    /// Allow CPU jobs with more processes than this machine has CPUs (default false: such a
    /// request is refused; `--oversubscribe` sets this for one command).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oversubscribe: bool,
    /// `uv sync --group` names.
    #[serde(default)]
    pub uv_groups: Vec<String>,
    /// Environment for jobs on this host.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl Default for LocalHost {
    fn default() -> Self {
        LocalHost {
            cluster: local_cluster(),
            chips: BTreeMap::new(),
            processes: None,
            coordinator_port: None,
            oversubscribe: false,
            uv_groups: Vec::new(),
            env: BTreeMap::new(),
        }
    }
}

/// `cluster` of a local host, and the name of the built-in cluster.
pub fn local_cluster() -> String {
    "local".into()
}

impl HostSettings for LocalHost {
    crate::common_host_settings!(HostKind::LOCAL);

    fn validate(&mut self, path: &str) -> Result<(), KeyError> {
        check_count(&format!("{path}.processes"), self.processes)?;
        self.chips = canonical_chips(&self.chips, &format!("{path}.chips"))?;
        Ok(())
    }

    fn gpus(&self) -> Gpus<'_> {
        Gpus::Listed(&self.chips)
    }

    fn fit(&self, _gres_mapping: &BTreeMap<String, String>, want: &Want, availability: &Availability) -> Outcome {
        fit(self, want, availability)
    }

    fn backend(&self, name: &str, cluster: &ClusterConfig, home: &Path) -> Arc<DynBackend> {
        Arc::new(LocalBackend::new(name, self.clone(), cluster.clone(), home))
    }
}

/// Rules for a `local` host: CPU jobs run `processes` processes (the request's count when it
/// asks for more than one, else the host's `processes`), at most one per CPU of the machine (as
/// measured) unless the host has `oversubscribe`; GPU jobs run `processes` processes sharing
/// the requested GPUs.
fn fit(host: &LocalHost, want: &Want, avail: &Availability) -> Outcome {
    match *want {
        Want::Cpu { processes } => {
            let processes = if processes > 1 { processes } else { host.processes.unwrap_or(1).max(1) };
            if let Availability::Free { chips: cpus, .. } = avail
                && processes > *cpus
                && !host.oversubscribe
            {
                return Outcome::Pass {
                    reason: format!(
                        "needs {processes} processes, this machine has {cpus} CPU{} (pass \
                         --oversubscribe, or set `oversubscribe: true` on the host, to run more \
                         processes than CPUs)",
                        if *cpus == 1 { "" } else { "s" }
                    ),
                    free: Some(*cpus),
                };
            }
            Outcome::Fits {
                layout: Layout::cpu(1, processes),
                reason: format!("runs {processes} process{} here", plural_es(processes)),
            }
        }
        Want::Gpu { chip, count } => one_machine(&host.chips, chip, count, avail, host.processes.unwrap_or(1).max(1)),
        Want::Accelerator { chip, .. } => not_a_gpu(chip, "this machine"),
    }
}
