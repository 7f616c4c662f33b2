//! Gang jobs past a thousand pods: what reaches a container's environment stays far under the
//! kernel's limit on one environment string, and the ranks still get the coordinator (rank 0, by
//! a headless Service theseus renders) and the process count.
//!
//! The environment a container gets is computed as Volcano's job controller would build it from
//! the rendered job (pkg/controllers/job/plugins, v1.15): the `env` plugin adds `VK_TASK_INDEX`
//! and `VC_TASK_INDEX`; the `svc` plugin, when the job enables it, adds `VC_<TASK>_HOSTS` and
//! `VC_<TASK>_NUM` from `GenerateHosts` (every pod's `J-T-i.J`, comma-joined) whatever its
//! arguments say on releases before mid-2026.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use theseus_backend_volcano::render::{ENV_COORDINATOR, ENV_NODES, MAX_JOB_NAME, TASK_INDEX_LABEL};
use theseus_backend_volcano::{JobInputs, RenderOptions, render_job};
use theseus_core::job::JobIdentity;

use crate::fixtures::{env, gpu_plan, host, layout};
use crate::schema::assert_valid;

/// Linux's `MAX_ARG_STRLEN`: exec fails with E2BIG when one `NAME=value` string is longer.
const MAX_ARG_STRLEN: usize = 131_072;

/// The longest names theseus renders: a job name of [`MAX_JOB_NAME`] characters.
fn longest_identity() -> JobIdentity {
    JobIdentity {
        name: "n".repeat(80),
        project: "p".repeat(80),
        group: "g".repeat(80),
        run_id: "20261121-134501-a1b2c3".into(),
    }
}

fn rendered(nodes: u32) -> (Value, Value) {
    let (identity, layout, env) = (longest_identity(), layout(), env());
    let plan = gpu_plan(nodes, 8);
    let options = RenderOptions::default();
    let inputs = JobInputs {
        identity: &identity,
        plan: &plan,
        env: &env,
        layout: &layout,
        bootstrap_entry: ".theseus/bootstrap.sh",
        options: &options,
    };
    let rendered = render_job(&host(), &inputs).expect("renders");
    (serde_json::to_value(&rendered.job).unwrap(), serde_json::to_value(&rendered.service).unwrap())
}

/// Volcano's `GenerateHosts` (pkg/controllers/job/plugins/svc/svc.go) for one job: per task,
/// `<task>.host` (newline-joined), `VC_<TASK>_HOSTS` (comma-joined) and `VC_<TASK>_NUM`.
fn generate_hosts(job: &Value) -> BTreeMap<String, String> {
    let name = job["metadata"]["name"].as_str().unwrap();
    let mut out = BTreeMap::new();
    for task in job["spec"]["tasks"].as_array().unwrap() {
        let task_name = task["name"].as_str().unwrap();
        let spec = &task["template"]["spec"];
        let fixed_host = spec["hostname"].as_str().filter(|h| !h.is_empty());
        let subdomain = spec["subdomain"].as_str().filter(|s| !s.is_empty()).unwrap_or(name);
        let replicas = task["replicas"].as_u64().unwrap();
        let mut hosts = Vec::new();
        for i in 0..replicas {
            let host = fixed_host.map_or_else(|| format!("{name}-{task_name}-{i}"), str::to_owned);
            hosts.push(format!("{host}.{subdomain}"));
            if fixed_host.is_some() {
                break;
            }
        }
        let key = task_name.replace('-', "_");
        out.insert(format!("{key}.host"), hosts.join("\n"));
        out.insert(format!("VC_{}_HOSTS", key.to_uppercase()), hosts.join(","));
        out.insert(format!("VC_{}_NUM", key.to_uppercase()), hosts.len().to_string());
    }
    out
}

/// The `NAME=value` strings of the first container of pod `index`, as Volcano's plugins make them
/// from the job (plain values; secret references resolve to the Secret's values, which are the
/// user's).
fn container_env(job: &Value, index: usize) -> Vec<String> {
    let container = &job["spec"]["tasks"][0]["template"]["spec"]["containers"][0];
    let mut env: Vec<String> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| Some(format!("{}={}", v["name"].as_str()?, v["value"].as_str()?)))
        .collect();
    let plugins = job["spec"]["plugins"].as_object().unwrap();
    if plugins.contains_key("env") {
        env.push(format!("VK_TASK_INDEX={index}"));
        env.push(format!("VC_TASK_INDEX={index}"));
    }
    if plugins.contains_key("svc") {
        env.extend(
            generate_hosts(job).into_iter().filter(|(k, _)| k.starts_with("VC_")).map(|(k, v)| format!("{k}={v}")),
        );
    }
    env
}

/// The longest environment string the job's containers get at `nodes` pods.
fn longest_env_string(job: &Value) -> usize {
    container_env(job, 0).iter().map(String::len).max().unwrap()
}

#[test]
fn the_svc_plugins_host_list_would_not_fit_in_one_env_string_at_4096_pods() {
    // Why theseus does not enable `svc`: its host list alone, for theseus's longest names.
    let (job, _) = rendered(4096);
    assert_eq!(job["metadata"]["name"].as_str().unwrap().len(), MAX_JOB_NAME);
    let hosts = &generate_hosts(&job)["VC_WORKER_HOSTS"];
    assert!(hosts.len() + "VC_WORKER_HOSTS=".len() > MAX_ARG_STRLEN, "{}", hosts.len());
    // At 1,024 pods it is already most of the limit.
    let (job, _) = rendered(1024);
    let hosts = &generate_hosts(&job)["VC_WORKER_HOSTS"];
    assert!(hosts.len() > MAX_ARG_STRLEN * 3 / 4, "{}", hosts.len());
}

#[test]
fn a_4096_pod_gang_job_keeps_every_env_string_under_half_the_kernel_limit() {
    let (job, _) = rendered(4096);
    assert_valid(&job);
    let longest = longest_env_string(&job);
    assert!(longest < MAX_ARG_STRLEN / 2, "an env string of {longest} bytes");
    // Nothing grows with the gang: the same longest string at 2 and 4,096 pods.
    assert_eq!(longest_env_string(&rendered(2).0), longest);
    let env = container_env(&job, 7);
    for wanted in [format!("{ENV_NODES}=4096"), "VC_TASK_INDEX=7".into()] {
        assert!(env.contains(&wanted), "{wanted} missing from {env:?}");
    }
}

#[test]
fn the_coordinator_is_a_headless_service_selecting_rank_0() {
    let (job, service) = rendered(4);
    let name = job["metadata"]["name"].as_str().unwrap();
    let env = container_env(&job, 3);
    assert!(env.contains(&format!("{ENV_COORDINATOR}={name}")), "{env:?}");
    assert_eq!(service["metadata"]["name"], name);
    assert_eq!(service["metadata"]["namespace"], job["metadata"]["namespace"]);
    assert_eq!(service["metadata"]["labels"], job["metadata"]["labels"], "gc finds it by the run's labels");
    let spec = &service["spec"];
    assert_eq!(spec["clusterIP"], "None");
    assert_eq!(spec["publishNotReadyAddresses"], true, "ranks connect while rank 0 starts");
    assert_eq!(spec["selector"], json!({"volcano.sh/job-name": name, TASK_INDEX_LABEL: "0"}));
    let port = host().coordinator_port;
    assert_eq!(
        spec["ports"],
        json!([
            {"name": "coordinator", "port": port, "protocol": "TCP"},
            {"name": "torch", "port": port + 1, "protocol": "TCP"}
        ]),
        "torch's MASTER_PORT is the next port"
    );
}
