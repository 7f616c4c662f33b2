//! The Cloud TPU flows against `theseus-tpu-sim` (the binary next to `theseus`): a fresh
//! simulator per case (Google's TPU API v2 over HTTPS with its own CA, real sshd workers in
//! network namespaces reached through its ssh proxy), the real binary with a service-account
//! key, and one API request or one remote command of the flow failed. After each case a
//! recovery without faults runs (`cancel` when the ledger has a run that is not over, then
//! `gc`), and what is left is read from the API: a node or queued resource labelled
//! `theseus-created=true` is a leftover (a run still alive keeps `gc` from deleting its VM, so
//! a run the client lost shows here too), and a `cancel` that said it succeeded must have
//! deleted its VM.
//!
//! API requests fail through the simulator's fault API (`POST /sim/v1/faults`): a method, a
//! path fragment and a `skip` (how many matching requests of the clean run come before it)
//! single out each request of the run in turn. `--full` (every flow) fails every request with
//! 500, 503 UNAVAILABLE, 429 and a reset connection, and ends the first create or delete
//! operation the flow waits on with `google.rpc.Code` 13 (INTERNAL).
//!
//! The short matrix (in every `cargo xtask test`, about 150 s at most) runs `submit` and
//! `cancel` only: 500 on the first request of each kind, each remote command of `submit`
//! refused, its launch's connection dropped, and the answer of `cancel`'s kill lost.
//!
//! Remote commands on the workers fail as on the lab ([`crate::inject`]; with `--full` every
//! command of every flow each way): the injector's
//! forced-command line is the first `ssh-keys` entry of the host's metadata, which Google's
//! guest agent (and the simulator) copy as they are into the worker's `authorized_keys`, and
//! its key is the user's `~/.ssh/google_compute_engine`, which theseus adds after it.
//!
//! The workers need what the SSH/Slurm lab installs (sshd, socat, its user, its Python): the
//! lab's `THESEUSTEST_SSH_USER` and `THESEUSTEST_REMOTE_PYTHON` say who and which.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::inject::{FAULTS, Injector};
use crate::matrix::{self, Case, classify};
use crate::pool;
use crate::proc::{self, KillAt, Ran, indent};

mod sim;
use sim::Sim;

const ZONE: &str = "us-central2-b";
const PROJECT: &str = "chaos-project";
/// The host, and so the VM's node id.
const HOST: &str = "chaos-tpu";
/// The arguments that send a job to it: v4-8 is one worker of 4 chips.
const TO_TPU: &[&str] = &["--host", HOST, "--chip", "tpu-v4", "-n", "4"];

/// One flow: what runs before (cleanly) and the command under test.
struct Flow {
    name: &'static str,
    /// The name of its remote-command cases in the report.
    ssh_name: &'static str,
    /// Experiment the setup submits as job `chaos`, and whether with `--keep`.
    setup: Option<(&'static str, bool)>,
    command: &'static [&'static str],
}

const FLOWS: &[Flow] = &[
    Flow { name: "submit", ssh_name: "submit/ssh", setup: None, command: &["submit", "chaos", "long.yaml", "--yes"] },
    Flow { name: "status", ssh_name: "status/ssh", setup: Some(("sleep.yaml", false)), command: &["status", "chaos"] },
    Flow { name: "cancel", ssh_name: "cancel/ssh", setup: Some(("sleep.yaml", false)), command: &["cancel", "chaos"] },
    // The run ended on a VM it kept: `gc` deletes it.
    Flow {
        name: "gc",
        ssh_name: "gc/ssh",
        setup: Some(("quick.yaml", true)),
        command: &["gc", "--older-than", "0s", "--host", HOST],
    },
];

/// Who logs in to the workers, and their Python.
#[derive(Debug, Clone)]
pub(crate) struct Lab {
    user: String,
    python: String,
}

