//! Running the kind path's steps. A [`Step`] is one command (argv, optional stdin) with what to
//! do around it: skip it when a probe succeeds, retry it a bounded number of times until its
//! output is right, save its stdout to a file. A [`Runner`] runs commands: [`Processes`] for
//! real, a scripted fake in the tests, so that every command line, retry and error message of
//! the setup can be checked on a machine without Docker.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// One command of the setup, the diagnostics or the teardown.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) what: String,
    pub(crate) argv: Vec<String>,
    pub(crate) stdin: Option<String>,
    /// Skip the step when this probe command succeeds (an image that is already there).
    pub(crate) unless: Option<Vec<String>>,
    /// Run again until the output is right, a bounded number of times.
    pub(crate) until: Option<Until>,
    /// Write the command's stdout to this file (diagnostics).
    pub(crate) stdout_to: Option<PathBuf>,
}

/// When a retried step is done.
#[derive(Clone, Debug)]
pub(crate) struct Until {
    pub(crate) attempts: u32,
    pub(crate) every: Duration,
    /// Done when the command succeeds and its trimmed stdout is this (any stdout when `None`).
    pub(crate) stdout_is: Option<String>,
    /// What the step waits for and what to look at when it never comes.
    pub(crate) hint: String,
}

impl Step {
    pub(crate) fn new(what: impl Into<String>, argv: &[&str]) -> Step {
        Step {
            what: what.into(),
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            stdin: None,
            unless: None,
            until: None,
            stdout_to: None,
        }
    }

    pub(crate) fn stdin(mut self, input: String) -> Step {
        self.stdin = Some(input);
        self
    }

    pub(crate) fn unless(mut self, probe: &[&str]) -> Step {
        self.unless = Some(probe.iter().map(|s| (*s).to_owned()).collect());
        self
    }

    pub(crate) fn until(mut self, until: Until) -> Step {
        self.until = Some(until);
        self
    }

    pub(crate) fn stdout_to(mut self, path: PathBuf) -> Step {
        self.stdout_to = Some(path);
        self
    }

    /// The command as a shell line, for `--dry-run` and error messages.
    pub(crate) fn command_line(&self) -> String {
        let line = shell_line(&self.argv);
        let line = match &self.unless {
            Some(probe) => format!("{} >/dev/null 2>&1 || {line}", shell_line(probe)),
            None => line,
        };
        match &self.stdout_to {
            Some(path) => format!("{line} > {}", shell_word(&path.display().to_string())),
            None => line,
        }
    }
}

/// What a command did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Output {
    pub(crate) success: bool,
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs commands and waits.
pub(crate) trait Runner {
    /// Runs `argv` to its end; `Err` only when it cannot be started.
    fn run(&mut self, argv: &[String], stdin: Option<&str>) -> Result<Output>;
    fn sleep(&mut self, duration: Duration);
    /// Whether the last command was ended by SIGINT or SIGTERM (a Ctrl-C in the terminal
    /// reaches the command and us at once).
    fn last_interrupted(&self) -> bool {
        false
    }
}

/// Real processes; their output is copied to stderr as it comes and kept for the checks.
#[derive(Default)]
pub(crate) struct Processes {
    /// PID of the command running now, so that a signal can stop it (see `teardown`).
    pub(crate) current: Arc<Mutex<Option<u32>>>,
    /// The signal that ended the last command, if one did.
    last_signal: Option<i32>,
}

impl Runner for Processes {
    fn run(&mut self, argv: &[String], stdin: Option<&str>) -> Result<Output> {
        let (program, args) = argv.split_first().context("empty command")?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run `{}`", shell_line(argv)))?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(child.id());
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A command that exits early closes its stdin; its exit status tells the rest.
            let _ = pipe.write_all(input.as_bytes());
        }
        let out = child.stdout.take().map(tee);
        let err = child.stderr.take().map(tee);
        let status = child.wait();
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let status = status?;
        self.last_signal = std::os::unix::process::ExitStatusExt::signal(&status);
        let collect = |h: Option<std::thread::JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
        Ok(Output { success: status.success(), code: status.code(), stdout: collect(out), stderr: collect(err) })
    }

    fn sleep(&mut self, duration: Duration) {
        std::thread::sleep(duration);
    }

    fn last_interrupted(&self) -> bool {
        matches!(self.last_signal, Some(2 | 15))
    }
}

/// Copies a pipe to our stderr, line by line as it comes, and returns all of it.
fn tee(mut pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            let _ = std::io::stderr().write_all(&buf[..n]);
            all.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&all).into_owned()
    })
}

