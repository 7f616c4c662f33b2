//! Running rendered shell scripts for real: with stub `mkdir`, `tee` and `bash` first on `PATH`
//! that record their arguments, so a test sees exactly the words the script passed (quoting
//! round-trips), and a deadline-bounded wait so a hung script fails instead of hanging.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Exit status of the stub bootstrap; the pod script must exit with it.
pub(crate) const BOOT_STATUS: i32 = 5;

/// What a stubbed run of a pod script did.
#[derive(Debug)]
pub(crate) struct ScriptRun {
    /// `bash -n` accepts the script.
    pub(crate) parses: bool,
    /// The script's exit status.
    pub(crate) status: Option<i32>,
    /// Arguments of `mkdir`, `bash` (the bootstrap) and `tee`.
    pub(crate) mkdir: Vec<String>,
    pub(crate) boot: Vec<String>,
    pub(crate) tee: Vec<String>,
}

/// The real bash, found on this process's `PATH` (the children's `PATH` starts with stubs).
pub(crate) fn real_bash() -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    std::env::split_paths(&path).map(|d| d.join("bash")).find(|p| p.is_file()).expect("bash on PATH")
}

/// Waits for `child` until `deadline` from now; kills it and panics when it is still running.
pub(crate) fn wait_deadline(child: &mut Child, deadline: Duration) -> ExitStatus {
    let end = Instant::now() + deadline;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("the script did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn stub(bin: &Path, name: &str, body: &str) {
    let path = bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\nprintf '%s\\0' \"$@\" > \"$THESEUS_REC/{name}\"\n{body}\n")).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
}

fn recorded(dir: &Path, name: &str) -> Vec<String> {
    let Ok(bytes) = std::fs::read(dir.join(name)) else { return Vec::new() };
    let text = String::from_utf8(bytes).expect("utf-8 arguments");
    text.split_terminator('\0').map(str::to_owned).collect()
}

/// Checks `script` with `bash -n`, then runs it with recording stubs.
pub(crate) fn run_with_stubs(script: &str) -> ScriptRun {
    let bash = real_bash();
    let parses = Command::new(&bash).args(["-n", "-c", script]).status().unwrap().success();
    let dir = tempfile::tempdir().unwrap();
    let (bin, rec, tmp) = (dir.path().join("bin"), dir.path().join("rec"), dir.path().join("tmp"));
    for d in [&bin, &rec, &tmp] {
        std::fs::create_dir(d).unwrap();
    }
    stub(&bin, "mkdir", "exit 0");
    stub(&bin, "tee", "exec cat > /dev/null");
    stub(&bin, "bash", &format!("exit {BOOT_STATUS}"));
    let path = std::env::join_paths(
        std::iter::once(bin.clone()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let mut child = Command::new(&bash)
        .args(["-c", script])
        .env("PATH", path)
        .env("THESEUS_REC", &rec)
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_deadline(&mut child, Duration::from_secs(20)).code();
    let leftovers = std::fs::read_dir(&tmp).unwrap().count();
    assert_eq!(leftovers, 0, "the pod script left its FIFO directory behind");
    ScriptRun {
        parses,
        status,
        mkdir: recorded(&rec, "mkdir"),
        boot: recorded(&rec, "bash"),
        tee: recorded(&rec, "tee"),
    }
}