impl Lab {
    /// The lab's user and Python, or why they cannot be used.
    pub(crate) fn from_env() -> Result<Lab, String> {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty()).ok_or_else(|| format!("{k} is not set"));
        Ok(Lab { user: get("THESEUSTEST_SSH_USER")?, python: get("THESEUSTEST_REMOTE_PYTHON")? })
    }
}

/// A fresh simulator with a HOME whose config has one TPU host on it.
struct World {
    // Dropped first: the simulator stops before its root goes.
    sim: Sim,
    home: tempfile::TempDir,
    code: tempfile::TempDir,
    theseus: PathBuf,
    /// Base64 lines of the service-account key, which no output may show.
    secrets: Vec<String>,
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

impl World {
    /// `injector`'s key is the user's (`~/.ssh/google_compute_engine`, which theseus puts in
    /// the VM's `ssh-keys`), and the host's own `ssh-keys` metadata has its forced-command line
    /// first: the guest agent copies each line as it is, so sshd runs every command of that key
    /// through the injector's script.
    fn start(theseus: &Path, lab: &Lab, injector: &Injector) -> Result<World, String> {
        let home = tempfile::Builder::new().prefix("chaos-tpu-").tempdir().map_err(|e| e.to_string())?;
        let code = tempfile::tempdir().map_err(|e| e.to_string())?;
        let sim = Sim::start(&theseus.with_file_name("theseus-tpu-sim"), home.path())?;
        let ssh = home.path().join(".ssh");
        std::fs::create_dir_all(&ssh).map_err(|e| e.to_string())?;
        let key = ssh.join("google_compute_engine");
        for (from, to) in
            [(injector.key(), key.clone()), (injector.key().with_extension("pub"), key.with_extension("pub"))]
        {
            std::fs::copy(&from, &to)
                .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))?;
        }
        write(
            &ssh.join("config"),
            &format!(
                "Host {}\n  ProxyCommand {}\n  IdentityFile {}\n  StrictHostKeyChecking accept-new\n  UserKnownHostsFile {}\n",
                sim.pattern,
                sim.ssh_proxy,
                key.display(),
                ssh.join("known_hosts").display()
            ),
        )?;
        let sa = sim.admin("POST", "keys", Some(&json!({"project": PROJECT})))?;
        let secrets =
            sa["private_key"].as_str().unwrap_or("").lines().filter(|l| l.len() > 40).map(str::to_owned).collect();
        write(&home.path().join("sa-key.json"), &sa.to_string())?;
        write(
            &home.path().join(".theseus.yaml"),
            &format!(
                "clusters:\n  gcp:\n    root: ~/theseus\n    work: ~/theseus/work\nhosts:\n  {HOST}:\n    type: tpu\n    \
                 cluster: gcp\n    zone: {ZONE}\n    project: {PROJECT}\n    accelerator_type: v4-8\n    \
                 version: tpu-ubuntu2204-base\n    ssh_user: {user}\n    metadata:\n      ssh-keys: '{user}:{forced}'\n    \
                 env:\n      THESEUS_PYTHON: {}\n",
                lab.python,
                user = lab.user,
                forced = injector.line(),
            ),
        )?;
        let job = "import sys, time\nprint('chaos: started', flush=True)\ntime.sleep(float(sys.argv[1]))\n";
        write(&code.path().join("job.py"), job)?;
        write(&code.path().join("quick.yaml"), "entrypoint: python job.py 1\n")?;
        // Long enough that a submit's job still runs when the case is judged.
        write(&code.path().join("long.yaml"), "entrypoint: python job.py 30\n")?;
        write(&code.path().join("sleep.yaml"), "entrypoint: python job.py 600\n")?;
        Ok(World { sim, home, code, theseus: theseus.to_owned(), secrets })
    }

    /// `theseus ARGS` in this world (a submit goes to the TPU host).
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = proc::theseus(&self.theseus, self.home.path(), self.code.path());
        let home = self.home.path();
        cmd.env("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU", &self.sim.endpoint)
            .env("CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", &self.sim.ca)
            .env("GOOGLE_APPLICATION_CREDENTIALS", home.join("sa-key.json"))
            .env("THESEUS_SSH_CONFIG", home.join(".ssh/config"))
            // Not a GCE VM: no metadata server answers.
            .env("GCE_METADATA_HOST", "127.0.0.1:9")
            .args(args);
        if args.first() == Some(&"submit") {
            cmd.args(["--code", "."]).args(TO_TPU);
        }
        cmd
    }

    /// Runs `theseus ARGS`, killing it after `bound`; refuses output that shows the key.
    fn run(&self, args: &[&str], bound: Duration) -> Result<Ran, String> {
        let ran = proc::run(self.command(args), bound, KillAt::Never)?;
        if self.secrets.iter().any(|s| ran.stdout.contains(s) || ran.stderr.contains(s)) {
            return Err(format!("`theseus {}` printed the service-account key", args.join(" ")));
        }
        Ok(ran)
    }

    /// A clean submit of `experiment` as job `chaos`; with `wait_end`, returns once it ended.
    fn setup(&self, experiment: &str, keep: bool) -> Result<(), String> {
        let mut args = vec!["submit", "chaos", experiment, "--yes"];
        if keep {
            args.push("--keep");
        }
        let ran = self.run(&args, Duration::from_secs(240))?;
        if ran.code != Some(0) {
            return Err(format!("the setup submit failed:\n{}", indent(&ran.stderr)));
        }
        if !keep {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let state = self.ledger().get("chaos").cloned().unwrap_or_default();
            if matches!(state.as_str(), "completed" | "failed" | "cancelled") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the setup job did not end (last state `{state}`)"));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Job name -> state, as `status --output json` reports each job (asking the backend).
    fn ledger(&self) -> std::collections::BTreeMap<String, String> {
        let Ok(list) = self.run(&["list", "--output", "json"], Duration::from_secs(60)) else {
            return Default::default();
        };
        let rows: Value = serde_json::from_str(&list.stdout).unwrap_or_default();
        rows.as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r["identity"]["name"].as_str()?.to_owned(), r["state"].as_str()?.to_owned())))
            .collect()
    }

    /// Uses up a request fault the command never met (the simulator has no way to withdraw
    /// one), so that it does not fail the recovery or the harness's own reads.
    fn consume(&self, fault: &Value, before: usize) -> Result<(), String> {
        let (Some(method), Some(fragment)) = (fault["method"].as_str(), fault["path"].as_str()) else { return Ok(()) };
        let skip = fault["skip"].as_u64().unwrap_or(0) as usize;
        let met = self.sim.requests()?.iter().skip(before).filter(|(m, p)| m == method && p.contains(fragment)).count();
        // A reset answers nothing: curl fails, as it should.
        for _ in met..=skip {
            let _ = self.sim.call(method, fragment, None, None);
        }
        Ok(())
    }

    /// What the API still has once a recovery without faults ran (`cancel` when a run is not
    /// over, then `gc`) and the deletes it started had time to end.
    fn recover_and_judge(&self) -> Result<Vec<String>, String> {
        let mut left = Vec::new();
        let ledger = self.ledger();
        if ledger.values().any(|state| !matches!(state.as_str(), "completed" | "failed" | "cancelled")) {
            let ran = self.run(&["cancel", "chaos"], Duration::from_secs(120))?;
            if ran.code != Some(0) && !ran.stderr.contains("already") {
                left.push(format!("the recovery `cancel` failed: {}", ran.stderr.trim()));
            }
        }
        let gc = || self.run(&["gc", "--older-than", "0s", "--host", HOST], Duration::from_secs(120));
        let mut ran = gc()?;
        // A pending operation fault the command never met fails the first delete it meets.
        if ran.code != Some(0) {
            ran = gc()?;
        }
        if ran.code != Some(0) {
            left.push(format!("the recovery `gc` failed: {}", ran.stderr.trim()));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let created = self.sim.created()?;
            if created.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                left.extend(created.into_iter().map(|(what, state)| format!("{what} ({state})")));
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(left)
    }
}

