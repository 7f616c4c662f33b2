//! YAML snapshots of representative manifests, from fixed identities and run ids so they are
//! stable: a 1-node GPU job, a 4-node RDMA job with tolerations and a node selector, a CPU-only
//! job, the helper and the redacted Secret. Every snapshotted job is also schema-checked.

use std::collections::BTreeMap;

use theseus_backend_volcano::VolcanoHost;
use theseus_backend_volcano::{JobInputs, RenderOptions, RenderedJob, redacted, render_helper, render_job};
use theseus_core::solver::Plan;

use crate::fixtures::{cpu_plan, env, gpu_plan, host, identity, layout};
use crate::schema::assert_valid;

/// Snapshots live in `tests/it/snapshots/`, named without the module path.
fn settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings
}

/// A GPU host with none of the optional extras.
fn plain_host() -> VolcanoHost {
    VolcanoHost {
        shm_size: None,
        priority_class: None,
        service_account: None,
        node_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        rdma: false,
        host_network: false,
        labels: BTreeMap::new(),
        image_pull_secrets: Vec::new(),
        helper_resources: None,
        ..host()
    }
}

fn render(host: &VolcanoHost, plan: &Plan, options: &RenderOptions) -> RenderedJob {
    let (identity, layout, env) = (identity(), layout(), env());
    let inputs = JobInputs {
        identity: &identity,
        plan,
        env: &env,
        layout: &layout,
        bootstrap_entry: ".theseus/bootstrap.sh",
        options,
    };
    let rendered = render_job(host, &inputs).expect("renders");
    assert_valid(&serde_json::to_value(&rendered.job).unwrap());
    rendered
}

#[test]
fn one_node_gpu_job() {
    let rendered = render(&plain_host(), &gpu_plan(1, 8), &RenderOptions::default());
    settings().bind(|| insta::assert_yaml_snapshot!("one_node_gpu_job", rendered.job));
}

#[test]
fn four_node_rdma_job() {
    let options = RenderOptions { max_retry: 5, ttl_seconds_after_finished: Some(3600), ..RenderOptions::default() };
    let rendered = render(&host(), &gpu_plan(4, 8), &options);
    settings().bind(|| insta::assert_yaml_snapshot!("four_node_rdma_job", rendered.job));
}

#[test]
fn cpu_only_job() {
    let rendered = render(&plain_host(), &cpu_plan(), &RenderOptions::default());
    settings().bind(|| insta::assert_yaml_snapshot!("cpu_only_job", rendered.job));
}

#[test]
fn helper_job() {
    let helper = render_helper(&host(), &identity(), &layout().work_dir).expect("renders");
    assert_valid(&serde_json::to_value(&helper).unwrap());
    settings().bind(|| insta::assert_yaml_snapshot!("helper_job", helper));
}

#[test]
fn redacted_secret() {
    let rendered = render(&host(), &gpu_plan(1, 8), &RenderOptions::default());
    let secret = redacted(&rendered.secret.expect("the fixture env has secrets"));
    settings().bind(|| insta::assert_yaml_snapshot!("redacted_secret", secret));
}

#[test]
fn pod_script_text() {
    let script = theseus_backend_volcano::render::pod_script(&layout(), ".theseus/bootstrap.sh");
    settings().bind(|| insta::assert_snapshot!("pod_script", script));
}
