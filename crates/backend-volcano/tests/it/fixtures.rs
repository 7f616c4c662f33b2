//! A realistic volcano host, plans and a layout for the render tests.

use theseus_backend_volcano::VolcanoHost;
use theseus_core::backend::{EnvVar, RunLayout};
use theseus_core::bootstrap::Launch;
use theseus_core::job::JobIdentity;
use theseus_core::solver::Plan;

pub(crate) const SECRET_VALUE: &str = "wandb-s3cr3t-VALUE-1234";
pub(crate) const HOSTILE: &str = "it's \"quoted\" $(rm -rf /) `id` ${HOME}\nsecond line\\";

pub(crate) fn host() -> VolcanoHost {
    serde_json::from_value(serde_json::json!({
        "cluster": "k8s",
        "namespace": "ml",
        "queue": "research",
        "image": "ghcr.io/acme/train:2026.11",
        "pvc_name": "team-pvc",
        "pvc_mount_path": "/workspace",
        "chips": {"h100": 8},
        "cpu": "32",
        "memory": "256Gi",
        "shm_size": "64Gi",
        "priority_class": "high",
        "service_account": "trainer",
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute", "tolerationSeconds": 300}
        ],
        "rdma": true,
        "host_network": true,
        "labels": {"team": "ml", "theseus.dev/owner": "alice"},
        "image_pull_secrets": ["ghcr"],
        "helper_resources": {"requests.cpu": "250m", "requests.memory": "256Mi", "limits.memory": "512Mi"}
    }))
    .expect("a valid volcano host")
}

pub(crate) fn identity() -> JobIdentity {
    JobIdentity {
        name: "Llama_Pretrain.v2".into(),
        project: "scaling-laws".into(),
        group: "sweep/lr".into(),
        run_id: "20261121-134501-a1b2c3".into(),
    }
}

pub(crate) fn gpu_plan(nodes: u32, chips_per_node: u32) -> Plan {
    Plan {
        host: "k8s".into(),
        kind: theseus_backend_volcano::KIND,
        cluster: "k8s".into(),
        chip: Some(theseus_core::chips::parse("h100").unwrap()),
        nodes,
        chips_per_node,
        processes_per_node: 1,
        total_chips: nodes * chips_per_node,
        placement: Default::default(),
        placement_text: String::new(),
        queued: false,
        notes: Vec::new(),
        considered: Vec::new(),
    }
}

pub(crate) fn cpu_plan() -> Plan {
    Plan { chip: None, chips_per_node: 0, total_chips: 0, ..gpu_plan(1, 0) }
}

pub(crate) fn layout() -> RunLayout {
    RunLayout {
        work_dir: "/workspace/work/scaling-laws/sweep/Llama_Pretrain.v2/20261121-134501-a1b2c3".into(),
        run_dir: "/workspace/status/scaling-laws/run dir".into(),
        log_file: "/workspace/work/logs/it's a log/run.log".into(),
        root_dir: "/workspace".into(),
        uv_cache_dir: None,
        data_dirs: theseus_core::bootstrap::DataDirs {
            data: "/workspace/data".into(),
            checkpoints: "/workspace/checkpoints".into(),
            results: "/workspace/results".into(),
        },
        launch: Launch::Wired { coordinator_port: 1234, wiring: theseus_backend_volcano::WIRING },
    }
}

pub(crate) fn env() -> Vec<EnvVar> {
    let var = |name: &str, value: &str, secret: bool| EnvVar { name: name.into(), value: value.into(), secret };
    vec![
        var("WANDB_API_KEY", SECRET_VALUE, true),
        var("WANDB_PROJECT", "scaling", false),
        var("HOSTILE", HOSTILE, false),
        var("HF_TOKEN", "hf_other_secret_987", true),
    ]
}

/// A bootstrap file as found in a run dir, without what the bootstrap appends to `env.sh` at
/// each start (THESEUS_ATTEMPT, THESEUS_RESTORE_FROM): what was rendered and shipped.
pub(crate) fn as_shipped(path: &str, found: String) -> String {
    match found.split_once("# ---- set by the bootstrap at start ----\n") {
        Some((before, _)) if path.ends_with("env.sh") => before.to_owned(),
        _ => found,
    }
}
