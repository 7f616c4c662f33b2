//! The script that enters a running job for `theseus shell`: the run's work dir, the job's
//! variables (`env.sh`, written with the bootstrap), its rank, the project's venv first on
//! `PATH` when `uv sync` made one, then the user's command or an interactive shell. Pure: every
//! value is shell-quoted into a POSIX `sh` script that each backend runs its own way (a local
//! `sh -c`, `ssh -t host sh -c …`, `srun --pty sh -c …`, a pod exec).

use std::fmt::Write as _;

use super::BOOTSTRAP_DIR;
use crate::shell::{join, quote};

/// The `sh` script that runs `command` (or, when empty, a shell: `$SHELL` when it exists there,
/// else bash, else sh; interactive when stdin is a terminal, else reading commands from stdin) as rank `rank` of the run whose code is in `work_dir`
/// (`None`: stay where the process starts, e.g. a pod's working dir).
pub fn script(work_dir: Option<&str>, rank: u32, command: &[String]) -> String {
    let mut s = String::new();
    if let Some(dir) = work_dir {
        let _ = writeln!(s, "cd {} || exit 127", quote(dir));
    }
    let _ = writeln!(s, "if [ -f ./{BOOTSTRAP_DIR}/env.sh ]; then . ./{BOOTSTRAP_DIR}/env.sh; fi");
    let _ = writeln!(s, "export THESEUS_PROCESS_ID={rank} RANK={rank} THESEUS_SHELL=1");
    s.push_str("if [ -d .venv/bin ]; then PATH=\"$PWD/.venv/bin:$PATH\"; export PATH; fi\n");
    if command.is_empty() {
        // Interactive on a terminal; without one (`shell -T` fed by a pipe) the shell reads its
        // commands from stdin, without a prompt or job-control noise.
        s.push_str(
            "i=; if [ -t 0 ]; then i=-i; fi\n\
             if [ -n \"${SHELL:-}\" ] && [ -x \"$SHELL\" ]; then exec \"$SHELL\" $i; fi\n\
             if command -v bash >/dev/null 2>&1; then exec bash $i; fi\n\
             exec sh $i\n",
        );
    } else {
        let _ = writeln!(s, "exec {}", join(command));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(script: &str) -> std::process::Output {
        std::process::Command::new("sh").args(["-c", script]).env_remove("THESEUS_RUN_ID").output().unwrap()
    }

    #[test]
    fn a_command_runs_in_the_work_dir_with_the_jobs_variables_and_its_rank() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work dir 'x'");
        std::fs::create_dir_all(work.join(BOOTSTRAP_DIR)).unwrap();
        std::fs::write(work.join(BOOTSTRAP_DIR).join("env.sh"), "export THESEUS_RUN_ID='r-1'\n").unwrap();
        let cmd = ["sh", "-c", "printf '%s|%s|%s|%s' \"$PWD\" \"$THESEUS_RUN_ID\" \"$RANK\" \"$1\"", "-", "a b;$c"]
            .map(String::from);
        let out = run(&script(Some(work.to_str().unwrap()), 3, &cmd));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let real = work.canonicalize().unwrap();
        assert_eq!(text, format!("{}|r-1|3|a b;$c", real.display()));
    }

    #[test]
    fn the_commands_exit_code_comes_back_and_a_missing_dir_is_127() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(&script(Some(dir.path().to_str().unwrap()), 0, &["sh".into(), "-c".into(), "exit 7".into()]));
        assert_eq!(out.status.code(), Some(7));
        let out = run(&script(Some("/nonexistent/theseus"), 0, &["true".into()]));
        assert_eq!(out.status.code(), Some(127));
    }

    #[test]
    fn without_a_command_or_a_terminal_the_shell_reads_stdin_quietly() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script(Some(dir.path().to_str().unwrap()), 2, &[])])
            .env("SHELL", "/bin/bash")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"echo rank $RANK; exit 3\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "rank 2\n");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no prompt or job-control noise");
    }

    #[test]
    fn a_venv_made_by_uv_sync_comes_first_on_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".venv/bin")).unwrap();
        let out = run(&script(Some(dir.path().to_str().unwrap()), 0, &["sh".into(), "-c".into(), "echo $PATH".into()]));
        let path = String::from_utf8(out.stdout).unwrap();
        assert!(path.starts_with(&format!("{}/.venv/bin:", dir.path().canonicalize().unwrap().display())), "{path}");
    }
}
