//! Proptest strategies for everything a gang job is rendered from: hosts with every optional
//! setting on or off, plans (CPU-only, one node, many nodes, partial nodes), identities and paths
//! with hostile text, environments with and without secrets, and render options.

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use theseus_backend_volcano::RenderOptions;
use theseus_backend_volcano::{Toleration, VolcanoHost};
use theseus_core::backend::{EnvVar, RunLayout};
use theseus_core::job::JobIdentity;
use theseus_core::solver::Plan;

use crate::fixtures::{cpu_plan, gpu_plan, layout};

/// GPUs per node the generated hosts have (`chips: {h100: 8}`).
pub(crate) const NODE_GPUS: u32 = 8;

/// Everything one render needs.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) host: VolcanoHost,
    pub(crate) identity: JobIdentity,
    pub(crate) plan: Plan,
    pub(crate) env: Vec<EnvVar>,
    pub(crate) layout: RunLayout,
    pub(crate) bootstrap_entry: String,
    pub(crate) options: RenderOptions,
}

/// Text that breaks naive quoting: quotes, substitutions, newlines, backslashes, unicode.
pub(crate) fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("'".to_owned()),
        Just("\"".to_owned()),
        Just("$(touch /tmp/pwned)".to_owned()),
        Just("`id`".to_owned()),
        Just("${HOME}".to_owned()),
        Just("\n".to_owned()),
        Just(" ".to_owned()),
        Just("\\".to_owned()),
        Just("'\\''".to_owned()),
        Just("ü".to_owned()),
        Just("日本".to_owned()),
        Just("🚀".to_owned()),
        Just("*?[".to_owned()),
        Just(";|&><".to_owned()),
        "[A-Za-z0-9_.-]{1,8}",
    ];
    vec(piece, 1..6).prop_map(|p| p.concat())
}

/// A DNS-1123 label.
pub(crate) fn dns_label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,14}[a-z0-9])?"
}

/// A DNS-1123 subdomain of one to three labels.
pub(crate) fn dns_subdomain() -> impl Strategy<Value = String> {
    vec(dns_label(), 1..4).prop_map(|parts| parts.join("."))
}

/// A label value (possibly empty).
pub(crate) fn label_value() -> impl Strategy<Value = String> {
    "([A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?)?"
}

/// A label key, with or without a DNS prefix.
pub(crate) fn label_key() -> impl Strategy<Value = String> {
    (option::of(dns_subdomain()), "[A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?")
        .prop_map(|(prefix, name)| prefix.map_or(name.clone(), |p| format!("{p}/{name}")))
}

/// A valid Kubernetes quantity in the spellings people write.
pub(crate) fn quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        "[1-9][0-9]{0,3}",
        "[1-9][0-9]{0,3}m",
        "[1-9][0-9]{0,2}(Ki|Mi|Gi|Ti)",
        "[1-9][0-9]{0,2}[kMGTP]",
        "[0-9]{1,2}\\.[0-9]{1,2}",
        "\\.[1-9]",
        "[1-9][eE][0-9]",
        Just("0".to_owned()),
    ]
}

/// A toleration the apiserver accepts, covering both operators, every effect and seconds.
pub(crate) fn toleration() -> impl Strategy<Value = Toleration> {
    let effect = option::of(prop_oneof![Just("NoSchedule"), Just("PreferNoSchedule"), Just("NoExecute")]);
    (prop::bool::ANY, option::of(Just(())), label_key(), label_value(), effect, 0i64..100_000, prop::bool::ANY)
        .prop_map(|(exists, explicit, key, value, effect, seconds, with_seconds)| {
            let no_execute = effect == Some("NoExecute");
            let key = if exists && key.len() % 3 == 0 { String::new() } else { key };
            Toleration {
                operator: if exists { Some("Exists".into()) } else { explicit.map(|()| "Equal".into()) },
                value: (!exists).then_some(value),
                effect: effect.map(Into::into),
                toleration_seconds: (no_execute && with_seconds).then_some(seconds),
                key,
            }
        })
}

