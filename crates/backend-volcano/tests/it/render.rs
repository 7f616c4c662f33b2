//! Rendered gang jobs, secrets and helpers: schema-valid, sized by the plan, secrets only by
//! reference, hostile values literal, scripts that parse.

use serde_json::{Value, json};
use theseus_backend_volcano::{
    JobInputs, Quantity, RenderOptions, helper_name, is_label_key, is_label_value, job_name, owner_reference, redacted,
    render_helper, render_job, validate_host,
};
use theseus_core::solver::Plan;

use crate::fixtures::{HOSTILE, SECRET_VALUE, cpu_plan, env, gpu_plan, host, identity, layout};
use crate::schema::{assert_valid, errors};

fn render(plan: &Plan) -> (Value, Option<Value>) {
    let (identity, layout, env) = (identity(), layout(), env());
    let options = RenderOptions { max_retry: 2, ttl_seconds_after_finished: Some(600), ..RenderOptions::default() };
    let inputs = JobInputs {
        identity: &identity,
        plan,
        env: &env,
        layout: &layout,
        bootstrap_entry: ".theseus/bootstrap.sh",
        options: &options,
    };
    let rendered = render_job(&host(), &inputs).expect("renders");
    (serde_json::to_value(&rendered.job).unwrap(), rendered.secret.map(|s| serde_json::to_value(s).unwrap()))
}

fn container(job: &Value) -> &Value {
    &job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
}

