//! Recognising and loading job configs of the original.

use serde_json::json;

use super::*;

const JOB: &str =
    "job: toy/train\nrequest: {chip: H100, min_chips: 2}\ntraining: {lr: 0.1, per_device_batch_size: 8}\n";

fn load(text: &str, options: &Options, overrides: &[&str]) -> Result<Experiment> {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    from_yaml(text, "job.yaml", options, &overrides)
}

fn message(r: Result<Experiment>) -> String {
    r.expect_err("an error").to_string()
}

#[test]
fn a_job_config_becomes_an_experiment_running_the_runner() {
    let e = load(JOB, &Options::default(), &["training.lr=0.5", "model.depth=2"]).unwrap();
    assert_eq!(e.job_key.as_deref(), Some("toy/train"));
    assert_eq!(e.entrypoint_words().unwrap(), ["python", RUNNER]);
    assert_eq!(e.distributed, Distributed::Jax);
    let request = e.request.unwrap();
    assert_eq!((request.chip.as_deref(), request.count), (Some("h100"), Some(2)));
    // The whole file is the config, overrides applied to it (not to a `config` section), where
    // it has the key, as the original applied them (the CLI refuses one no file of a submit has).
    assert_eq!(e.config["training"]["lr"], json!(0.5));
    assert!(e.config.get("model").is_none(), "{}", e.config);
    assert_eq!(e.config["job"], json!("toy/train"));
    assert!(e.env.is_empty());
    assert!(!e.batch_search);
    // `training.per_device_batch_size: -1` asks for the batch-size search (part `batch`).
    assert!(load(JOB, &Options::default(), &["training.per_device_batch_size=-1"]).unwrap().batch_search);
}

#[test]
fn flags_set_the_key_the_shards_and_the_modules() {
    let options = Options {
        job: Some("other/key".into()),
        n_shards: Some(4),
        load: vec!["plugins.py".into(), "a.b_c".into()],
        ..Options::default()
    };
    let e = load(JOB, &options, &[]).unwrap();
    assert_eq!(e.job_key.as_deref(), Some("other/key"));
    assert_eq!(e.config["job"], json!("other/key"));
    assert_eq!(e.config["request"]["n_shards"], json!(4));
    assert_eq!(e.env[LOAD_ENV], "plugins,a.b_c");
    // -j gives a file without `job:` its key; --n_shards makes a `request` section.
    let e =
        load("model: {}\n", &Options { job: Some("k".into()), n_shards: Some(2), ..Options::default() }, &[]).unwrap();
    assert_eq!((e.job_key.as_deref(), e.request.clone()), (Some("k"), Some(ExperimentRequest::default())));
    assert_eq!(e.config["request"], json!({"n_shards": 2}));
    // An override of request.min_chips reaches the request.
    let e = load(JOB, &Options::default(), &["request.min_chips=0"]).unwrap();
    assert_eq!(e.request.unwrap().count, Some(0));
}

#[test]
fn an_experiment_is_loaded_as_before_and_refuses_the_flags_of_job_configs() {
    let text = "entrypoint: python train.py\nconfig: {lr: 1}\n";
    let e = load(text, &Options::default(), &["lr=2"]).unwrap();
    assert_eq!((e.job_key, e.config), (None, json!({"lr": 2})));
    let m = message(load(text, &Options { job: Some("k".into()), ..Options::default() }, &[]));
    assert!(m.contains("job.yaml") && m.contains("-j/--job") && m.contains("experiment"), "{m}");
    let shards_and_load = Options { n_shards: Some(2), load: vec!["m".into()], ..Options::default() };
    let m = message(load(text, &shards_and_load, &[]));
    assert!(m.contains("--n_shards, --load"), "{m}");
    // A further stage that is an experiment is loaded without them (they are for job configs).
    let stage = Options { stage: true, ..shards_and_load };
    assert_eq!(load(text, &stage, &[]).unwrap().config, json!({"lr": 1}));
    let m = message(load(text, &Options { job: Some("k".into()), ..stage }, &[]));
    assert!(m.contains("-j/--job"), "{m}");
}

#[test]
fn errors_name_the_file_and_the_key() {
    for (text, options, wanted) in [
        ("model: {}\n", Options::default(), "job.yaml: neither `entrypoint:`"),
        ("job: 3\n", Options::default(), "job.yaml: job: expected the job's registry key (a string), found"),
        ("job: ''\n", Options::default(), "job.yaml: job: the job key is empty"),
        ("job: k\nrequest: {chip: h1000}\n", Options::default(), "job.yaml: request.chip: "),
        ("job: k\nrequest: {min_chips: -1}\n", Options::default(), "job.yaml: request.min_chips: expected a whole"),
        ("job: k\nrequest: {min_chips: two}\n", Options::default(), "job.yaml: request.min_chips: "),
        ("job: k\nrequest: {n_shards: 0}\n", Options::default(), "job.yaml: request.n_shards: "),
        ("job: k\nrequest: [1]\n", Options::default(), "job.yaml: request: expected a map"),
        ("job: k\n", Options { n_shards: Some(0), ..Options::default() }, "--n_shards: the shard count"),
        ("job: k\n", Options { load: vec!["a-b".into()], ..Options::default() }, "--load \"a-b\": expected a dotted"),
        ("job: k\n", Options { load: vec!["dir/m.py".into()], ..Options::default() }, "--load \"dir/m.py\""),
    ] {
        let m = message(load(text, &options, &[]));
        assert!(m.contains(wanted), "{text:?}: {m}");
    }
}

#[test]
fn module_names_are_normalised_as_the_original_did() {
    assert_eq!(normalize_module("anyways.py").unwrap(), "anyways");
    assert_eq!(normalize_module("pkg.sub_mod").unwrap(), "pkg.sub_mod");
    for bad in ["", ".py", "1abc", "a..b", "a b", "a/b"] {
        assert!(normalize_module(bad).is_err(), "{bad:?}");
    }
}
