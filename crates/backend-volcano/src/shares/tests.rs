//! Table tests of [`super::weigh`]: one cluster per case, the verdict it must reach.

use super::*;

const GPU: &str = "nvidia.com/gpu";

fn queue(name: &str, weight: u32, allocated: f64) -> QueueSnap {
    QueueSnap {
        name: name.into(),
        state: Some("Open".into()),
        weight,
        reclaimable: true,
        allocated,
        ..QueueSnap::default()
    }
}

fn group(name: &str, queue: &str, class: Option<&str>, phase: &str, need: f64) -> GroupSnap {
    GroupSnap {
        namespace: "ml".into(),
        name: name.into(),
        queue: queue.into(),
        priority_class: class.map(str::to_owned),
        phase: phase.into(),
        need,
    }
}

fn classes() -> Vec<ClassSnap> {
    let class =
        |name: &str, value: i32, never: bool| ClassSnap { name: name.into(), value, global_default: false, never };
    vec![class("prod", 1000, false), class("dev", 10, false), class("polite", 1000, true)]
}

fn snap(queues: Vec<QueueSnap>, groups: Vec<GroupSnap>, nodes: (f64, f64)) -> Snapshot {
    Snapshot {
        resource: GPU.into(),
        queues: Some(queues),
        groups: Some(groups),
        groups_only_in: None,
        classes: Some(classes()),
        nodes: Some(nodes),
    }
}

fn ask(queue: &str, amount: f64, class: Option<&str>) -> Ask {
    Ask { queue: queue.into(), amount, priority_class: class.map(str::to_owned) }
}

/// The verdict's kind and its one-line description.
fn kind(v: &ShareVerdict) -> &'static str {
    match v {
        ShareVerdict::FitsNow { .. } => "now",
        ShareVerdict::Reclaim { .. } => "reclaim",
        ShareVerdict::Preempt { .. } => "preempt",
        ShareVerdict::Waits { .. } => "waits",
        ShareVerdict::Never { .. } => "never",
        ShareVerdict::Unknown { .. } => "unknown",
    }
}

#[test]
fn verdicts_by_case() {
    // Two equal queues on 8 GPUs: "b" borrowed 6 while "a" was idle.
    let borrowed = || vec![queue("a", 1, 0.0), queue("b", 1, 6.0)];
    let b_running = || vec![group("b-job", "b", Some("dev"), "Running", 6.0)];
    let cases: Vec<(&str, Snapshot, Ask, &str, &str)> = vec![
        (
            "idle cluster",
            snap(vec![queue("a", 1, 0.0)], vec![], (8.0, 8.0)),
            ask("a", 4.0, None),
            "now",
            "room for 4 (deserved 4",
        ),
        (
            "room on the nodes",
            snap(borrowed(), b_running(), (8.0, 8.0 - 6.0)),
            ask("a", 2.0, None),
            "now",
            "nodes have 2",
        ),
        (
            "b borrowed a's share",
            snap(borrowed(), b_running(), (8.0, 2.0)),
            ask("a", 4.0, None),
            "reclaim",
            "reclaiming 2 from queue b",
        ),
        (
            "b is not reclaimable",
            snap(
                vec![queue("a", 1, 0.0), QueueSnap { reclaimable: false, ..queue("b", 1, 6.0) }],
                b_running(),
                (8.0, 2.0),
            ),
            ask("a", 4.0, None),
            "waits",
            "b not reclaimable",
        ),
        (
            "b keeps its guarantee",
            snap(
                vec![queue("a", 1, 0.0), QueueSnap { guarantee: Some(6.0), ..queue("b", 1, 6.0) }],
                b_running(),
                (8.0, 2.0),
            ),
            ask("a", 4.0, None),
            "waits",
            // The guarantee also lowers a's real capability: 8 in all less b's 6.
            "has room for 2 (deserved 2",
        ),
        (
            "a would pass its share",
            snap(borrowed(), b_running(), (8.0, 2.0)),
            ask("a", 6.0, None),
            "waits",
            "beyond its deserved 4",
        ),
        (
            "preempt own dev job",
            snap(vec![queue("a", 1, 8.0)], vec![group("dev-exp", "a", Some("dev"), "Running", 8.0)], (8.0, 0.0)),
            ask("a", 4.0, Some("prod")),
            "preempt",
            "ml/dev-exp (a, priority dev 10, 8)",
        ),
        (
            "equal priority preempts nothing",
            snap(vec![queue("a", 1, 8.0)], vec![group("other", "a", Some("prod"), "Running", 8.0)], (8.0, 0.0)),
            ask("a", 4.0, Some("prod")),
            "waits",
            "not enough lower-priority",
        ),
        (
            "preemptionPolicy Never",
            snap(vec![queue("a", 1, 8.0)], vec![group("dev-exp", "a", Some("dev"), "Running", 8.0)], (8.0, 0.0)),
            ask("a", 4.0, Some("polite")),
            "waits",
            "preemptionPolicy Never",
        ),
        (
            "over the capability",
            snap(vec![QueueSnap { capability: Some(4.0), ..queue("a", 1, 0.0) }], vec![], (8.0, 8.0)),
            ask("a", 6.0, None),
            "never",
            "caps nvidia.com/gpu at 4",
        ),
        (
            "over the cluster",
            snap(vec![queue("a", 1, 0.0)], vec![], (8.0, 8.0)),
            ask("a", 16.0, None),
            "never",
            "have 8 in all",
        ),
    ];
    for (name, snap, ask, want, text) in cases {
        let got = weigh(&snap, &ask);
        let line = got.verdict.describe();
        assert_eq!(kind(&got.verdict), want, "{name}: {line}");
        assert!(line.contains(text), "{name}: {line:?} lacks {text:?}");
    }
}