/// `GET node`, `POST nodes`, `GET operation`, `POST token`: the method and the resource.
fn request_name(method: &str, path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let rest = path.split_once("/locations/").map_or(path, |(_, r)| r.split_once('/').map_or(r, |(_, r)| r));
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let resource = match parts.as_slice() {
        [collection] => (*collection).to_owned(),
        [collection, name, ..] => {
            let verb = name.split_once(':').map(|(_, v)| format!(":{v}")).unwrap_or_default();
            format!("{}{verb}", collection.strip_suffix('s').unwrap_or(collection))
        }
        [] => "?".into(),
    };
    format!("{method} {resource}")
}

/// The path fragment a fault matches the request at `path` by: its path without the query,
/// and with an operation's id dropped (each run has its own).
fn fragment(path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    match path.split_once("/operations/") {
        Some((before, _)) => format!("{before}/operations/"),
        None => path.to_owned(),
    }
}

/// Each request of a clean run as a fault singles it out: its number (1-based), method, path
/// [`fragment`], how many earlier requests match those (the fault's `skip`), and whether it is
/// the first of its kind ([`request_name`]).
fn targets(requests: &[(String, String)]) -> Vec<(usize, String, String, usize, bool)> {
    requests
        .iter()
        .enumerate()
        .map(|(i, (method, path))| {
            let fragment = fragment(path);
            let skip = requests[..i].iter().filter(|(m, p)| m == method && p.contains(&fragment)).count();
            let name = request_name(method, path);
            let first = !requests[..i].iter().any(|(m, p)| request_name(m, p) == name);
            (i + 1, method.clone(), fragment, skip, first)
        })
        .collect()
}

