//! The Volcano flows against the simulator: a fresh cluster per case, the real binary, the
//! n-th request failed, and what is left behind read from the simulator's store.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use theseus_kube_sim::{NodeConfig, RequestFault, Sim, SimConfig};

use crate::matrix::{Case, classify};
use crate::pool;
use crate::proc::{self, KillAt, Ran, indent};

/// A secret value the runs carry (a Secret is made for it).
const SECRET: &str = "chaos-secret-value";

/// One flow: what runs before (cleanly) and the command under test.
struct Flow {
    name: &'static str,
    /// Experiment of the job the setup submits, if any.
    setup: Option<&'static str>,
    command: &'static [&'static str],
}

const FLOWS: &[Flow] = &[
    Flow { name: "submit", setup: None, command: &["submit", "chaos", "quick.yaml", "--secret-env", "CHAOS_TOKEN"] },
    Flow { name: "status", setup: Some("sleep.yaml"), command: &["status", "chaos"] },
    Flow { name: "logs", setup: Some("quick.yaml"), command: &["logs", "-f", "chaos"] },
    Flow { name: "cancel", setup: Some("sleep.yaml"), command: &["cancel", "chaos"] },
    Flow { name: "gc", setup: Some("quick.yaml"), command: &["gc", "--older-than", "0s", "--host", "k8s"] },
    // The run's vcjob was collected (`ttl_seconds_after_finished: 0`) before anyone looked:
    // its log and its end are read from the PVC through short-lived helper pods.
    Flow { name: "gone", setup: Some("quick.yaml"), command: &["logs", "-f", "chaos"] },
];

/// Runs a flow's setup, if it has one (see [`FLOWS`]).
fn prepare(world: &World, flow: &Flow) -> Result<(), String> {
    match flow.setup {
        None => Ok(()),
        Some(experiment) if flow.name == "gone" => world.setup_collected(experiment),
        Some(experiment) => world.setup(experiment),
    }
}

/// A fresh simulated cluster with a HOME configured for it.
pub(crate) struct World {
    // Dropped in this order: the simulator (and its pods) before the runtime that drives it.
    sim: Sim,
    _runtime: tokio::runtime::Runtime,
    home: tempfile::TempDir,
    _pvc: tempfile::TempDir,
    code: tempfile::TempDir,
    theseus: PathBuf,
}

