//! The `tpu` host type ([`TpuType`]): reads a host's keys into [`TpuSettings`] strictly, checks
//! them, gives the solver the TPU rule ([`crate::fit`]) and the dispatcher the backend
//! ([`TpuBackend`]) over the host's VM.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use theseus_core::availability::Availability;
use theseus_core::backend::DynBackend;
use theseus_core::chips::Chip;
use theseus_core::cluster::ClusterConfig;
use theseus_core::config::{FlagConstant, FlagSets, Gpus, HostFlag, HostSettings, HostType};
use theseus_core::fit::{Outcome, Want};
use theseus_core::keys::{KeyError, de_strict};
use theseus_core::plan::HostKind;

use crate::backend::{Connector, TpuBackend};
use crate::config::{KIND, TpuSettings};

/// How long after a job's end worker 0 deletes the VM theseus created for it, unless the client's
/// environment says otherwise in `THESEUS_TPU_SELF_DELETE_AFTER_SECONDS` (so that a client
/// following the job reads its end first).
pub const SELF_DELETE_AFTER: Duration = Duration::from_secs(30);

/// The `tpu` host type, for the registry.
#[derive(Debug, Clone, Copy, Default)]
pub struct TpuType;

impl HostType for TpuType {
    fn kind(&self) -> HostKind {
        KIND
    }

    fn required_keys(&self) -> &'static [&'static str] {
        &["cluster", "zone", "accelerator_type"]
    }

    fn parse(&self, body: Map<String, Value>, path: &str) -> Result<Box<dyn HostSettings>, KeyError> {
        let host: TpuSettings = de_strict(Value::Object(body), path)?;
        Ok(Box::new(host))
    }

    fn flags(&self) -> &'static [HostFlag] {
        FLAGS
    }
}

/// The original's TPU flags of `submit`, `plan` and `repl`: each sets a key of every `tpu` host.
pub const FLAGS: &[HostFlag] = &[
    HostFlag {
        name: "tpu-version",
        help: "TPU runtime version to create TPU VMs with (sets `version` of every tpu host)",
        sets: FlagSets::Value { key: "version", value_name: "VERSION" },
    },
    HostFlag {
        name: "tpu-spot",
        help: "create spot TPU VMs (sets `spot: true` of every tpu host)",
        sets: FlagSets::Constant { key: "spot", value: FlagConstant::Bool(true) },
    },
    HostFlag {
        name: "tpu-on-demand",
        help: "create on-demand TPU VMs (sets `spot: false` of every tpu host)",
        sets: FlagSets::Constant { key: "spot", value: FlagConstant::Bool(false) },
    },
    HostFlag {
        name: "tpu-preemptible",
        help: "create preemptible TPU VMs (sets `preemptible: true` of every tpu host)",
        sets: FlagSets::Constant { key: "preemptible", value: FlagConstant::Bool(true) },
    },
    HostFlag {
        name: "tpu-no-preemptible",
        help: "create TPU VMs that are not preemptible (sets `preemptible: false` of every tpu host)",
        sets: FlagSets::Constant { key: "preemptible", value: FlagConstant::Bool(false) },
    },
];

/// No GPUs on a TPU VM.
static NO_GPUS: BTreeMap<String, u32> = BTreeMap::new();

impl HostSettings for TpuSettings {
    theseus_core::common_host_settings!(KIND);

    fn probe_timeout(&self) -> Option<Duration> {
        TpuSettings::probe_timeout(self)
    }

    fn api_timeout(&self) -> Option<Duration> {
        Some(TpuSettings::api_timeout(self))
    }

    fn validate(&mut self, path: &str) -> Result<(), KeyError> {
        if let Some(name) = path.strip_prefix("hosts.") {
            TpuSettings::check_name(name)?;
        }
        self.check_keys(path)
    }

    fn gpus(&self) -> Gpus<'_> {
        Gpus::Listed(&NO_GPUS)
    }

    fn accelerators(&self) -> Vec<(&'static Chip, u32)> {
        self.accelerator().map(|a| vec![(a.chip, a.chips)]).unwrap_or_default()
    }

    /// Only a request for the host's own chip asks the API (a CPU or GPU job never does).
    fn probes_for(&self, want: &Want) -> bool {
        matches!(want, Want::Accelerator { chip, .. }
            if self.accelerator().is_some_and(|a| a.chip.name == chip.name))
    }

    fn fit(&self, _gres_mapping: &BTreeMap<String, String>, want: &Want, availability: &Availability) -> Outcome {
        crate::fit::fit(self, want, availability)
    }

    fn backend(&self, name: &str, cluster: &ClusterConfig, home: &Path) -> Arc<DynBackend> {
        let connector = Connector {
            user: self.ssh_user.clone(),
            // A recreated VM has new host keys: each incarnation gets a known-hosts file here.
            known_hosts_dir: Some(home.join(".ssh").join("theseus-tpu-known-hosts")),
            ..Connector::default()
        };
        let after = std::env::var("THESEUS_TPU_SELF_DELETE_AFTER_SECONDS")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .map_or(SELF_DELETE_AFTER, Duration::from_secs);
        let vm = crate::backend::cloud_vm::vm(name, self, home);
        // Runs on VMs theseus created are kept for a restart after a preemption, beside the
        // ledger's default place (`--state-dir` does not reach a backend).
        let state = theseus_core::ledger::default_state_dir(home, std::env::var("XDG_STATE_HOME").ok().as_deref());
        let mut backend = TpuBackend::new(name, &self.cluster, cluster.clone(), vm, connector)
            .with_self_delete(after)
            .with_zone(&self.zone, self.project.as_deref())
            .with_spool(state.join("tpu-runs"));
        if let Some(accel) = self.accelerator() {
            backend = backend.with_accelerator(accel);
        }
        Arc::new(backend)
    }
}
