//! A two-process local job running real JAX on CPU, wired by theseus.

use crate::{TestContext, jax_python, text};

#[test]
fn two_local_processes_form_one_jax_job() {
    let Some(python) = jax_python("two_local_processes_form_one_jax_job") else { return };
    let ctx = TestContext::new();
    let out = ctx
        .cmd()
        .env("THESEUS_PYTHON", &python)
        .args(["submit", "jax-demo", "examples/jax-cpu/experiment.yaml", "--follow"])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for rank in 0..2 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("[rank-{rank}] process_index={rank} ")))
            .unwrap_or_else(|| panic!("no line of rank {rank} in:\n{stdout}"));
        assert!(line.contains("process_count=2"), "{line}");
        assert!(line.contains("allgather=[1, 11]"), "{line}");
    }
}

/// A fake `uv` for the code dir's `pyproject.toml`: every call is logged; the first `uv sync`
/// anywhere in the run takes 20 s (a slow node); `run --no-sync python ARGS` runs the JAX python.
const SLOW_UV: &str = r#"#!/bin/sh
printf '%s %s\n' "${RANK:-?}" "$*" >> "$UV_LOG"
case "$1" in
  sync) if mkdir "$UV_LOG.first" 2> /dev/null; then sleep 20; fi; exit 0 ;;
  run) shift 3; exec "$THESEUSTEST_PYTHON" "$@" ;;
esac
exit 9
"#;

#[test]
fn a_slow_uv_sync_does_not_time_out_the_rendezvous() {
    use std::os::unix::fs::PermissionsExt;
    let Some(python) = jax_python("a_slow_uv_sync_does_not_time_out_the_rendezvous") else { return };
    let ctx = TestContext::new();
    let tmp = tempfile::tempdir().unwrap();
    let code = tmp.path().join("code");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::copy(crate::repo_root().join("examples/jax-cpu/allgather.py"), code.join("allgather.py")).unwrap();
    std::fs::write(code.join("pyproject.toml"), "[project]\nname = \"demo\"\nversion = \"0\"\n").unwrap();
    // The JAX coordinator gives up after 10 s: a rank that entered initialize while the other
    // still synced for 20 s would fail the job.
    let experiment = tmp.path().join("experiment.yaml");
    std::fs::write(
        &experiment,
        "entrypoint: python allgather.py\ndistributed: jax\nrequest: {chip: cpu, count: 2}\n\
         env: {JAX_PLATFORMS: cpu, THESEUS_JAX_INIT_TIMEOUT: '10'}\nconfig: {multiplier: 10}\n",
    )
    .unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("uv"), SLOW_UV).unwrap();
    std::fs::set_permissions(bin.join("uv"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = tmp.path().join("uv.log");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = ctx
        .cmd()
        .env("PATH", &path)
        .env("UV_LOG", &log)
        .env("THESEUSTEST_PYTHON", &python)
        .arg("submit")
        .arg("slow-sync")
        .arg(&experiment)
        .arg("--code")
        .arg(&code)
        .arg("--follow")
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for rank in 0..2 {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("[rank-{rank}] process_index={rank} process_count=2"))),
            "no line of rank {rank} in:\n{stdout}"
        );
    }
    let calls = std::fs::read_to_string(&log).unwrap();
    let syncs: Vec<&str> = calls.lines().filter(|l| l.split(' ').nth(1) == Some("sync")).collect();
    assert_eq!(syncs, ["0 sync"], "exactly one uv sync, by rank 0; calls:\n{calls}");
}
