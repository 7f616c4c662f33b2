//! Login shells as real sites have them (issue 23): the lab's users print banners from their rc
//! files on stdout and stderr, one logs in with tcsh and one with fish, and a tool is on PATH only
//! through the login files (`~/.profile`, `~/.login`, fish's login config). Nothing the rc files
//! print may reach a command's output, every shell must run the same commands, and commands and
//! jobs run with the login environment.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use theseus_backend_ssh::plain::PlainBackend;
use theseus_backend_ssh::ssh::{RemoteCommand, SshError, SshHost};
use theseus_backend_ssh::testing::{log_lines, small_job};
use theseus_core::availability::Availability;
use theseus_core::backend::{Backend, JobState, PreparedJob, SubmitOptions};
use theseus_core::solver::{ChipRequest, Request};
use theseus_core::testing::{self, Harness};

use crate::plain::{lab_host, plan, quick, scratch_cluster};
use crate::require_lab;
use crate::support::Lab;

/// Texts the lab's rc files print (see `write_noisy_rc` in `ci/lab/lib.sh`), as they print
/// them: a bare "fish" or "profile" is also in the lab users' names and paths (the bootstrap's
/// resume line names the checkpoint dir, under a scratch dir named after the user).
const NOISE: &[&str] =
    &["====", "quota notice", "bashrc:", "bash_profile:", "profile: Lmod", "tcshrc:", "fish:", "fish login"];

fn assert_clean(what: &str, text: &str) {
    for noise in NOISE {
        assert!(!text.contains(noise), "{what} carries rc-file noise ({noise:?}): {text:?}");
    }
}