#[test]
fn proportion_water_fills_by_weight_within_requests_and_guarantees() {
    // 12 GPUs; a (weight 2) asks 8, b (weight 1) holds 6 and wants 2 more, c (weight 1) has no jobs.
    let s = snap(
        vec![queue("a", 2, 0.0), queue("b", 1, 6.0), queue("c", 1, 0.0)],
        vec![group("b-job", "b", None, "Running", 6.0), group("b-more", "b", None, "Pending", 2.0)],
        (12.0, 6.0),
    );
    let got = weigh(&s, &ask("a", 8.0, None));
    let row = |n: &str| got.queues.iter().find(|q| q.name == n).unwrap().clone();
    assert_eq!(row("a").deserved, Some(8.0), "2/3 of 12, within its request of 8");
    assert_eq!(row("b").deserved, Some(4.0), "1/3 of 12");
    assert_eq!(row("c").deserved, Some(0.0), "no jobs: no share");
    assert_eq!(row("b").borrowed, 2.0);
    assert_eq!(row("b").owed, 0.0);
    assert_eq!(row("b").pending, Some(2.0));
    assert_eq!(row("b").classes, vec![("none".to_owned(), 2)]);
    assert!(got.model.starts_with("proportion"), "{}", got.model);
    assert_eq!(kind(&got.verdict), "reclaim", "{}", got.verdict.describe());
}

#[test]
fn capacity_takes_spec_deserved() {
    let q =
        |name: &str, deserved: f64, allocated: f64| QueueSnap { deserved: Some(deserved), ..queue(name, 1, allocated) };
    let s = snap(vec![q("a", 6.0, 0.0), q("b", 2.0, 8.0)], vec![group("b-job", "b", None, "Running", 8.0)], (8.0, 0.0));
    let got = weigh(&s, &ask("a", 4.0, None));
    assert!(got.model.starts_with("capacity"), "{}", got.model);
    assert_eq!(got.queues[1].borrowed, 6.0);
    assert!(got.verdict.describe().contains("reclaiming 4 from queue b"), "{}", got.verdict.describe());
}

#[test]
fn what_rbac_hides_is_said_not_guessed() {
    let mut s = snap(vec![queue("a", 1, 8.0)], vec![], (8.0, 0.0));
    s.queues = None;
    let got = weigh(&s, &ask("a", 4.0, Some("prod")));
    assert_eq!(kind(&got.verdict), "unknown");
    assert!(got.unknown[0].contains("queues cannot be read"), "{:?}", got.unknown);

    let mut s = snap(vec![queue("a", 1, 0.0)], vec![], (8.0, 8.0));
    s.nodes = None;
    let got = weigh(&s, &ask("a", 4.0, None));
    assert_eq!(kind(&got.verdict), "unknown", "deserved needs the total: {}", got.verdict.describe());
    assert!(got.unknown.iter().any(|u| u.contains("nodes cannot be read")), "{:?}", got.unknown);
    assert_eq!(got.queues[0].deserved, None, "no share is guessed");

    let mut s = snap(vec![queue("a", 1, 8.0)], vec![], (8.0, 0.0));
    s.groups = None;
    s.classes = None;
    let got = weigh(&s, &ask("a", 4.0, Some("prod")));
    assert_eq!(kind(&got.verdict), "waits");
    let line = got.verdict.describe();
    assert!(line.contains("jobs cannot be read, so preemption is not weighed"), "{line}");
    assert!(got.unknown.iter().any(|u| u.contains("PodGroups cannot be read")), "{:?}", got.unknown);
    assert_eq!(got.queues[0].pending, None);

    let mut s = snap(vec![queue("a", 1, 0.0)], vec![], (8.0, 8.0));
    s.groups_only_in = Some("ml".into());
    let got = weigh(&s, &ask("a", 1.0, None));
    assert!(got.unknown.iter().any(|u| u.contains("only the PodGroups of namespace \"ml\"")), "{:?}", got.unknown);
}

#[test]
fn the_table_shows_every_column() {
    let s = snap(
        vec![queue("a", 1, 0.0), QueueSnap { reclaimable: false, capability: Some(8.0), ..queue("b", 1, 6.0) }],
        vec![group("b-job", "b", Some("dev"), "Running", 6.0)],
        (8.0, 2.0),
    );
    let table = theseus_core::shares::render_table(&weigh(&s, &ask("a", 4.0, None)));
    let lines: Vec<_> = table.lines().collect();
    assert!(lines[0].starts_with("queue") && lines[0].contains("priority classes"), "{table}");
    assert!(lines[1].starts_with("a*"), "{table}");
    assert!(lines[2].contains("b (not reclaimable)") && lines[2].contains("dev x1"), "{table}");
}