#[test]
fn pods_get_the_jobs_restart_count_from_volcanos_pod_annotation() {
    let (job, _) = render(&cpu_plan());
    let env = container(&job)["env"].as_array().unwrap();
    let restart: Vec<&Value> = env.iter().filter(|e| e["name"] == "THESEUS_RESTART_COUNT").collect();
    assert_eq!(
        restart,
        [
            &json!({"name": "THESEUS_RESTART_COUNT", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['volcano.sh/job-retry-count']"}}})
        ]
    );
}

#[test]
fn gpu_job_is_schema_valid_and_sized_by_the_plan() {
    let (job, _) = render(&gpu_plan(2, 4));
    assert_valid(&job);
    assert_eq!(job["apiVersion"], "batch.volcano.sh/v1alpha1");
    assert_eq!(job["kind"], "Job");
    let spec = &job["spec"];
    assert_eq!(spec["minAvailable"], 2);
    assert_eq!(spec["tasks"][0]["replicas"], 2);
    assert_eq!(spec["tasks"][0]["minAvailable"], 2);
    assert_eq!(spec["queue"], "research");
    assert_eq!(spec["schedulerName"], "volcano");
    assert_eq!(spec["maxRetry"], 2);
    assert_eq!(spec["ttlSecondsAfterFinished"], 600);
    // Only `env` (the rank): `svc` would put every pod's host name into every container's env
    // (see gang_env.rs), and `ssh`'s config names hosts only `svc` makes resolvable.
    assert_eq!(spec["plugins"], json!({"env": []}));
    // One failed rank ends the whole job at once (Terminated: pods freed, failed pod kept);
    // evictions restart it up to maxRetry.
    assert_eq!(
        spec["policies"],
        json!([{"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodFailed", "action": "TerminateJob"}])
    );
    assert_eq!(spec["tasks"][0]["policies"], json!([{"event": "TaskCompleted", "action": "CompleteJob"}]));
    let pod = &spec["tasks"][0]["template"]["spec"];
    assert_eq!(pod["schedulerName"], "volcano");
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["priorityClassName"], "high");
    assert_eq!(pod["serviceAccountName"], "trainer");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "ghcr"}]));
    assert_eq!(pod["nodeSelector"]["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
    assert_eq!(pod["tolerations"][1]["tolerationSeconds"], 300);
    assert_eq!(pod["tolerations"][1]["value"], "true");
    let term = &pod["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(term["weight"], 100);
    assert_eq!(term["podAffinityTerm"]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        term["podAffinityTerm"]["labelSelector"]["matchLabels"],
        json!({"team": "ml", "theseus.dev/owner": "alice"})
    );

    let c = container(&job);
    assert_eq!(c["name"], "worker");
    assert_eq!(c["image"], "ghcr.io/acme/train:2026.11");
    assert_eq!(c["command"], json!(["bash", "-lc"]));
    let resources = &c["resources"];
    assert_eq!(resources["requests"], resources["limits"]);
    assert_eq!(resources["limits"]["nvidia.com/gpu"], "4");
    assert_eq!(resources["limits"]["cpu"], "32");
    assert_eq!(resources["limits"]["memory"], "256Gi");
    assert_eq!(resources["limits"]["rdma/rdma_shared_device_a"], "8");
    assert_eq!(
        c["volumeMounts"],
        json!([
            {"name": "workspace", "mountPath": "/workspace"},
            {"name": "dshm", "mountPath": "/dev/shm"}
        ])
    );
    assert_eq!(pod["volumes"][0]["persistentVolumeClaim"]["claimName"], "team-pvc");
    assert_eq!(pod["volumes"][1]["emptyDir"], json!({"medium": "Memory", "sizeLimit": "64Gi"}));
}

#[test]
fn cpu_job_uses_cpu_sizes_and_no_gpu_extras() {
    let (job, _) = render(&cpu_plan());
    assert_valid(&job);
    assert_eq!(job["spec"]["minAvailable"], 1);
    assert_eq!(job["spec"]["tasks"][0]["replicas"], 1);
    let c = container(&job);
    assert_eq!(c["resources"]["limits"], json!({"cpu": "8", "memory": "64Gi"}));
    assert_eq!(c["resources"]["requests"], c["resources"]["limits"]);
    assert_eq!(c["volumeMounts"].as_array().unwrap().len(), 1);
}

#[test]
fn secrets_are_only_referenced() {
    let (job, secret) = render(&gpu_plan(2, 4));
    let text = serde_json::to_string(&job).unwrap();
    assert!(!text.contains(SECRET_VALUE));
    assert!(!text.contains("hf_other_secret_987"));
    let name = job["metadata"]["name"].as_str().unwrap();
    let env = container(&job)["env"].as_array().unwrap();
    assert_eq!(env[0], json!({"name": "THESEUS_VOLCANO_MODE", "value": "1"}));
    let wandb = env.iter().find(|e| e["name"] == "WANDB_API_KEY").unwrap();
    assert_eq!(
        wandb,
        &json!({"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": name, "key": "WANDB_API_KEY"}}})
    );
    assert_eq!(env.len(), 8, "mode, coordinator, count, restart count and the four variables");

    let secret = secret.expect("a secret");
    assert_eq!(secret["metadata"]["name"], name);
    assert_eq!(secret["metadata"]["namespace"], "ml");
    assert_eq!(secret["metadata"]["labels"], job["metadata"]["labels"]);
    assert_eq!(secret["stringData"]["WANDB_API_KEY"], SECRET_VALUE);
    assert_eq!(secret["stringData"].as_object().unwrap().len(), 2);

    let shown: k8s_openapi::api::core::v1::Secret = serde_json::from_value(secret).unwrap();
    let shown = serde_json::to_string(&redacted(&shown)).unwrap();
    assert!(!shown.contains(SECRET_VALUE) && shown.contains("<redacted>"));

    let owner = owner_reference(name, "uid-123");
    assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("Job", "uid-123", Some(true)));
}

#[test]
fn no_secret_without_secret_env() {
    let (identity, layout) = (identity(), layout());
    let env: Vec<_> = env().into_iter().filter(|v| !v.secret).collect();
    let options = RenderOptions::default();
    let plan = gpu_plan(1, 8);
    let inputs = JobInputs {
        identity: &identity,
        plan: &plan,
        env: &env,
        layout: &layout,
        bootstrap_entry: "b.sh",
        options: &options,
    };
    let rendered = render_job(&host(), &inputs).unwrap();
    assert!(rendered.secret.is_none());
    let job = serde_json::to_value(&rendered.job).unwrap();
    assert_valid(&job);
    assert_eq!(job["spec"]["maxRetry"], 3);
    assert!(job["spec"].get("ttlSecondsAfterFinished").is_none());
}

#[test]
fn hostile_values_stay_literal() {
    let (job, _) = render(&gpu_plan(2, 4));
    let env = container(&job)["env"].as_array().unwrap();
    let hostile = env.iter().find(|e| e["name"] == "HOSTILE").unwrap();
    assert_eq!(hostile["value"], HOSTILE);
}

