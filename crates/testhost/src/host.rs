//! The two host-type traits for `type: sandbox`: [`SandboxType`] reads a host's keys into a
//! [`SandboxHost`], which gives the solver its fit rule and the dispatcher its backend.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};
use theseus_core::availability::Availability;
use theseus_core::backend::DynBackend;
use theseus_core::config::{ClusterConfig, FlagSets, Gpus, HostFlag, HostKind, HostSettings, HostType};
use theseus_core::fit::{Outcome, Want};
use theseus_core::keys::{KeyError, de_strict};

use crate::backend::SandboxBackend;
use crate::config::{KIND, SandboxHost};

/// The `sandbox` host type, for a registry.
#[derive(Debug, Clone, Copy, Default)]
pub struct SandboxType;

impl HostType for SandboxType {
    fn kind(&self) -> HostKind {
        KIND
    }

    fn required_keys(&self) -> &'static [&'static str] {
        &["cluster", "slots"]
    }

    fn flags(&self) -> &'static [HostFlag] {
        FLAGS
    }

    fn parse(&self, body: Map<String, Value>, path: &str) -> Result<Box<dyn HostSettings>, KeyError> {
        let host: SandboxHost = de_strict(Value::Object(body), path)?;
        Ok(Box::new(host))
    }
}

/// `--sandbox-slots N` on `submit`, `plan` and `repl` sets `slots` of every sandbox host.
static FLAGS: &[HostFlag] = &[HostFlag {
    name: "sandbox-slots",
    help: "Processes a job may run on a sandbox host, instead of its `slots`",
    sets: FlagSets::Value { key: "slots", value_name: "N" },
}];

/// No GPUs: a sandbox lists none.
static NO_GPUS: BTreeMap<String, u32> = BTreeMap::new();

impl HostSettings for SandboxHost {
    theseus_core::common_host_settings!(KIND);

    fn validate(&mut self, path: &str) -> Result<(), KeyError> {
        SandboxHost::validate(self, path)
    }

    fn gpus(&self) -> Gpus<'_> {
        Gpus::Listed(&NO_GPUS)
    }

    fn fit(&self, _gres_mapping: &BTreeMap<String, String>, want: &Want, _availability: &Availability) -> Outcome {
        crate::fit::fit(self.slots, want)
    }

    fn plan_notes(&self, name: &str) -> Vec<String> {
        vec![format!("{name} is a test sandbox: the job runs as local processes under its dir")]
    }

    fn backend(&self, name: &str, cluster: &ClusterConfig, home: &Path) -> Arc<DynBackend> {
        Arc::new(SandboxBackend::new(name, self.clone(), cluster.clone(), home))
    }
}
