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

#[test]
fn dot_env_of_the_current_dir_feeds_the_client_never_overrides_and_names_bad_lines() {
    let ctx = TestContext::new();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("exp.yaml"), "entrypoint: sh -c 'echo \"tok=$TOK\"'\nrequest: {chip: cpu}\n")
        .unwrap();
    std::fs::write(dir.path().join(".env"), "export TOK='from dotenv'\nbroken line sEcReT\nOTHER=o\n").unwrap();
    let submit = |env: &[(&str, &str)]| {
        let mut cmd = ctx.cmd();
        cmd.current_dir(dir.path()).args(["submit", "e", "exp.yaml", "--secret-env", "TOK", "--follow", "--replace"]);
        cmd.envs(env.iter().copied());
        crate::run_bounded(cmd, std::time::Duration::from_secs(120))
    };
    let out = submit(&[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The secret reached the job through --secret-env (a local job also inherits the rest of
    // the client's environment; a remote one gets only what is forwarded).
    assert!(stdout.contains("tok=from dotenv\n"), "{stdout}");
    let warning = format!("{}:2: not `KEY=VALUE`; the line is ignored", dir.path().join(".env").display());
    assert!(stderr.contains(&warning), "{stderr}");
    assert_eq!(stderr.matches(":2: not").count(), 1, "warned once: {stderr}");
    assert!(!stderr.contains("sEcReT") && !stderr.contains("from dotenv"), "no value is printed: {stderr}");
    // A variable already set wins over the file.
    let out = submit(&[("TOK", "from env")]);
    assert!(text(&out.stdout).contains("tok=from env\n"), "{}", text(&out.stdout));
    // Without the file the secret is missing, and submit says so.
    std::fs::remove_file(dir.path().join(".env")).unwrap();
    let out = submit(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("TOK"), "{}", text(&out.stderr));
}
