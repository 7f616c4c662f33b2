//! `theseus ui` on a 10,000-run ledger (`--only ui`): the ledger is made by the binary (`theseus
//! list`), then filled here with rusqlite (the schema of `crates/core/src/ledger/schema.rs`; mixed
//! states, 20 projects, 5 hosts); `theseus ui --port 0` serves it. Measured: `/api/runs` (first
//! page, 50 requests: median, p95 in the note), the last page (`offset=9950`), a filtered page,
//! and in headless Chromium the time from navigation to `performance.mark("runs-rendered")`.
//!
//! The browser figure goes through the same CDP driver as the cli's browser tests (that file,
//! included with `#[path]`: xtask cannot link the cli's tests, and one driver is one thing to keep
//! working). Not Chromium's `--dump-dom` with `--virtual-time-budget`: virtual time runs the
//! page's clock as fast as it likes, so a time read from it says nothing about a user's wait,
//! and `--dump-dom` reports no time at all. The mark's `startTime` is measured by the page's own
//! clock from the navigation's start, so it holds HTML, assets, the API call and the render.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use super::{Goal, Measure, local_cmd, timed};

// Only part of the driver is used here (no clicks or screenshots).
#[allow(dead_code)]
#[path = "../../../crates/cli/tests/it/browser/cdp.rs"]
mod cdp;

/// Runs in the ledger, and the page size the dashboard asks for.
const RUNS: usize = 10_000;
const PAGE: usize = 50;
/// How many times each API page is asked.
const REQUESTS: usize = 50;
/// The goal of the issue: the first page within 100 ms.
const FIRST_PAGE_MS: f64 = 100.0;

const HOSTS: [&str; 5] = ["local", "gpu-box", "lab-slurm", "k8s-east", "k8s-west"];

/// The figures of `theseus ui` on a [`RUNS`]-run ledger.
pub(super) fn measure(root: &Path, bin: &Path, python: &Path, scratch: &Path, runs: usize) -> Result<Vec<Measure>> {
    let home = scratch.join("ui-home");
    std::fs::create_dir_all(&home)?;
    timed(local_cmd(bin, &home, python, root, &["list"]), "theseus list (makes the ledger)")?;
    let db = home.join(".local/state/theseus/ledger.sqlite3");
    fill_ledger(&db, RUNS).with_context(|| format!("cannot fill {}", db.display()))?;
    eprintln!("bench: ui: {RUNS} runs in {}", db.display());

    let mut cmd = local_cmd(bin, &home, python, root, &["ui", "--port", "0"]);
    cmd.stdout(Stdio::piped()).stderr(std::fs::File::create(scratch.join("ui.stderr"))?);
    let mut server = UiServer { child: cmd.spawn().context("cannot run theseus ui")? };
    let url = server.url(&scratch.join("ui.stderr"))?;
    let result = measure_server(&url, runs);
    server.stop();
    result
}

fn measure_server(url: &UiUrl, runs: usize) -> Result<Vec<Measure>> {
    let pages = [
        ("GET /api/runs, first page of 50, 10,000 runs", "/api/runs?limit=50".to_owned()),
        ("GET /api/runs?offset=9950, 10,000 runs", "/api/runs?offset=9950&limit=50".to_owned()),
        ("GET /api/runs, project+state filter, 10,000 runs", "/api/runs?project=proj-3&state=completed".to_owned()),
    ];
    let mut measures = Vec::new();
    for (name, path) in pages {
        let mut m = Measure::new(name, "ms", Goal::Below(FIRST_PAGE_MS));
        let mut rows = 0;
        for _ in 0..REQUESTS {
            let started = Instant::now();
            let body = get(url, &path)?;
            m.values.push(started.elapsed().as_secs_f64() * 1000.0);
            let page: serde_json::Value = serde_json::from_str(&body).with_context(|| format!("{path}: {body}"))?;
            rows = page["runs"].as_array().map_or(0, Vec::len);
            ensure!(page["total"].as_u64().is_some_and(|t| t > 0), "{path} found no runs: {body:.300}");
        }
        m.note = Some(format!("p95 {:.1} ms over {REQUESTS} requests; {rows} rows a page", p95(&m.values)));
        measures.push(m);
    }
    eprintln!("bench: ui: API pages done");
    measures.push(rendered(url, runs)?);
    Ok(measures)
}

