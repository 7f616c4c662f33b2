//! The main property: for every valid case, the gang job and the helper validate against the
//! upstream jobs CRD (unknown fields forbidden), are sized by the plan, carry valid names and
//! labels, hold no secret value, and run a pod script that parses and quotes paths faithfully.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use proptest::prelude::*;
use serde_json::Value;
use theseus_backend_volcano::render::{LABEL_GROUP, LABEL_NAME, LABEL_PROJECT, LABEL_RUN_ID};
use theseus_backend_volcano::{
    JobInputs, is_label_key, is_label_value, job_name, redacted, render_helper, render_job, validate_host,
};

use super::script::{ScriptRun, run_with_stubs};
use super::strategies::{Case, case};
use crate::schema::errors;

/// Cases of the main property (each renders three manifests and runs one bash process).
const CASES: u32 = 256;

fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn schema_ok(what: &str, value: &Value) -> Result<(), TestCaseError> {
    let errors = errors(value);
    prop_assert!(errors.is_empty(), "{what} fails the CRD schema:\n{}\n{value:#}", errors.join("\n"));
    Ok(())
}

/// The `theseus.dev/*` labels and every other label are valid, and the pods carry the job's.
fn labels_ok(job: &Value) -> Result<(), TestCaseError> {
    let labels = job["metadata"]["labels"].as_object().expect("labels");
    for key in [LABEL_PROJECT, LABEL_GROUP, LABEL_NAME, LABEL_RUN_ID] {
        let value = labels[key].as_str().expect("a theseus label");
        prop_assert!(!value.is_empty() && is_label_value(value), "{key}={value:?}");
    }
    for (key, value) in labels {
        prop_assert!(is_label_key(key) && is_label_value(value.as_str().unwrap()), "{key}={value}");
    }
    for task in job["spec"]["tasks"].as_array().unwrap() {
        prop_assert_eq!(&task["template"]["metadata"]["labels"], &job["metadata"]["labels"]);
    }
    Ok(())
}

/// Every container's requests equal its limits.
fn requests_are_limits(job: &Value) -> Result<(), TestCaseError> {
    for task in job["spec"]["tasks"].as_array().unwrap() {
        prop_assert_eq!(&task["template"]["spec"]["schedulerName"], "volcano");
        for c in task["template"]["spec"]["containers"].as_array().unwrap() {
            prop_assert_eq!(&c["resources"]["requests"], &c["resources"]["limits"]);
        }
    }
    Ok(())
}

fn check_job(case: &Case, job: &Value) -> Result<(), TestCaseError> {
    schema_ok("the gang job", job)?;
    let spec = &job["spec"];
    let task = &spec["tasks"][0];
    let nodes = i64::from(case.plan.nodes);
    prop_assert_eq!(spec["minAvailable"].as_i64(), Some(nodes));
    prop_assert_eq!(task["replicas"].as_i64(), Some(nodes));
    prop_assert_eq!(task["minAvailable"].as_i64(), Some(nodes));
    prop_assert_eq!(&spec["schedulerName"], "volcano");
    prop_assert_eq!(spec["maxRetry"].as_i64(), Some(i64::from(case.options.max_retry)));
    prop_assert_eq!(spec["ttlSecondsAfterFinished"].as_i64(), case.options.ttl_seconds_after_finished.map(i64::from));
    requests_are_limits(job)?;

    let limits = task["template"]["spec"]["containers"][0]["resources"]["limits"].as_object().unwrap();
    let gpus = limits.get(&case.host.gpu_resource_key).and_then(Value::as_str);
    if case.plan.chip.is_some() {
        let want = case.plan.chips_per_node.to_string();
        prop_assert_eq!(gpus, Some(want.as_str()));
        prop_assert_eq!(limits.contains_key("rdma/rdma_shared_device_a"), case.host.rdma);
    } else {
        prop_assert_eq!(gpus, None);
        prop_assert!(limits.contains_key("cpu") && limits.contains_key("memory"));
    }

    let name = job["metadata"]["name"].as_str().unwrap();
    prop_assert_eq!(name, job_name(&case.identity));
    prop_assert!(name.len() <= 50 && is_dns_label(name), "{name:?}");
    labels_ok(job)?;

    let text = serde_json::to_string(job).unwrap();
    for var in case.env.iter().filter(|v| v.secret) {
        prop_assert!(!text.contains(&var.value), "secret {} leaks into the job", var.name);
    }
    Ok(())
}

fn check_secret(case: &Case, job_name: &str, secret: Option<&Secret>) -> Result<(), TestCaseError> {
    let secrets: BTreeMap<&str, &str> =
        case.env.iter().filter(|v| v.secret).map(|v| (v.name.as_str(), v.value.as_str())).collect();
    let Some(secret) = secret else {
        prop_assert!(secrets.is_empty(), "secret env without a Secret");
        return Ok(());
    };
    prop_assert_eq!(secret.metadata.name.as_deref(), Some(job_name));
    prop_assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    let data = secret.string_data.as_ref().expect("stringData");
    let data: BTreeMap<&str, &str> = data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    prop_assert_eq!(&data, &secrets);
    for key in data.keys() {
        prop_assert!(key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)), "{key}");
    }
    let shown = serde_json::to_string(&redacted(secret)).unwrap();
    for value in secrets.values() {
        prop_assert!(!shown.contains(value), "redacted() shows a secret");
    }
    Ok(())
}

fn check_script(case: &Case, script: &str) -> Result<(), TestCaseError> {
    let ScriptRun { parses, status, mkdir, boot, tee } = run_with_stubs(script);
    prop_assert!(parses, "bash -n rejects the pod script:\n{script}");
    let entry = theseus_core::config::join(&case.layout.work_dir, &case.bootstrap_entry);
    let log_dir = case.layout.log_file.rsplit_once('/').unwrap().0;
    prop_assert_eq!(mkdir, vec!["-p".to_owned(), log_dir.to_owned()]);
    prop_assert_eq!(boot, vec![entry]);
    prop_assert_eq!(tee, vec!["-a".to_owned(), case.layout.log_file.clone()]);
    prop_assert_eq!(status, Some(super::script::BOOT_STATUS));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn every_rendered_manifest_is_valid(case in case()) {
        prop_assert_eq!(validate_host("k8s", &case.host), Ok(()));
        let inputs = JobInputs {
            identity: &case.identity,
            plan: &case.plan,
            env: &case.env,
            layout: &case.layout,
            bootstrap_entry: &case.bootstrap_entry,
            options: &case.options,
        };
        let rendered = render_job(&case.host, &inputs).expect("a valid case renders");
        let job = serde_json::to_value(&rendered.job).unwrap();
        check_job(&case, &job)?;
        check_secret(&case, job["metadata"]["name"].as_str().unwrap(), rendered.secret.as_ref())?;

        let helper = render_helper(&case.host, &case.identity, &case.layout.work_dir).expect("the helper renders");
        let helper = serde_json::to_value(&helper).unwrap();
        schema_ok("the helper", &helper)?;
        prop_assert_eq!(helper["spec"]["minAvailable"].as_i64(), Some(1));
        prop_assert_eq!(&helper["spec"]["schedulerName"], "volcano");
        prop_assert!(is_dns_label(helper["metadata"]["name"].as_str().unwrap()));
        labels_ok(&helper)?;
        let helper_script = helper["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"][2].as_str();
        let parsed = std::process::Command::new("sh").args(["-n", "-c", helper_script.unwrap()]).status().unwrap();
        prop_assert!(parsed.success());

        let args = &job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["args"];
        check_script(&case, args[0].as_str().unwrap())?;
    }
}
