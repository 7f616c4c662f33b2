//! Table-driven tests of the solver with the binary's host types: tiny inline configs, availability reports and the expected
//! plan (one line), notes and verdicts, all compared as text by one `check` helper.

use std::collections::BTreeMap;

use theseus_core::availability::{Availability, NodeAvailability, PartitionAvailability, PartitionReport};
use theseus_core::chips;
use theseus_core::config::DispatchConfig;
use theseus_core::solver::*;

use crate::host_types;

/// Parses `yaml` as a dispatch config with the binary's host types.
fn parse(yaml: &str) -> DispatchConfig {
    let value: serde_json::Value = serde_saphyr::from_str(yaml).expect("test config is YAML");
    theseus_core::config::load::from_value(&value, &host_types()).expect("test config parses")
}

/// Parses `yaml` as a dispatch config, solves `request` and compares the result, shown as text,
/// with `expect`.
fn check(yaml: &str, request: Request, avail: Vec<(&str, Availability)>, expect: &str) {
    let config = parse(yaml);
    let avail: BTreeMap<String, Availability> = avail.into_iter().map(|(h, a)| (h.to_owned(), a)).collect();
    let actual = show(&solve(&config, &request, &avail));
    assert_eq!(actual.trim(), unindent(expect), "\nrequest: {request}\nactual:\n{actual}");
}

fn show(res: &Result<Plan, SolveError>) -> String {
    let (mut out, considered) = match res {
        Ok(plan) => {
            let mut out = format!("plan: {}\n", describe_plan(plan));
            for note in &plan.notes {
                out.push_str(&format!("note: {note}\n"));
            }
            (out, &plan.considered)
        }
        Err(err) => (format!("error: {err}\n"), &err.considered),
    };
    for c in considered {
        out.push_str(&format!("- {} {:?}: {}\n", c.host, c.verdict, c.reason));
    }
    if let Err(err) = res {
        for hint in &err.hints {
            out.push_str(&format!("hint: {hint}\n"));
        }
    }
    out
}

fn unindent(s: &str) -> String {
    s.trim().lines().map(str::trim).collect::<Vec<_>>().join("\n")
}

/// `cpu`, `cpu 4`, `8 h100` or `8 any`.
fn req(spec: &str) -> Request {
    let parts: Vec<&str> = spec.split_whitespace().collect();
    let (chip, count) = match parts.as_slice() {
        ["cpu"] => (ChipRequest::Cpu, 0),
        ["cpu", n] => (ChipRequest::Cpu, n.parse().unwrap()),
        [n, "any"] => (ChipRequest::AnyGpu, n.parse().unwrap()),
        [n, chip] => (ChipRequest::Chip(chips::lookup(chip).unwrap()), n.parse().unwrap()),
        _ => panic!("bad request spec {spec}"),
    };
    Request { chip, count, preferred_clusters: vec![], forbidden_clusters: vec![], host: None }
}

fn on(host: &str, spec: &str) -> Request {
    Request { host: Some(host.into()), ..req(spec) }
}

fn free(chips: u32, source: &str) -> Availability {
    Availability::Free { chips, source: source.into() }
}

fn unknown(reason: &str) -> Availability {
    Availability::Unknown { reason: reason.into() }
}

/// A usable node: name, GRES type, total and free GPUs.
fn node(name: &str, gpu_type: &str, total: u32, free: u32) -> NodeAvailability {
    let gpu_type = (!gpu_type.is_empty()).then(|| gpu_type.to_owned());
    NodeAvailability { name: name.into(), gpu_type, total, free, usable: true }
}

fn drained(node: NodeAvailability) -> NodeAvailability {
    NodeAvailability { usable: false, ..node }
}

fn sinfo(partitions: Vec<(&str, Vec<NodeAvailability>)>) -> Availability {
    Availability::Partitions(PartitionReport {
        partitions: partitions
            .into_iter()
            .map(|(name, nodes)| PartitionAvailability { name: name.into(), nodes })
            .collect(),
    })
}

const ORDER: &str = "
priority: [c]
hosts:
  a: {type: plain, ssh: a, cluster: east, chips: {h100: 2}}
  b: {type: plain, ssh: b, cluster: west, chips: {h100: 8}}
  c: {type: plain, ssh: c, cluster: west, chips: {h100: 4}}
";

