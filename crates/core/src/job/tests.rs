//! Tests of experiment loading, `KEY=VALUE` overrides and Kubernetes names.

use serde_json::json;

use super::*;

fn parse(text: &str) -> Result<Experiment> {
    Experiment::from_yaml(text, "exp.yaml")
}

fn error(text: &str) -> String {
    match parse(text) {
        Ok(e) => panic!("should not load: {e:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn minimal_experiment() {
    let e = parse("entrypoint: python train.py --lr 3e-4\n").unwrap();
    assert_eq!(e.entrypoint_words().unwrap(), ["python", "train.py", "--lr", "3e-4"]);
    assert_eq!(e.distributed, Distributed::Auto, "JAX distributed on import of jax unless the file says otherwise");
    assert_eq!(e.config, serde_json::Value::Null);
    for (text, mode) in [("auto", Distributed::Auto), ("none", Distributed::None), ("jax", Distributed::Jax)] {
        let e = parse(&format!("entrypoint: python t.py\ndistributed: {text}\n")).unwrap();
        assert_eq!(e.distributed, mode, "{text}");
    }
}

#[test]
fn full_experiment() {
    let text = "\
entrypoint: [python, -m, train]
request: {chip: H100, min_chips: 2}
env: {WANDB_MODE: offline, TOKEN: s3cret}
secret_env: [TOKEN]
distributed: jax
uv_groups: [gpu]
config: {lr: 0.1, model: {layers: 2}}
";
    let e = parse(text).unwrap();
    let request = e.request.clone().unwrap();
    assert_eq!(request.chip.as_deref(), Some("h100"), "aliases become catalog names");
    assert_eq!(request.count, Some(2));
    assert_eq!(e.distributed, Distributed::Jax);
    assert_eq!(e.config, json!({"lr": 0.1, "model": {"layers": 2}}));
}

#[test]
fn experiment_errors_name_the_file_and_key() {
    assert_eq!(
        error("entrypoint: x\nfoo: 1\n"),
        "exp.yaml: foo: unknown key \"foo\" (expected one of: entrypoint, request, env, secret_env, distributed, uv_groups, config, batch_search)"
    );
    assert!(
        error("entrypoint: x\nrequest: {chipp: h100}\n").starts_with("exp.yaml: request.chipp: unknown key \"chipp\"")
    );
    assert_eq!(error("request: {count: 1}\n"), "exp.yaml: missing required key \"entrypoint\"");
    assert_eq!(error(""), "exp.yaml: missing required key \"entrypoint\"");
    assert_eq!(error("entrypoint: ''\n"), "exp.yaml: entrypoint: the entrypoint is empty");
    assert_eq!(error("entrypoint: []\n"), "exp.yaml: entrypoint: the entrypoint is empty");
    assert_eq!(error("entrypoint: {a: 1}\n"), "exp.yaml: entrypoint: expected a command line or a list of words");
    assert_eq!(
        error("entrypoint: x\nrequest: {chip: h10}\n"),
        "exp.yaml: request.chip: unknown chip \"h10\" (did you mean \"h100\"?)"
    );
    assert_eq!(
        error("entrypoint: x\nrequest: {count: -1}\n"),
        "exp.yaml: request.count: invalid count -1: counts must be 0 or more"
    );
    assert_eq!(
        error("entrypoint: x\nenv: {'1BAD': x}\n"),
        "exp.yaml: env.1BAD: invalid environment variable name \"1BAD\""
    );
    assert_eq!(
        error("entrypoint: x\nenv: {A: x}\nsecret_env: [A, B]\n"),
        "exp.yaml: secret_env[1]: \"B\" is not a key of `env`"
    );
    assert_eq!(
        error("entrypoint: x\ndistributed: mpi\n"),
        "exp.yaml: distributed: unknown value \"mpi\" (expected one of: auto, none, jax)"
    );
    assert!(error("entrypoint: [x\n").starts_with("exp.yaml: invalid YAML: line "));
    assert!(error("entrypoint: \"python 'x\"\n").starts_with("exp.yaml: entrypoint: "));
}

#[test]
fn load_reads_a_file_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exp.yaml");
    std::fs::write(&path, "entrypoint: run\nbogus: 1\n").unwrap();
    let message = Experiment::load(&path).unwrap_err().to_string();
    assert!(message.starts_with(&format!("{}: bogus: unknown key", path.display())), "{message}");
    std::fs::write(&path, "entrypoint: run\n").unwrap();
    assert_eq!(Experiment::load(&path).unwrap().entrypoint, Entrypoint::Line("run".into()));
    assert!(matches!(Experiment::load(&dir.path().join("missing.yaml")), Err(Error::Io { .. })));
}

fn overridden(config: serde_json::Value, overrides: &[&str]) -> Result<serde_json::Value> {
    let mut e = Experiment { config, ..Experiment::default() };
    let overrides: Vec<String> = overrides.iter().map(|s| (*s).to_owned()).collect();
    e.apply_overrides(&overrides)?;
    Ok(e.config)
}

#[test]
fn overrides_parse_yaml_values_and_create_maps() {
    let config = overridden(
        json!({"lr": 0.1, "model": {"layers": 2}}),
        &["model.layers=3", "train.amp=true", "train.steps=[1, 2]", "name='007'", "note=a=b", "empty=", "lr=1e-3"],
    )
    .unwrap();
    assert_eq!(
        config,
        json!({
            "lr": 0.001,
            "model": {"layers": 3},
            "train": {"amp": true, "steps": [1, 2]},
            "name": "007",
            "note": "a=b",
            "empty": ""
        })
    );
    assert_eq!(overridden(serde_json::Value::Null, &["a.b.c=x"]).unwrap(), json!({"a": {"b": {"c": "x"}}}));
    assert_eq!(overridden(json!({"a": {"b": 1}}), &["a={x: 1}"]).unwrap(), json!({"a": {"x": 1}}));
}

#[test]
fn override_errors_name_the_override() {
    let err = |config: serde_json::Value, o: &str| overridden(config, &[o]).unwrap_err().to_string();
    assert_eq!(err(json!({}), "novalue"), "invalid override \"novalue\": expected KEY=VALUE");
    assert_eq!(err(json!({}), "=3"), "invalid override \"=3\": empty key");
    assert_eq!(err(json!({}), "a..b=3"), "invalid override \"a..b=3\": empty segment in key \"a..b\"");
    assert_eq!(err(json!({"a": {"b": 1}}), "a.b.c=2"), "invalid override \"a.b.c=2\": config.a.b is not a map");
    assert_eq!(err(json!({"a": [1]}), "a.x=2"), "invalid override \"a.x=2\": config.a is not a map");
    assert_eq!(err(json!([1]), "a=2"), "invalid override \"a=2\": config is not a map");
    assert!(err(json!({}), "a=[1").starts_with("invalid override \"a=[1\": invalid YAML value: line 1"));
}

fn is_valid_k8s_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

fn hash8(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))[..8].to_owned()
}

