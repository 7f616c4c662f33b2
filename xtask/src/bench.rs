//! `cargo xtask bench [--runs N] [--release] [--output text|json] [--strict] [--keep]`: wall
//! times of the real `theseus` binary, each measured `--runs` times (default 5) and reported as
//! min / median / max against a goal. Timing goals live here, never in timed tests.
//!
//! - `plan` of `examples/hello/experiment.yaml` with no config file;
//! - `submit --follow` of the same example on the built-in `local` host: wall time to the end,
//!   and time to the first line on stdout (the job's launcher prints it);
//! - `status` of that completed run;
//! - against the simulator (the `e2e --sim` world, [`crate::e2e::start_sim_world`]): `submit`
//!   of a 1-pod CPU job without `--follow` (helper start, ship, gang create), and the same
//!   submit with a code dir of 50 MiB of incompressible files, as MiB/s from its wall time;
//! - code shipping ([`store`]), on a generated git repo of 10k files (~90 MiB): a re-ship after a
//!   one-file edit (bytes sent, from `submit --output json`'s `ship` object, and wall time) on the
//!   local host, over the lab's sshd (plain host; skipped without `THESEUSTEST_SSH_*`) and to the
//!   simulator; the disk used by 20 local runs against one; the first ship of 500 MiB to the
//!   simulator (MiB/s and the `theseus` process's peak RSS); a local first ship against
//!   `git archive HEAD | tar -x` as a ratio;
//! - probes ([`probes`]): `plan` over 50 hosts whose port refuses and over 5 that accept TCP and
//!   never speak SSH;
//! - hosts ([`follow_end`]): how soon `submit --follow` exits after its job's last write on the
//!   local host, a plain host over the lab's sshd and the lab's Slurm, each beside its by-hand
//!   floor (`sh`, `ssh HOST sh -c`, `ssh LOGIN srun`);
//! - the dashboard ([`ui`]): `theseus ui` on a 10,000-run ledger: `/api/runs` pages (first,
//!   last, filtered) and, in headless Chromium, navigation to the first render of the run table.
//!
//! A figure that cannot be measured here (no lab, a field the binary does not report) is printed
//! as skipped with the reason, never made up; it does not count as a miss. `--only GROUP,...`
//! runs some groups: `local`, `sim`, `store`, `probes`,
//! `dist`, `scale`, `hosts`, `ui`.
//!
//! The verdict compares the median with the goal; a miss prints `SLOW` and fails the command
//! only with `--strict`. Binaries are the debug build (the one e2e uses) unless `--release`.
//! Every process it starts is waited for (the simulator stopped by PID with SIGTERM, which
//! stops its pods), and the scratch dir under the target dir is removed unless `--keep`.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;

use crate::e2e::{World, build_binaries, scratch_dir, start_sim_world, text};

mod floor;
mod follow;
mod follow_end;
mod probes;
mod repo;
mod scale;
mod store;
mod ui;

/// Size of each generated file and how many the shipping benchmark submits (50 MiB).
const SHIP_FILE_BYTES: usize = 1 << 20;
const SHIP_FILES: usize = 50;
/// Shipping goals in MiB/s, from the wall time of the whole submit. The debug goal sits just
/// under what the debug build measured on a 2-core VM (9.2-9.8 MiB/s), so it catches
/// regressions; the release goal is the target, not yet measured.
const SHIP_GOAL_DEBUG: f64 = 8.0;
const SHIP_GOAL_RELEASE: f64 = 20.0;
/// A `submit --follow` that takes longer than this is killed and the bench fails.
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(120);

const USAGE: &str = "usage: cargo xtask bench [--runs N] [--release] [--output text|json] [--strict] [--keep] [--only local,sim,store,probes,dist,scale,hosts,ui]";

/// The groups of figures `--only` can pick.
const GROUPS: &[&str] = &["local", "sim", "store", "probes", "dist", "scale", "hosts", "ui"];

struct Options {
    runs: usize,
    release: bool,
    json: bool,
    strict: bool,
    keep: bool,
    only: Vec<String>,
}

impl Options {
    fn wants(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == group)
    }
}

/// What a measurement must stay below (times), at most (sizes, ratios) or above (rates).
#[derive(Clone, Copy)]
enum Goal {
    Below(f64),
    AtMost(f64),
    Above(f64),
}

