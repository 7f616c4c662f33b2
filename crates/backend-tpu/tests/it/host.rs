//! The `tpu` host type through core's traits: a host's keys parsed strictly and checked, the
//! solver's rule, and the accelerators it offers.

use theseus_backend_tpu::host::TpuType;
use theseus_core::availability::Availability;
use theseus_core::chips;
use theseus_core::config::HostType;
use theseus_core::fit::{Outcome, Want};

fn parse(yaml: serde_json::Value, name: &str) -> Result<Box<dyn theseus_core::config::HostSettings>, String> {
    let body = yaml.as_object().unwrap().clone();
    let mut host = TpuType.parse(body, &format!("hosts.{name}")).map_err(|e| format!("{e:?}"))?;
    host.validate(&format!("hosts.{name}")).map_err(|e| format!("{e:?}"))?;
    Ok(host)
}

#[test]
fn a_tpu_host_parses_checks_and_takes_a_request_for_its_chip_whole() {
    let host = parse(
        serde_json::json!({"cluster": "gcp", "zone": "us-central2-b", "accelerator_type": "v4-32", "version": "tpu-ubuntu2204-base", "spot": true}),
        "big-tpu",
    )
    .unwrap();
    assert_eq!(host.kind().to_string(), "tpu");
    let v4 = chips::lookup("tpu-v4").unwrap();
    assert_eq!(host.accelerators(), vec![(v4, 16)]);
    let free = Availability::Free { chips: 16, source: "reuses VM `big-tpu`, READY".into() };
    match host.fit(&Default::default(), &Want::Accelerator { chip: v4, count: 8 }, &free) {
        Outcome::Fits { layout, reason } => {
            assert_eq!((layout.nodes, layout.processes_per_node, layout.total_chips()), (4, 1, 16));
            assert!(reason.contains("reuses VM"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(host.fit(&Default::default(), &Want::Cpu { processes: 1 }, &free), Outcome::Pass { .. }));
    // Only a request for its chip asks the API.
    assert!(host.probes_for(&Want::Accelerator { chip: v4, count: 1 }));
    assert!(!host.probes_for(&Want::Cpu { processes: 1 }));
    assert!(!host.probes_for(&Want::Gpu { chip: None, count: 1 }));
    assert!(!host.probes_for(&Want::Accelerator { chip: chips::lookup("tpu-v5p").unwrap(), count: 1 }));
}

#[test]
fn bad_keys_and_names_are_refused_naming_the_key() {
    let err = parse(serde_json::json!({"cluster": "c", "zone": "z-1", "accelerator_type": "v4-32", "nope": 1}), "t")
        .unwrap_err();
    assert!(err.contains("hosts.t.nope") || err.contains("nope"), "{err}");
    let err =
        parse(serde_json::json!({"cluster": "c", "zone": "z-1", "accelerator_type": "v4-32"}), "Bad_Name").unwrap_err();
    assert!(err.contains("hosts.Bad_Name"), "{err}");
    let err = parse(serde_json::json!({"cluster": "c", "zone": "z-1", "accelerator_type": "v4-7"}), "t").unwrap_err();
    assert!(err.contains("hosts.t.accelerator_type"), "{err}");
}

#[test]
fn the_type_declares_the_originals_tpu_flags_each_setting_a_key_it_reads() {
    let names: Vec<_> = TpuType.flags().iter().map(|f| f.name).collect();
    assert_eq!(names, ["tpu-version", "tpu-spot", "tpu-on-demand", "tpu-preemptible", "tpu-no-preemptible"]);
    for flag in TpuType.flags() {
        let value = match flag.sets {
            theseus_core::config::FlagSets::Value { .. } => serde_json::json!("tpu-ubuntu2204-base"),
            theseus_core::config::FlagSets::Constant { value: theseus_core::config::FlagConstant::Bool(b), .. } => {
                serde_json::json!(b)
            }
            theseus_core::config::FlagSets::Constant { value: theseus_core::config::FlagConstant::Text(t), .. } => {
                serde_json::json!(t)
            }
        };
        let mut body = serde_json::json!({"cluster": "c", "zone": "z-1", "accelerator_type": "v4-8"});
        body[flag.key()] = value;
        parse(body, "t").unwrap_or_else(|e| panic!("--{}: {e}", flag.name));
    }
}