/// The remote-command faults of step `n` of a flow: `--full` fails every step every way; the
/// short matrix refuses each command of `submit`, drops the connection of its launch, and loses
/// the answer of `cancel`'s kill.
fn remote_faults(full: bool, flow: &str, step: &str) -> &'static [&'static str] {
    match (full, flow, step) {
        (true, ..) => FAULTS,
        (false, "submit", "claim+launch") => &["fail", "drop"],
        (false, "submit", _) => &["fail"],
        (false, "cancel", "mark+kill") => &["lost"],
        _ => &[],
    }
}

/// What a case fails.
enum Fault {
    /// A request of Google's API (a fault spec for the simulator).
    Api(Value),
    /// A remote command on the workers ([`crate::inject`]'s faults).
    Remote(&'static str),
}

/// One case: a flow, and its n-th request or remote command failed.
struct Planned<'a> {
    flow: &'a Flow,
    /// The requests or the remote commands of the clean run.
    names: &'a [String],
    n: usize,
    label: String,
    fault: Fault,
}

/// What a clean run of a flow does.
struct Counted<'a> {
    flow: &'a Flow,
    requests: Vec<(String, String)>,
    names: Vec<String>,
    commands: Vec<String>,
}

/// Runs the TPU matrix for the selected flows (all when empty): a clean run of each flow counts
/// its API requests and its remote commands, then every case runs, a few at once, each in a
/// simulator of its own with a fault key of its own.
pub(crate) fn run(theseus: &Path, lab: &Lab, full: bool, only: &[String], jobs: usize) -> Result<Vec<Case>, String> {
    let bound = Duration::from_secs(240);
    // Each case has a simulator with its workers' sshd; they mostly wait, as the other matrices' do.
    let injectors = (0..jobs.clamp(1, 4)).map(|_| Injector::make()).collect::<Result<Vec<_>, _>>()?;
    let mut counted = Vec::new();
    // The short matrix (in every CI run) takes the flows that start and stop things.
    let chosen = |f: &&Flow| match only {
        [] => full || matches!(f.name, "submit" | "cancel"),
        only => only.iter().any(|o| o == f.name),
    };
    for flow in FLOWS.iter().filter(chosen) {
        let injector = &injectors[0];
        injector.clear()?;
        let world = World::start(theseus, lab, injector)?;
        if let Some((experiment, keep)) = flow.setup {
            world.setup(experiment, keep)?;
        }
        let before = world.sim.requests()?.len();
        let commands_before = injector.count();
        let clean = world.run(flow.command, bound)?;
        if clean.code != Some(0) {
            return Err(format!("the clean `{}` failed:\n{}", flow.command.join(" "), indent(&clean.stderr)));
        }
        let requests: Vec<(String, String)> = world.sim.requests()?.split_off(before);
        let commands: Vec<String> = (commands_before + 1..=injector.count()).map(|n| injector.command(n)).collect();
        if std::env::var_os("THESEUS_CHAOS_VERBOSE").is_some() {
            for n in commands_before + 1..=injector.count() {
                eprintln!("chaos: command {}: {}", n - commands_before, injector.full_command(n));
            }
        }
        let left = world.recover_and_judge()?;
        if !left.is_empty() {
            return Err(format!("the clean `{}` left {}", flow.command.join(" "), left.join(", ")));
        }
        let names: Vec<String> = requests.iter().map(|(m, p)| request_name(m, p)).collect();
        eprintln!("chaos: tpu {} makes {} API requests: {}", flow.name, names.len(), names.join(" | "));
        eprintln!("chaos: tpu {} runs {} remote commands: {}", flow.name, commands.len(), commands.join(" | "));
        counted.push(Counted { flow, requests, names, commands });
    }
    let mut planned = Vec::new();
    for Counted { flow, requests, names, commands } in &counted {
        for (n, method, fragment, skip, first) in targets(requests) {
            let mut faults = vec![("500".to_owned(), json!({"status": 500}))];
            if full {
                faults.push(("503".to_owned(), json!({"status": 503})));
                faults.push(("429".to_owned(), json!({"status": 429})));
                faults.push(("reset".to_owned(), json!({"reset": true})));
            } else if !first {
                // The short matrix: the first request of each kind.
                continue;
            }
            for (label, mut fault) in faults {
                fault["method"] = json!(method);
                fault["path"] = json!(fragment);
                fault["skip"] = json!(skip);
                planned.push(Planned { flow, names, n, label, fault: Fault::Api(fault) });
            }
        }
        // The first operation the flow waits on ends with INTERNAL.
        let waited = requests.iter().enumerate().find_map(|(i, (method, path))| match method.as_str() {
            "POST" if path.contains("/nodes?") || path.contains("/queuedResources?") => Some((i, "create")),
            "DELETE" => Some((i, "delete")),
            _ => None,
        });
        if let Some((i, verb)) = waited.filter(|_| full) {
            let fault = Fault::Api(json!({"operation": {"code": 13, "verb": verb}}));
            planned.push(Planned { flow, names, n: i + 1, label: format!("{verb} op code 13"), fault });
        }
        for n in (1..=commands.len()).filter(|n| full || !matrix::repeats_a_poll(commands, n - 1)) {
            for fault in remote_faults(full, flow.name, &commands[n - 1]) {
                planned.push(Planned {
                    flow,
                    names: commands,
                    n,
                    label: format!("ssh {fault}"),
                    fault: Fault::Remote(fault),
                });
            }
        }
    }
    let (cases, _injectors) =
        pool::run(&planned, injectors, |injector, case| run_case(theseus, lab, injector, case, bound));
    cases
}

