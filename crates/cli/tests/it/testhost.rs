//! A host type defined only here, in a test crate: `testbox`, a machine with a `chips` map of
//! GPUs and an `accelerators` map of other chips, whose jobs run on this machine. Config loading, validation, the solver's loop and hints, and
//! building its backend take it through core's `HostType`/`HostSettings` traits alone: adding a
//! host type needs no change to core.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use theseus_core::availability::Availability;
use theseus_core::backend::DynBackend;
use theseus_core::chips::{self, Chip};
use theseus_core::cluster::ClusterConfig;
use theseus_core::config::validate::canonical_chips;
use theseus_core::config::{ConfigSources, Gpus, HostSettings, HostType, HostTypes, load};
use theseus_core::fit::{Layout, Outcome, Want, not_a_gpu, one_machine};
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
    accelerators: BTreeMap<String, u32>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    uv_groups: Vec<String>,
}

impl HostSettings for TestboxHost {
    theseus_core::common_host_settings!(KIND);

    fn validate(&mut self, path: &str) -> Result<(), KeyError> {
        self.chips = canonical_chips(&self.chips, &format!("{path}.chips"))?;
        self.accelerators = canonical_chips(&self.accelerators, &format!("{path}.accelerators"))?;
        Ok(())
    }
    fn gpus(&self) -> Gpus<'_> {
        Gpus::Listed(&self.chips)
    }
    fn accelerators(&self) -> Vec<(&'static Chip, u32)> {
        self.accelerators.iter().filter_map(|(name, n)| Some((chips::lookup(name)?, *n))).collect()
    }
    fn fit(&self, _gres_mapping: &BTreeMap<String, String>, want: &Want, availability: &Availability) -> Outcome {
        match *want {
            Want::Cpu { .. } => {
                Outcome::Fits { layout: Layout::cpu(1, 1), reason: "a testbox runs one process".into() }
            }
            Want::Gpu { chip, count } => one_machine(&self.chips, chip, count, availability, 1),
            Want::Accelerator { chip, count } => match self.accelerators.get(chip.name) {
                Some(&n) if n >= count => Outcome::Fits {
                    layout: Layout {
                        chip: Some(chip),
                        nodes: 1,
                        chips_per_node: n,
                        processes_per_node: 1,
                        ..Layout::default()
                    },
                    reason: format!("has {n} {chip}"),
                },
                Some(&n) => Outcome::Pass { reason: format!("needs {count} {chip}, has {n}"), free: Some(n) },
                None => not_a_gpu(chip, "a testbox without it"),
            },
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
    of("h100", count)
}

fn of(chip: &str, count: u32) -> Request {
    Request {
        chip: ChipRequest::Chip(chips::lookup(chip).unwrap()),
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
        error.contains(
            "hosts.box.ssh: unknown key \"ssh\" (expected one of: cluster, chips, accelerators, env, uv_groups)"
        ),
        "{error}"
    );
    let error = load_text(home.path(), "hosts:\n  box: {type: slurm, cluster: local}\n").unwrap_err().to_string();
    assert!(error.contains("unknown host type \"slurm\" (expected one of: testbox, local)"), "{error}");
}

#[test]
fn a_host_type_that_offers_another_accelerator_takes_its_requests_and_the_hints_name_it() {
    let home = tempfile::tempdir().unwrap();
    let config = "hosts:\n  box: {cluster: local, chips: {h100: 2}}\n  pod: {cluster: local, accelerators: {V5E: 8}}\n";
    let loaded = load_text(home.path(), config).unwrap();
    let plan = solve(&loaded.config, &of("tpu-v5e", 4), &BTreeMap::new()).unwrap();
    assert_eq!((plan.host.as_str(), plan.total_chips), ("pod", 8), "{:?}", plan.considered);
    assert_eq!(plan.considered[0].reason, "tpu-v5e is not a GPU; a testbox without it runs GPU and CPU jobs only");

    let error = solve(&loaded.config, &of("tpu-v5e", 16), &BTreeMap::new()).unwrap_err();
    assert_eq!(error.hints, ["largest fit is 8 x tpu-v5e on pod: `-n 8` runs now"]);
    let error = solve(&loaded.config, &of("tpu-v4", 4), &BTreeMap::new()).unwrap_err();
    assert_eq!(
        error.hints,
        ["no host offers tpu-v4; the config has tpu-v5e on pod: ask for one of those with `--chip`"]
    );
    // A GPU request never goes to the accelerator: its host has no GPUs.
    let error = solve(&loaded.config, &gpus(4), &BTreeMap::new()).unwrap_err();
    assert_eq!(error.considered[1].reason, "no h100 in chips (none)");
    // Without GPU hosts, the hint names the accelerator a request could name.
    let loaded = load_text(home.path(), "hosts:\n  pod: {cluster: local, accelerators: {v5e: 8}}\n").unwrap();
    let error = solve(&loaded.config, &gpus(1), &BTreeMap::new()).unwrap_err();
    assert_eq!(
        error.hints.last().map(String::as_str),
        Some("the config has tpu-v5e on pod: ask for it with `--chip tpu-v5e`"),
        "{:?}",
        error.hints
    );
}