/// Runs one step: the probe, the command (retried per `until`), the stdout file. Fails with
/// the command, its exit status, the end of its stderr and, where known, the likely cause.
pub(crate) fn execute(runner: &mut dyn Runner, step: &Step) -> Result<Output> {
    if let Some(probe) = &step.unless
        && runner.run(probe, None)?.success
    {
        eprintln!("e2e:       skipped: `{}` succeeded", shell_line(probe));
        return Ok(Output { success: true, ..Output::default() });
    }
    let Some(until) = &step.until else {
        let out = runner.run(&step.argv, step.stdin.as_deref())?;
        if !out.success {
            bail!("{}", failure(step, &out, None));
        }
        save_stdout(step, &out)?;
        return Ok(out);
    };
    let mut last = Output::default();
    for attempt in 1..=until.attempts.max(1) {
        last = runner.run(&step.argv, step.stdin.as_deref())?;
        let right = match &until.stdout_is {
            Some(want) => last.stdout.trim() == want,
            None => true,
        };
        if last.success && right {
            save_stdout(step, &last)?;
            return Ok(last);
        }
        if attempt < until.attempts {
            runner.sleep(until.every);
        }
    }
    bail!("{}", failure(step, &last, Some(until)));
}

fn save_stdout(step: &Step, out: &Output) -> Result<()> {
    if let Some(path) = &step.stdout_to {
        std::fs::write(path, &out.stdout).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The error of a step that failed (or never got right within its attempts).
fn failure(step: &Step, out: &Output, until: Option<&Until>) -> String {
    let status = match out.code {
        Some(code) => format!("exit code {code}"),
        None if out.success => "exit code 0".to_owned(),
        None => "killed by a signal".to_owned(),
    };
    let mut text = match until {
        Some(u) => format!(
            "step `{}` was not done after {} attempts {:?} apart ({status}, stdout `{}`): {}\n  command: {}",
            step.what,
            u.attempts,
            u.every,
            tail(out.stdout.trim(), 200),
            u.hint,
            step.command_line()
        ),
        None => format!("step `{}` failed ({status})\n  command: {}", step.what, step.command_line()),
    };
    let stderr = tail(out.stderr.trim(), 2000);
    if !stderr.is_empty() {
        text.push_str(&format!("\n  stderr: {stderr}"));
    }
    if let Some(cause) = likely_cause(&step.argv, &out.stderr) {
        text.push_str(&format!("\n  likely cause: {cause}"));
    }
    text
}

/// The likely cause of a known failure, from the tool and its stderr.
pub(crate) fn likely_cause(argv: &[String], stderr: &str) -> Option<&'static str> {
    let tool = argv.first().map(String::as_str).unwrap_or("");
    let lower = stderr.to_lowercase();
    if tool == "helm"
        && (lower.contains("context deadline exceeded") || lower.contains("timed out waiting for the condition"))
    {
        return Some(
            "Volcano's pods did not become ready in time. Most often an image could not be pulled: Docker Hub's \
             anonymous pull rate limit (`toomanyrequests` in `kubectl --kubeconfig KUBECONFIG -n volcano-system \
             get events`) allows a few fresh clusters an hour. The images are preloaded from the host's Docker and \
             the chart's pull policy is IfNotPresent; `docker login` raises the limit for the host's pulls",
        );
    }
    if lower.contains("toomanyrequests") || lower.contains("pull rate limit") {
        return Some("Docker Hub's anonymous pull rate limit; wait, or `docker login` and run again");
    }
    if tool == "kind" && lower.contains("content digest") && lower.contains("not found") {
        return Some(
            "Docker's containerd image store saved an image without all of its platforms; the image is \
             saved with `docker save --platform`, which needs Docker 28+ (API 1.48)",
        );
    }
    None
}

/// The last `max` bytes of `text` (on a char boundary).
fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Quotes a word for display when it has shell metacharacters.
pub(crate) fn shell_word(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+".contains(c)) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn shell_line(argv: &[String]) -> String {
    argv.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" ")
}

/// A scripted runner for the tests: answers by the command's leading words, records every
/// command and every sleep.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Fake {
    /// (leading words, answers in order; the last one repeats).
    answers: Vec<(String, std::collections::VecDeque<Output>)>,
    pub(crate) ran: Vec<String>,
    pub(crate) stdins: Vec<Option<String>>,
    pub(crate) slept: Vec<Duration>,
    /// What `last_interrupted` says.
    pub(crate) interrupted: bool,
}

#[cfg(test)]
impl Fake {
    /// Answers commands starting with `prefix` with `outputs`, in order.
    pub(crate) fn answer(&mut self, prefix: &str, outputs: Vec<Output>) -> &mut Fake {
        self.answers.push((prefix.to_owned(), outputs.into()));
        self
    }

