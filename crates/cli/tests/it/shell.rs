//! `theseus shell` on all four backends through the real binary: a command's output and exit
//! code come back, it runs in the run's code dir with the job's variables and rank; an
//! interactive shell under a pseudo-terminal (made by util-linux `script`) sees a TTY of the
//! terminal's size, through `ssh -tt` (plain), `srun --pty` on the job's node (Slurm) and an
//! exec with a TTY and resize messages (Volcano).

use std::io::Write as _;
use std::process::Stdio;

use crate::targets::{Kind, Target};
use crate::text;

/// A job that sleeps, with a variable of its own, submitted and running on `target`.
fn sleeping_job(target: &Target, name: &str) -> tempfile::TempDir {
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("marker.txt"), "shipped\n").unwrap();
    let exp = code.path().join("sleep.yaml");
    std::fs::write(&exp, "entrypoint: sleep 600\nrequest: {chip: cpu}\nenv: {GREETING: hello from the job}\n").unwrap();
    target.submit(name, exp.to_str().unwrap(), code.path());
    target.wait_running(name);
    code
}

fn shell_on(kind: Kind) {
    let Some(target) = Target::new(kind, "shell") else { return };
    let _code = sleeping_job(&target, "sh-job");

    // A command: its output, in the code dir, with the job's variables and the rank.
    let out = target.run(&[
        "shell",
        "sh-job",
        "-T",
        "--",
        "sh",
        "-c",
        "cat marker.txt; echo \"$GREETING|$RANK|${THESEUS_RUN_ID:+run}\"; echo to-stderr >&2; exit 7",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{kind:?}: {stdout} {}", text(&out.stderr));
    assert!(stdout.contains("shipped\nhello from the job|0|run\n"), "{kind:?}: {stdout:?} {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("to-stderr"), "{kind:?}: {}", text(&out.stderr));

    // An interactive shell on a terminal of 101 x 33.
    let mut child = std::process::Command::new("script")
        .args(["-qec", &format!("stty cols 101 rows 33; exec {}", shell_line(&target)), "/dev/null"])
        .envs(target.cmd(&[]).get_envs().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))))
        .current_dir(crate::repo_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"tty; stty size; echo \"rank=$RANK\"; exit 3\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{kind:?}: {stdout} {}", text(&out.stderr));
    assert!(stdout.contains("/dev/pts/") && !stdout.contains("not a tty"), "{kind:?}: {stdout:?}");
    assert!(stdout.contains("33 101"), "{kind:?}: the size reached the remote terminal: {stdout:?}");
    assert!(stdout.contains("rank=0"), "{kind:?}: {stdout:?}");

    // A rank the job does not have.
    let out = target.run(&["shell", "sh-job", "--rank", "5", "-T", "--", "true"]);
    assert!(!out.status.success(), "{kind:?}");
    assert!(text(&out.stderr).contains("rank 5"), "{kind:?}: {}", text(&out.stderr));

    let cancel = target.run(&["cancel", "sh-job"]);
    assert!(cancel.status.success(), "{kind:?}: {}", text(&cancel.stderr));
    // Nothing to enter any more.
    let out = target.run(&["shell", "sh-job", "-T", "--", "true"]);
    assert!(!out.status.success(), "{kind:?}: a shell into an ended job");
}

/// `theseus shell sh-job` as one shell command line with this target's environment.
fn shell_line(target: &Target) -> String {
    let cmd = target.cmd(&["shell", "sh-job"]);
    let mut words = vec![cmd.get_program().to_string_lossy().into_owned()];
    words.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.iter().map(|w| format!("'{}'", w.replace('\'', "'\\''"))).collect::<Vec<_>>().join(" ")
}

#[test]
fn shell_enters_a_local_job() {
    shell_on(Kind::Local);
}

#[test]
fn shell_enters_a_job_on_a_plain_host() {
    shell_on(Kind::Plain);
}

#[test]
fn shell_enters_a_slurm_job_on_its_node() {
    shell_on(Kind::Slurm);
}

#[test]
fn shell_enters_a_volcano_pod() {
    shell_on(Kind::Volcano);
}