#[test]
fn k8s_name_keeps_valid_names() {
    for name in ["hello", "my-job-1", "123abc", "a", &"a".repeat(63)] {
        assert_eq!(k8s_name(name), name);
    }
}

#[test]
fn k8s_name_changes_get_a_hash() {
    let cases = [
        ("MyJob", "myjob"),
        ("a.b_c", "a-b-c"),
        ("--x--", "x"),
        ("a---b", "a-b"),
        ("run 1/2", "run-1-2"),
        ("día", "d-a"),
    ];
    for (input, base) in cases {
        assert_eq!(k8s_name(input), format!("{base}-{}", hash8(input)), "{input}");
    }
    assert_eq!(k8s_name("日本語"), format!("job-{}", hash8("日本語")));
    assert_eq!(k8s_name("---"), format!("job-{}", hash8("---")));
    assert_eq!(k8s_name(""), "job");
}

#[test]
fn k8s_name_shortens_long_names_and_keeps_them_distinct() {
    let prefix = "x".repeat(63);
    let (a, b) = (format!("{prefix}-first"), format!("{prefix}-second"));
    let (na, nb) = (k8s_name(&a), k8s_name(&b));
    assert_eq!(na.len(), 63);
    assert_ne!(na, nb);
    assert!(na.ends_with(&hash8(&a)));
    // A cut that ends in `-` drops it.
    let dashed = format!("{}-{}", "y".repeat(53), "z".repeat(20));
    assert_eq!(k8s_name(&dashed), format!("{}-{}", "y".repeat(53), hash8(&dashed)));
}

#[test]
fn k8s_name_is_valid_and_idempotent() {
    let long = "Ünïcödé ".repeat(20);
    for input in ["MyJob", "a.b_c", "--x--", "日本語", "", "x", "1-2-3", "UPPER_CASE.name", &long, &"9".repeat(100)]
    {
        let name = k8s_name(input);
        assert!(is_valid_k8s_name(&name), "{input:?} -> {name:?}");
        assert_eq!(k8s_name(&name), name, "{input:?}");
    }
}

#[test]
fn names_follow_one_rule() {
    for good in ["hello", "run.1", "My_Job-2", "a", &"x".repeat(MAX_NAME_LEN)] {
        assert_eq!(name_problem(good), None, "{good:?}");
    }
    let problem = |name: &str| name_problem(name).unwrap_or_else(|| panic!("{name:?} was accepted"));
    assert!(problem("").contains("empty"));
    assert!(problem("..").contains("start with `.`"));
    assert!(problem(".hidden").contains("start with `.`"));
    assert!(problem("-rf").contains("start with `-`"));
    assert!(problem("../../../../tmp/x").contains("`/` is not allowed"));
    assert!(problem("a b").contains("' ' (U+0020)"));
    assert!(problem("tab\there").contains("control character (U+0009)"));
    assert!(problem("née").contains("'é' (U+00E9)"));
    assert!(problem(&"x".repeat(MAX_NAME_LEN + 1)).contains("limit of 100"));
    let err = validate_name("project", "../x").unwrap_err().to_string();
    assert!(err.starts_with("project \"../x\": "), "{err}");
}

#[test]
fn an_identity_with_a_path_in_a_name_is_refused() {
    let mut identity = JobIdentity::new("n", Some("../../../../tmp/x"), Some("y"));
    assert!(identity.validate().unwrap_err().to_string().contains("project"));
    identity.project = "p".into();
    assert_eq!(identity.validate().ok(), Some(()));
    identity.run_id = "../r".into();
    assert!(identity.validate().unwrap_err().to_string().contains("run id"));
}

/// Issue 23 point 9: unquoted numbers and booleans in `env` load as their YAML text.
#[test]
fn unquoted_env_numbers_and_booleans_load_as_text() {
    let e = parse("entrypoint: python train.py\nenv: {NCCL_IB_DISABLE: 0, SEED: 42, OFFLINE: true}\n").unwrap();
    assert_eq!(e.env["NCCL_IB_DISABLE"], "0");
    assert_eq!(e.env["SEED"], "42");
    assert_eq!(e.env["OFFLINE"], "true");
    let err = error("entrypoint: python train.py\nenv: {A: {b: 1}}\n");
    assert!(err.starts_with("exp.yaml: env.A: "), "{err}");
}
