//! A host type defined only here, in a test crate: `testbox`, a machine with a `chips` map whose
//! jobs run on this machine. Config loading, validation, the solver's loop and hints, and
//! building its backend take it through core's `HostType`/`HostSettings` traits alone: adding a
//! host type needs no change to core.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use theseus_core::availability::Availability;
use theseus_core::backend::DynBackend;
use theseus_core::chips;
use theseus_core::cluster::ClusterConfig;
use theseus_core::config::validate::canonical_chips;
use theseus_core::config::{ConfigSources, Gpus, HostSettings, HostType, HostTypes, load};
use theseus_core::fit::{Layout, Outcome, Want, one_machine};
use theseus_core::keys::{KeyError, de_strict};
use theseus_core::local::{LocalBackend, LocalHost, LocalType};
use theseus_core::plan::HostKind;
use theseus_core::solver::{ChipRequest, Request, solve};

const KIND: HostKind = HostKind::named("testbox");

/// The `testbox` type.
struct TestboxType;

impl HostType for TestboxType {
    fn kind(&self) -> HostKind {
        KIND
    }

    fn parse(&self, body: Map<String, Value>, path: &str) -> Result<Box<dyn HostSettings>, KeyError> {
        let host: TestboxHost = de_strict(Value::Object(body), path)?;
        Ok(Box::new(host))
    }
}

/// The settings of a `testbox` host.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestboxHost {
    cluster: String,
    #[serde(default)]
    chips: BTreeMap<String, u32>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    uv_groups: Vec<String>,
}

impl HostSettings for TestboxHost {
    theseus_core::common_host_settings!(KIND);

    fn validate(&mut self, path: &str) -> Result<(), KeyError> {
        self.chips = canonical_chips(&self.chips, &format!("{path}.chips"))?;
        Ok(())
    }
    fn gpus(&self) -> Gpus<'_> {
        Gpus::Listed(&self.chips)
    }
    fn fit(&self, _gres_mapping: &BTreeMap<String, String>, want: &Want, availability: &Availability) -> Outcome {
        match *want {
            Want::Cpu { .. } => {
                Outcome::Fits { layout: Layout::cpu(1, 1), reason: "a testbox runs one process".into() }
            }
            Want::Gpu { chip, count } => one_machine(&self.chips, chip, count, availability, 1),
        }
    }
    fn backend(&self, name: &str, cluster: &ClusterConfig, home: &Path) -> Arc<DynBackend> {
        let host = LocalHost { cluster: self.cluster.clone(), chips: self.chips.clone(), ..LocalHost::default() };
        Arc::new(LocalBackend::new(name, host, cluster.clone(), home))
    }
}

static TYPES: &[&dyn HostType] = &[&TestboxType, &LocalType];

fn load_text(home: &Path, text: &str) -> theseus_core::Result<load::LoadedConfig> {
    std::fs::write(home.join(".theseus.yaml"), text).unwrap();
    let sources = ConfigSources {
        home: Some(home.to_owned()),
        host_types: HostTypes::new(TYPES).with_default("testbox"),
        ..ConfigSources::default()
    };
    load::load(&sources)
}

fn gpus(count: u32) -> Request {
    Request {
        chip: ChipRequest::Chip(chips::lookup("h100").unwrap()),
        count,
        preferred_clusters: vec![],
        forbidden_clusters: vec![],
        host: None,
    }
}

#[test]
fn a_host_type_of_a_test_crate_loads_checks_solves_and_builds_its_backend() {
    let home = tempfile::tempdir().unwrap();
    let loaded = load_text(home.path(), "hosts:\n  box: {cluster: local, chips: {H100: 2}}\n").unwrap();
    let host = &loaded.config.hosts["box"];
    assert_eq!(host.kind(), KIND, "a host without `type:` has the registry's default type");
    assert_eq!(host.to_value()["chips"], serde_json::json!({"h100": 2}), "validated: chip names canonical");

    let plan = solve(&loaded.config, &gpus(2), &BTreeMap::new()).unwrap();
    assert_eq!((plan.host.as_str(), plan.kind.as_str(), plan.total_chips), ("box", "testbox", 2));
    let error = solve(&loaded.config, &gpus(4), &BTreeMap::new()).unwrap_err();
    assert!(error.hints.iter().any(|h| h.contains("largest fit is 2 x h100 on box")), "{:?}", error.hints);

    let cluster = &loaded.config.clusters["local"];
    let backend = host.backend("box", cluster, home.path());
    assert_eq!(backend.kind(), HostKind::LOCAL, "its backend is the local one it wraps");

    let error = load_text(home.path(), "hosts:\n  box: {cluster: local, ssh: x}\n").unwrap_err().to_string();
    assert!(
        error.contains("hosts.box.ssh: unknown key \"ssh\" (expected one of: cluster, chips, env, uv_groups)"),
        "{error}"
    );
    let error = load_text(home.path(), "hosts:\n  box: {type: slurm, cluster: local}\n").unwrap_err().to_string();
    assert!(error.contains("unknown host type \"slurm\" (expected one of: testbox, local)"), "{error}");
}