impl World {
    pub(crate) fn start(theseus: &Path) -> Result<World, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let config = SimConfig {
            nodes: (0..2).map(|i| NodeConfig::new(&format!("gpu-node-{i}"), 4)).collect(),
            ..SimConfig::default()
        };
        let sim = runtime.block_on(Sim::start(config)).map_err(|e| format!("the simulator did not start: {e}"))?;
        let (home, pvc, code) = (tempdir()?, tempdir()?, tempdir()?);
        let kube = home.path().join(".kube");
        std::fs::create_dir_all(&kube).map_err(|e| e.to_string())?;
        // HTTPS with the simulator's CA, as kind's kubeconfig.
        write(&kube.join("config"), &sim.kubeconfig("{}", "default"))?;
        let p = pvc.path().display();
        write(
            &home.path().join(".theseus.yaml"),
            &format!(
                "clusters:\n  sim:\n    root: {p}\n    work: {p}/work\n    log: {p}/logs\n    status: {p}/status\n\
                 hosts:\n  k8s:\n    type: volcano\n    cluster: sim\n    namespace: default\n    queue: default\n\
                 \x20   image: theseus-chaos:local\n    pvc_name: work\n    pvc_mount_path: {p}\n    chips: {{h100: 4}}\n"
            ),
        )?;
        write(
            &code.path().join("job.py"),
            "import sys, time\nprint('chaos: started', flush=True)\ntime.sleep(float(sys.argv[1]))\nprint('chaos: done', flush=True)\n",
        )?;
        write(&code.path().join("quick.yaml"), "entrypoint: python job.py 1\nrequest: {chip: cpu}\n")?;
        write(&code.path().join("sleep.yaml"), "entrypoint: python job.py 600\nrequest: {chip: cpu}\n")?;
        Ok(World { sim, _runtime: runtime, home, _pvc: pvc, code, theseus: theseus.to_owned() })
    }

    /// The code dir a submit ships.
    pub(crate) fn code_dir(&self) -> &Path {
        self.code.path()
    }

    /// `theseus ARGS` in this world (a submit ships the world's code to the simulated host).
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = proc::theseus(&self.theseus, self.home.path(), self.code.path());
        cmd.env("CHAOS_TOKEN", SECRET).args(args);
        if args.first() == Some(&"submit") {
            cmd.args(["--code", ".", "--host", "k8s"]);
        }
        cmd
    }

    /// Runs `theseus ARGS`, killing it after `bound`; refuses output with the secret in it.
    pub(crate) fn run(&self, args: &[&str], bound: Duration) -> Result<Ran, String> {
        let ran = proc::run(self.command(args), bound, KillAt::Never)?;
        if ran.stdout.contains(SECRET) || ran.stderr.contains(SECRET) {
            return Err(format!("`theseus {}` printed the secret value", args.join(" ")));
        }
        Ok(ran)
    }

    /// A clean submit of `experiment` as job `chaos`, running (or finished) when it returns.
    fn setup(&self, experiment: &str) -> Result<(), String> {
        let ran = self.run(&["submit", "chaos", experiment], Duration::from_secs(120))?;
        if ran.code != Some(0) {
            return Err(format!("the setup submit failed: {}", ran.stderr));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.run(&["status", "chaos", "--output", "json"], Duration::from_secs(60))?;
            let state = serde_json::from_str::<Value>(&status.stdout).unwrap_or_default()["status"]["state"].clone();
            if state == "running" || state == "completed" {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the setup job never ran: {}", status.stdout));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A clean submit of `experiment` as job `chaos` to a host whose finished vcjobs are
    /// collected at once, returning once its vcjob is gone (nothing asked about it meanwhile: the
    /// ledger still has it live).
    fn setup_collected(&self, experiment: &str) -> Result<(), String> {
        let config = self.home.path().join(".theseus.yaml");
        let text = std::fs::read_to_string(&config).map_err(|e| e.to_string())?;
        write(&config, &format!("{text}    ttl_seconds_after_finished: 0\n"))?;
        let ran = self.run(&["submit", "chaos", experiment], Duration::from_secs(120))?;
        if ran.code != Some(0) {
            return Err(format!("the setup submit failed: {}", ran.stderr));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.sim.objects("batch.volcano.sh/v1alpha1", "Job").is_empty()
            || !self.sim.objects("v1", "Pod").is_empty()
        {
            if Instant::now() > deadline {
                return Err("the setup job was never collected".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Run ids the ledger knows.
    fn ledger_runs(&self) -> HashSet<String> {
        let Ok(list) = self.run(&["list", "--output", "json", "--no-refresh"], Duration::from_secs(30)) else {
            return HashSet::new();
        };
        let rows: Value = serde_json::from_str(&list.stdout).unwrap_or_default();
        rows.as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["identity"]["run_id"].as_str().map(str::to_owned))
            .collect()
    }

    /// What theseus left that it should not have: helper jobs and pods, Secrets, coordinator
    /// Services and run-files ConfigMaps without their Job, Jobs the ledger does not know.
    fn left_behind(&self) -> Vec<String> {
        let label = |o: &Value, k: &str| o["metadata"]["labels"][k].as_str().map(str::to_owned);
        let name = |o: &Value| o["metadata"]["name"].as_str().unwrap_or("?").to_owned();
        let jobs = self.sim.objects("batch.volcano.sh/v1alpha1", "Job");
        let pods = self.sim.objects("v1", "Pod");
        let secrets = self.sim.objects("v1", "Secret");
        let services = self.sim.objects("v1", "Service");
        let maps = self.sim.objects("v1", "ConfigMap");
        let known = self.ledger_runs();
        let mut left = Vec::new();
        for job in &jobs {
            if label(job, "theseus.dev/role").as_deref() == Some("helper") {
                left.push(format!("helper job {}", name(job)));
            } else if let Some(run) = label(job, "theseus.dev/run-id")
                && !known.contains(&run)
            {
                left.push(format!("vcjob {} of run {run}, which the ledger does not know", name(job)));
            }
        }
        for pod in pods.iter().filter(|p| name(p).starts_with("theseus-")) {
            left.push(format!("helper pod {}", name(pod)));
        }
        let job_runs: HashSet<String> = jobs.iter().filter_map(|j| label(j, "theseus.dev/run-id")).collect();
        for secret in &secrets {
            if let Some(run) = label(secret, "theseus.dev/run-id")
                && !job_runs.contains(&run)
            {
                left.push(format!("Secret {} without its Job", name(secret)));
            }
        }
        for service in &services {
            if let Some(run) = label(service, "theseus.dev/run-id")
                && !job_runs.contains(&run)
            {
                left.push(format!("Service {} without its Job", name(service)));
            }
        }
        for map in &maps {
            if let Some(run) = label(map, "theseus.dev/run-id")
                && !job_runs.contains(&run)
            {
                left.push(format!("ConfigMap {} without its Job", name(map)));
            }
        }
        left
    }

    /// How many distinct runs have a vcjob in the cluster.
    pub(crate) fn vcjobs_of_runs(&self) -> usize {
        let jobs = self.sim.objects("batch.volcano.sh/v1alpha1", "Job");
        let runs: HashSet<String> = jobs
            .iter()
            .filter(|j| j["metadata"]["labels"]["theseus.dev/role"].as_str() != Some("helper"))
            .filter_map(|j| j["metadata"]["labels"]["theseus.dev/run-id"].as_str().map(str::to_owned))
            .collect();
        runs.len()
    }

    /// [`World::left_behind`] once what the cluster deletes by itself is gone (bounded).
    pub(crate) fn settled_left_behind(&self) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = self.left_behind();
            if left.is_empty() || Instant::now() > deadline {
                return left;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn tempdir() -> Result<tempfile::TempDir, String> {
    tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The faults of a run: every request of every flow gets each.
fn faults(full: bool, flow: &str) -> Vec<(String, RequestFault)> {
    let mut faults = vec![("500".to_owned(), RequestFault::Status(500)), ("reset".to_owned(), RequestFault::Reset)];
    if full || flow == "submit" {
        faults.push(("409".to_owned(), RequestFault::Status(409)));
    }
    if full || matches!(flow, "logs" | "cancel" | "gone") {
        faults.push(("drop-streams".to_owned(), RequestFault::DropStreams));
    }
    if full {
        faults.push(("429".to_owned(), RequestFault::Status(429)));
        faults.push(("hang".to_owned(), RequestFault::Hang));
    }
    faults
}

/// How long the scheduler waits before placing pods in the delayed-scheduling case.
const SCHEDULING_DELAY: Duration = Duration::from_secs(4);

/// One case: a flow, and the n-th request failed with a fault, or (no fault) every pod's
/// scheduling delayed.
struct Planned<'a> {
    flow: &'a Flow,
    names: &'a [String],
    n: usize,
    fault: Option<(String, RequestFault)>,
}

/// Runs the matrix for the selected flows (all when empty): first a clean run of each flow
/// counts its requests, then every case of every flow runs, `jobs` at a time, each in a cluster
/// of its own.
pub(crate) fn run(theseus: &Path, full: bool, only: &[String], jobs: usize) -> Result<Vec<Case>, String> {
    let bound = if full { Duration::from_secs(120) } else { Duration::from_secs(90) };
    let mut counted = Vec::new();
    for flow in FLOWS.iter().filter(|f| only.is_empty() || only.iter().any(|o| o == f.name)) {
        let world = World::start(theseus)?;
        prepare(&world, flow)?;
        let before = world.sim.requests().len();
        let clean = world.run(flow.command, bound)?;
        if clean.code != Some(0) {
            return Err(format!("the clean `{}` failed: {}", flow.command.join(" "), clean.stderr));
        }
        let requests = world.sim.requests();
        let names: Vec<String> = requests[before..].iter().map(|(method, path)| request_name(method, path)).collect();
        eprintln!("chaos: volcano {} makes {} API requests: {}", flow.name, names.len(), names.join(" | "));
        counted.push((flow, names));
    }
    let mut planned = Vec::new();
    for (flow, names) in &counted {
        for (label, fault) in faults(full, flow.name) {
            for n in 1..=names.len() {
                planned.push(Planned { flow, names, n, fault: Some((label.clone(), fault)) });
            }
        }
        // The scheduler waits before placing any pod (a busy cluster): the flow must still end
        // well, however long the wait within its bounds.
        planned.push(Planned { flow, names, n: 0, fault: None });
    }
    let (cases, _) = pool::run(&planned, vec![(); jobs], |(), case| run_case(theseus, case, bound));
    cases
}

fn run_case(theseus: &Path, planned: &Planned<'_>, bound: Duration) -> Result<Case, String> {
    let Planned { flow, names, n, fault } = planned;
    let started = Instant::now();
    let world = World::start(theseus)?;
    let faults = world.sim.faults();
    // A delay holds the setup's pods too; a failed request is counted from the command on.
    if fault.is_none() {
        faults.delay_scheduling(Some(SCHEDULING_DELAY));
    }
    prepare(&world, flow)?;
    if let Some((_, fault)) = fault {
        faults.fail_nth_request(*n, *fault);
    }
    let ran = world.run(flow.command, bound)?;
    faults.clear_request_faults();
    faults.delay_scheduling(None);
    let case = Case {
        flow: flow.name,
        step: if *n == 0 { "whole flow".into() } else { names.get(n - 1).cloned().unwrap_or_default() },
        n: *n,
        of: names.len(),
        fault: match fault {
            Some((label, _)) => label.clone(),
            None => format!("scheduling delayed {}s", SCHEDULING_DELAY.as_secs()),
        },
        verdict: classify(ran.code, &ran.stderr, ran.timed_out),
        left: world.settled_left_behind(),
        seconds: started.elapsed().as_secs_f64(),
    };
    if case.is_bad() {
        eprintln!("chaos: BAD {case}\n{}", indent(&ran.stderr));
    }
    Ok(case)
}

/// `GET pods`, `POST jobs`, `GET pods/log`: the method and the resource of a request path.
fn request_name(method: &str, path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    // .../namespaces/NS/RESOURCE[/NAME[/SUB]]
    let resource = match parts.iter().position(|p| *p == "namespaces") {
        Some(i) if parts.len() > i + 2 => {
            let rest = &parts[i + 2..];
            match rest {
                [resource, _, sub, ..] => format!("{resource}/{sub}"),
                [resource, ..] => (*resource).to_owned(),
                [] => String::new(),
            }
        }
        Some(_) => "namespaces".to_owned(),
        None => parts.last().copied().unwrap_or("").to_owned(),
    };
    format!("{method} {resource}")
}
