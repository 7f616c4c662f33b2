//! The binary against a simulator with RBAC on, holding exactly the least-privilege Role and
//! ClusterRole the README documents (`docs/rbac.yaml`), then the namespaced Role alone.

use theseus_kube_sim::Authz;

use crate::volcano::SimWorld;
use crate::{TestContext, repo_root, text};

const TOKENS: &str = "t-researcher,researcher,1\n";

fn documented() -> String {
    std::fs::read_to_string(repo_root().join("docs/rbac.yaml")).unwrap()
}

/// The documented objects without the cluster-scoped ones.
fn namespaced_only() -> String {
    documented().split("\n---\n").filter(|doc| !doc.contains("kind: Cluster")).collect::<Vec<_>>().join("\n---\n")
}

#[test]
fn the_readme_documents_the_role_the_tests_use() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    assert!(readme.contains(documented().trim()), "README.md must show docs/rbac.yaml verbatim");
}

#[test]
fn every_command_works_with_the_least_privilege_role() {
    let ctx = TestContext::new();
    let authz = Authz::from_files(TOKENS, &documented()).unwrap();
    let world = SimWorld::start_with(&ctx, Some((authz, "t-researcher")));
    let plan = ctx.run(&[
        "plan",
        "p",
        &world.exp("exp.yaml"),
        "--host",
        "k8s",
        "--chip",
        "h100",
        "-n",
        "4",
        "--output",
        "json",
    ]);
    assert!(plan.status.success(), "{}", text(&plan.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let verdict = plan.to_string();
    assert!(verdict.contains("allocatable"), "live capacity was read: {verdict}");
    assert_eq!(plan["queues"]["unknown"], serde_json::json!([]), "the ClusterRole reads every queue: {verdict}");
    assert_eq!(plan["queues"]["verdict"]["kind"], "fits_now", "{verdict}");

    let out = ctx.run(&[
        "submit",
        "ok",
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
    assert!(out.status.success(), "stdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    assert!(!text(&out.stderr).contains("could not check"), "the documented roles check it all: {}", text(&out.stderr));
    let sleeper = ctx.run(&[
        "submit",
        "sleeper",
        &world.exp("sleep.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
    ]);
    assert!(sleeper.status.success(), "{}", text(&sleeper.stderr));
    for args in [
        &["status", "sleeper"][..],
        &["logs", "ok"][..],
        &["cancel", "sleeper"][..],
        &["list"][..],
        &["gc", "--dry-run"][..],
    ] {
        let out = ctx.run(args);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(!stderr.contains("forbidden") && !stderr.contains("RBAC"), "{args:?}: {stderr}");
    }
}

#[test]
fn without_the_cluster_role_capacity_is_unknown_naming_the_permission_and_submit_works() {
    let ctx = TestContext::new();
    let authz = Authz::from_files(TOKENS, &namespaced_only()).unwrap();
    let world = SimWorld::start_with(&ctx, Some((authz, "t-researcher")));
    let plan = ctx.run(&["plan", "p", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "h100", "-n", "4"]);
    let all = format!("{}{}", text(&plan.stdout), text(&plan.stderr));
    let row = all.lines().find(|l| l.starts_with("k8s ")).unwrap_or_else(|| panic!("{all}")).to_owned();
    assert!(row.contains("unknown"), "{row}");
    assert!(all.contains("queues") && all.contains("ClusterRole"), "the plan names the missing permission: {all}");
    assert!(all.contains("queue:   unknown: the queues cannot be read"), "the queue verdict is not guessed: {all}");

    let out = ctx.run(&[
        "submit",
        "blind",
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
    assert!(out.status.success(), "stdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    assert!(
        text(&out.stderr).contains("could not check that namespace \"default\" exists"),
        "a check RBAC refuses is said, not a refusal: {}",
        text(&out.stderr)
    );
}

#[test]
fn a_kubeconfig_without_a_valid_token_is_one_clear_line() {
    let ctx = TestContext::new();
    let authz = Authz::from_files(TOKENS, &documented()).unwrap();
    let world = SimWorld::start_with(&ctx, Some((authz, "t-expired")));
    let out =
        ctx.run(&["submit", "x", &world.exp("exp.yaml"), "--code", world.code(), "--host", "k8s", "--chip", "cpu"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("401") || stderr.to_lowercase().contains("unauthorized"), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one clear line: {stderr}");
    assert!(errors[0].contains("kubeconfig") || errors[0].contains("credentials"), "{stderr}");
}
