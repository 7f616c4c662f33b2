//! Hosts whose runs are files: the local host, and the plain-SSH and Slurm hosts of the lab.
//!
//! The plain-SSH and Slurm flows against the lab (`cargo xtask lab up`): the real binary, a fresh
//! HOME and cluster dir per case, and the n-th remote command of the flow failed, dropped with
//! its connection, or run and then unheard ([`crate::inject`]). After each case a recovery
//! (`cancel` when a run is left, then `gc`) runs without faults, and what is left is read from
//! the shared filesystem: `.partial` run dirs, runs started twice, runs the ledger does not
//! know, runs still beating after a successful `cancel`. The short matrix skips the later
//! rounds of a wait loop's polls ([`matrix::repeats_a_poll`]); `--full` faults every command.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::inject::{FAULTS, Injector};
use crate::matrix::{self, Case, classify};
use crate::pool;
use crate::proc::{KillAt, Ran, indent, run};

/// Which lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Plain,
    Slurm,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain (lab sshd)",
            Kind::Slurm => "slurm (lab, login node)",
        }
    }
}

/// What the lab's env contract says (`THESEUSTEST_*`, printed by `cargo xtask lab up`).
#[derive(Debug, Clone)]
pub(crate) struct Lab {
    kind: Kind,
    port: String,
    user: String,
    known_hosts: String,
    shared: PathBuf,
    authorized: PathBuf,
    client_key: PathBuf,
}

impl Lab {
    /// The lab's own client key (no faults).
    pub(crate) fn client_key(&self) -> PathBuf {
        self.client_key.clone()
    }

    /// The lab, or why it cannot be used.
    pub(crate) fn from_env(kind: Kind) -> Result<Lab, String> {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty()).ok_or_else(|| format!("{k} is not set"));
        let (port, user) = match kind {
            Kind::Plain => (get("THESEUSTEST_SSH_PORT")?, get("THESEUSTEST_SSH_USER")?),
            Kind::Slurm => (get("THESEUSTEST_SLURM_SSH_PORT")?, get("THESEUSTEST_SLURM_SSH_USER")?),
        };
        let lab_dir = PathBuf::from(get("THESEUSTEST_LAB_DIR")?);
        Ok(Lab {
            kind,
            port,
            user,
            known_hosts: get("THESEUSTEST_SSH_KNOWN_HOSTS")?,
            shared: PathBuf::from(get("THESEUSTEST_SLURM_SHARED")?),
            authorized: lab_dir.join("ssh/authorized_keys"),
            client_key: PathBuf::from(get("THESEUSTEST_SSH_KEY")?),
        })
    }
}

/// One flow: what runs before (cleanly) and the command under test.
pub(crate) struct Flow {
    pub(crate) name: &'static str,
    pub(crate) setup: Option<&'static str>,
    pub(crate) command: &'static [&'static str],
}

const FLOWS: &[Flow] = &[
    Flow { name: "submit", setup: None, command: &["submit", "chaos", "long.yaml", "--code", ".", "--host", "box"] },
    Flow { name: "cancel", setup: Some("sleep.yaml"), command: &["cancel", "chaos"] },
];

