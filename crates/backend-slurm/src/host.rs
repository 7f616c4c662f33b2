//! The `slurm` host type: a Slurm cluster reached over SSH to its login node. Reads
//! [`SlurmHost`] settings, checks them, and gives the solver its rule ([`crate::fit`]) and the
//! dispatcher its backend ([`SlurmBackend`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use theseus_core::availability::Availability;
use theseus_core::backend::DynBackend;
use theseus_core::cluster::ClusterConfig;
use theseus_core::config::ssh::parse_with_connection;
use theseus_core::config::validate::{canonical_chips, check_count, check_ssh_destination};
use theseus_core::config::{Gpus, HostSettings, HostType, SshSettings};
use theseus_core::fit::{Outcome, Want};
use theseus_core::keys::KeyError;
use theseus_core::plan::HostKind;

use crate::config::{DEFAULT_SLURM_TIME, KIND, SlurmHost};
use crate::slurm::{Settings, SlurmBackend};

/// The `slurm` host type, for the registry.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlurmType;

impl HostType for SlurmType {
    fn kind(&self) -> HostKind {
        KIND
    }

    fn required_keys(&self) -> &'static [&'static str] {
        &["ssh", "cluster"]
    }

    fn overrides(&self) -> &'static [(&'static str, &'static [&'static str])] {
        &[("mem", &["mem"])]
    }

    fn parse(&self, body: Map<String, Value>, path: &str) -> Result<Box<dyn HostSettings>, KeyError> {
        let (connection, host): (SshSettings, SlurmHost) = parse_with_connection(body, path)?;
        Ok(Box::new(SlurmHost { connection, ..host }))
    }
}

impl HostSettings for SlurmHost {
    theseus_core::common_host_settings!(KIND);

    fn probe_timeout(&self) -> Option<Duration> {
        self.probe_timeout.as_deref().and_then(|t| theseus_core::duration::parse(t).ok())
    }

    fn connection(&self) -> Option<&SshSettings> {
        Some(&self.connection)
    }

    fn validate(&mut self, path: &str) -> Result<(), KeyError> {
        check_count(&format!("{path}.gpus_per_node"), self.gpus_per_node)?;
        check_ssh_destination(&self.ssh).map_err(|m| KeyError::new(format!("{path}.ssh"), m))?;
        if let Some(chips) = &mut self.chips {
            *chips = canonical_chips(chips, &format!("{path}.chips"))?;
        }
        for (i, p) in self.partitions.iter().enumerate() {
            if p.name().trim().is_empty() {
                return Err(KeyError::new(
                    format!("{path}.partitions"),
                    format!("partitions[{i}]: empty partition name"),
                ));
            }
        }
        for (i, p) in self.cpu_partitions.iter().enumerate() {
            if p.trim().is_empty() {
                return Err(KeyError::new(
                    format!("{path}.cpu_partitions"),
                    format!("cpu_partitions[{i}]: empty partition name"),
                ));
            }
        }
        Ok(())
    }

    fn gpus(&self) -> Gpus<'_> {
        match &self.chips {
            Some(chips) if !chips.is_empty() => Gpus::Listed(chips),
            _ => Gpus::Unlisted,
        }
    }

    fn fit(&self, gres_mapping: &BTreeMap<String, String>, want: &Want, availability: &Availability) -> Outcome {
        crate::fit::fit(gres_mapping, self, want, availability)
    }

    fn queued_note(&self, request: &str, name: &str) -> String {
        format!("no host has {request} free now; sending to {name} where Slurm will queue it")
    }

    fn plan_notes(&self, name: &str) -> Vec<String> {
        vec![match &self.time {
            Some(t) => format!("time limit {t} (the host's `time:`)"),
            None => format!("time limit {DEFAULT_SLURM_TIME} (the default; set `time:` on host `{name}` for another)"),
        }]
    }

    fn backend(&self, name: &str, cluster: &ClusterConfig, _home: &Path) -> Arc<DynBackend> {
        let ssh = theseus_backend_ssh::ssh::connect(&self.ssh, &self.connection);
        Arc::new(SlurmBackend::with_ssh(name, self.clone(), cluster.clone(), ssh, Settings::default()))
    }
}
