//! Issue 28, part `standalone`: `--target`, `.env`, `theseus bootstrap` and the
//! `THESEUS_DISPATCH_*_OVERRIDE` variables, through the real binary.

use crate::{TestContext, text};

/// A config whose local host syncs the uv group `base`.
fn host_with_groups(ctx: &TestContext) {
    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "hosts:\n  local:\n    type: local\n    uv_groups: [base, extra]\n",
    )
    .unwrap();
}

#[test]
fn target_groups_follow_the_hosts_and_the_experiments_once_each_in_plan_and_dry_run() {
    let ctx = TestContext::new();
    host_with_groups(&ctx);
    let code = tempfile::tempdir().unwrap();
    std::fs::write(
        code.path().join("exp.yaml"),
        "entrypoint: python3 -c 'print(1)'\nrequest: {chip: cpu}\nuv_groups: [exp, base]\n",
    )
    .unwrap();
    let exp = code.path().join("exp.yaml").display().to_string();
    let args = ["p", exp.as_str(), "--target", "gpu", "--target", "extra", "--target", "tools"];
    let out = ctx.run(&[&["plan"][..], &args].concat());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("uv groups: base, extra, exp, gpu, tools\n"), "{stdout}");
    let mut dry = vec!["submit", "--dry-run", "--code", code.path().to_str().unwrap()];
    dry.extend(args);
    let out = ctx.run(&dry);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("# uv groups: base, extra, exp, gpu, tools\n"), "{stdout}");
    assert!(
        stdout.contains("theseus_uv_groups=(--group base --group extra --group exp --group gpu --group tools)"),
        "the bootstrap syncs them: {stdout}"
    );
    let bad = ctx.run(&["plan", "p", &exp, "--target", "a b"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("is not a uv dependency group name"), "{}", text(&bad.stderr));
}
