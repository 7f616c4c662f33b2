//! How soon a followed Volcano job's output and end reach the user, on the simulator, against
//! `kubectl` doing the same in the same run.
//!
//! The job (`latency.py`) prints `T0 <time>` as its first write and `END <time>` as its last,
//! each flushed, with the wall clock of this machine (the simulator's pods are local processes,
//! so one clock serves both sides). Each line's arrival on the follower's stdout is stamped with
//! the same clock, so:
//! - *line latency* = arrival of the `T0` line − the `T0` the pod wrote;
//! - *end latency* = the follower's exit − the `END` the pod wrote (the pod ends right after it).
//!
//! Figures (each median of at least [`MIN_RUNS`] runs):
//! - `submit --follow`: both latencies, and its wall time from start to exit; the floor is a
//!   `kubectl create` of an equivalent bare vcjob (same script, no bootstrap) followed by
//!   `kubectl logs -f` of its pod, retried every 50 ms until the container has started (what a
//!   user's script does), in the same run;
//! - `logs -f` of a job that prints after 2 s: both latencies, with `kubectl logs -f` of the same
//!   pod started at the same moment as the floor.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};

use super::floor::kubectl;
use super::{Goal, Measure};
use crate::e2e::{World, text};

/// The issue asks for the median of 10.
const MIN_RUNS: usize = 10;
/// A follower that takes longer than this is killed and the bench fails.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The latency goal of both the first line and the end.
const LATENCY_GOAL: f64 = 0.3;

/// The job: `T0` at once (after `argv[1]` seconds), `END` half a second later, then exit.
const LATENCY_PY: &str = "\
import sys, time
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
print('T0', repr(time.time()), flush=True)
time.sleep(0.5)
print('END', repr(time.time()), flush=True)
";

/// Now, in seconds since the epoch.
fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// What a follower printed and when it ended.
struct Followed {
    started: f64,
    /// Each stdout line with its arrival time.
    lines: Vec<(f64, String)>,
    exited: f64,
    success: bool,
    stderr: String,
}

impl Followed {
    /// (arrival, value) of the first line holding `marker` followed by a number.
    fn marked(&self, marker: &str) -> Option<(f64, f64)> {
        self.lines.iter().find_map(|(at, line)| {
            let rest = &line[line.find(&format!("{marker} "))? + marker.len() + 1..];
            let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
            Some((*at, value))
        })
    }

    /// (line latency, end latency, start to exit).
    fn latencies(&self, what: &str) -> Result<(f64, f64, f64)> {
        let (Some((t0_seen, t0)), Some((_, end))) = (self.marked("T0"), self.marked("END")) else {
            bail!(
                "{what} did not print the job's T0 and END lines:\n{}\n{}",
                self.lines.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>().join("\n"),
                self.stderr
            );
        };
        Ok((t0_seen - t0, self.exited - end, self.exited - self.started))
    }
}

/// Runs `cmd`, stamping each stdout line; killed by PID after [`TIMEOUT`].
fn follow(mut cmd: Command, scratch: &Path, what: &str) -> Result<Followed> {
    let stderr_path = scratch.join(format!("{}.stderr", what.replace(|c: char| !c.is_ascii_alphanumeric(), "-")));
    cmd.stdout(Stdio::piped()).stderr(std::fs::File::create(&stderr_path)?).stdin(Stdio::null());
    let started = now();
    let mut child = cmd.spawn().with_context(|| format!("cannot run {what}"))?;
    let pid = child.id();
    let (done, cancelled) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if cancelled.recv_timeout(TIMEOUT) == Err(mpsc::RecvTimeoutError::Timeout) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    });
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().context("no stdout")?).lines() {
        lines.push((now(), line?));
    }
    let status = child.wait()?;
    let exited = now();
    let _ = done.send(());
    let _ = watchdog.join();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    Ok(Followed { started, lines, exited, success: status.success(), stderr })
}

/// `kubectl logs -f POD`, retried every 50 ms (while the pod does not exist or its container has
/// not started) until it prints something, within [`TIMEOUT`]; `started` is kept from the first try.
fn kubectl_logs(world: &World, pod: &str, scratch: &Path, started: f64) -> Result<Followed> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let mut cmd = kubectl(world);
        cmd.args(["logs", "-f", pod]);
        let mut run = follow(cmd, scratch, "kubectl logs -f")?;
        if run.success && !run.lines.is_empty() {
            run.started = started;
            return Ok(run);
        }
        ensure!(Instant::now() < deadline, "kubectl logs -f {pod} never succeeded: {}", run.stderr);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A bare vcjob running `latency.py` from the code dir: one pod `<name>-worker-0`.
fn bare_job(world: &World, name: &str, python: &str) -> String {
    let script = world.code.join("latency.py");
    let command = serde_json::json!([python, script.display().to_string(), "0"]);
    format!(
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
         spec:\n  minAvailable: 1\n  schedulerName: volcano\n  queue: default\n  tasks:\n  - name: worker\n    replicas: 1\n\
         \x20   template:\n      spec:\n        restartPolicy: Never\n        containers:\n        - name: main\n\
         \x20         image: theseus-e2e:local\n          command: {command}\n\
         \x20         resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}\n",
        ns = world.namespace
    )
}