/// A fresh HOME and cluster dir on one lab host.
pub(crate) struct World {
    home: tempfile::TempDir,
    code: tempfile::TempDir,
    /// Where the job's marks go: the cluster's root, on the lab's shared filesystem (removed
    /// on drop), or a dir in HOME.
    base: PathBuf,
    theseus: PathBuf,
    host: &'static str,
    /// The work root: run dirs and the object store.
    work: PathBuf,
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl World {
    /// A world on the local host (the built-in `local`, no config).
    pub(crate) fn local(theseus: &Path) -> Result<World, String> {
        let home = tempfile::tempdir().map_err(|e| e.to_string())?;
        let code = tempfile::tempdir().map_err(|e| e.to_string())?;
        let base = home.path().join("marks-dir");
        std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
        let work = home.path().join(".local/share/theseus/work");
        let world = World { home, code, base, theseus: theseus.to_owned(), host: "local", work };
        world.write_code()?;
        Ok(world)
    }

    pub(crate) fn start(theseus: &Path, lab: &Lab, key: &Path) -> Result<World, String> {
        let home = tempfile::tempdir().map_err(|e| e.to_string())?;
        let code = tempfile::tempdir().map_err(|e| e.to_string())?;
        let base = lab.shared.join(format!(
            "chaos-{}-{}",
            std::process::id(),
            home.path().file_name().unwrap_or_default().to_string_lossy()
        ));
        write(
            &home.path().join("ssh_config"),
            &format!(
                "Host lab\n  HostName 127.0.0.1\n  Port {}\n  User {}\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
                 UserKnownHostsFile {}\n  StrictHostKeyChecking yes\n",
                lab.port,
                lab.user,
                key.display(),
                lab.known_hosts
            ),
        )?;
        let hosts = match lab.kind {
            Kind::Plain => "hosts:\n  box: {type: plain, ssh: lab, cluster: lab, chips: {h100: 1}}\n".to_owned(),
            Kind::Slurm => {
                "hosts:\n  box:\n    type: slurm\n    cluster: lab\n    ssh: lab\n    partitions: [gpu]\n    \
                            cpu_partitions: [cpu]\n    mem: 300M\n    time: \"10\"\ngres_mapping:\n  h100: h100\n"
                    .to_owned()
            }
        };
        let b = base.display();
        write(
            &home.path().join(".theseus.yaml"),
            &format!(
                "clusters:\n  lab:\n    root: {b}\n    work: {b}/work\n    log: {b}/logs\n    status: {b}/status\n{hosts}"
            ),
        )?;
        let work = base.join("work");
        let world = World { home, code, base, theseus: theseus.to_owned(), host: "box", work };
        world.write_code()?;
        Ok(world)
    }

    /// The job and its experiments: each start of a run appends its id to `marks`; while it
    /// runs it rewrites its beat file.
    fn write_code(&self) -> Result<(), String> {
        let (code, b) = (&self.code, self.base.display());
        write(
            &code.path().join("job.sh"),
            "echo \"$THESEUS_RUN_ID\" >> \"$CHAOS_MARKS\"\nend=$(( $(date +%s) + $1 ))\n\
             while [ \"$(date +%s)\" -lt \"$end\" ]; do date +%s%N > \"$CHAOS_MARKS.$THESEUS_RUN_ID.beat\"; sleep 0.2; done\n",
        )?;
        let env = format!("env: {{CHAOS_MARKS: {b}/marks}}\nrequest: {{chip: cpu}}\n");
        write(&code.path().join("quick.yaml"), &format!("entrypoint: sh job.sh 1\n{env}"))?;
        // The submit flow's: long enough that a job left running behind a submit that reported
        // failure is still beating when the case is judged (a 1 s job had ended, hiding them).
        write(&code.path().join("long.yaml"), &format!("entrypoint: sh job.sh 20\n{env}"))?;
        write(&code.path().join("sleep.yaml"), &format!("entrypoint: sh job.sh 600\n{env}"))
    }

    /// The host runs go to (`--host`).
    pub(crate) fn host(&self) -> &'static str {
        self.host
    }

    /// The code dir a submit ships.
    pub(crate) fn code_dir(&self) -> &Path {
        self.code.path()
    }