#[test]
fn order_first_fit_and_filters() {
    // Priority first, then config order; the first host that fits wins and later ones are not listed.
    check(
        ORDER,
        req("4 h100"),
        vec![],
        "
        plan: c (plain): 1 node x 4 h100 = 4 chips, 1 process per node
        - c Chosen: needs 4 h100, 4 free (not checked; configured)
    ",
    );
    check(
        ORDER,
        req("8 h100"),
        vec![],
        "
        plan: b (plain): 1 node x 8 h100 = 8 chips, 1 process per node
        - c Passed: needs 8 h100, has 4
        - a Passed: needs 8 h100, has 2
        - b Chosen: needs 8 h100, 8 free (not checked; configured)
    ",
    );
    // First fit, not best fit: `a` wins although `b` has more free.
    check(
        ORDER,
        req("2 h100"),
        vec![("c", free(1, "nvidia-smi"))],
        "
        plan: a (plain): 1 node x 2 h100 = 2 chips, 1 process per node
        - c Passed: needs 2 h100, 1 free (nvidia-smi)
        - a Chosen: needs 2 h100, 2 free (not checked; configured)
    ",
    );
    let preferred = Request { preferred_clusters: vec!["east".into()], ..req("2 h100") };
    check(
        ORDER,
        preferred,
        vec![],
        "
        plan: a (plain): 1 node x 2 h100 = 2 chips, 1 process per node
        - c Filtered: cluster west not in preferred clusters (east)
        - a Chosen: needs 2 h100, 2 free (not checked; configured)
        - b Filtered: cluster west not in preferred clusters (east)
    ",
    );
    let forbidden = Request { forbidden_clusters: vec!["west".into()], ..req("1 h100") };
    check(
        ORDER,
        forbidden,
        vec![],
        "
        plan: a (plain): 1 node x 1 h100 = 1 chips, 1 process per node
        - c Filtered: cluster west is forbidden
        - a Chosen: needs 1 h100, 2 free (not checked; configured)
        - b Filtered: cluster west is forbidden
    ",
    );
    check(
        ORDER,
        on("b", "1 h100"),
        vec![],
        "
        plan: b (plain): 1 node x 1 h100 = 1 chips, 1 process per node
        - c Filtered: not the requested host b
        - a Filtered: not the requested host b
        - b Chosen: needs 1 h100, 8 free (not checked; configured)
    ",
    );
    check(
        ORDER,
        on("zzz", "1 h100"),
        vec![],
        "error: cannot satisfy 1 x h100: unknown host zzz (known hosts: a, b, c)",
    );
    let everything = Request { forbidden_clusters: vec!["east".into(), "west".into()], ..req("1 h100") };
    check(
        ORDER,
        everything,
        vec![],
        "
        error: cannot satisfy 1 x h100: every host was filtered out
        - c Filtered: cluster west is forbidden
        - a Filtered: cluster east is forbidden
        - b Filtered: cluster west is forbidden
        hint: every host was filtered out by `--exclude-cluster`; loosen it (`theseus plan` shows each host)
    ",
    );
}

#[test]
fn errors_name_the_closest_host() {
    check(
        ORDER,
        req("16 h100"),
        vec![],
        "
        error: cannot satisfy 16 x h100: no host has 16 x h100; largest fit: b with 8 free
        - c Passed: needs 16 h100, has 4
        - a Passed: needs 16 h100, has 2
        - b Passed: needs 16 h100, has 8
        hint: largest fit is 8 x h100 on b: `-n 8` runs now
    ",
    );
    check("hosts: {}", req("1 h100"), vec![], "error: cannot satisfy 1 x h100: no hosts configured");
    check(
        CPU,
        on("gpu-bx", "cpu"),
        vec![],
        "error: cannot satisfy cpu-only (1 process): unknown host gpu-bx (did you mean gpu-box?)",
    );
    check(ORDER, req("0 h100"), vec![], "error: cannot satisfy 0 x h100: a h100 request needs at least one chip");
}

const CPU: &str = "
hosts:
  gpu-box: {type: plain, ssh: g, cluster: c, chips: {h100: 8}}
  laptop: {type: local, processes: 4}
";