/// The figures of the module doc.
pub(super) fn measure(world: &World, python: &Path, scratch: &Path, runs: usize) -> Result<Vec<Measure>> {
    let dir = scratch.join("follow");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(world.code.join("latency.py"), LATENCY_PY)?;
    std::fs::write(world.code.join("latency.yaml"), "entrypoint: python latency.py 0\n")?;
    std::fs::write(world.code.join("latency-late.yaml"), "entrypoint: python latency.py 2\n")?;
    let python = python.display().to_string();
    let runs = runs.max(MIN_RUNS);
    let submit = |name: &str, yaml: &str, follow: bool| -> Vec<String> {
        let mut args: Vec<String> =
            format!("submit {name} {yaml} --code . --host e2e --chip cpu --cpu 100m --mem 128Mi")
                .split_whitespace()
                .map(str::to_owned)
                .collect();
        if follow {
            args.push("--follow".into());
        }
        args
    };

    let (mut line, mut end, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let (mut line_floor, mut end_floor, mut total_floor) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let args = submit(&format!("bench-follow-{i}"), "latency.yaml", true);
        let run = follow(world.theseus_cmd(&super::strs(&args)), &dir, "theseus submit --follow")?;
        ensure!(run.success, "theseus submit --follow failed:\n{}", run.stderr);
        let (l, e, t) = run.latencies("theseus submit --follow")?;
        line.push(l);
        end.push(e);
        total.push(t);

        let name = format!("bench-floor-{i}");
        let manifest = dir.join(format!("{name}.yaml"));
        std::fs::write(&manifest, bare_job(world, &name, &python))?;
        let started = now();
        let mut create = kubectl(world);
        create.args(["create", "-f"]).arg(&manifest);
        let out = create.output().context("cannot run kubectl create")?;
        ensure!(out.status.success(), "kubectl create failed: {}", text(&out.stderr));
        let floor = kubectl_logs(world, &format!("{name}-worker-0"), &dir, started)?;
        let (l, e, t) = floor.latencies("kubectl logs -f")?;
        line_floor.push(l);
        end_floor.push(e);
        total_floor.push(t);
        let mut delete = kubectl(world);
        delete.args(["delete", "vcjob", &name, "--wait=false"]);
        let _ = delete.output();
    }
    eprintln!("bench: submit --follow latency done");
    let kubectl = "kubectl create + kubectl logs -f, retried until the container starts";
    let mut measures = vec![
        Measure {
            values: line,
            ..Measure::new("submit --follow, sim: 1st job line after the pod wrote it", "s", Goal::Below(LATENCY_GOAL))
        }
        .with_floor(kubectl, line_floor),
        Measure {
            values: end,
            ..Measure::new("submit --follow, sim: exit after the pod's last write", "s", Goal::Below(LATENCY_GOAL))
        }
        .with_floor(kubectl, end_floor),
        Measure {
            values: total,
            ..Measure::new("submit --follow 1-pod job, sim: start to exit", "s", Goal::Below(5.0))
        }
        .with_floor(kubectl, total_floor),
    ];

    let (mut line, mut end) = (Vec::new(), Vec::new());
    let (mut line_floor, mut end_floor) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let name = format!("bench-logs-{i}");
        world.theseus_ok(&super::strs(&submit(&name, "latency-late.yaml", false)))?;
        let pod = job_pod(world, &name)?;
        // Both followers start now, while the job sleeps before its first write.
        let (theirs, ours) = std::thread::scope(|s| {
            let floor = s.spawn(|| kubectl_logs(world, &pod, &dir, now()));
            let ours = follow(world.theseus_cmd(&["logs", "-f", &name]), &dir, "theseus logs -f");
            (floor.join().expect("kubectl follower"), ours)
        });
        let (ours, theirs) = (ours?, theirs?);
        ensure!(ours.success, "theseus logs -f failed:\n{}", ours.stderr);
        let (l, e, _) = ours.latencies("theseus logs -f")?;
        line.push(l);
        end.push(e);
        let (l, e, _) = theirs.latencies("kubectl logs -f")?;
        line_floor.push(l);
        end_floor.push(e);
    }
    eprintln!("bench: logs -f latency done");
    let kubectl = "kubectl logs -f of the same pod, started at the same moment";
    measures.push(
        Measure {
            values: line,
            ..Measure::new("logs -f, sim: job line after the pod wrote it", "s", Goal::Below(LATENCY_GOAL))
        }
        .with_floor(kubectl, line_floor),
    );
    measures.push(
        Measure {
            values: end,
            ..Measure::new("logs -f, sim: exit after the pod's last write", "s", Goal::Below(LATENCY_GOAL))
        }
        .with_floor(kubectl, end_floor),
    );
    Ok(measures)
}

/// The name of rank 0's pod of the run `name` (its vcjob's pod of task `worker`).
fn job_pod(world: &World, name: &str) -> Result<String> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let mut get = kubectl(world);
        get.args(["get", "pods", "-l"])
            .arg(format!("theseus.dev/name={name},volcano.sh/task-spec=worker"))
            .args(["-o", "jsonpath={.items[*].metadata.name}"]);
        let out = get.output().context("cannot run kubectl get pods")?;
        let names = text(&out.stdout);
        if let Some(pod) = names.split_whitespace().find(|p| p.ends_with("-worker-0")) {
            return Ok(pod.to_owned());
        }
        ensure!(Instant::now() < deadline, "no pod of run {name} appeared: {}", text(&out.stderr));
        std::thread::sleep(Duration::from_millis(50));
    }
}
