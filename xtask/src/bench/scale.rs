//! Big gang jobs on the simulator (`--only scale`): a job of [`BIG`] pods and one of [`MID`],
//! each pod idle (`sleep`), submitted by theseus; then the wall time and peak RSS
//! (`/usr/bin/time -f %M`) of `status`, `logs` and `cancel` of the big one and `cancel` of the
//! middle one, each beside its raw floor measured in the same run with `curl` over one
//! connection (the kubeconfig's client certificate):
//! - `status`: LIST the job's pods + GET the vcjob;
//! - `logs`: LIST the pods + GET every pod's log;
//! - `cancel`: DELETE the vcjob of an equal bare job, then LIST every 100 ms until no pod is left.
//!
//! Also the environment every pod of the big job gets: its largest single variable, which must
//! stay far under Linux's 131,072-byte limit on one string (`MAX_ARG_STRLEN`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::floor::kubectl;
use super::{Goal, Measure, timed};
use crate::e2e::{World, start_sim_world, text};

/// The big job's pods.
const BIG: usize = 1024;
/// The middle job's pods (the cancel figure).
const MID: usize = 256;
/// How long the pods of a job may take to all run.
const START_WITHIN: Duration = Duration::from_secs(900);
/// Peak RSS goal of `status`, `logs` and `cancel` at [`BIG`] pods.
const RSS_GOAL: f64 = 50.0;

/// The figures of the module doc, on a simulator of their own.
pub(super) fn measure(root: &Path, bin: &Path, scratch: &Path, runs: usize) -> Result<Vec<Measure>> {
    let dir = scratch.join("scale");
    let (mut simulator, world) = start_sim_world(root, bin, &dir, crate::e2e::Rbac::Off)?;
    eprintln!("bench: simulator for big jobs at {}", simulator.url);
    let result = measures(&world, &dir, runs);
    simulator.stop();
    result
}