#[test]
fn cpu_requests_on_each_host_type() {
    // Any plain host runs a one-process CPU job, GPU box or not; availability is not consulted.
    check(
        CPU,
        req("cpu"),
        vec![("gpu-box", unknown("down"))],
        "
        plan: gpu-box (plain): cpu-only, 1 node x 1 process
        - gpu-box Chosen: runs one process
    ",
    );
    check(
        CPU,
        req("cpu 4"),
        vec![],
        "
        plan: laptop (local): cpu-only, 1 node x 4 processes
        - gpu-box Passed: plain hosts run one process; asked for 4
        - laptop Chosen: runs 4 processes here
    ",
    );
    // Local: the host's `processes` unless the request asks for more than one.
    let local = "hosts: {laptop: {type: local, processes: 4}, bare: {type: local}}";
    check(
        local,
        req("cpu"),
        vec![],
        "
        plan: laptop (local): cpu-only, 1 node x 4 processes
        - laptop Chosen: runs 4 processes here
    ",
    );
    check(
        local,
        req("cpu 2"),
        vec![],
        "
        plan: laptop (local): cpu-only, 1 node x 2 processes
        - laptop Chosen: runs 2 processes here
    ",
    );
    check(
        local,
        on("bare", "cpu"),
        vec![],
        "
        plan: bare (local): cpu-only, 1 node x 1 process
        - laptop Filtered: not the requested host bare
        - bare Chosen: runs 1 process here
    ",
    );
    check(
        "hosts: {k8s: {type: volcano, cluster: c}}",
        req("cpu 3"),
        vec![],
        "
        plan: k8s (volcano): cpu-only, 3 nodes x 1 process
        - k8s Chosen: 3 pods of one process
    ",
    );
    let slurm = "
        hosts:
          hpc: {type: slurm, ssh: h, cluster: c, partitions: [gpu], cpu_partitions: [cpu, cpu2]}
          hpc2: {type: slurm, ssh: h, cluster: c, partitions: [gpu, gpu2]}
          hpc3: {type: slurm, ssh: h, cluster: c}
    ";
    check(
        slurm,
        req("cpu 2"),
        vec![],
        "
        plan: hpc (slurm): cpu-only, 2 nodes x 1 process, partition cpu
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: partition cpu, 2 nodes x 1 task
    ",
    );
    check(
        slurm,
        on("hpc2", "cpu"),
        vec![],
        "
        plan: hpc2 (slurm): cpu-only, 1 node x 1 process, partition gpu
        note: time limit 14-0 (the default; set `time:` on host `hpc2` for another)
        - hpc Filtered: not the requested host hpc2
        - hpc2 Chosen: partition gpu, 1 node x 1 task
        - hpc3 Filtered: not the requested host hpc2
    ",
    );
    check(
        slurm,
        on("hpc3", "cpu"),
        vec![],
        "
        error: cannot satisfy cpu-only (1 process): hpc3: no cpu_partitions or partitions configured
        - hpc Filtered: not the requested host hpc3
        - hpc2 Filtered: not the requested host hpc3
        - hpc3 Passed: no cpu_partitions or partitions configured
    ",
    );
}

const MACHINES: &str = "
hosts:
  laptop: {type: local, chips: {h100: 2, l40: 4}, processes: 2}
  l40-box: {type: plain, ssh: l, cluster: c, chips: {l40: 8}}
  a100-box: {type: plain, ssh: a, cluster: c, chips: {a100-sxm4-80gb: 4}}
";

#[test]
fn local_and_plain_gpus() {
    check(
        MACHINES,
        req("2 h100"),
        vec![],
        "
        plan: laptop (local): 1 node x 2 h100 = 2 chips, 2 processes per node
        - laptop Chosen: needs 2 h100, 2 free (not checked; configured)
    ",
    );
    // Any GPU takes one chip type: the one with most GPUs.
    check(
        MACHINES,
        req("3 any"),
        vec![],
        "
        plan: laptop (local): 1 node x 3 l40 = 3 chips, 2 processes per node
        note: any GPU: using l40, the type with most GPUs (4)
        - laptop Chosen: needs 3 l40, 4 free (not checked; configured)
    ",
    );
    // An a100 request is not served by the l40 box.
    check(
        MACHINES,
        req("2 a100-sxm4-80gb"),
        vec![],
        "
        plan: a100-box (plain): 1 node x 2 a100-sxm4-80gb = 2 chips, 1 process per node
        - laptop Passed: no a100-sxm4-80gb in chips (h100: 2, l40: 4)
        - l40-box Passed: no a100-sxm4-80gb in chips (l40: 8)
        - a100-box Chosen: needs 2 a100-sxm4-80gb, 4 free (not checked; configured)
    ",
    );
    // Measured availability is capped at the configured count.
    check(
        MACHINES,
        on("a100-box", "4 a100-80gb"),
        vec![("a100-box", free(9, "nvidia-smi"))],
        "
        plan: a100-box (plain): 1 node x 4 a100-sxm4-80gb = 4 chips, 1 process per node
        - laptop Filtered: not the requested host a100-box
        - l40-box Filtered: not the requested host a100-box
        - a100-box Chosen: needs 4 a100-sxm4-80gb, 4 free (nvidia-smi)
    ",
    );
    check(
        MACHINES,
        req("4 l40"),
        vec![("laptop", free(3, "nvidia-smi")), ("l40-box", free(2, "nvidia-smi"))],
        "
        error: cannot satisfy 4 x l40: no host has 4 x l40; largest fit: laptop with 3 free
        - laptop Passed: needs 4 l40, 3 free (nvidia-smi)
        - l40-box Passed: needs 4 l40, 2 free (nvidia-smi)
        - a100-box Passed: no l40 in chips (a100-sxm4-80gb: 4)
        hint: largest fit is 3 x l40 on laptop: `-n 3` runs now
    ",
    );
    // A host whose availability is unknown is not chosen.
    check(
        MACHINES,
        req("1 l40"),
        vec![("laptop", unknown("no answer within 20s")), ("l40-box", unknown("ssh failed"))],
        "
        error: cannot satisfy 1 x l40: no host can serve 1 x l40
        - laptop Passed: availability unknown: no answer within 20s
        - l40-box Passed: availability unknown: ssh failed
        - a100-box Passed: no l40 in chips (a100-sxm4-80gb: 4)
        hint: host laptop did not answer its probe, so it was not used (see `-v`)
        hint: host l40-box did not answer its probe, so it was not used (see `-v`)
    ",
    );
    // One host left: the error is its reason, said once.
    check(
        MACHINES,
        on("l40-box", "1 l40"),
        vec![("l40-box", unknown("probe failed: permission denied"))],
        "
        error: cannot satisfy 1 x l40: l40-box: availability unknown: probe failed: permission denied
        - laptop Filtered: not the requested host l40-box
        - l40-box Passed: availability unknown: probe failed: permission denied
        - a100-box Filtered: not the requested host l40-box
    ",
    );
    // A probe that answered with an error is not one that did not answer.
    check(
        MACHINES,
        req("1 l40"),
        vec![("laptop", unknown("probe failed: permission denied")), ("l40-box", unknown("no answer within 5s"))],
        "
        error: cannot satisfy 1 x l40: no host can serve 1 x l40
        - laptop Passed: availability unknown: probe failed: permission denied
        - l40-box Passed: availability unknown: no answer within 5s
        - a100-box Passed: no l40 in chips (a100-sxm4-80gb: 4)
        hint: host laptop's probe failed (its reason is above), so it was not used
        hint: host l40-box did not answer its probe, so it was not used (see `-v`)
    ",
    );
}

