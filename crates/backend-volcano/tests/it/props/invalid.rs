//! Invalid inputs: a valid case with one setting broken is rejected by `validate_host`, by
//! `render_job` and by `render_helper`, each with an error naming the broken key; nothing renders.

use proptest::prelude::*;
use theseus_backend_volcano::{JobInputs, RenderOptions, render_helper, render_job, validate_host};
use theseus_backend_volcano::{Toleration, VolcanoHost};

use super::strategies::{Case, case, hostile};

/// Cases of the invalid-input property.
const CASES: u32 = 256;

/// One broken setting: what to change and the key the error must name.
#[derive(Debug, Clone)]
enum Break {
    Host(&'static str, fn(&mut VolcanoHost, String)),
    Options(&'static str, RenderOptions),
}

fn toleration(op: Option<&str>, key: &str, value: Option<&str>, effect: Option<&str>, secs: Option<i64>) -> Toleration {
    Toleration {
        key: key.into(),
        operator: op.map(Into::into),
        value: value.map(Into::into),
        effect: effect.map(Into::into),
        toleration_seconds: secs,
    }
}

/// Hostile text made into a value that cannot be a quantity.
fn q(s: &str) -> Option<String> {
    Some(format!("x{s}"))
}

/// Host breaks; the `String` is hostile text (never a valid quantity or name: it is prefixed).
fn host_breaks() -> Vec<Break> {
    vec![
        Break::Host("image", |h, _| h.image = "  ".into()),
        Break::Host("helper_image", |h, _| h.helper_image.clear()),
        Break::Host("pvc_name", |h, _| h.pvc_name.clear()),
        Break::Host("pvc_name", |h, s| h.pvc_name = format!("Team_{s}")),
        Break::Host("pvc_mount_path", |h, s| h.pvc_mount_path = format!("workspace{s}")),
        Break::Host("namespace", |h, s| h.namespace = format!("NS{s}")),
        // An empty namespace is not broken: it is the kubeconfig context's (else `default`).
        Break::Host("gpu_resource_key", |h, s| h.gpu_resource_key = format!("nvidia gpu{s}")),
        Break::Host("cpu", |h, s| h.cpu = q(&s)),
        Break::Host("cpu", |h, _| h.cpu = Some("-4".into())),
        Break::Host("memory", |h, s| h.memory = q(&s)),
        Break::Host("memory", |h, _| h.memory = Some("64Gx".into())),
        Break::Host("cpu_cpu", |h, s| h.cpu_cpu = q(&s)),
        Break::Host("cpu_memory", |h, _| h.cpu_memory = Some("-1Gi".into())),
        Break::Host("shm_size", |h, _| h.shm_size = Some("1 Gi".into())),
        Break::Host("priority_class", |h, s| h.priority_class = Some(format!("High_{s}"))),
        Break::Host("service_account", |h, s| h.service_account = Some(format!("-{s}"))),
        Break::Host("image_pull_secrets[1]", |h, s| h.image_pull_secrets = vec!["ok".into(), format!("A {s}")]),
        Break::Host("labels", |h, s| _ = h.labels.insert(format!("bad key {s}"), "v".into())),
        Break::Host("labels.team", |h, s| _ = h.labels.insert("team".into(), format!("-{s}"))),
        Break::Host("node_selector", |h, s| _ = h.node_selector.insert(format!("a/b/{s}"), "v".into())),
        Break::Host("node_selector.zone", |h, s| _ = h.node_selector.insert("zone".into(), format!("{s}!"))),
        Break::Host("tolerations[0].operator", |h, _| {
            h.tolerations = vec![toleration(Some("In"), "k", None, None, None)]
        }),
        Break::Host("tolerations[0].operator", |h, _| h.tolerations = vec![toleration(None, "", None, None, None)]),
        Break::Host("tolerations[0].key", |h, s| {
            h.tolerations = vec![toleration(Some("Exists"), &format!("{s}?"), None, None, None)];
        }),
        Break::Host("tolerations[0].value", |h, s| {
            h.tolerations = vec![toleration(Some("Exists"), "k", Some(&format!("v{s}")), None, None)];
        }),
        Break::Host("tolerations[0].value", |h, s| {
            h.tolerations = vec![toleration(Some("Equal"), "k", Some(&format!("{s}!")), None, None)];
        }),
        Break::Host("tolerations[0].effect", |h, _| {
            h.tolerations = vec![toleration(Some("Exists"), "k", None, Some("NoRun"), None)];
        }),
        Break::Host("tolerations[1].tolerationSeconds", |h, _| {
            h.tolerations.truncate(0);
            h.tolerations.push(toleration(Some("Exists"), "", None, None, None));
            h.tolerations.push(toleration(Some("Exists"), "k", None, Some("NoSchedule"), Some(30)));
        }),
        Break::Host("helper_resources.cpu", |h, _| h.helper_resources = Some([("cpu".into(), "1".into())].into())),
        Break::Host("helper_resources.limits.memory", |h, s| {
            h.helper_resources = Some([("limits.memory".into(), format!("x{s}"))].into());
        }),
        Break::Host("helper_resources.requests.cpu", |h, _| {
            h.helper_resources = Some([("requests.cpu".into(), "-500m".into())].into());
        }),
    ]
}

fn breaks() -> impl Strategy<Value = Break> {
    let mut all = host_breaks();
    all.push(Break::Options("max_retry", RenderOptions { max_retry: -1, ..RenderOptions::default() }));
    all.push(Break::Options(
        "ttl_seconds_after_finished",
        RenderOptions { ttl_seconds_after_finished: Some(-60), ..RenderOptions::default() },
    ));
    proptest::sample::select(all)
}

fn render(case: &Case) -> Result<theseus_backend_volcano::RenderedJob, theseus_backend_volcano::RenderError> {
    let inputs = JobInputs {
        identity: &case.identity,
        plan: &case.plan,
        env: &case.env,
        layout: &case.layout,
        bootstrap_entry: &case.bootstrap_entry,
        options: &case.options,
    };
    render_job(&case.host, &inputs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn broken_settings_are_rejected_naming_the_key(mut case in case(), broken in breaks(), text in hostile()) {
        match broken {
            Break::Host(key, edit) => {
                edit(&mut case.host, text);
                let err = validate_host("k8s", &case.host).expect_err("validation must reject");
                prop_assert!(err.starts_with(&format!("hosts.k8s.{key}")), "{key}: {err}");
                let err = render(&case).expect_err("render_job must reject").0;
                prop_assert!(err.starts_with(key), "{key}: {err}");
                let err = render_helper(&case.host, &case.identity, &case.layout.work_dir).expect_err("helper").0;
                prop_assert!(err.starts_with(key), "{key}: {err}");
            }
            Break::Options(key, options) => {
                case.options = options;
                prop_assert_eq!(validate_host("k8s", &case.host), Ok(()));
                let err = render(&case).expect_err("render_job must reject").0;
                prop_assert!(err.starts_with(key), "{key}: {err}");
            }
        }
    }
}