/// The lab's users: the main one (bash) and, when the lab has them, tcsh and fish.
fn users(lab: &Lab) -> Vec<String> {
    let mut users = vec![lab.user.clone()];
    for shell in ["tcsh", "fish"] {
        if let Some(user) = lab.shell_user(shell) {
            users.push(user.to_owned());
        }
    }
    users
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_login_shell_runs_scripts_with_hostile_words_and_clean_output() {
    let lab = require_lab!();
    for user in users(lab) {
        let host = SshHost::new(lab.options_as(&format!("words-{user}"), &user));
        let words = ["it's", "$HOME", "`id`", "a  b", "new\nline", "", "!x", "\\", "\"q\"", "-n", "✓"];
        let out = host.run(&RemoteCommand::new("printf").arg("%s\\0").args(words)).await.unwrap();
        let got: Vec<&str> = out.stdout.split(|b| *b == 0).map(|w| std::str::from_utf8(w).unwrap()).collect();
        assert_eq!(got[..got.len() - 1], words, "{user}: stdout {:?}", out.stdout_text());
        let script = RemoteCommand::script("echo \"out $1\"; echo \"err $2\" >&2; exit 7", ["a b", "c'd"]);
        let out = host.output(&script).await.unwrap();
        assert_eq!(
            (out.code, out.stdout_text().as_str(), out.stderr_text().as_str()),
            (Some(7), "out a b\n", "err c'd"),
            "{user}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_and_streamed_output_pass_every_login_shell_untouched() {
    let lab = require_lab!();
    for user in users(lab) {
        let host = SshHost::new(lab.options_as(&format!("stdin-{user}"), &user));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let out = host
            .run_with_writer(&RemoteCommand::new("cat"), move |w| w.write_all(&sent), None)
            .await
            .unwrap_or_else(|e| panic!("{user}: {e}"));
        assert!(out.stdout == data, "{user}: stdin came back changed ({} bytes)", out.stdout.len());
        assert_clean(&format!("{user}: stderr of cat"), &String::from_utf8_lossy(&out.stderr));
        let lines = host.lines(&RemoteCommand::script("for i in 1 2 3; do echo \"line $i\"; done", [""; 0])).await;
        let lines: Vec<String> = lines.unwrap().map(|l| l.unwrap()).collect().await;
        assert_eq!(lines, ["line 1", "line 2", "line 3"], "{user}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_commands_find_tools_that_only_the_login_files_put_on_path() {
    let lab = require_lab!();
    for user in users(lab) {
        let host = SshHost::new(lab.options_as(&format!("tool-{user}"), &user));
        let out = host.output(&RemoteCommand::new("theseus-site-tool").arg("x y")).await.unwrap();
        assert_eq!((out.code, out.stdout_text().as_str()), (Some(0), "site tool ok: x y\n"), "{user}: {out:?}");
    }
}

/// A plain backend on the lab as `user`, its cluster root in a fresh scratch dir.
fn backend(lab: &Lab, name: &str, user: &str) -> (Arc<PlainBackend>, Arc<SshHost>) {
    let (cluster, _) = scratch_cluster(lab, name);
    let ssh = Arc::new(SshHost::new(lab.options_as(name, user)));
    (Arc::new(PlainBackend::with_ssh("lab", lab_host(), cluster, ssh.clone(), quick())), ssh)
}

fn harness(backend: Arc<PlainBackend>) -> Harness {
    Harness { backend, plan: plan(), probe: Arc::new(crate::plain::LocalProcProbe), timeout: Duration::from_secs(90) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_jobs_submit_log_and_cancel_for_tcsh_and_fish_users() {
    let lab = require_lab!();
    for shell in ["tcsh", "fish"] {
        let Some(user) = lab.shell_user(shell) else { continue };
        let (backend, _) = backend(lab, &format!("plain-{shell}"), user);
        let h = harness(backend);
        testing::check_submit_runs_to_completion(&h).await;
        testing::check_logs_follow_until_end(&h).await;
        testing::check_cancel_stops_all_processes(&h).await;
    }
}

/// A job of `words` for `b` (project `login`), with a run id of its own.
fn prepare(b: &PlainBackend, name: &str, words: &[&str]) -> (PreparedJob, tempfile::TempDir) {
    small_job(b, &plan(), "login", name, words)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_job_runs_a_tool_from_the_login_path_and_its_log_has_no_banner() {
    let lab = require_lab!();
    for user in users(lab) {
        let (b, _) = backend(lab, &format!("job-tool-{user}"), &user);
        let (job, _dir) = prepare(&b, "site-tool", &["theseus-site-tool", "from the job"]);
        let handle = b.submit(&job, &SubmitOptions::default()).await.unwrap_or_else(|e| panic!("{user}: {e}"));
        let h = harness(b.clone());
        let status = testing::wait_terminal(&h, &handle).await;
        let logs = log_lines(&*b, &handle).await;
        assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{user}: {status:?} {logs:?}");
        assert!(logs.iter().any(|l| l == "site tool ok: from the job"), "{user}: {logs:?}");
        assert_clean(&format!("{user}: the job's log"), &logs.join("\n"));
    }
}

fn request(chip: ChipRequest) -> Request {
    Request { chip, count: 1, preferred_clusters: vec![], forbidden_clusters: vec![], host: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_reads_nproc_and_a_missing_nvidia_smi_through_a_noisy_shell() {
    let lab = require_lab!();
    let cores = std::thread::available_parallelism().unwrap().get() as u32;
    for user in users(lab) {
        let (b, _) = backend(lab, &format!("avail-{user}"), &user);
        let cpu = request(ChipRequest::Cpu);
        match b.availability(&cpu).await.unwrap_or_else(|e| panic!("{user}: {e}")) {
            Availability::Free { chips, .. } => assert_eq!(chips, cores, "{user}: nproc read through the banner"),
            other => panic!("{user}: {other:?}"),
        }
        let gpu = request(ChipRequest::AnyGpu);
        match b.availability(&gpu).await.unwrap_or_else(|e| panic!("{user}: {e}")) {
            Availability::Free { chips: 0, source } => assert!(source.contains("no nvidia-smi"), "{user}: {source}"),
            other => panic!("{user}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_the_commands_stderr_without_the_banner() {
    let lab = require_lab!();
    let host = SshHost::new(lab.options("stderr-clean"));
    match host.run(&RemoteCommand::script("echo 'the real cause' >&2; exit 3", [""; 0])).await {
        Err(SshError::Failed { code: Some(3), stderr, .. }) => assert_eq!(stderr, "the real cause"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_base64_is_named_in_one_line_with_the_fix() {
    let lab = require_lab!();
    let scratch = lab.scratch("no-base64");
    let sshd = crate::support::RestrictedSshd::start(lab, &scratch, &["base64"]);
    let host = SshHost::new(sshd.options(lab, "no-base64"));
    let err = host.run(&RemoteCommand::new("true")).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, SshError::Shell { .. }), "{err:?}");
    assert!(text.contains("no `base64`") && text.contains("install coreutils"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
}

/// The scripts of the remote commands running now, decoded from their command lines
/// (`/bin/sh -c 'exec 3<&0; echo BASE64|base64 -d|...'`) as any user of the host can read them
/// (the lab's sshd runs on this machine).
fn remote_command_lines() -> Vec<String> {
    let mut scripts = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let Some(blob) = text.split("echo ").nth(1).and_then(|t| t.split("|base64 -d").next()) else { continue };
        let mut decode = std::process::Command::new("base64")
            .arg("-d")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut decode.stdin.take().unwrap(), blob.as_bytes()).unwrap();
        let out = decode.wait_with_output().unwrap();
        scripts.push(format!("{text}\n{}", String::from_utf8_lossy(&out.stdout)));
    }
    scripts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_environment_values_reach_commands_but_never_a_command_line() {
    let lab = require_lab!();
    const TOKEN: &str = "lab-profile-token-5f3a91";
    for user in users(lab) {
        let host = Arc::new(SshHost::new(lab.options_as(&format!("token-{user}"), &user)));
        let tag = format!("token-probe-{}", theseus_core::job::new_run_id());
        let cmd = RemoteCommand::script("echo \"$THESEUS_LAB_PROFILE_TOKEN\"; sleep 2; : \"$1\"", [tag.clone()]);
        let running = {
            let host = host.clone();
            tokio::spawn(async move { host.run(&cmd).await })
        };
        let mut seen = Vec::new();
        for _ in 0..100 {
            seen = remote_command_lines().into_iter().filter(|s| s.contains(&tag)).collect();
            if !seen.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let out = running.await.unwrap().unwrap_or_else(|e| panic!("{user}: {e}"));
        assert_eq!(out.stdout_text(), format!("{TOKEN}\n"), "{user}: the command has the login environment");
        assert!(!seen.is_empty(), "{user}: the command's line was never seen in /proc");
        for script in seen {
            assert!(!script.contains(TOKEN), "{user}: a login value is on a command line: {script}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_env_false_runs_commands_without_the_login_files() {
    let lab = require_lab!();
    let mut options = lab.options("no-login-env");
    options.login_env = false;
    let host = SshHost::new(options);
    let out =
        host.output(&RemoteCommand::script("echo \"[$THESEUS_LAB_LOGIN_ENV]\"; theseus-site-tool", [""; 0])).await;
    let out = out.unwrap();
    assert_eq!((out.code, out.stdout_text().as_str()), (Some(127), "[]\n"), "{out:?}");
    assert_clean("stderr", &out.stderr_text());
}