fn run_case(
    theseus: &Path,
    lab: &Lab,
    injector: &mut Injector,
    planned: &Planned<'_>,
    bound: Duration,
) -> Result<Case, String> {
    let Planned { flow, names, n, label, fault } = planned;
    let started = Instant::now();
    injector.clear()?;
    let world = World::start(theseus, lab, injector)?;
    if let Some((experiment, keep)) = flow.setup {
        world.setup(experiment, keep)?;
    }
    let before = world.sim.requests()?.len();
    match fault {
        Fault::Api(spec) => drop(world.sim.admin("POST", "faults", Some(spec))?),
        Fault::Remote(fault) => injector.plan(injector.count() + n, fault)?,
    }
    let ran = world.run(flow.command, bound)?;
    injector.clear()?;
    if let Fault::Api(spec) = fault {
        world.consume(spec, before)?;
    }
    let mut left = Vec::new();
    // A `cancel` that says it succeeded has deleted (or is deleting) the VM.
    if flow.name == "cancel" && ran.code == Some(0) {
        for (what, state) in world.sim.created()? {
            if what.starts_with("TPU VM") && state != "DELETING" {
                left.push(format!("{what} is {state} after `cancel` succeeded"));
            }
        }
    }
    left.extend(world.recover_and_judge()?);
    let case = Case {
        flow: if matches!(fault, Fault::Remote(_)) { flow.ssh_name } else { flow.name },
        step: names.get(n - 1).cloned().unwrap_or_default(),
        n: *n,
        of: names.len(),
        fault: label.clone(),
        verdict: classify(ran.code, &ran.stderr, ran.timed_out),
        left,
        seconds: started.elapsed().as_secs_f64(),
    };
    if case.is_bad() {
        eprintln!("chaos: BAD tpu {case}\n{}", indent(&ran.stderr));
    }
    Ok(case)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_named_by_method_and_resource() {
        let base = "/v2/projects/p/locations/us-central2-b";
        assert_eq!(request_name("POST", &format!("{base}/nodes?nodeId=x")), "POST nodes");
        assert_eq!(request_name("GET", &format!("{base}/nodes/x")), "GET node");
        assert_eq!(request_name("GET", &format!("{base}/operations/op-1")), "GET operation");
        assert_eq!(request_name("POST", &format!("{base}/nodes/x:getGuestAttributes")), "POST node:getGuestAttributes");
        assert_eq!(request_name("DELETE", &format!("{base}/queuedResources/x?force=true")), "DELETE queuedResource");
        assert_eq!(request_name("POST", "/token"), "POST token");
    }

    #[test]
    fn every_request_is_singled_out_by_how_many_before_it_match() {
        let base = "/v2/projects/p/locations/z";
        let requests: Vec<(String, String)> = [
            ("POST", "/token".to_owned()),
            ("GET", format!("{base}/nodes/x")),
            ("POST", format!("{base}/nodes?nodeId=x")),
            ("GET", format!("{base}/operations/op-1")),
            ("GET", format!("{base}/operations/op-1")),
            ("GET", format!("{base}/nodes/x")),
            ("GET", format!("{base}/nodes")),
        ]
        .into_iter()
        .map(|(m, p)| (m.to_owned(), p))
        .collect();
        let got: Vec<(usize, usize, bool)> =
            targets(&requests).into_iter().map(|(n, _, _, skip, first)| (n, skip, first)).collect();
        // The list's fragment (`.../nodes`) is in both reads of node x before it.
        assert_eq!(
            got,
            [(1, 0, true), (2, 0, true), (3, 0, true), (4, 0, true), (5, 1, false), (6, 1, false), (7, 2, true)]
        );
    }

    #[test]
    fn the_short_matrix_fails_each_submit_command_and_the_launch_and_kill_every_way_it_matters() {
        assert_eq!(remote_faults(false, "submit", "store upload"), ["fail"]);
        assert_eq!(remote_faults(false, "submit", "claim+launch"), ["fail", "drop"]);
        assert_eq!(remote_faults(false, "cancel", "mark+kill"), ["lost"]);
        assert!(remote_faults(false, "cancel", "login env").is_empty());
        assert_eq!(remote_faults(true, "gc", "home"), FAULTS);
    }

    #[test]
    fn a_fault_matches_every_operation_and_no_query() {
        let base = "/v2/projects/p/locations/z";
        assert_eq!(fragment(&format!("{base}/operations/op-7")), format!("{base}/operations/"));
        assert_eq!(fragment(&format!("{base}/nodes?nodeId=x")), format!("{base}/nodes"));
        assert_eq!(fragment("/token"), "/token");
    }
}