    /// `theseus ARGS` in this world.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = crate::proc::theseus(&self.theseus, self.home.path(), self.code.path());
        cmd.env("THESEUS_SSH_CONFIG", self.home.path().join("ssh_config")).args(args);
        cmd
    }

    pub(crate) fn run(&self, args: &[&str], bound: Duration) -> Result<Ran, String> {
        run(self.command(args), bound, KillAt::Never)
    }

    /// A clean submit of `experiment` as job `chaos`, running when it returns.
    pub(crate) fn setup(&self, experiment: &str) -> Result<(), String> {
        let ran =
            self.run(&["submit", "chaos", experiment, "--code", ".", "--host", self.host], Duration::from_secs(120))?;
        if ran.code != Some(0) {
            return Err(format!("the setup submit failed:\n{}", indent(&ran.stderr)));
        }
        // The lab is shared: the test suite and the matrix's other workers hold its few cores,
        // so a job may wait in Slurm's queue for minutes. Time spent pending does not count
        // against the start; a job that neither starts nor stays queued fails the case, and so
        // does one queued past the outer bound.
        let (outer, grace) = (Instant::now() + Duration::from_secs(900), Duration::from_secs(60));
        let mut deadline = Instant::now() + grace;
        let mut last_look = Instant::now();
        let mut status = Value::Null;
        while self.marks().is_empty() {
            if last_look.elapsed() > Duration::from_secs(2) {
                last_look = Instant::now();
                status = self.status_of("chaos");
                if status["state"] == "pending" {
                    deadline = (Instant::now() + grace).min(outer);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("the setup job never started; its last status: {status}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// The status `theseus status NAME --output json` reports (state, reason, ranks), or why it
    /// could not be read.
    fn status_of(&self, name: &str) -> Value {
        match self.run(&["status", name, "--output", "json"], Duration::from_secs(60)) {
            Ok(ran) => match serde_json::from_str::<Value>(&ran.stdout) {
                Ok(json) => json["status"].clone(),
                Err(_) => Value::String(format!("unreadable: {}", ran.stderr.trim())),
            },
            Err(e) => Value::String(format!("unreadable: {e}")),
        }
    }

    /// How many times each run started.
    pub(crate) fn marks(&self) -> BTreeMap<String, usize> {
        let mut marks = BTreeMap::new();
        for run in std::fs::read_to_string(self.base.join("marks")).unwrap_or_default().lines() {
            *marks.entry(run.trim().to_owned()).or_default() += 1;
        }
        marks
    }

    /// Whether run `run` beat in the last `window`.
    fn beating(&self, run: &str, window: Duration) -> bool {
        let beat = self.base.join(format!("marks.{run}.beat"));
        let first = std::fs::read_to_string(&beat).unwrap_or_default();
        std::thread::sleep(window);
        std::fs::read_to_string(&beat).unwrap_or_default() != first
    }

    /// Run ids and states the ledger knows (no backend asked).
    pub(crate) fn ledger(&self) -> BTreeMap<String, String> {
        let Ok(list) = self.run(&["list", "--output", "json", "--no-refresh"], Duration::from_secs(30)) else {
            return BTreeMap::new();
        };
        let rows: Value = serde_json::from_str(&list.stdout).unwrap_or_default();
        rows.as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r["identity"]["run_id"].as_str()?.to_owned(), r["state"].as_str()?.to_owned())))
            .collect()
    }

    /// Dirs under the cluster's work root named `*.partial*`.
    fn partial_dirs(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![self.work.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if !entry.file_type().is_ok_and(|t| t.is_dir()) || path.ends_with(".theseus/objects") {
                    continue;
                }
                if path.file_name().is_some_and(|n| n.to_string_lossy().contains(".partial")) {
                    found.push(path.strip_prefix(&self.work).unwrap_or(&path).display().to_string());
                }
                stack.push(path);
            }
        }
        found
    }

    /// What is left once a recovery without faults has run: `cancel chaos` if the ledger has
    /// a run that is not finished, then `gc`. `cancelled_ok`: the command under test was a
    /// `cancel` that said it succeeded, so the run must already have stopped.
    pub(crate) fn recover_and_judge(&self, cancelled_ok: bool) -> Result<Vec<String>, String> {
        let mut left = Vec::new();
        if cancelled_ok {
            for run in self.marks().keys() {
                if self.beating(run, Duration::from_millis(700)) {
                    left.push(format!("run {run} still runs after `cancel` succeeded"));
                }
            }
        }
        let ledger = self.ledger();
        // A run that is alive must not be recorded as over (the user would never cancel it).
        for (run, state) in &ledger {
            if matches!(state.as_str(), "completed" | "failed" | "cancelled")
                && self.marks().contains_key(run)
                && self.beating(run, Duration::from_millis(700))
            {
                left.push(format!("run {run} runs but the ledger says {state}"));
            }
        }
        if ledger.values().any(|state| !matches!(state.as_str(), "completed" | "failed" | "cancelled")) {
            let ran = self.run(&["cancel", "chaos"], Duration::from_secs(60))?;
            if ran.code != Some(0) && !ran.stderr.contains("already") {
                left.push(format!("the recovery `cancel` failed: {}", ran.stderr.trim()));
            }
        }
        let ran = self.run(&["gc", "--older-than", "0s", "--host", self.host], Duration::from_secs(60))?;
        if ran.code != Some(0) {
            left.push(format!("the recovery `gc` failed: {}", ran.stderr.trim()));
        }
        left.extend(self.left_after_recovery());
        Ok(left)
    }

    /// What is wrong once `cancel` and `gc` have run: runs started twice or unknown to the
    /// ledger, half-made run dirs, runs still going.
    pub(crate) fn left_after_recovery(&self) -> Vec<String> {
        let mut left = Vec::new();
        let marks = self.marks();
        for (run, times) in &marks {
            if *times > 1 {
                left.push(format!("run {run} started {times} times"));
            }
        }
        let ledger = self.ledger();
        for run in marks.keys() {
            if !ledger.contains_key(run) {
                left.push(format!("run {run} ran but the ledger does not know it"));
            }
        }
        for dir in self.partial_dirs() {
            left.push(format!("half-made run dir {dir}"));
        }
        for run in marks.keys() {
            if self.beating(run, Duration::from_millis(700)) {
                left.push(format!("run {run} still runs after `cancel` and `gc`"));
            }
        }
        left
    }
}