const VOLCANO: &str = "
hosts:
  k8s: {type: volcano, cluster: c, chips: {h100: 8, a100-sxm4-80gb: 4}}
";

#[test]
fn volcano_nodes_and_queue() {
    check(
        VOLCANO,
        req("32 h100"),
        vec![],
        "
        plan: k8s (volcano): 4 nodes x 8 h100 = 32 chips, 1 process per node
        - k8s Chosen: 4 pods x 8 h100 = 32, queue not checked
    ",
    );
    check(
        VOLCANO,
        req("20 h100"),
        vec![("k8s", free(24, "queue capability"))],
        "
        plan: k8s (volcano): 3 nodes x 8 h100 = 24 chips, 1 process per node
        note: rounded up to 24 chips on 3 nodes (8 per node)
        - k8s Chosen: 3 pods x 8 h100 = 24, 24 free (queue capability)
    ",
    );
    check(
        VOLCANO,
        req("3 h100"),
        vec![],
        "
        plan: k8s (volcano): 1 node x 3 h100 = 3 chips, 1 process per node
        note: partial node: 3 of 8 h100
        - k8s Chosen: 1 pod x 3 h100 = 3, queue not checked
    ",
    );
    // Heterogeneous chips: an a100 pod gets 4 GPUs, not 8 (nor 12).
    check(
        VOLCANO,
        req("8 a100-80gb"),
        vec![],
        "
        plan: k8s (volcano): 2 nodes x 4 a100-sxm4-80gb = 8 chips, 1 process per node
        - k8s Chosen: 2 pods x 4 a100-sxm4-80gb = 8, queue not checked
    ",
    );
    check(
        VOLCANO,
        req("16 any"),
        vec![],
        "
        plan: k8s (volcano): 2 nodes x 8 h100 = 16 chips, 1 process per node
        note: any GPU: pods sized for h100 (8 per node)
        - k8s Chosen: 2 pods x 8 h100 = 16, queue not checked
    ",
    );
    check(
        VOLCANO,
        req("1 l40"),
        vec![],
        "
        error: cannot satisfy 1 x l40: k8s: no l40 in chips (a100-sxm4-80gb: 4, h100: 8)
        - k8s Passed: no l40 in chips (a100-sxm4-80gb: 4, h100: 8)
        hint: no host has l40 GPUs; the config has a100-sxm4-80gb on k8s, h100 on k8s: ask for one of those with `--chip`
    ",
    );
    // The queue must hold the rounded-up total, not just the request.
    check(
        VOLCANO,
        req("20 h100"),
        vec![("k8s", free(20, "queue capability"))],
        "
        error: cannot satisfy 20 x h100: no host has 20 x h100; largest fit: k8s with 20 free
        - k8s Passed: needs 24 h100, 20 free (queue capability)
        hint: largest fit is 20 x h100 on k8s: `-n 20` runs now
    ",
    );
    check(
        VOLCANO,
        req("8 h100"),
        vec![("k8s", unknown("kubectl failed"))],
        "
        plan: k8s (volcano): 1 node x 8 h100 = 8 chips, 1 process per node
        note: queue availability unknown (kubectl failed); the scheduler will queue the job if needed
        - k8s Chosen: 1 pod x 8 h100 = 8, queue availability unknown
    ",
    );
    let per_node_only = "hosts: {k8s: {type: volcano, cluster: c, gpus_per_node: 4}}";
    check(
        per_node_only,
        req("6 any"),
        vec![],
        "
        plan: k8s (volcano): 2 nodes x 4 gpu = 8 chips, 1 process per node
        note: rounded up to 8 chips on 2 nodes (4 per node)
        - k8s Chosen: 2 pods x 4 GPU = 8, queue not checked
    ",
    );
    check(
        per_node_only,
        req("1 h100"),
        vec![],
        "
        error: cannot satisfy 1 x h100: k8s: no h100 in chips (none)
        - k8s Passed: no h100 in chips (none)
        hint: no host in the config has GPUs: add `--chip cpu` or `request: {chip: cpu}` to run on CPUs, or add a GPU host to ~/.theseus.yaml
    ",
    );
}