fn measures(world: &World, dir: &Path, runs: usize) -> Result<Vec<Measure>> {
    std::fs::write(world.code.join("idle.yaml"), "entrypoint: sleep 3600\n")?;
    let curl = Curl::new(world, dir)?;
    let mut out = Vec::new();

    let name = "bench-big";
    let mut submit = Measure::new("submit of a 1,024-pod job, sim", "s", Goal::Below(5.0));
    submit
        .values
        .push(timed(world.theseus_cmd(&super::strs(&submit_args(name, BIG))), "theseus submit of 1,024 pods")?);
    let job = vcjob_of(world, name)?;
    wait_running(world, &job, BIG)?;
    eprintln!("bench: {BIG} pods run");
    out.push(submit);
    out.push(env_size(world, &job)?);

    let selector = format!("volcano.sh/job-name={job}");
    let pods = curl.path(&format!("/api/v1/namespaces/{}/pods?labelSelector={selector}", world.namespace));
    let vcjob = curl.path(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{}/jobs/{job}", world.namespace));
    let (time, rss) = rss_runs(world, &["status", name], runs, "theseus status")?;
    let floor = (0..runs).map(|_| curl.time(&[&pods, &vcjob])).collect::<Result<Vec<_>>>()?;
    out.push(
        with(Measure::new("status of a 1,024-pod job, sim", "s", Goal::Below(5.0)), time.clone())
            .with_floor("curl: LIST the pods + GET the vcjob", floor.clone()),
    );
    out.push(ratio("status of a 1,024-pod job, sim / its floor", &time, &floor));
    out.push(with(Measure::new("status of a 1,024-pod job, sim: peak RSS", "MiB", Goal::Below(RSS_GOAL)), rss));

    let names = pod_names(world, &job)?;
    let logs: Vec<String> = std::iter::once(pods.clone())
        .chain(names.iter().map(|p| curl.path(&format!("/api/v1/namespaces/{}/pods/{p}/log", world.namespace))))
        .collect();
    let logs: Vec<&str> = logs.iter().map(String::as_str).collect();
    let (time, rss) = rss_runs(world, &["logs", name], runs, "theseus logs")?;
    let floor = (0..runs).map(|_| curl.time(&logs)).collect::<Result<Vec<_>>>()?;
    out.push(
        with(Measure::new("logs of a 1,024-pod job, sim", "s", Goal::Below(10.0)), time.clone())
            .with_floor("curl: LIST the pods + GET each pod's log, one connection", floor.clone()),
    );
    out.push(ratio("logs of a 1,024-pod job, sim / its floor", &time, &floor));
    out.push(with(Measure::new("logs of a 1,024-pod job, sim: peak RSS", "MiB", Goal::Below(RSS_GOAL)), rss));

    let (time, rss) = rss_runs(world, &["cancel", name], 1, "theseus cancel")?;
    eprintln!("bench: cancel of {BIG} pods done");
    let floor = raw_cancel(world, &curl, dir, "bench-big-floor", BIG)?;
    out.push(
        with(Measure::new("cancel of a 1,024-pod job, sim", "s", Goal::Below(10.0)), time.clone())
            .with_floor("curl: DELETE the vcjob, LIST every 100 ms until no pod is left", vec![floor]),
    );
    out.push(ratio("cancel of a 1,024-pod job, sim / its floor", &time, &[floor]));
    out.push(with(Measure::new("cancel of a 1,024-pod job, sim: peak RSS", "MiB", Goal::Below(RSS_GOAL)), rss));

    let name = "bench-mid";
    timed(world.theseus_cmd(&super::strs(&submit_args(name, MID))), "theseus submit of 256 pods")?;
    wait_running(world, &vcjob_of(world, name)?, MID)?;
    let (time, _) = rss_runs(world, &["cancel", name], 1, "theseus cancel")?;
    let floor = raw_cancel(world, &curl, dir, "bench-mid-floor", MID)?;
    out.push(
        with(Measure::new("cancel of a 256-pod job, sim", "s", Goal::Below(5.0)), time.clone())
            .with_floor("curl: DELETE the vcjob, LIST every 100 ms until no pod is left", vec![floor]),
    );
    out.push(ratio("cancel of a 256-pod job, sim / its floor", &time, &[floor]));
    eprintln!("bench: cancel of {MID} pods done");
    Ok(out)
}

fn with(mut m: Measure, values: Vec<f64>) -> Measure {
    m.values = values;
    m
}

/// theseus's median against the floor's, each run's time over the floor's median.
fn ratio(name: &'static str, values: &[f64], floor: &[f64]) -> Measure {
    let f = super::median(floor);
    with(Measure::new(name, "x", Goal::AtMost(1.5)), values.iter().map(|v| v / f).collect())
}

fn submit_args(name: &str, pods: usize) -> Vec<String> {
    let line = format!("submit {name} idle.yaml --code . --host e2e --chip cpu -n {pods} --cpu 10m --mem 16Mi");
    line.split_whitespace().map(str::to_owned).collect()
}

/// The vcjob of the run `name` (from `status --output json`'s handle, else the pods' label).
fn vcjob_of(world: &World, name: &str) -> Result<String> {
    let out = kubectl(world)
        .args(["get", "vcjob", "-l", &format!("theseus.dev/name={name}"), "-o", "jsonpath={.items[*].metadata.name}"])
        .output()?;
    let names = text(&out.stdout);
    let job = names.split_whitespace().next().with_context(|| format!("no vcjob of run {name}"))?;
    Ok(job.to_owned())
}

/// Waits until `pods` pods of vcjob `job` run.
fn wait_running(world: &World, job: &str, pods: usize) -> Result<()> {
    let deadline = Instant::now() + START_WITHIN;
    loop {
        let out = kubectl(world).args(["get", "vcjob", job, "-o", "jsonpath={.status.running}"]).output()?;
        let running: usize = text(&out.stdout).trim().parse().unwrap_or(0);
        if running >= pods {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "only {running} of {pods} pods of {job} run after {START_WITHIN:?}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn pod_names(world: &World, job: &str) -> Result<Vec<String>> {
    let out = kubectl(world)
        .args(["get", "pods", "-l", &format!("volcano.sh/job-name={job}"), "-o", "jsonpath={.items[*].metadata.name}"])
        .output()?;
    Ok(text(&out.stdout).split_whitespace().map(str::to_owned).collect())
}

/// The largest environment variable of rank 0's container, as the pod's process sees it.
fn env_size(world: &World, job: &str) -> Result<Measure> {
    let mut m = Measure::new("largest env variable of a pod of a 1,024-pod job, sim", "bytes", Goal::Below(65_536.0));
    let out = kubectl(world).args(["exec", &format!("{job}-worker-0"), "--", "env"]).output()?;
    ensure!(out.status.success(), "kubectl exec env failed: {}", text(&out.stderr));
    let env = text(&out.stdout);
    let (name, len) = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), k.len() + 1 + v.len()))
        .max_by_key(|(_, len)| *len)
        .context("the pod has no environment")?;
    m.values.push(len as f64);
    m.note = Some(format!("{name}; Linux refuses exec with one string over 131,072 bytes"));
    Ok(m)
}