/// Runs the matrix on `lab` for the selected flows (all when empty): a clean run of each flow
/// counts its remote commands, then every case runs, `jobs` at a time, each with a fault key
/// of its own.
pub(crate) fn run_matrix(
    theseus: &Path,
    lab: &Lab,
    full: bool,
    only: &[String],
    jobs: usize,
) -> Result<Vec<Case>, String> {
    // Installed (and, when dropped at the end, removed) one after another: each rewrites the
    // lab's `authorized_keys`.
    let injectors = (0..jobs.max(1)).map(|_| Injector::install(&lab.authorized)).collect::<Result<Vec<_>, _>>()?;
    let bound = Duration::from_secs(if full { 180 } else { 120 });
    let mut counted = Vec::new();
    for flow in FLOWS.iter().filter(|f| only.is_empty() || only.iter().any(|o| o == f.name)) {
        let injector = &injectors[0];
        injector.clear()?;
        let world = World::start(theseus, lab, &injector.key())?;
        if let Some(experiment) = flow.setup {
            world.setup(experiment)?;
        }
        let before = injector.count();
        let clean = world.run(flow.command, bound)?;
        if clean.code != Some(0) {
            return Err(format!("the clean `{}` failed:\n{}", flow.command.join(" "), indent(&clean.stderr)));
        }
        let steps = injector.count() - before;
        let names: Vec<String> = (before + 1..=before + steps).map(|n| injector.command(n)).collect();
        if std::env::var_os("THESEUS_CHAOS_VERBOSE").is_some() {
            for n in before + 1..=before + steps {
                eprintln!("chaos: command {}: {}", n - before, injector.full_command(n));
            }
        }
        world.recover_and_judge(flow.name == "cancel")?;
        eprintln!("chaos: {} {} runs {steps} remote commands: {}", lab.kind.name(), flow.name, names.join(" | "));
        counted.push((flow, names));
    }
    let faults: &[&str] = if full { FAULTS } else { &["fail", "drop", "lost"] };
    let planned: Vec<(&Flow, &[String], &str, usize)> = counted
        .iter()
        .flat_map(|(flow, names)| {
            faults.iter().flat_map(move |fault| (1..=names.len()).map(move |n| (*flow, names.as_slice(), *fault, n)))
        })
        .filter(|(_, names, _, n)| full || !matrix::repeats_a_poll(names, n - 1))
        .collect();
    let (cases, _injectors) = pool::run(&planned, injectors, |injector, &(flow, names, fault, n)| {
        let started = Instant::now();
        injector.clear()?;
        let world = World::start(theseus, lab, &injector.key())?;
        if let Some(experiment) = flow.setup {
            world.setup(experiment)?;
        }
        injector.plan(injector.count() + n, fault)?;
        let ran = world.run(flow.command, bound)?;
        injector.clear()?;
        let verdict = classify(ran.code, &ran.stderr, ran.timed_out);
        let left = world.recover_and_judge(flow.name == "cancel" && ran.code == Some(0))?;
        let case = Case {
            flow: flow.name,
            step: names.get(n - 1).cloned().unwrap_or_default(),
            n,
            of: names.len(),
            fault: fault.to_owned(),
            verdict,
            left,
            seconds: started.elapsed().as_secs_f64(),
        };
        if case.is_bad() {
            eprintln!("chaos: BAD {case}\n{}", indent(&ran.stderr));
        }
        Ok(case)
    });
    cases
}
