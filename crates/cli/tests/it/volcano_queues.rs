//! `plan` on a Volcano host shows how the request stands among the cluster's queues: the verdict
//! line, a row per queue, and the same in `--output json`.

use crate::volcano::SimWorld;
use crate::{TestContext, text};

#[test]
fn plan_shows_the_queues_and_the_verdict() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    world.sim.put_queue("team-b", "Open");
    let args = ["plan", "p", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "h100", "-n", "4"];
    let out = ctx.run(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("queues of k8s (nvidia.com/gpu; proportion"), "{stdout}");
    let header = stdout.lines().find(|l| l.starts_with("queue ")).expect("a table");
    for column in
        ["capability", "deserved", "guarantee", "allocated", "owed", "borrowed", "pending", "priority classes"]
    {
        assert!(header.contains(column), "{column}: {header}");
    }
    assert!(stdout.lines().any(|l| l.starts_with("default*")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("team-b")), "{stdout}");
    assert!(!stdout.contains("-0"), "no negative zeros: {stdout}");
    assert!(stdout.contains("queue:   fits now: queue default has room for 4 (deserved 4, allocated 0)"), "{stdout}");

    let out = ctx.run(&[&args[..], &["--output", "json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["queues"]["verdict"]["kind"], "fits_now", "{v}");
    assert_eq!(v["queues"]["queue"], "default", "{v}");
    assert_eq!(v["queues"]["queues"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["queues"]["unknown"], serde_json::json!([]), "{v}");
}