const SLURM: &str = "
gres_mapping: {h100: h100, a100-sxm4-80gb: a100}
hosts:
  hpc:
    type: slurm
    ssh: h
    cluster: c
    partitions: [small, {name: big, default: true}]
";

fn hpc_report() -> Availability {
    sinfo(vec![
        ("small", vec![node("s1", "h100", 4, 4)]),
        ("big", vec![node("n1", "h100", 8, 3), node("n2", "h100", 8, 2), drained(node("n3", "h100", 8, 8))]),
    ])
}

#[test]
fn slurm_partitions_and_nodes() {
    // The default partition is tried first.
    check(
        SLURM,
        req("2 h100"),
        vec![("hpc", hpc_report())],
        "
        plan: hpc (slurm): 1 node x 2 h100 = 2 chips, 1 process per node, partition big, gres gpu:h100:2
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: partition big: a node has 3 h100 free
    ",
    );
    // 5 GPUs are free in `big` but on two nodes: a one-node job does not fit there now.
    check(
        SLURM,
        req("4 h100"),
        vec![("hpc", hpc_report())],
        "
        plan: hpc (slurm): 1 node x 4 h100 = 4 chips, 1 process per node, partition small, gres gpu:h100:4
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: partition small: a node has 4 h100 free
    ",
    );
    check(
        SLURM,
        req("5 h100"),
        vec![("hpc", hpc_report())],
        "
        plan: hpc (slurm): 1 node x 5 h100 = 5 chips, 1 process per node, partition big, gres gpu:h100:5, queued
        note: no host has 5 x h100 free now; sending to hpc where Slurm will queue it
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: needs 5 h100 on one node, at most 3 free on a node now (partition big)
    ",
    );
    // The drained node n3 has 8 free but does not count.
    check(
        SLURM,
        req("8 h100"),
        vec![("hpc", hpc_report())],
        "
        plan: hpc (slurm): 1 node x 8 h100 = 8 chips, 1 process per node, partition big, gres gpu:h100:8, queued
        note: no host has 8 x h100 free now; sending to hpc where Slurm will queue it
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: needs 8 h100 on one node, at most 3 free on a node now (partition big)
    ",
    );
    // Two usable 8-GPU nodes at most: 24 GPUs can never run here.
    check(
        SLURM,
        req("24 h100"),
        vec![("hpc", hpc_report())],
        "
        error: cannot satisfy 24 x h100: no host has 24 x h100; largest fit: hpc with 5 free
        - hpc Passed: needs 3 nodes with 8 h100; partition big has 2
        hint: largest fit is 5 x h100 on hpc: `-n 5` runs now
    ",
    );
    check(
        SLURM,
        req("1 l40"),
        vec![("hpc", hpc_report())],
        "
        error: cannot satisfy 1 x l40: hpc: no gres_mapping for l40
        - hpc Passed: no gres_mapping for l40
    ",
    );
    check(
        SLURM,
        req("1 a100-80gb"),
        vec![("hpc", hpc_report())],
        "
        error: cannot satisfy 1 x a100-sxm4-80gb: hpc: no usable gres a100 nodes in partitions big, small
        - hpc Passed: no usable gres a100 nodes in partitions big, small
    ",
    );
    // Nodes named in `exclude` do not count either.
    let excluded = SLURM.replace("cluster: c", "cluster: c\n    exclude: [n1]");
    check(
        &excluded,
        req("2 h100"),
        vec![("hpc", hpc_report())],
        "
        plan: hpc (slurm): 1 node x 2 h100 = 2 chips, 1 process per node, partition big, gres gpu:h100:2
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: partition big: a node has 2 h100 free
    ",
    );
    // Any GPU: no GRES type.
    check(
        SLURM,
        req("3 any"),
        vec![("hpc", hpc_report())],
        "
        plan: hpc (slurm): 1 node x 3 gpu = 3 chips, 1 process per node, partition big, gres gpu:3
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: partition big: a node has 3 GPU free
    ",
    );
}

const SPAN: &str = "
gres_mapping: {h100: h100}
hosts:
  hpc: {type: slurm, ssh: h, cluster: c, partitions: [gpu]}
";

fn span_report() -> Availability {
    sinfo(vec![("gpu", vec![node("g1", "h100", 8, 8), node("g2", "h100", 8, 8), node("g3", "h100", 8, 0)])])
}

