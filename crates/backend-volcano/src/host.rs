//! The `volcano` host type: a Kubernetes cluster with the Volcano batch scheduler. Reads
//! [`VolcanoHost`] settings, checks them (Kubernetes quantities and names, cluster paths on the
//! PVC), and gives the solver its rule ([`crate::rule`]) and the dispatcher its backend.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use theseus_core::availability::Availability;
use theseus_core::backend::DynBackend;
use theseus_core::cluster::ClusterConfig;
use theseus_core::config::validate::{canonical_chips, check_count};
use theseus_core::config::{Gpus, HostSettings, HostType};
use theseus_core::fit::{Outcome, Want};
use theseus_core::keys::{KeyError, de_strict};
use theseus_core::plan::HostKind;

use crate::VolcanoBackend;
use crate::config::{KIND, VolcanoHost};

/// The `volcano` host type, for the registry.
#[derive(Debug, Clone, Copy, Default)]
pub struct VolcanoType;

impl HostType for VolcanoType {
    fn kind(&self) -> HostKind {
        KIND
    }

    fn overrides(&self) -> &'static [(&'static str, &'static [&'static str])] {
        &[
            ("image", &["image"]),
            ("namespace", &["namespace"]),
            ("cpu", &["cpu", "cpu_cpu"]),
            ("mem", &["memory", "cpu_memory"]),
        ]
    }

    fn parse(&self, body: Map<String, Value>, path: &str) -> Result<Box<dyn HostSettings>, KeyError> {
        let host: VolcanoHost = de_strict(Value::Object(body), path)?;
        Ok(Box::new(host))
    }
}

impl HostSettings for VolcanoHost {
    theseus_core::common_host_settings!(KIND);

    fn probe_timeout(&self) -> Option<Duration> {
        self.probe_timeout.as_deref().and_then(|t| theseus_core::duration::parse(t).ok())
    }

    fn api_timeout(&self) -> Option<Duration> {
        crate::client::api_timeout(self).ok()
    }

    fn validate(&mut self, path: &str) -> Result<(), KeyError> {
        for (key, count) in [
            ("gpus_per_node", Some(self.gpus_per_node)),
            ("num_nodes", Some(self.num_nodes)),
            ("rdma_per_node", Some(self.rdma_per_node)),
        ] {
            check_count(&format!("{path}.{key}"), count)?;
        }
        self.chips = canonical_chips(&self.chips, &format!("{path}.chips"))?;
        Ok(())
    }

    fn check(&self, name: &str, cluster: &ClusterConfig) -> Result<Vec<String>, KeyError> {
        crate::validate_host(name, self).map_err(|message| match message.split_once(": ") {
            Some((key, rest)) => KeyError::new(key, rest),
            None => KeyError::new(message.split(':').next().unwrap_or_default(), message.clone()),
        })?;
        crate::check_cluster_paths(name, self, &self.cluster, cluster).map_err(|(key, m)| KeyError::new(key, m))?;
        let mut warnings = Vec::new();
        if cluster.mount.is_some() {
            warnings.push(format!(
                "clusters.{}.mount is ignored for volcano host `{name}`: its pods see the PVC `{}` at `{}`",
                self.cluster, self.pvc_name, self.pvc_mount_path
            ));
        }
        Ok(warnings)
    }

    fn gpus(&self) -> Gpus<'_> {
        Gpus::Listed(&self.chips)
    }

    fn fit(&self, _gres_mapping: &BTreeMap<String, String>, want: &Want, availability: &Availability) -> Outcome {
        crate::rule::solve(self, want, availability)
    }

    fn backend(&self, name: &str, cluster: &ClusterConfig, _home: &Path) -> Arc<DynBackend> {
        Arc::new(VolcanoBackend::new(name, self.clone(), cluster.clone()))
    }
}