/// Navigation to `performance.mark("runs-rendered")` in headless Chromium, `runs` times.
fn rendered(url: &UiUrl, runs: usize) -> Result<Measure> {
    let name = "runs page: navigation to first table render (Chromium)";
    let goal = Goal::Below(FIRST_PAGE_MS);
    let binary = std::env::var_os("THESEUSTEST_CHROMIUM")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from(crate::chromium::BINARY), PathBuf::from);
    if !binary.exists() {
        return Ok(Measure::skipped(name, "ms", goal, format!("no Chromium at {}", binary.display())));
    }
    let chromium = cdp::Chromium::start(&binary)?;
    let page = chromium.page()?;
    let mark = "(performance.getEntriesByName('runs-rendered')[0] || {}).startTime";
    let mut m = Measure::new(name, "ms", goal);
    // Where the time goes, from the page's own timings: the HTML's arrival, the script's
    // start (DOMContentLoaded), the first /api/runs answer.
    let parts_js = "(() => { const n = performance.getEntriesByType('navigation')[0]; \
        const api = performance.getEntriesByType('resource').find(r => r.name.includes('/api/runs')); \
        const js = performance.getEntriesByType('resource').find(r => r.name.endsWith('/assets/app.js')); \
        return [n.responseEnd, n.domContentLoadedEventStart, api ? api.startTime : -1, api ? api.responseEnd : -1, \
                api ? api.responseStart - api.requestStart : -1, js ? js.responseEnd : -1]; })()";
    let mut parts: Vec<Vec<f64>> = vec![Vec::new(); 6];
    // One warm-up load (the first compiles the page's script), then the measured ones.
    for i in 0..=runs {
        page.navigate(&url.page)?;
        let at = page.wait_until("the runs-rendered mark", mark, Duration::from_secs(60))?;
        let rows = page.eval("document.querySelectorAll('table#runs tbody tr[data-run-id]').length")?;
        ensure!(rows.as_u64() == Some(PAGE as u64), "the runs page shows {rows} rows, not {PAGE}");
        if i > 0 {
            m.values.push(at.as_f64().context("the mark's startTime is not a number")?);
            let found: Vec<f64> = serde_json::from_value(page.eval(parts_js)?)?;
            for (all, v) in parts.iter_mut().zip(found) {
                all.push(v);
            }
        }
    }
    let med = |v: &[f64]| super::median(v);
    m.note = Some(format!(
        "{PAGE} rows; medians from the navigation's start: HTML in {:.1} ms, app.js in {:.1} ms, DOMContentLoaded {:.1} ms, \
         /api/runs asked at {:.1} ms and answered at {:.1} ms (the server's part, request to first byte: {:.1} ms)",
        med(&parts[0]),
        med(&parts[5]),
        med(&parts[1]),
        med(&parts[2]),
        med(&parts[3]),
        med(&parts[4])
    ));
    eprintln!("bench: ui: browser render done");
    Ok(m)
}

/// The 95th percentile (nearest rank).
fn p95(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() * 95).div_ceil(100)).saturating_sub(1).min(v.len() - 1)]
}

/// Writes `n` runs into the ledger `theseus list` made: newest last by `submitted_at`, 20
/// projects, 7 groups, 5 hosts, and every state (mostly ended ones, as a long-used ledger).
pub(crate) fn fill_ledger(db: &Path, n: usize) -> Result<()> {
    let mut conn = rusqlite::Connection::open(db)?;
    // `chips` is added in place by newer clients (schema.rs `ensure_chips`); add it the same way.
    if conn.prepare("SELECT chips FROM runs LIMIT 0").is_err() {
        conn.execute_batch("ALTER TABLE runs ADD COLUMN chips TEXT")?;
    }
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO runs (run_id, name, project, grp, host, handle, submitted_at, updated_at, state, exit_code, \
             message, kind, chips) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, 'job', ?11)",
        )?;
        for i in 0..n {
            let run_id = format!("20260101-{i:06}-{:06x}", i * 7919 % 0xff_ffff);
            let host = HOSTS[i % HOSTS.len()];
            let handle = serde_json::json!({"kind": "local", "host": host, "id": run_id, "data": {
                "run_dir": format!("/nonexistent/{run_id}"), "work_dir": "/nonexistent",
                "log_file": "/nonexistent.log", "processes": 1}});
            let minute = i;
            let at = format!("2026-01-{:02}T{:02}:{:02}:00Z", 1 + minute / 1440, minute / 60 % 24, minute % 60);
            let (state, exit, message): (&str, Option<i32>, Option<&str>) = match i % 100 {
                0 | 1 => ("running", None, None),
                2 => ("pending", None, Some("waiting in queue default: 8 of 8 h100 in use by 2 jobs")),
                3..=9 => ("failed", Some(1), Some("exit code 1")),
                10..=12 => ("cancelled", None, None),
                13 => ("preempted", None, Some("preempted by queue team-b")),
                _ => ("completed", Some(0), None),
            };
            let chips = if i % 3 == 0 { "2 x cpu" } else { "8 x h100" };
            insert.execute(rusqlite::params![
                run_id,
                format!("exp-{}", i % 500),
                format!("proj-{}", i % 20),
                format!("grp-{}", i % 7),
                host,
                handle.to_string(),
                at,
                state,
                exit,
                message,
                chips
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// `theseus ui`'s URL: the page (with `?token=`), its address and the token.
struct UiUrl {
    page: String,
    addr: String,
    token: String,
}

struct UiServer {
    child: Child,
}

impl UiServer {
    /// Reads the one line `theseus ui` prints: `http://HOST:PORT/?token=TOKEN`.
    fn url(&mut self, stderr: &Path) -> Result<UiUrl> {
        let mut line = String::new();
        BufReader::new(self.child.stdout.take().context("no stdout")?).read_line(&mut line)?;
        let page = line.trim().to_owned();
        let parsed = page
            .strip_prefix("http://")
            .and_then(|rest| rest.split_once("/?token="))
            .map(|(addr, token)| UiUrl { page: page.clone(), addr: addr.to_owned(), token: token.to_owned() });
        match parsed {
            Some(url) => Ok(url),
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "theseus ui printed {page:?}, not its URL; stderr:\n{}",
                    std::fs::read_to_string(stderr).unwrap_or_default()
                )
            }
        }
    }

    /// SIGTERM by PID (it closes its streams and exits), SIGKILL after 10 s.
    fn stop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET with the token header over a fresh connection; the body of a 200, else an error.
fn get(url: &UiUrl, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect(&url.addr).with_context(|| format!("cannot connect to {}", url.addr))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nX-Theseus-Token: {}\r\nConnection: close\r\n\r\n",
        url.addr, url.token
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").context("no HTTP head")?;
    ensure!(head.starts_with("HTTP/1.1 200"), "GET {path}: {}", head.lines().next().unwrap_or(""));
    let chunked = head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding: chunked"));
    Ok(if chunked { dechunk(body) } else { body.to_owned() })
}

/// The body of a chunked response.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}