    pub(crate) fn ok(stdout: &str) -> Output {
        Output { success: true, code: Some(0), stdout: stdout.to_owned(), stderr: String::new() }
    }

    pub(crate) fn fail(code: i32, stderr: &str) -> Output {
        Output { success: false, code: Some(code), stdout: String::new(), stderr: stderr.to_owned() }
    }

    /// Index of the first recorded command starting with `prefix`.
    pub(crate) fn position(&self, prefix: &str) -> Option<usize> {
        self.ran.iter().position(|c| c.starts_with(prefix))
    }

    pub(crate) fn count(&self, prefix: &str) -> usize {
        self.ran.iter().filter(|c| c.starts_with(prefix)).count()
    }
}

#[cfg(test)]
impl Runner for Fake {
    fn run(&mut self, argv: &[String], stdin: Option<&str>) -> Result<Output> {
        let line = argv.join(" ");
        self.ran.push(line.clone());
        self.stdins.push(stdin.map(str::to_owned));
        let answer = self.answers.iter_mut().find(|(prefix, _)| line.starts_with(prefix.as_str()));
        Ok(match answer {
            Some((_, outputs)) if outputs.len() > 1 => outputs.pop_front().unwrap_or_default(),
            Some((_, outputs)) => outputs.front().cloned().unwrap_or_default(),
            None => Fake::ok(""),
        })
    }

    fn sleep(&mut self, duration: Duration) {
        self.slept.push(duration);
    }

    fn last_interrupted(&self) -> bool {
        self.interrupted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(attempts: u32) -> Step {
        Step::new("wait", &["kubectl", "get", "x"]).until(Until {
            attempts,
            every: Duration::from_secs(2),
            stdout_is: Some("4".into()),
            hint: "x never became 4".into(),
        })
    }

    #[test]
    fn a_retried_step_stops_at_the_first_right_answer() {
        let mut fake = Fake::default();
        fake.answer("kubectl get x", vec![Fake::fail(1, "not yet"), Fake::ok(""), Fake::ok("4\n")]);
        execute(&mut fake, &waiting(10)).unwrap();
        assert_eq!(fake.count("kubectl get x"), 3);
        assert_eq!(fake.slept, vec![Duration::from_secs(2); 2]);
    }

    #[test]
    fn a_retried_step_gives_up_after_its_attempts_with_what_it_saw() {
        let mut fake = Fake::default();
        fake.answer("kubectl get x", vec![Fake::ok("0")]);
        let err = execute(&mut fake, &waiting(5)).unwrap_err().to_string();
        assert_eq!(fake.count("kubectl get x"), 5);
        assert_eq!(fake.slept.len(), 4, "no sleep after the last attempt");
        assert!(err.contains("5 attempts") && err.contains("stdout `0`") && err.contains("x never became 4"), "{err}");
    }

    #[test]
    fn a_probe_that_succeeds_skips_the_step() {
        let mut fake = Fake::default();
        let step = Step::new("pull", &["docker", "pull", "busybox:1.36"]).unless(&["docker", "image", "inspect", "b"]);
        execute(&mut fake, &step).unwrap();
        assert_eq!(fake.ran, vec!["docker image inspect b"]);
        fake.answer("docker image inspect", vec![Fake::fail(1, "No such image")]);
        execute(&mut fake, &step).unwrap();
        assert_eq!(fake.count("docker pull busybox:1.36"), 1);
        assert_eq!(step.command_line(), "docker image inspect b >/dev/null 2>&1 || docker pull busybox:1.36");
    }

    #[test]
    fn a_helm_timeout_names_the_pull_rate_limit() {
        let mut fake = Fake::default();
        fake.answer("helm", vec![Fake::fail(1, "Error: INSTALLATION FAILED: context deadline exceeded")]);
        let err = execute(&mut fake, &Step::new("install Volcano", &["helm", "install", "volcano"])).unwrap_err();
        let err = err.to_string();
        assert!(err.contains("exit code 1") && err.contains("context deadline exceeded"), "{err}");
        assert!(err.contains("pull rate limit"), "{err}");
    }

    #[test]
    fn a_kind_load_digest_error_names_the_image_store() {
        let cause = likely_cause(
            &["kind".into(), "load".into()],
            "ctr: content digest sha256:82014a3cbf22d2e03382cd9b123f4151d956986e727340a466406a206408b7a2: not found",
        );
        assert!(cause.is_some_and(|c| c.contains("containerd image store")), "{cause:?}");
        assert_eq!(likely_cause(&["kubectl".into()], "connection refused"), None);
    }

    #[test]
    fn words_are_quoted_for_display() {
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word("--set=basic.x=IfNotPresent"), "--set=basic.x=IfNotPresent");
        assert_eq!(shell_word(""), "''");
    }
}