/// A host that validation accepts, every optional setting independently on or off.
pub(crate) fn host() -> impl Strategy<Value = VolcanoHost> {
    let names = (
        dns_label(),
        prop_oneof![Just(String::new()), dns_label()],
        prop_oneof![Just("nvidia.com/gpu".to_owned()), Just("amd.com/gpu".to_owned()), label_key()],
        "/[a-z]{1,8}(/[a-z ]{1,8})?",
        dns_subdomain(),
    );
    let sizes = (
        option::of(quantity()),
        option::of(quantity()),
        option::of(quantity()),
        option::of(quantity()),
        option::of(quantity()),
    );
    let access = (
        option::of(dns_subdomain()),
        option::of(dns_subdomain()),
        btree_map(label_key(), label_value(), 0..3),
        vec(toleration(), 0..4),
        vec(dns_subdomain(), 0..3),
    );
    let extras = (
        prop::bool::ANY,
        0u32..17,
        btree_map(label_key(), label_value(), 0..4),
        btree_map("[A-Z_][A-Z0-9_]{0,8}", hostile(), 0..3),
        option::of(helper_resources()),
    );
    (names, sizes, access, extras).prop_map(|(names, sizes, access, extras)| {
        let mut host = crate::fixtures::host();
        (host.namespace, host.queue, host.gpu_resource_key, host.pvc_mount_path, host.pvc_name) = names;
        (host.cpu, host.memory, host.cpu_cpu, host.cpu_memory, host.shm_size) = sizes;
        (host.priority_class, host.service_account, host.node_selector, host.tolerations, host.image_pull_secrets) =
            access;
        (host.rdma, host.rdma_per_node, host.labels, host.env, host.helper_resources) = extras;
        host.chips = BTreeMap::from([("h100".to_owned(), NODE_GPUS)]);
        host
    })
}

/// `helper_resources` maps of valid `requests.*` / `limits.*` keys.
pub(crate) fn helper_resources() -> impl Strategy<Value = BTreeMap<String, String>> {
    let key = prop_oneof![
        Just("requests.cpu"),
        Just("requests.memory"),
        Just("limits.cpu"),
        Just("limits.memory"),
        Just("limits.ephemeral-storage"),
    ];
    btree_map(key.prop_map(str::to_owned), quantity(), 1..5)
}

/// CPU-only, one full node, a partial node, or many full nodes.
pub(crate) fn plan() -> impl Strategy<Value = Plan> {
    prop_oneof![
        Just(cpu_plan()),
        Just(gpu_plan(1, NODE_GPUS)),
        (1..NODE_GPUS).prop_map(|chips| gpu_plan(1, chips)),
        (2u32..=64).prop_map(|nodes| gpu_plan(nodes, NODE_GPUS)),
    ]
}

/// Identities with hostile names; run ids in the real format or hostile too.
pub(crate) fn identity() -> impl Strategy<Value = JobIdentity> {
    let run_id = prop_oneof![3 => "2026[01][0-9][0-2][0-9]-[0-2][0-9][0-5][0-9]{3}-[0-9a-f]{6}", 1 => hostile()];
    (hostile(), hostile(), hostile(), run_id).prop_map(|(name, project, group, run_id)| JobIdentity {
        name,
        project,
        group,
        run_id,
    })
}

/// Environments with unique names; secret values carry a marker so a leak is unmistakable.
pub(crate) fn env() -> impl Strategy<Value = Vec<EnvVar>> {
    let var = (hostile(), prop::bool::weighted(0.3), "[A-Za-z0-9]{12}");
    btree_map("[A-Z_][A-Z0-9_]{0,10}", var, 0..6).prop_map(|vars| {
        vars.into_iter()
            .map(|(name, (value, secret, tag))| {
                let value = if secret { format!("s3cr3t-{tag}{value}") } else { value };
                EnvVar { name, value, secret }
            })
            .collect()
    })
}

/// Paths on the PVC with hostile directory names.
pub(crate) fn run_layout() -> impl Strategy<Value = RunLayout> {
    (hostile(), hostile(), hostile()).prop_map(|(work, logs, file)| {
        let clean = |s: String| s.replace('/', "_");
        RunLayout {
            work_dir: format!("/workspace/work/{}", clean(work)),
            log_file: format!("/workspace/logs/{}/{}.log", clean(logs), clean(file)),
            ..layout()
        }
    })
}

/// Render options in the CRD's ranges.
pub(crate) fn options() -> impl Strategy<Value = RenderOptions> {
    (0i32..20, option::of(0i32..1_000_000), proptest::bool::ANY).prop_map(
        |(max_retry, ttl_seconds_after_finished, restart_on_failure)| RenderOptions {
            max_retry,
            ttl_seconds_after_finished,
            restart_on_failure,
        },
    )
}

/// A whole valid case.
pub(crate) fn case() -> impl Strategy<Value = Case> {
    let entry = prop_oneof![Just(".theseus/bootstrap.sh".to_owned()), hostile().prop_map(|h| format!("{h}.sh"))];
    (host(), identity(), plan(), env(), run_layout(), entry, options()).prop_map(
        |(host, identity, plan, env, layout, bootstrap_entry, options)| Case {
            host,
            identity,
            plan,
            env,
            layout,
            bootstrap_entry,
            options,
        },
    )
}