struct Measure {
    name: &'static str,
    unit: &'static str,
    values: Vec<f64>,
    goal: Goal,
    /// Why the figure was not measured (then `values` is empty).
    skipped: Option<String>,
    /// What the figure was computed from (e.g. bytes sent of bytes in the repo).
    note: Option<String>,
    /// The same quantity for what a user would do by hand (or the raw API), measured in the
    /// same run, printed beside it.
    floor: Option<Floor>,
}

/// The floor of a figure: what it is (e.g. `kubectl logs -f`) and its samples.
struct Floor {
    what: String,
    values: Vec<f64>,
}

/// The median of `values` (which must not be empty).
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

impl Measure {
    fn new(name: &'static str, unit: &'static str, goal: Goal) -> Measure {
        Measure { name, unit, values: Vec::new(), goal, skipped: None, note: None, floor: None }
    }

    /// Sets the floor measured beside it.
    fn with_floor(mut self, what: impl Into<String>, values: Vec<f64>) -> Measure {
        self.floor = Some(Floor { what: what.into(), values });
        self
    }

    /// The floor's text: its median, and this figure's median against it.
    fn floor_text(&self) -> Option<String> {
        let floor = self.floor.as_ref()?;
        if floor.values.is_empty() {
            return Some(format!("floor ({}): not measured", floor.what));
        }
        let f = median(&floor.values);
        let ratio = if self.values.is_empty() || f == 0.0 {
            String::new()
        } else {
            format!("; this is {:.2}x the floor", median(&self.values) / f)
        };
        Some(format!("floor ({}): median {f:.3} {} of {} runs{ratio}", floor.what, self.unit, floor.values.len()))
    }

    /// A figure that could not be measured, with the reason.
    fn skipped(name: &'static str, unit: &'static str, goal: Goal, why: impl Into<String>) -> Measure {
        Measure { skipped: Some(why.into()), ..Measure::new(name, unit, goal) }
    }

    /// Min, median, max.
    fn stats(&self) -> (f64, f64, f64) {
        let min = self.values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, median(&self.values), max)
    }

    /// Whether the median meets the goal; a skipped figure is no miss.
    fn ok(&self) -> bool {
        if self.values.is_empty() {
            return true;
        }
        let (_, median, _) = self.stats();
        match self.goal {
            Goal::Below(g) => median < g,
            Goal::AtMost(g) => median <= g,
            Goal::Above(g) => median > g,
        }
    }

    fn goal_parts(&self) -> (&'static str, f64) {
        match self.goal {
            Goal::Below(g) => ("<", g),
            Goal::AtMost(g) => ("<=", g),
            Goal::Above(g) => (">", g),
        }
    }

    fn goal_text(&self) -> String {
        let (op, g) = self.goal_parts();
        // At most 3 decimals: a goal of 1/0.75 reads 1.333.
        let g = format!("{g:.3}");
        let g = g.trim_end_matches('0').trim_end_matches('.');
        format!("{op} {g} {}", self.unit)
    }

    fn to_json(&self) -> serde_json::Value {
        let (op, goal) = self.goal_parts();
        let mut doc = json!({"name": self.name, "unit": self.unit, "values": self.values,
                             "goal": {"op": op, "value": goal}, "ok": self.ok()});
        if self.values.is_empty() {
            doc["skipped"] = json!(self.skipped.as_deref().unwrap_or("not measured"));
        } else {
            let (min, median, max) = self.stats();
            doc["min"] = json!(min);
            doc["median"] = json!(median);
            doc["max"] = json!(max);
        }
        if let Some(note) = &self.note {
            doc["note"] = json!(note);
        }
        if let Some(floor) = &self.floor {
            doc["floor"] = json!({"what": floor.what, "values": floor.values,
                                  "median": (!floor.values.is_empty()).then(|| median(&floor.values))});
        }
        doc
    }
}

