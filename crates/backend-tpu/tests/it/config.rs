//! The settings of a `tpu` host as a config file writes them: the original's example loads,
//! unknown keys are refused with the key's full name.

use serde_json::Value;
use theseus_backend_tpu::config::TpuSettings;
use theseus_core::keys::de_strict;

/// The `hosts.my-tpu-v4` body of the original's example config (core's test data), without `type`.
fn original_tpu_host() -> serde_json::Map<String, Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../core/test_data/original-dispatch.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let config: Value = serde_saphyr::from_str(&text).unwrap();
    let mut host = config["hosts"]["my-tpu-v4"].as_object().unwrap().clone();
    assert_eq!(host.remove("type"), Some(Value::String("tpu".into())));
    host
}

#[test]
fn the_originals_example_loads() {
    let host: TpuSettings = de_strict(Value::Object(original_tpu_host()), "hosts.my-tpu-v4").unwrap();
    host.check_keys("hosts.my-tpu-v4").unwrap();
    TpuSettings::check_name("my-tpu-v4").unwrap();
    assert_eq!(host.zone, "us-central2-b");
    assert_eq!(host.project.as_deref(), Some("my-gcp-project"));
    assert!(host.spot && !host.preemptible);
    assert_eq!(host.uv_groups, ["tpu"]);
    assert_eq!(host.env["JAX_PLATFORMS"], "tpu");
    // The original read v4-32 as 32 chips; it is 32 TensorCores: 16 chips on 4 workers.
    let accelerator = host.accelerator().unwrap();
    assert_eq!((accelerator.chip.name, accelerator.chips, accelerator.workers), ("tpu-v4", 16, 4));
}

#[test]
fn unknown_keys_are_refused_with_their_path() {
    let mut body = original_tpu_host();
    body.insert("acelerator_type".into(), Value::String("v4-8".into()));
    let e = de_strict::<TpuSettings>(Value::Object(body), "hosts.my-tpu-v4").unwrap_err();
    assert_eq!(e.path, "hosts.my-tpu-v4.acelerator_type");
    assert!(e.message.contains("unknown key \"acelerator_type\""), "{}", e.message);
}

#[test]
fn flags_written_as_text_still_parse() {
    // `--set hosts.NAME.spot=true` and numbers in maps arrive as scalars of any type.
    let mut body = original_tpu_host();
    body.insert("spot".into(), Value::Bool(false));
    body.insert("preemptible".into(), Value::Bool(true));
    body.insert("metadata".into(), serde_json::json!({"enable-oslogin": false, "n": 2}));
    let host: TpuSettings = de_strict(Value::Object(body), "hosts.t").unwrap();
    assert_eq!(host.pricing(), "preemptible");
    assert_eq!(host.metadata["enable-oslogin"], "false");
    assert_eq!(host.metadata["n"], "2");
}