#[test]
fn slurm_multi_node() {
    check(
        SPAN,
        req("16 h100"),
        vec![("hpc", span_report())],
        "
        plan: hpc (slurm): 2 nodes x 8 h100 = 16 chips, 1 process per node, partition gpu, gres gpu:h100:8
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: partition gpu: 2 nodes have 8 h100 free
    ",
    );
    check(
        SPAN,
        req("12 h100"),
        vec![("hpc", span_report())],
        "
        plan: hpc (slurm): 2 nodes x 8 h100 = 16 chips, 1 process per node, partition gpu, gres gpu:h100:8
        note: rounded up to 16 chips on 2 nodes (8 per node)
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: partition gpu: 2 nodes have 8 h100 free
    ",
    );
    check(
        SPAN,
        req("24 h100"),
        vec![("hpc", span_report())],
        "
        plan: hpc (slurm): 3 nodes x 8 h100 = 24 chips, 1 process per node, partition gpu, gres gpu:h100:8, queued
        note: no host has 24 x h100 free now; sending to hpc where Slurm will queue it
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: needs 3 nodes with 8 h100 free, 2 now (partition gpu)
    ",
    );
    // Without a configured partition list, every reported partition is used.
    let no_partitions = "gres_mapping: {h100: h100}\nhosts: {hpc: {type: slurm, ssh: h, cluster: c}}";
    check(
        no_partitions,
        req("8 h100"),
        vec![("hpc", span_report())],
        "
        plan: hpc (slurm): 1 node x 8 h100 = 8 chips, 1 process per node, partition gpu, gres gpu:h100:8
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: partition gpu: a node has 8 h100 free
    ",
    );
}

#[test]
fn slurm_caps_and_unchecked_availability() {
    // The chips cap is never applied silently.
    let capped = "gres_mapping: {h100: h100}\nhosts: {hpc: {type: slurm, ssh: h, cluster: c, partitions: [gpu], chips: {h100: 4}}}";
    check(
        capped,
        req("8 h100"),
        vec![("hpc", span_report())],
        "
        error: cannot satisfy 8 x h100: hpc: needs 8 h100; chips allows at most 4
        - hpc Passed: needs 8 h100; chips allows at most 4
    ",
    );
    check(
        capped,
        req("1 a100-80gb"),
        vec![],
        "
        error: cannot satisfy 1 x a100-sxm4-80gb: hpc: chips allows no a100-sxm4-80gb
        - hpc Passed: chips allows no a100-sxm4-80gb
        hint: no host has a100-sxm4-80gb GPUs; the config has h100 on hpc: ask for one of those with `--chip`
    ",
    );
    // Any GPU is capped by the largest entry.
    check(
        capped,
        req("5 any"),
        vec![("hpc", span_report())],
        "
        error: cannot satisfy 5 x any-gpu: hpc: needs 5 GPU; chips allows at most 4
        - hpc Passed: needs 5 GPU; chips allows at most 4
    ",
    );
    check(
        capped,
        req("4 any"),
        vec![("hpc", span_report())],
        "
        plan: hpc (slurm): 1 node x 4 gpu = 4 chips, 1 process per node, partition gpu, gres gpu:4
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: partition gpu: a node has 8 GPU free
    ",
    );
    let rounded = "gres_mapping: {h100: h100}\nhosts: {hpc: {type: slurm, ssh: h, cluster: c, partitions: [gpu], chips: {h100: 12}, gpus_per_node: 8}}";
    check(
        rounded,
        req("12 h100"),
        vec![],
        "
        error: cannot satisfy 12 x h100: hpc: needs 16 h100 on whole nodes; chips allows at most 12
        - hpc Passed: needs 16 h100 on whole nodes; chips allows at most 12
    ",
    );
    check(
        rounded,
        req("8 h100"),
        vec![],
        "
        plan: hpc (slurm): 1 node x 8 h100 = 8 chips, 1 process per node, partition gpu, gres gpu:h100:8
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: availability not checked; partition gpu from config
    ",
    );
    // Not checked: trust the config, one node when gpus_per_node is unknown.
    check(
        SLURM,
        req("16 h100"),
        vec![],
        "
        plan: hpc (slurm): 1 node x 16 h100 = 16 chips, 1 process per node, partition big, gres gpu:h100:16
        note: gpus_per_node unknown; asking for one node
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: availability not checked; partition big from config
    ",
    );
    let bare = "gres_mapping: {h100: h100}\nhosts: {hpc: {type: slurm, ssh: h, cluster: c}}";
    check(
        bare,
        req("1 h100"),
        vec![],
        "
        error: cannot satisfy 1 x h100: hpc: no partitions configured and availability not checked
        - hpc Passed: no partitions configured and availability not checked
    ",
    );
    // Unknown: still a fallback candidate on the configured partition.
    check(
        SLURM,
        req("4 h100"),
        vec![("hpc", unknown("no answer within 20s"))],
        "
        plan: hpc (slurm): 1 node x 4 h100 = 4 chips, 1 process per node, partition big, gres gpu:h100:4, queued
        note: no host has 4 x h100 free now; sending to hpc where Slurm will queue it
        note: gpus_per_node unknown; asking for one node
        note: availability unknown (no answer within 20s); partition big from config
        note: time limit 14-0 (the default; set `time:` on host `hpc` for another)
        - hpc Chosen: availability unknown: no answer within 20s
    ",
    );
}

