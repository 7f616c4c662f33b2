//! The registry is the plug: the `theseus` binary's host types do not read a sandbox host, the
//! same list plus [`SandboxType`] does, and core's solver then runs the sandbox's fit rule.

use std::collections::BTreeMap;

use theseus_core::config::{HostType, HostTypes, load};
use theseus_core::plan::{ChipRequest, Request};
use theseus_core::solver::solve;
use theseus_testhost::{KIND, SandboxType};

fn config() -> serde_json::Value {
    serde_json::json!({
        "clusters": {"box": {"root": "/r", "work": "/w"}},
        "hosts": {"sb": {"type": "sandbox", "cluster": "box", "slots": 2}},
    })
}

fn cpu(count: u32) -> Request {
    Request { chip: ChipRequest::Cpu, count, preferred_clusters: vec![], forbidden_clusters: vec![], host: None }
}

#[test]
fn the_built_in_types_refuse_a_sandbox_host_and_one_more_line_reads_it() {
    let built_in = HostTypes::new(theseus_cli::HOST_TYPES);
    let err = load::from_value(&config(), &built_in).unwrap_err().to_string();
    assert!(err.contains("hosts.sb.type") && err.contains("unknown host type \"sandbox\""), "{err}");

    let types: Vec<&'static dyn HostType> =
        theseus_cli::HOST_TYPES.iter().copied().chain([&SandboxType as _]).collect();
    let config = load::from_value(&config(), &HostTypes::new(&types)).unwrap();
    assert_eq!(config.hosts["sb"].kind(), KIND);
    let plan = solve(&config, &cpu(2), &BTreeMap::new()).unwrap();
    assert_eq!((plan.host.as_str(), plan.processes()), ("sb", 2));
    let err = solve(&config, &cpu(3), &BTreeMap::new()).unwrap_err();
    let reasons: Vec<_> = err.considered.iter().map(|c| format!("{}: {}", c.host, c.reason)).collect();
    assert_eq!(reasons, ["sb: needs 3 processes, the sandbox has 2 slots (raise `slots` on the host)"]);
}
