//! The client-crash matrix: `theseus submit chaos sleep.yaml --follow` killed with SIGKILL at
//! each phase (probe, snapshot, ship, create, follow) on every backend, then `list`, `status`,
//! `cancel` and `gc` as a user would run them next. A case is good when every one of them ends
//! in success or one clear error, the ledger stays readable, `status` tells an honest state
//! (never `submitting` for a client that is gone), and after the `gc` nothing is left: no
//! half-made run dir, no run still going after `cancel`, no Kubernetes object without its run.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::hosts::{self, Lab};
use crate::matrix::{Case, Verdict, classify};
use crate::proc::{self, KillAt, Ran, indent};
use crate::volcano;

/// Bytes of incompressible code each crash world ships.
const BIG_FILE: usize = 16 << 20;

/// Where the client is killed: the phase, and what it waits for.
struct Phase {
    name: &'static str,
    kill: KillAt<'static>,
}

/// The phases, in order. A line is the first stderr line of the phase (the kill follows it at
/// once), so the client dies inside the phase, not between two.
fn phases() -> Vec<Phase> {
    vec![
        Phase { name: "probe", kill: KillAt::After(Duration::from_millis(15)) },
        Phase { name: "snapshot", kill: KillAt::Line("theseus: chose", Duration::ZERO) },
        Phase { name: "ship", kill: KillAt::Line("theseus: submitting", Duration::from_millis(5)) },
        Phase { name: "create", kill: KillAt::Line("files already there", Duration::from_millis(20)) },
        Phase { name: "follow", kill: KillAt::Line("theseus: submitted", Duration::from_millis(300)) },
    ]
}

/// One backend's world.
enum Site {
    Hosts(hosts::World),
    Volcano(Box<volcano::World>),
}

impl Site {
    fn run(&self, args: &[&str], bound: Duration, kill: KillAt<'_>) -> Result<Ran, String> {
        let cmd = match self {
            Site::Hosts(w) => {
                let mut full: Vec<&str> = args.to_vec();
                if args.first() == Some(&"submit") {
                    full.extend(["--code", ".", "--host", w.host()]);
                }
                w.command(&full)
            }
            Site::Volcano(w) => w.command(args),
        };
        proc::run(cmd, bound, kill)
    }

    fn write_big_file(&self, bytes: usize) -> Result<(), String> {
        let dir = match self {
            Site::Hosts(w) => w.code_dir(),
            Site::Volcano(w) => w.code_dir(),
        };
        let mut data = vec![0u8; bytes];
        let mut urandom = std::fs::File::open("/dev/urandom").map_err(|e| e.to_string())?;
        std::io::Read::read_exact(&mut urandom, &mut data).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("weights.bin"), data).map_err(|e| e.to_string())
    }

    fn gc_args(&self) -> Vec<&'static str> {
        match self {
            Site::Hosts(w) => vec!["gc", "--older-than", "0s", "--host", w.host()],
            Site::Volcano(_) => vec!["gc", "--older-than", "0s", "--host", "k8s"],
        }
    }
}

/// Runs the crash matrix on one backend: `lab` for plain and Slurm, none for local and Volcano.
pub(crate) fn run(theseus: &Path, backend: &str, lab: Option<&Lab>) -> Result<Vec<Case>, String> {
    let mut cases = Vec::new();
    let phases = phases();
    let of = phases.len();
    for (i, phase) in phases.into_iter().enumerate() {
        let started = Instant::now();
        let site = match (backend, lab) {
            ("volcano", _) => Site::Volcano(Box::new(volcano::World::start(theseus)?)),
            (_, Some(lab)) => Site::Hosts(hosts::World::start(theseus, lab, &lab.client_key())?),
            _ => Site::Hosts(hosts::World::local(theseus)?),
        };
        // Enough code that shipping takes a moment, so that a kill during it lands inside it.
        site.write_big_file(BIG_FILE)?;
        let bound = Duration::from_secs(120);
        let submit = site.run(&["submit", "chaos", "sleep.yaml", "--follow"], bound, phase.kill)?;
        if std::env::var_os("THESEUS_CHAOS_VERBOSE").is_some() {
            eprintln!("chaos: crash {backend} {}: submit's stderr:\n{}", phase.name, indent(&submit.stderr));
        }
        let mut problems = Vec::new();
        let verdict = std::cell::RefCell::new(Verdict::Ok);
        if submit.killed_at.is_none() {
            problems.push(format!("the client was not killed in phase {} (it ended first)", phase.name));
        }
        // What a user runs next: each must succeed or fail with one clear error.
        let next = |args: &[&str]| -> Result<Ran, String> {
            let ran = site.run(args, Duration::from_secs(90), KillAt::Never)?;
            let judged = classify(ran.code, &ran.stderr, ran.timed_out);
            if !matches!(judged, Verdict::Ok | Verdict::ClearError) && *verdict.borrow() == Verdict::Ok {
                eprintln!(
                    "chaos: crash {backend} {}: `theseus {}`:\n{}",
                    phase.name,
                    args.join(" "),
                    indent(&ran.stderr)
                );
                *verdict.borrow_mut() = judged;
            }
            Ok(ran)
        };
        let list = next(&["list", "--output", "json"])?;
        let rows: Value = serde_json::from_str(&list.stdout).unwrap_or(Value::Null);
        if list.code != Some(0) || !rows.is_array() {
            problems.push(format!("`list` cannot read the ledger: {}", list.stderr.trim()));
        }
        let known = rows.as_array().map_or(0, Vec::len);
        if known > 0 {
            let status = next(&["status", "chaos", "--output", "json"])?;
            let answer: Value = serde_json::from_str(&status.stdout).unwrap_or(Value::Null);
            let state = answer["status"]["state"].as_str().unwrap_or("").to_owned();
            if status.code == Some(0)
                && !matches!(state.as_str(), "unknown" | "pending" | "running" | "completed" | "failed" | "cancelled")
            {
                problems.push(format!(
                    "`status` says `{state}` for a client that is gone ({})",
                    answer["status"]["message"].as_str().unwrap_or("no message")
                ));
            }
            let cancel = next(&["cancel", "chaos"])?;
            if cancel.code != Some(0) {
                // One clear error is fine (nothing to cancel); the recovery below judges the rest.
                eprintln!("chaos: crash {backend} {}: cancel said: {}", phase.name, cancel.stderr.trim());
            }
        }
        let gc = next(&site.gc_args())?;
        if gc.code != Some(0) {
            problems.push(format!("`gc` failed: {}", gc.stderr.trim()));
        }
        let mut left = match &site {
            Site::Hosts(w) => w.left_after_recovery(),
            Site::Volcano(w) => w.settled_left_behind(),
        };
        left.extend(problems);
        let case = Case {
            flow: "crash",
            step: format!("{}, at: {}", phase.name, submit.killed_at.as_deref().map_or("never".into(), shorten)),
            n: i + 1,
            of,
            fault: "kill -9".into(),
            verdict: verdict.into_inner(),
            left,
            seconds: started.elapsed().as_secs_f64(),
        };
        if case.is_bad() {
            eprintln!("chaos: BAD {backend} {case}\n{}", indent(&submit.stderr));
        }
        cases.push(case);
    }
    Ok(cases)
}

fn shorten(line: &str) -> String {
    line.strip_prefix("theseus: ").unwrap_or(line).chars().take(40).collect()
}