/// `cargo xtask bench ...`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let opts = parse(args)?;
    let python = crate::python::ensure_venv(root)?;
    let bin = build_binaries(root, true, opts.release)?;
    let profile = if opts.release { "release" } else { "debug" };
    let scratch = scratch_dir(root, "bench")?;
    eprintln!(
        "bench: {profile} binaries in {}, {} runs each, scratch dir {}",
        bin.display(),
        opts.runs,
        scratch.display()
    );
    let result = measure_all(root, &bin, &python, &scratch, &opts);
    if result.is_ok() && !opts.keep {
        let _ = std::fs::remove_dir_all(&scratch);
    } else {
        eprintln!("bench: kept {}", scratch.display());
    }
    let measures = result?;
    let slow: Vec<&str> = measures.iter().filter(|m| !m.ok()).map(|m| m.name).collect();
    if opts.json {
        let results: Vec<_> = measures.iter().map(Measure::to_json).collect();
        let doc = json!({"profile": profile, "runs": opts.runs, "results": results});
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_table(profile, opts.runs, &measures);
    }
    if opts.strict && !slow.is_empty() {
        bail!("bench: goals missed (--strict): {}", slow.join(", "));
    }
    Ok(())
}

fn parse(args: &[String]) -> Result<Options> {
    let mut opts = Options { runs: 5, release: false, json: false, strict: false, keep: false, only: Vec::new() };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_owned())),
            None => (arg.as_str(), None),
        };
        let mut value = || {
            inline.clone().or_else(|| args.next().cloned()).with_context(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag {
            "--runs" => {
                let v = value()?;
                opts.runs = v.parse().with_context(|| format!("bad --runs `{v}`"))?;
                ensure!(opts.runs > 0, "--runs must be at least 1");
            }
            "--output" => match value()?.as_str() {
                "json" => opts.json = true,
                "text" => opts.json = false,
                other => bail!("bad --output `{other}`\n{USAGE}"),
            },
            "--release" => opts.release = true,
            "--strict" => opts.strict = true,
            "--keep" => opts.keep = true,
            "--only" => {
                for group in value()?.split(',').map(str::trim).filter(|g| !g.is_empty()) {
                    ensure!(
                        GROUPS.contains(&group),
                        "bad --only group `{group}` (groups: {})\n{USAGE}",
                        GROUPS.join(", ")
                    );
                    opts.only.push(group.to_owned());
                }
            }
            _ => bail!("unknown argument `{arg}`\n{USAGE}"),
        }
    }
    Ok(opts)
}

fn print_table(profile: &str, runs: usize, measures: &[Measure]) {
    println!("theseus benchmarks ({profile} build, {runs} runs each; verdict on the median)");
    println!("{:<60} {:>8} {:>8} {:>8}  {:<13} VERDICT", "BENCHMARK", "MIN", "MEDIAN", "MAX", "GOAL");
    for m in measures {
        let name = format!("{} ({})", m.name, m.unit);
        if m.values.is_empty() {
            let why = m.skipped.as_deref().unwrap_or("not measured");
            println!("{name:<60} {:>8} {:>8} {:>8}  {:<13} skipped: {why}", "-", "-", "-", m.goal_text());
            continue;
        }
        let (min, median, max) = m.stats();
        let f = |v: f64| {
            if m.unit == "s" || m.unit == "%" || m.unit == "x" { format!("{v:.3}") } else { format!("{v:.1}") }
        };
        let verdict = if m.ok() { "ok" } else { "SLOW" };
        println!("{name:<60} {:>8} {:>8} {:>8}  {:<13} {verdict}", f(min), f(median), f(max), m.goal_text());
        if let Some(note) = &m.note {
            println!("    {note}");
        }
        if let Some(floor) = m.floor_text() {
            println!("    {floor}");
        }
    }
}

fn measure_all(root: &Path, bin: &Path, python: &Path, scratch: &Path, opts: &Options) -> Result<Vec<Measure>> {
    let (runs, release) = (opts.runs, opts.release);
    let mut measures = Vec::new();
    if opts.wants("local") {
        measures.extend(local(root, bin, python, scratch, runs)?);
    }
    if opts.wants("sim") {
        measures.extend(sim(root, bin, python, scratch, runs, release)?);
    }
    if opts.wants("probes") {
        measures.extend(probes::measure(root, bin, python, scratch, runs)?);
    }
    if opts.wants("store") {
        measures.extend(store::measure(root, bin, python, scratch, runs, release)?);
    }
    if opts.wants("dist") {
        measures.extend(dist(root, runs)?);
    }
    if opts.wants("scale") {
        measures.extend(scale::measure(root, bin, scratch, runs)?);
    }
    if opts.wants("hosts") {
        measures.extend(follow_end::measure(bin, python, runs)?);
    }
    if opts.wants("ui") {
        measures.extend(ui::measure(root, bin, python, scratch, runs)?);
    }
    Ok(measures)
}