const FALLBACK: &str = "
gres_mapping: {h100: h100}
hosts:
  s1: {type: slurm, ssh: a, cluster: c, partitions: [gpu]}
  s2: {type: slurm, ssh: b, cluster: c, partitions: [gpu]}
  box: {type: plain, ssh: x, cluster: c, chips: {h100: 2}}
";

fn one_node(free: u32) -> Availability {
    sinfo(vec![("gpu", vec![node("n1", "h100", 8, free)])])
}

/// Issue 23 point 10: `theseus plan` shows a Slurm job's time limit, the original's 14 days
/// unless the host sets `time:`.
#[test]
fn slurm_plans_show_the_time_limit() {
    check(
        "
gres_mapping: {h100: h100}
hosts:
  s1: {type: slurm, ssh: a, cluster: c, partitions: [gpu], time: '2-00:00:00'}
",
        req("2 h100"),
        vec![("s1", one_node(5))],
        "
        plan: s1 (slurm): 1 node x 2 h100 = 2 chips, 1 process per node, partition gpu, gres gpu:h100:2
        note: time limit 2-00:00:00 (the host's `time:`)
        - s1 Chosen: partition gpu: a node has 5 h100 free
    ",
    );
}

#[test]
fn slurm_fallback() {
    check(
        FALLBACK,
        req("8 h100"),
        vec![("s1", one_node(2)), ("s2", one_node(5))],
        "
        plan: s2 (slurm): 1 node x 8 h100 = 8 chips, 1 process per node, partition gpu, gres gpu:h100:8, queued
        note: no host has 8 x h100 free now; sending to s2 where Slurm will queue it
        note: time limit 14-0 (the default; set `time:` on host `s2` for another)
        - s1 Eligible: needs 8 h100 on one node, at most 2 free on a node now (partition gpu)
        - s2 Chosen: needs 8 h100 on one node, at most 5 free on a node now (partition gpu)
        - box Passed: needs 8 h100, has 2
    ",
    );
    // Ties go to the earlier host.
    check(
        FALLBACK,
        req("8 h100"),
        vec![("s1", one_node(3)), ("s2", one_node(3))],
        "
        plan: s1 (slurm): 1 node x 8 h100 = 8 chips, 1 process per node, partition gpu, gres gpu:h100:8, queued
        note: no host has 8 x h100 free now; sending to s1 where Slurm will queue it
        note: time limit 14-0 (the default; set `time:` on host `s1` for another)
        - s1 Chosen: needs 8 h100 on one node, at most 3 free on a node now (partition gpu)
        - s2 Eligible: needs 8 h100 on one node, at most 3 free on a node now (partition gpu)
        - box Passed: needs 8 h100, has 2
    ",
    );
    // A host that fits now beats any fallback.
    check(
        FALLBACK,
        req("2 h100"),
        vec![("s1", one_node(1)), ("s2", one_node(5))],
        "
        plan: s2 (slurm): 1 node x 2 h100 = 2 chips, 1 process per node, partition gpu, gres gpu:h100:2
        note: time limit 14-0 (the default; set `time:` on host `s2` for another)
        - s1 Passed: needs 2 h100 on one node, at most 1 free on a node now (partition gpu)
        - s2 Chosen: partition gpu: a node has 5 h100 free
    ",
    );
}

#[test]
fn plan_fields_and_rendering() {
    let config: DispatchConfig = parse(SPAN);
    let avail = BTreeMap::from([("hpc".to_owned(), span_report())]);
    let plan = solve(&config, &req("24 h100"), &avail).unwrap();
    let placed = |key: &str| plan.placement.get(key).and_then(|v| v.as_deref());
    assert_eq!(
        (plan.kind.as_str(), plan.cluster.as_str(), plan.chip.map(|c| c.name), plan.nodes, plan.chips_per_node),
        ("slurm", "c", Some("h100"), 3, 8)
    );
    assert_eq!(
        (plan.total_chips, plan.processes(), placed("partition"), placed("gres_type"), plan.queued),
        (24, 3, Some("gpu"), Some("h100"), true)
    );

    let config: DispatchConfig = parse(ORDER);
    let err = solve(&config, &req("8 h100"), &BTreeMap::from([("b".to_owned(), free(0, "nvidia-smi"))])).unwrap_err();
    assert_eq!(
        render_table(&err.considered),
        "HOST  TYPE   VERDICT  REASON\n\
         c     plain  passed   needs 8 h100, has 4\n\
         a     plain  passed   needs 8 h100, has 2\n\
         b     plain  passed   needs 8 h100, 0 free (nvidia-smi)\n"
    );
    assert_eq!(render_table(&[]), "HOST  TYPE  VERDICT  REASON\n");
}

#[test]
fn local_cpu_requests_beyond_the_machine_need_oversubscribe() {
    let local = "hosts: {laptop: {type: local}}";
    check(
        local,
        req("cpu 3"),
        vec![("laptop", free(2, "CPU cores on this machine"))],
        "
        error: cannot satisfy cpu-only (3 processes): no host has cpu-only (3 processes); largest fit: laptop with 2 free
        - laptop Passed: needs 3 processes, this machine has 2 CPUs (pass --oversubscribe, or set `oversubscribe: true` on the host, to run more processes than CPUs)
        hint: largest fit is 2 processes on laptop: `-n 2` runs now
    ",
    );
    check(
        local,
        req("cpu 2"),
        vec![("laptop", free(2, "CPU cores on this machine"))],
        "
        plan: laptop (local): cpu-only, 1 node x 2 processes
        - laptop Chosen: runs 2 processes here
    ",
    );
    check(
        "hosts: {laptop: {type: local, oversubscribe: true}}",
        req("cpu 3"),
        vec![("laptop", free(2, "CPU cores on this machine"))],
        "
        plan: laptop (local): cpu-only, 1 node x 3 processes
        - laptop Chosen: runs 3 processes here
    ",
    );
}

#[test]
fn counts_beyond_the_limit_are_refused_before_any_arithmetic() {
    for spec in ["cpu 4294967295", "4294967295 h100", "65537 any"] {
        let config =
            "hosts: {laptop: {type: local, oversubscribe: true}, k8s: {type: volcano, cluster: c, chips: {h100: 8}}}";
        let config: DispatchConfig = parse(config);
        let err = solve(&config, &req(spec), &BTreeMap::new()).unwrap_err();
        assert!(err.summary.contains("at most 65536"), "{spec}: {err}");
        assert!(err.considered.is_empty(), "{spec}: no host was looked at");
    }
    // The largest allowed count spreads over nodes without overflow.
    check(
        "hosts: {k8s: {type: volcano, cluster: c, chips: {h100: 3}}}",
        req("65536 h100"),
        vec![],
        "
        plan: k8s (volcano): 21846 nodes x 3 h100 = 65538 chips, 1 process per node
        note: rounded up to 65538 chips on 21846 nodes (3 per node)
        - k8s Chosen: 21846 pods x 3 h100 = 65538, queue not checked
    ",
    );
}

#[test]
fn an_accelerator_that_is_not_a_gpu_is_passed_over_by_every_gpu_and_cpu_host_type() {
    check(
        "
gres_mapping: {h100: h100}
hosts:
  laptop: {type: local, chips: {h100: 8}}
  box: {type: plain, ssh: b, cluster: c, chips: {h100: 8}}
  hpc: {type: slurm, ssh: h, cluster: c, partitions: [gpu], chips: {h100: 8}}
  k8s: {type: volcano, cluster: c, chips: {h100: 8}}
",
        req("8 tpu-v4"),
        vec![],
        "
        error: cannot satisfy 8 x tpu-v4: no host can serve 8 x tpu-v4
        - laptop Passed: tpu-v4 is not a GPU; this machine runs GPU and CPU jobs only
        - box Passed: tpu-v4 is not a GPU; a plain host runs GPU and CPU jobs only
        - hpc Passed: tpu-v4 is not a GPU; a Slurm host runs GPU and CPU jobs only
        - k8s Passed: tpu-v4 is not a GPU; a Volcano host runs GPU and CPU jobs only
        hint: no host offers tpu-v4: add a host that has tpu-v4 chips to ~/.theseus.yaml
    ",
    );
}

#[test]
fn a_gpu_request_on_a_machine_without_gpus_hints_at_the_cpu() {
    check(
        "hosts:\n  laptop: {type: local}\n",
        req("1 any"),
        vec![],
        "
        error: cannot satisfy 1 x any-gpu: laptop: no GPUs in chips
        - laptop Passed: no GPUs in chips
        hint: this machine has no GPUs: add `--chip cpu` or `request: {chip: cpu}` to run on its CPUs
    ",
    );
    // A host refused for its host key is passed over with its own reason, not a probe hint.
    check(
        "hosts:\n  box: {type: plain, ssh: b, cluster: c, chips: {h100: 8}}\n",
        req("1 h100"),
        vec![("box", Availability::Unusable { reason: "host key verification failed for `b`".into() })],
        "
        error: cannot satisfy 1 x h100: box: host key verification failed for `b`
        - box Passed: host key verification failed for `b`
    ",
    );
    // CPU jobs too, although their availability is otherwise not consulted.
    check(
        "hosts:\n  box: {type: plain, ssh: b, cluster: c}\n  k8s: {type: volcano, cluster: c, namespace: ns, queue: q, image: img, pvc_name: pvc}\n",
        req("cpu"),
        vec![
            ("box", Availability::Unusable { reason: "host key verification failed for `b`".into() }),
            ("k8s", Availability::Unusable { reason: "queue q does not exist".into() }),
        ],
        "
        error: cannot satisfy cpu-only (1 process): no host can serve cpu-only (1 process)
        - box Passed: host key verification failed for `b`
        - k8s Passed: queue q does not exist
    ",
    );
}
