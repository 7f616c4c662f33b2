//! A two-process local job running real JAX on CPU, wired by theseus.

use crate::{jax_python, text, TestContext};

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