/// A `theseus` command in a temp `HOME` without a config file, run from the repository root.
fn local_cmd(bin: &Path, home: &Path, python: &Path, root: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin.join("theseus"));
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LANG", "C.UTF-8")
        .env("NO_COLOR", "1")
        .env("THESEUS_PYTHON", python)
        .current_dir(root)
        .args(args)
        .stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to the end, fails unless it exits 0, returns its wall time in seconds.
fn timed(mut cmd: Command, what: &str) -> Result<f64> {
    let started = Instant::now();
    let out = cmd.output().with_context(|| format!("cannot run {what}"))?;
    let secs = started.elapsed().as_secs_f64();
    ensure!(out.status.success(), "{what} failed ({}):\n{}{}", out.status, text(&out.stdout), text(&out.stderr));
    Ok(secs)
}

/// Runs `theseus` (which must exit 0) under `/usr/bin/time` when there is one: its wall time and
/// peak RSS in MiB. `scratch` holds the RSS file.
pub(crate) fn timed_rss(theseus: Command, scratch: &Path, what: &str) -> Result<(f64, Option<f64>)> {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        return Ok((timed(theseus, what)?, None));
    }
    let rss_file = scratch.join("rss.kib");
    let mut cmd = Command::new(time);
    cmd.env_clear().arg("-f").arg("%M").arg("-o").arg(&rss_file).arg(theseus.get_program()).args(theseus.get_args());
    for (key, value) in theseus.get_envs() {
        if let Some(value) = value {
            cmd.env(key, value);
        }
    }
    if let Some(dir) = theseus.get_current_dir() {
        cmd.current_dir(dir);
    }
    let secs = timed(cmd, what)?;
    let kib = std::fs::read_to_string(&rss_file)?;
    let kib: f64 = kib
        .trim()
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .parse()
        .with_context(|| format!("/usr/bin/time wrote {kib:?}"))?;
    Ok((secs, Some(kib / 1024.0)))
}

/// `plan`, `submit --follow` and `status` on the built-in local host.
fn local(root: &Path, bin: &Path, python: &Path, scratch: &Path, runs: usize) -> Result<Vec<Measure>> {
    let home = scratch.join("local-home");
    std::fs::create_dir_all(&home)?;
    let experiment = "examples/hello/experiment.yaml";
    let cmd = |args: &[&str]| local_cmd(bin, &home, python, root, args);

    let mut plan = Measure::new("plan, default config", "s", Goal::Below(0.3));
    for _ in 0..runs {
        plan.values.push(timed(cmd(&["plan", "bench-plan", experiment]), "theseus plan")?);
    }
    eprintln!("bench: plan done");

    let mut follow = Measure::new("submit --follow hello, local: to the end", "s", Goal::Below(3.0));
    let mut first = Measure::new("submit --follow hello, local: 1st stdout line", "s", Goal::Below(1.5));
    for i in 0..runs {
        let (total, first_line) =
            follow_run(cmd(&["submit", &format!("bench-local-{i}"), experiment, "--follow"]), scratch)?;
        follow.values.push(total);
        first.values.push(first_line);
    }
    eprintln!("bench: local submit --follow done");

    let mut status = Measure::new("status of a completed run, local", "s", Goal::Below(0.5));
    for _ in 0..runs {
        status.values.push(timed(cmd(&["status", "bench-local-0"]), "theseus status")?);
    }
    eprintln!("bench: status done");
    let ledger = big_ledger(bin, python, root, scratch, runs)?;
    let mut measures = vec![plan, follow, first, status];
    measures.extend(ledger);
    Ok(measures)
}