/// `runs` runs of `theseus args` under `/usr/bin/time`: (wall seconds, peak RSS MiB).
fn rss_runs(world: &World, args: &[&str], runs: usize, what: &str) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut times, mut rss) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let mut theseus = world.theseus_cmd(args);
        theseus.stdout(Stdio::null());
        let (secs, peak) = super::timed_rss(theseus, &world.home, what)?;
        times.push(secs);
        rss.push(peak.context("no /usr/bin/time to read the peak RSS with")?);
    }
    Ok((times, rss))
}

/// A bare vcjob of `pods` idle pods created with kubectl, then deleted with curl: seconds from
/// the DELETE until no pod is left.
fn raw_cancel(world: &World, curl: &Curl, dir: &Path, name: &str, pods: usize) -> Result<f64> {
    let manifest = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n  minAvailable: {pods}\n\
             \x20 schedulerName: volcano\n  queue: default\n  tasks:\n  - name: worker\n    replicas: {pods}\n    template:\n\
             \x20     spec:\n        restartPolicy: Never\n        containers:\n        - name: main\n          image: theseus-e2e:local\n\
             \x20         command: [sleep, \"3600\"]\n          resources: {{requests: {{cpu: 10m, memory: 16Mi}}}}\n"
        ),
    )?;
    let out = kubectl(world).args(["create", "-f"]).arg(&manifest).output()?;
    ensure!(out.status.success(), "kubectl create failed: {}", text(&out.stderr));
    wait_running(world, name, pods)?;
    let job = curl.path(&format!("/apis/batch.volcano.sh/v1alpha1/namespaces/{}/jobs/{name}", world.namespace));
    let list =
        curl.path(&format!("/api/v1/namespaces/{}/pods?labelSelector=volcano.sh/job-name={name}", world.namespace));
    let started = Instant::now();
    let out = curl.command(&["-X", "DELETE", &job]).output()?;
    ensure!(out.status.success(), "curl DELETE failed: {}", text(&out.stderr));
    loop {
        let out = curl.command(&[&list]).output()?;
        let doc: Value = serde_json::from_slice(&out.stdout).context("curl LIST gave no JSON")?;
        if doc["items"].as_array().is_some_and(Vec::is_empty) {
            return Ok(started.elapsed().as_secs_f64());
        }
        ensure!(started.elapsed() < START_WITHIN, "the pods of {name} were not deleted");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// curl with the kubeconfig's server, CA and client certificate.
struct Curl {
    server: String,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Curl {
    fn new(world: &World, dir: &Path) -> Result<Curl> {
        let field = |path: &str| -> Result<String> {
            let out =
                kubectl(world).args(["config", "view", "--raw", "-o", &format!("jsonpath={{{path}}}")]).output()?;
            ensure!(out.status.success(), "kubectl config view: {}", text(&out.stderr));
            Ok(text(&out.stdout).trim().to_owned())
        };
        let decoded = |path: &str, file: &str| -> Result<PathBuf> {
            let data = field(path)?;
            let out = Command::new("base64").arg("-d").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().and_then(
                |mut c| {
                    use std::io::Write as _;
                    c.stdin.take().expect("piped").write_all(data.as_bytes())?;
                    c.wait_with_output()
                },
            )?;
            let path = dir.join(file);
            std::fs::write(&path, out.stdout)?;
            Ok(path)
        };
        Ok(Curl {
            server: field(".clusters[0].cluster.server")?,
            ca: decoded(".clusters[0].cluster.certificate-authority-data", "curl-ca.pem")?,
            cert: decoded(".users[0].user.client-certificate-data", "curl-cert.pem")?,
            key: decoded(".users[0].user.client-key-data", "curl-key.pem")?,
        })
    }

    fn path(&self, path: &str) -> String {
        format!("{}{path}", self.server)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("curl");
        cmd.args(["-sSf", "--cacert"]).arg(&self.ca).arg("--cert").arg(&self.cert).arg("--key").arg(&self.key);
        cmd.args(args).stdin(Stdio::null());
        cmd
    }

    /// Seconds to GET every URL in order over one connection (bodies read and dropped).
    fn time(&self, urls: &[&str]) -> Result<f64> {
        let mut cmd = self.command(&[]);
        for url in urls {
            cmd.args(["-o", "/dev/null", url]);
        }
        timed(cmd, "curl")
    }
}