#[test]
fn restart_on_failure_restarts_the_job_when_a_rank_fails() {
    let (identity, layout, env) = (identity(), layout(), env());
    let options = RenderOptions { restart_on_failure: true, ..RenderOptions::default() };
    let plan = gpu_plan(2, 4);
    let inputs = JobInputs {
        identity: &identity,
        plan: &plan,
        env: &env,
        layout: &layout,
        bootstrap_entry: "b.sh",
        options: &options,
    };
    let job = serde_json::to_value(render_job(&host(), &inputs).unwrap().job).unwrap();
    assert_valid(&job);
    assert_eq!(
        job["spec"]["policies"],
        json!([{"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodFailed", "action": "RestartJob"}])
    );
    assert_eq!(job["spec"]["maxRetry"], 3);
}

#[test]
fn pod_script_parses_and_quotes_paths() {
    let (job, _) = render(&gpu_plan(2, 4));
    let args = container(&job)["args"].as_array().unwrap();
    assert_eq!(args.len(), 1);
    let script = args[0].as_str().unwrap();
    assert!(script.contains("'/workspace/work/logs/it'\\''s a log/run.log'"), "{script}");
    assert!(script.contains("trap theseus_forward TERM INT"), "{script}");
    let out = std::process::Command::new("bash").args(["-n", "-c", script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn pod_script_runs_the_bootstrap_and_keeps_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work dir");
    std::fs::create_dir_all(work.join(".theseus")).unwrap();
    std::fs::write(work.join(".theseus/bootstrap.sh"), "echo hello from bootstrap\nexit 7\n").unwrap();
    let log = dir.path().join("logs/it's/run.log");
    let layout = theseus_core::backend::RunLayout {
        work_dir: work.display().to_string(),
        log_file: log.display().to_string(),
        ..layout()
    };
    let script = theseus_backend_volcano::render::pod_script(&layout, ".theseus/bootstrap.sh");
    let out = std::process::Command::new("bash").args(["-c", &script]).output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "hello from bootstrap\n");
}

#[test]
fn names_and_labels_are_valid() {
    let (job, _) = render(&gpu_plan(2, 4));
    let name = job["metadata"]["name"].as_str().unwrap();
    assert_eq!(name, job_name(&identity()));
    assert!(name.len() <= 50 && name.starts_with(|c: char| c.is_ascii_lowercase()), "{name}");
    assert!(name.ends_with("20261121-134501-a1b2c3"), "{name}");
    for (key, value) in job["metadata"]["labels"].as_object().unwrap() {
        assert!(is_label_key(key), "{key}");
        assert!(is_label_value(value.as_str().unwrap()), "{key}={value}");
    }
    assert_eq!(job["metadata"]["labels"]["theseus.dev/run-id"], "20261121-134501-a1b2c3");

    let mut long = identity();
    long.project = "9".repeat(100);
    long.name = "ÜBER/long name".repeat(10);
    let name = job_name(&long);
    assert!(name.len() <= 50 && name.starts_with(|c: char| c.is_ascii_lowercase()), "{name}");
    assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
    let mut other = long.clone();
    other.run_id = "20261121-134501-ffffff".into();
    assert_ne!(job_name(&other), name);
}

#[test]
fn helper_job_is_schema_valid() {
    let identity = identity();
    let work_dir = layout().work_dir;
    let helper = render_helper(&host(), &identity, &work_dir).unwrap();
    let job = serde_json::to_value(&helper).unwrap();
    assert_valid(&job);
    assert_eq!(job["metadata"]["name"], helper_name(&identity));
    assert_eq!(job["metadata"]["name"], "theseus-ship-20261121-134501-a1b2c3");
    assert_eq!(job["metadata"]["labels"]["theseus.dev/role"], "helper");
    assert_eq!(job["spec"]["minAvailable"], 1);
    assert_eq!(job["spec"]["queue"], "research");
    let task = &job["spec"]["tasks"][0];
    assert_eq!((task["name"].as_str(), task["replicas"].as_i64()), (Some("loader"), Some(1)));
    let pod = &task["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "trainer");
    assert_eq!(pod["tolerations"].as_array().unwrap().len(), 2);
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "busybox:1.36");
    assert_eq!(c["command"][0], "sh");
    let script = c["command"][2].as_str().unwrap();
    assert!(
        script.starts_with("trap 'kill $! 2> /dev/null; exit 0' TERM; mkdir -p /workspace/work/scaling-laws/"),
        "{script}"
    );
    assert!(script.ends_with("& wait"), "the sleep is backgrounded and waited, so the trap runs: {script}");
    let out = std::process::Command::new("sh").args(["-n", "-c", script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(c["resources"], json!({"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}));
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/workspace");
}

#[test]
fn the_schema_catches_typos_and_type_errors() {
    let (mut job, _) = render(&gpu_plan(2, 4));
    job["spec"]["tasks"][0]["replicaz"] = json!(2);
    let errs = errors(&job);
    assert!(errs.iter().any(|e| e.contains("replicaz")), "{errs:?}");

    let (mut job, _) = render(&gpu_plan(2, 4));
    job["spec"]["minAvailable"] = json!("2");
    assert!(!errors(&job).is_empty());

    let (mut job, _) = render(&gpu_plan(2, 4));
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("two cores");
    assert!(!errors(&job).is_empty());
}

#[test]
fn host_validation_names_the_key() {
    assert_eq!(validate_host("k8s", &host()), Ok(()));
    let check = |edit: &dyn Fn(&mut theseus_backend_volcano::VolcanoHost), want: &str| {
        let mut h = host();
        edit(&mut h);
        assert_eq!(validate_host("k8s", &h).unwrap_err(), want);
    };
    check(&|h| h.memory = Some("64Gx".into()), "hosts.k8s.memory: invalid quantity \"64Gx\"");
    check(&|h| h.cpu_cpu = Some("eight".into()), "hosts.k8s.cpu_cpu: invalid quantity \"eight\"");
    check(&|h| h.shm_size = Some("1 Gi".into()), "hosts.k8s.shm_size: invalid quantity \"1 Gi\"");
    check(&|h| h.image.clear(), "hosts.k8s.image: a volcano host needs a container image");
    check(
        &|h| (h.restart_on_failure, h.max_retry) = (true, 0),
        "hosts.k8s.restart_on_failure: needs max_retry of at least 1 (with 0 a failed rank fails the job, which is what restart_on_failure: false does)",
    );
    check(&|h| h.pvc_name.clear(), "hosts.k8s.pvc_name: a volcano host needs a PVC for code and logs");
    check(
        &|h| h.start_timeout = Some("inf".into()),
        "hosts.k8s.start_timeout: \"inf\": expected seconds (e.g. `20` or `0.5`) or a number with a unit ms, s, m, h or d (e.g. `30s`, `2h`)",
    );
    check(
        &|h| h.helper_resources = Some([("cpu".to_string(), "1".to_string())].into()),
        "hosts.k8s.helper_resources.cpu: expected a key like \"requests.cpu\" or \"limits.memory\"",
    );
    check(
        &|h| h.helper_resources = Some([("limits.cpu".to_string(), "1x".to_string())].into()),
        "hosts.k8s.helper_resources.limits.cpu: invalid quantity \"1x\"",
    );
    let mut h = host();
    h.memory = Some("64Gx".into());
    let env = env();
    let (identity, layout, plan) = (identity(), layout(), gpu_plan(1, 8));
    let options = RenderOptions::default();
    let inputs = JobInputs {
        identity: &identity,
        plan: &plan,
        env: &env,
        layout: &layout,
        bootstrap_entry: "b.sh",
        options: &options,
    };
    assert!(render_job(&h, &inputs).is_err());
}

#[test]
fn quantity_table() {
    for (text, ok) in [
        ("8", true),
        ("500m", true),
        ("64Gi", true),
        ("1.5", true),
        ("2e3", true),
        ("64G", true),
        ("64Gx", false),
        ("", false),
    ] {
        assert_eq!(Quantity::parse(text).is_ok(), ok, "{text}");
    }
    assert_eq!(Quantity::parse("64Gx").unwrap_err().to_string(), "invalid quantity \"64Gx\"");
}