/// The wheel's size and the installed binary's `--help` time, from what `cargo xtask dist
/// --check` left in `target/dist/` (skipped, saying so, when it has not run).
fn dist(root: &Path, runs: usize) -> Result<Vec<Measure>> {
    let (size_name, help_name) = ("wheel size (manylinux2014 x86_64)", "theseus --help, installed from the wheel");
    let out = crate::target_dir(root).join("dist");
    let wheel = std::fs::read_dir(&out)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        // The x86_64 manylinux wheel, not the aarch64 or musl one `dist --target` may have left.
        .find(|p| crate::dist::file_name(p).ends_with(&format!("{}.whl", crate::dist::TARGETS[0].tag)));
    let installed = crate::dist::check_venv(root).join("bin/theseus");
    let why = "run `cargo xtask dist --check` first";
    let Some(wheel) = wheel else {
        return Ok(vec![
            Measure::skipped(size_name, "MiB", Goal::AtMost(20.0), why),
            Measure::skipped(help_name, "s", Goal::Below(0.05), why),
        ]);
    };
    let mut size = Measure::new(size_name, "MiB", Goal::AtMost(20.0));
    size.values.push(std::fs::metadata(&wheel)?.len() as f64 / (1024.0 * 1024.0));
    if !installed.exists() {
        return Ok(vec![size, Measure::skipped(help_name, "s", Goal::Below(0.05), why)]);
    }
    let mut help = Measure::new(help_name, "s", Goal::Below(0.05));
    for _ in 0..runs.max(3) {
        let mut cmd = Command::new(&installed);
        cmd.arg("--help").stdout(Stdio::null());
        help.values.push(timed(cmd, "theseus --help")?);
    }
    Ok(vec![size, help])
}

/// Rows of the big ledger `list` is timed on.
const LEDGER_ROWS: usize = 10_000;

/// `list` (newest 20, and all rows as JSON) on a ledger of [`LEDGER_ROWS`] runs, about 200 of
/// them last seen running on the local host (4 among the newest 20, whose state `list` asks
/// for: their run dirs are gone).
fn big_ledger(bin: &Path, python: &Path, root: &Path, scratch: &Path, runs: usize) -> Result<Vec<Measure>> {
    let home = scratch.join("ledger-home");
    std::fs::create_dir_all(&home)?;
    let cmd = |args: &[&str]| local_cmd(bin, &home, python, root, args);
    timed(cmd(&["list"]), "theseus list (makes the ledger)")?;
    let db = home.join(".local/state/theseus/ledger.sqlite3");
    // Python's sqlite3 fills it in one transaction (the ledger's own schema, made above).
    let fill = format!(
        "import sqlite3, json, sys\n\
         c = sqlite3.connect(sys.argv[1])\n\
         rows = []\n\
         for i in range({LEDGER_ROWS}):\n\
         \x20   run = '20260101-%06d-%06x' % (i, i)\n\
         \x20   h = json.dumps({{'kind': 'local', 'host': 'local', 'id': run, 'data': {{'run_dir': '/nonexistent/' + run, 'work_dir': '/nonexistent', 'log_file': '/nonexistent.log', 'processes': 1}}}})\n\
         \x20   state = 'running' if i % 50 == 0 or i % 5 == 4 and i >= 9980 else 'completed'\n\
         \x20   rows.append((run, 'job-%d' % (i % 300), 'general', 'default', 'local', h, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', state, 0, None, 'job'))\n\
         c.executemany('INSERT INTO runs (run_id, name, project, grp, host, handle, submitted_at, updated_at, state, exit_code, message, kind) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)', rows)\n\
         c.commit()\n"
    );
    let out = Command::new("python3").args(["-c", &fill]).arg(&db).output().context("cannot run python3")?;
    ensure!(out.status.success(), "filling the ledger failed: {}", text(&out.stderr));
    let mut newest = Measure::new("list (newest 20) of a 10,000-run ledger", "s", Goal::Below(0.5));
    let mut all = Measure::new("list --limit 10000 --no-refresh --output json, 10,000 runs", "s", Goal::Below(1.0));
    for _ in 0..runs {
        newest.values.push(timed(cmd(&["list"]), "theseus list")?);
        all.values.push(timed(
            cmd(&["list", "--limit", "10000", "--no-refresh", "--output", "json"]),
            "theseus list --limit 10000",
        )?);
    }
    eprintln!("bench: list of a 10,000-run ledger done");
    Ok(vec![newest, all])
}

