//! `submit --follow` of a Volcano job that cannot start: the reason as soon as `status` has it,
//! once per change, then the job cancelled after the host's `start_timeout`.

use crate::volcano::SimWorld;
use crate::{TestContext, text};

/// Sets `start_timeout` (in seconds) on the `k8s` host (the last key of the dispatch config).
fn set_start_timeout(ctx: &TestContext, secs: u64) {
    let path = ctx.home().join(".theseus.yaml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&format!("    start_timeout: {secs}s\n"));
    std::fs::write(path, config).unwrap();
}

fn assert_cancelled_and_gone(ctx: &TestContext, name: &str) {
    let status = ctx.run(&["status", name]);
    let stdout = text(&status.stdout);
    assert!(stdout.contains("cancelled") && stdout.contains("no longer exists"), "{stdout}{}", text(&status.stderr));
    assert!(stdout.contains("did not start within") || stdout.contains("no longer exists"), "{stdout}");
}

#[test]
fn follow_says_why_the_image_cannot_be_pulled_and_gives_up_after_the_start_timeout() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    world.sim.faults().make_image_unpullable("theseus-test:local");
    set_start_timeout(&ctx, 5);
    let out = ctx.run(&[
        "submit",
        "pull",
        &world.exp("exp.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "h100",
        "-n",
        "4",
        "--follow",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let said: Vec<&str> =
        stderr.lines().filter(|l| l.contains("not started yet") && l.contains("ImagePullBackOff")).collect();
    assert_eq!(said.len(), 1, "the reason once, as soon as it shows:\n{stderr}");
    assert!(said[0].contains("cannot start: ImagePullBackOff"), "{stderr}");
    assert!(stderr.contains("did not start within 5 s: pod "), "{stderr}");
    assert_cancelled_and_gone(&ctx, "pull");
    drop(world);
}

#[test]
fn follow_says_why_volcano_does_not_enqueue_the_gang() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    set_start_timeout(&ctx, 5);
    let out = ctx.run(&[
        "submit",
        "huge",
        &world.exp("exp.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "h100",
        "-n",
        "16",
        "--no-check",
        "--follow",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let reason = "waiting for queue default: resource in cluster is overused: overused nvidia.com/gpu";
    assert!(stderr.contains(&format!("not started yet: {reason}")), "{stderr}");
    assert!(stderr.contains(&format!("did not start within 5 s: {reason}")), "{stderr}");
    assert_cancelled_and_gone(&ctx, "huge");
    drop(world);
}
