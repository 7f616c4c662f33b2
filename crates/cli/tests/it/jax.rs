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

/// The job of the `distributed` mode tests: `python probe.py MODE`. `plain`, `noargs` and `args`
/// import jax (the last two then call `jax.distributed.initialize` themselves, as scripts
/// written for other launchers do); `torch` never imports jax and wires its ranks over
/// `MASTER_ADDR:MASTER_PORT` as torch's TCPStore does (rank 0 listens, the others connect);
/// `both` imports jax, then does the same.
const PROBE_PY: &str = r#"
import os, socket, sys, time
mode = sys.argv[1]
rank = int(os.environ["RANK"])

def rendezvous():
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank == 0:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("", port))
        server.listen()
        conn, _ = server.accept()
        got = conn.recv(16).decode()
    else:
        deadline = time.time() + 60
        while True:
            try:
                conn = socket.create_connection((addr, port), timeout=5)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        conn.sendall(b"hello")
        got = "sent"
    return got

if mode == "torch":
    got = rendezvous()
    print(f"torch-like rank={rank} got={got} jax_imported={'jax' in sys.modules}", flush=True)
    sys.exit(0)
import jax
if mode == "both":
    got = rendezvous()
    print(f"both rank={rank} got={got} process_count={jax.process_count()}", flush=True)
    sys.exit(0)
if mode == "noargs":
    jax.distributed.initialize()
elif mode == "args":
    jax.distributed.initialize(coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                               num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                               process_id=int(os.environ["JAX_PROCESS_ID"]))
print(f"mode={mode} process_index={jax.process_index()} process_count={jax.process_count()}", flush=True)
"#;

/// Submits `python probe.py MODE` as 2 local processes with `distributed` as given (absent when
/// `None`) and returns stdout and stderr; fails unless the job completed.
fn submit_probe(ctx: &TestContext, python: &str, mode: &str, distributed: Option<&str>) -> (String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let code = tmp.path().join("code");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("probe.py"), PROBE_PY).unwrap();
    let key = distributed.map(|d| format!("distributed: {d}\n")).unwrap_or_default();
    let experiment = tmp.path().join("experiment.yaml");
    std::fs::write(
        &experiment,
        format!(
            "entrypoint: python probe.py {mode}\n{key}request: {{chip: cpu, count: 2}}\n\
             env: {{JAX_PLATFORMS: cpu, THESEUS_JAX_INIT_TIMEOUT: '60'}}\n"
        ),
    )
    .unwrap();
    let mut cmd = ctx.cmd();
    cmd.env("THESEUS_PYTHON", python)
        .args(["submit", &format!("probe-{mode}")])
        .arg(&experiment)
        .arg("--code")
        .arg(&code)
        .arg("--follow");
    let out = crate::run_bounded(cmd, std::time::Duration::from_secs(300));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{mode} {distributed:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    (stdout, stderr)
}

/// The line of `rank` that starts with `prefix`.
fn rank_line<'a>(stdout: &'a str, rank: u32, prefix: &str) -> &'a str {
    let start = format!("[rank-{rank}] {prefix}");
    stdout.lines().find(|l| l.starts_with(&start)).unwrap_or_else(|| panic!("no `{start}` line in:\n{stdout}"))
}

/// Without a `distributed` key (auto), a job that imports jax forms one JAX job; its own
/// `jax.distributed.initialize()` (with or without arguments) is a logged no-op.
#[test]
fn without_the_distributed_key_jax_is_initialised_on_import() {
    let Some(python) = jax_python("without_the_distributed_key_jax_is_initialised_on_import") else { return };
    let ctx = TestContext::new();
    for mode in ["plain", "noargs", "args"] {
        let (stdout, _) = submit_probe(&ctx, &python, mode, None);
        for rank in 0..2 {
            let line = rank_line(&stdout, rank, &format!("mode={mode} "));
            assert!(line.ends_with(&format!("process_index={rank} process_count=2")), "{line}");
            let init = rank_line(&stdout, rank, "[theseus] jax.distributed.initialize(");
            assert!(init.ends_with("on the job's import of jax"), "{init}");
            if mode != "plain" {
                rank_line(&stdout, rank, "[theseus] the job's jax.distributed.initialize(");
            }
        }
    }
    // `auto` said explicitly is the same.
    let (stdout, _) = submit_probe(&ctx, &python, "noargs", Some("auto"));
    assert!(rank_line(&stdout, 1, "mode=noargs ").ends_with("process_count=2"), "{stdout}");
    // `distributed: jax` initialises before the script, whose own call (JAX's "should only be
    // called once" before issue 28) is now a no-op too.
    let (stdout, _) = submit_probe(&ctx, &python, "args", Some("jax"));
    for rank in 0..2 {
        assert!(rank_line(&stdout, rank, "mode=args ").ends_with("process_count=2"), "{stdout}");
        assert!(
            rank_line(&stdout, rank, "[theseus] jax.distributed.initialize(").ends_with("before the job"),
            "{stdout}"
        );
        rank_line(&stdout, rank, "[theseus] the job's jax.distributed.initialize(");
    }
}

/// `distributed: none` leaves JAX alone: two independent processes.
#[test]
fn distributed_none_does_not_initialise_jax() {
    let Some(python) = jax_python("distributed_none_does_not_initialise_jax") else { return };
    let ctx = TestContext::new();
    let (stdout, _) = submit_probe(&ctx, &python, "plain", Some("none"));
    for rank in 0..2 {
        assert!(rank_line(&stdout, rank, "mode=plain ").ends_with("process_index=0 process_count=1"), "{stdout}");
    }
    assert!(!stdout.contains("[theseus] jax.distributed.initialize("), "{stdout}");
}

/// A job that never imports jax (here a torch-style rendezvous on MASTER_PORT) is untouched by
/// auto: jax is not imported behind its back and the port is free for it.
#[test]
fn auto_leaves_a_job_that_never_imports_jax_alone() {
    let Some(python) = jax_python("auto_leaves_a_job_that_never_imports_jax_alone") else { return };
    let ctx = TestContext::new();
    let (stdout, _) = submit_probe(&ctx, &python, "torch", None);
    assert!(rank_line(&stdout, 0, "torch-like ").ends_with("got=hello jax_imported=False"), "{stdout}");
    assert!(rank_line(&stdout, 1, "torch-like ").ends_with("got=sent jax_imported=False"), "{stdout}");
    assert!(!stdout.contains("jax.distributed.initialize"), "{stdout}");
}

/// A job that imports jax and also starts a torch-style rendezvous on MASTER_PORT gets both:
/// MASTER_PORT is the port after JAX's coordinator (on one port, the second bind failed with
/// EADDRINUSE, whichever came first).
#[test]
fn a_job_with_jax_and_a_torch_rendezvous_gets_two_ports() {
    let Some(python) = jax_python("a_job_with_jax_and_a_torch_rendezvous_gets_two_ports") else { return };
    let ctx = TestContext::new();
    let (stdout, _) = submit_probe(&ctx, &python, "both", None);
    assert!(rank_line(&stdout, 0, "both ").ends_with("got=hello process_count=2"), "{stdout}");
    assert!(rank_line(&stdout, 1, "both ").ends_with("got=sent process_count=2"), "{stdout}");
}