/// Runs a `submit --follow`, returning (wall time to the end, time to the first stdout line).
/// Killed by PID after [`FOLLOW_TIMEOUT`].
fn follow_run(mut cmd: Command, scratch: &Path) -> Result<(f64, f64)> {
    let stderr_path = scratch.join("follow.stderr");
    cmd.stdout(Stdio::piped()).stderr(std::fs::File::create(&stderr_path)?);
    let started = Instant::now();
    let mut child: Child = cmd.spawn().context("cannot run theseus submit --follow")?;
    let pid = child.id();
    let (done, cancelled) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if cancelled.recv_timeout(FOLLOW_TIMEOUT) == Err(mpsc::RecvTimeoutError::Timeout) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    });
    let mut first_line = None;
    let mut stdout = String::new();
    for line in BufReader::new(child.stdout.take().context("no stdout")?).lines() {
        first_line.get_or_insert_with(|| started.elapsed().as_secs_f64());
        stdout.push_str(&line?);
        stdout.push('\n');
    }
    let status = child.wait()?;
    let total = started.elapsed().as_secs_f64();
    let _ = done.send(());
    let _ = watchdog.join();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    ensure!(status.success(), "theseus submit --follow failed ({status}):\n{stdout}{stderr}");
    let first_line =
        first_line.with_context(|| format!("theseus submit --follow printed nothing on stdout:\n{stderr}"))?;
    Ok((total, first_line))
}

/// `submit` without `--follow` against the simulator: a small code dir, then 50 MiB.
fn sim(root: &Path, bin: &Path, python: &Path, scratch: &Path, runs: usize, release: bool) -> Result<Vec<Measure>> {
    let (mut simulator, world) = start_sim_world(root, bin, &scratch.join("sim"), crate::e2e::Rbac::Off)?;
    eprintln!("bench: simulator at {}", simulator.url);
    let result = sim_measures(&world, python, scratch, runs, release);
    simulator.stop();
    result
}

fn sim_measures(world: &World, python: &Path, scratch: &Path, runs: usize, release: bool) -> Result<Vec<Measure>> {
    let submit_args = |name: &str, code: &str| -> Vec<String> {
        format!("submit {name} hello.yaml --code {code} --host e2e --chip cpu --cpu 100m --mem 128Mi")
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let mut small =
        Measure::new("submit 1-pod CPU job, sim (no --follow; store hits after run 1)", "s", Goal::Below(5.0));
    for i in 0..runs {
        let args = submit_args(&format!("bench-sim-{i}"), ".");
        small.values.push(timed(world.theseus_cmd(&strs(&args)), "theseus submit (sim)")?);
    }
    eprintln!("bench: sim submit done");

    let big = scratch.join("big-code");
    let bytes = write_big_code(&world.code, &big)?;
    let mib = bytes as f64 / f64::from(1 << 20);
    let goal = if release { SHIP_GOAL_RELEASE } else { SHIP_GOAL_DEBUG };
    let mut ship =
        Measure::new("submit 50 MiB incompressible code, sim (store hits after run 1)", "MiB/s", Goal::Above(goal));
    for i in 0..runs {
        let args = submit_args(&format!("bench-ship-{i}"), &big.display().to_string());
        let secs = timed(world.theseus_cmd(&strs(&args)), "theseus submit of 50 MiB (sim)")?;
        ship.values.push(mib / secs);
    }
    eprintln!("bench: sim shipping done");
    let mut measures = vec![small, ship];
    measures.extend(follow::measure(world, python, scratch, runs)?);
    Ok(measures)
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The job files of `code` plus [`SHIP_FILES`] files of pseudo-random (incompressible) bytes;
/// returns the total size.
fn write_big_code(code: &Path, big: &Path) -> Result<u64> {
    write_random_code(code, big, SHIP_FILES)
}

/// The job files of `code` plus `files` files of 1 MiB of pseudo-random (incompressible) bytes;
/// returns the total size.
fn write_random_code(code: &Path, big: &Path, files: usize) -> Result<u64> {
    std::fs::create_dir_all(big)?;
    for name in ["hello.py", "hello.yaml"] {
        std::fs::copy(code.join(name), big.join(name)).with_context(|| format!("cannot copy {name}"))?;
    }
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut buf = vec![0u8; SHIP_FILE_BYTES];
    for i in 0..files {
        for chunk in buf.chunks_mut(8) {
            // xorshift64: fast, and gzip/zstd find nothing to squeeze.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        let path: PathBuf = big.join(format!("data/blob-{i:03}.bin"));
        std::fs::create_dir_all(path.parent().expect("has a parent"))?;
        std::fs::write(&path, &buf).with_context(|| format!("cannot write {}", path.display()))?;
    }
    walk_size(big)
}

fn walk_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() { walk_size(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}
