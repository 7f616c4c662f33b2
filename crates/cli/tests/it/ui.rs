//! `theseus ui` over real HTTP: the binary started with `--port 0` (its first stdout line is the
//! URL with the token), real local runs and a Volcano run on the simulator, and a tiny blocking
//! HTTP/1.1 client ([`http`], [`Events`] for server-sent events). The browser tests
//! (`browser::`) drive the pages; these check the API: the run list with its counts, facets,
//! paging and filters, a run's page, a log stream that delivers what the job prints after it
//! opened, cancel (checked through `theseus status`), the token, capacity, and that no secret
//! reaches any answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{TestContext, text};

/// How long a test waits for what should come soon.
const PATIENCE: Duration = Duration::from_secs(60);

/// A running `theseus ui`: where it listens and its token; killed (by its PID) when dropped.
pub(crate) struct Ui {
    child: Child,
    /// Held open: the server's stdout stays a pipe someone reads.
    _stdout: BufReader<std::process::ChildStdout>,
    stderr: Arc<Mutex<String>>,
    /// The URL it printed.
    pub(crate) url: String,
    /// Its address.
    pub(crate) addr: SocketAddr,
    /// Its token.
    pub(crate) token: String,
}

impl Ui {
    /// Starts `theseus ui --port 0 --refresh 1 ARGS` in `ctx` and reads its URL line.
    pub(crate) fn start(ctx: &TestContext, args: &[&str]) -> Ui {
        Ui::start_with_env(ctx, args, &[])
    }

    /// As [`Ui::start`], with the environment variables `env` set too.
    pub(crate) fn start_with_env(ctx: &TestContext, args: &[&str], env: &[(&str, &str)]) -> Ui {
        let mut child = ctx
            .cmd()
            .envs(env.iter().copied())
            .args(["ui", "--port", "0", "--refresh", "1"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let collected = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                collected.lock().unwrap_or_else(|e| e.into_inner()).push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        // `--output json`: the same URL inside one JSON line.
        let url = match serde_json::from_str::<Value>(&line) {
            Ok(v) => v["url"].as_str().unwrap_or_default().to_owned(),
            Err(_) => line.trim().to_owned(),
        };
        let Some((host, token)) = url.strip_prefix("http://").and_then(|u| u.split_once("/?token=")) else {
            // Not left running behind a failed test.
            let _ = child.kill();
            let _ = child.wait();
            let said = stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
            panic!("no URL line with a token: {line:?}; stderr:\n{said}");
        };
        Ui { child, _stdout: stdout, stderr, addr: host.parse().unwrap(), token: token.to_owned(), url }
    }

    /// What it wrote on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `GET path` with the token in the header: the status and the body.
    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        let reply = http(self.addr, "GET", path, &[("X-Theseus-Token", &self.token)]);
        (reply.status, reply.body)
    }

    /// `GET path` (with the token) answered 200 with JSON.
    pub(crate) fn json(&self, path: &str) -> Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// Stops it with `signal` and returns its exit code.
    pub(crate) fn stop(mut self, signal: &str) -> Option<i32> {
        let pid = self.child.id().to_string();
        assert!(std::process::Command::new("kill").args([signal, &pid]).status().unwrap().success());
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "theseus ui did not stop on {signal}:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An HTTP answer.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: String,
}

/// Sends one request (`Connection: close`) and reads the whole answer.
pub(crate) fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let (status, head, mut body) = open(addr, method, path, headers);
    let mut all = Vec::new();
    body.read_to_end(&mut all).unwrap();
    Reply { status, head, body: String::from_utf8_lossy(&all).into_owned() }
}

/// Sends a request and reads the status line and headers; the body is read from the reader
/// returned (de-chunked when the answer is chunked).
fn open(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String, Box<dyn Read + Send>) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        head.push_str(&line);
    }
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head:?}"));
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    let body: Box<dyn Read + Send> =
        if chunked { Box::new(Dechunk { inner: reader, left: 0, done: false }) } else { Box::new(reader) };
    (status, head, body)
}

/// A chunked body, de-chunked.
struct Dechunk<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Dechunk<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.left == 0 {
            let mut size = String::new();
            self.inner.read_line(&mut size)?;
            if size.trim().is_empty() {
                // The CRLF that ends the previous chunk.
                size.clear();
                self.inner.read_line(&mut size)?;
            }
            let size = size.trim().split(';').next().unwrap_or_default();
            self.left = usize::from_str_radix(size, 16).unwrap_or(0);
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n;
        Ok(n)
    }
}

/// A server-sent event stream: `(event, data)` pairs as they come.
pub(crate) struct Events {
    reader: BufReader<Box<dyn Read + Send>>,
    /// Every event read so far, as text.
    pub(crate) seen: String,
}

impl Events {
    /// Opens `GET path` with the token; it must answer 200.
    pub(crate) fn open(ui: &Ui, path: &str) -> Events {
        let (status, head, body) = open(ui.addr, "GET", path, &[("X-Theseus-Token", &ui.token)]);
        assert_eq!(status, 200, "GET {path}: {head}");
        assert!(head.to_ascii_lowercase().contains("text/event-stream"), "{head}");
        Events { reader: BufReader::new(body), seen: String::new() }
    }

    /// The next event (comments skipped); `None` when the stream ended.
    pub(crate) fn next(&mut self) -> Option<(String, Value)> {
        let (mut event, mut data) = (String::new(), String::new());
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => panic!("the stream broke: {e}; so far:\n{}", self.seen),
            }
            self.seen.push_str(&line);
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if !event.is_empty() || !data.is_empty() {
                    let value = serde_json::from_str(&data).unwrap_or(Value::String(data));
                    return Some((event, value));
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("event:") {
                event = rest.trim().to_owned();
            } else if let Some(rest) = line.strip_prefix("data:") {
                data.push_str(rest.trim_start());
            }
        }
    }

    /// Reads events until `wanted` says yes to one, which it returns.
    pub(crate) fn until(&mut self, mut wanted: impl FnMut(&str, &Value) -> bool) -> (String, Value) {
        while let Some((event, data)) = self.next() {
            if wanted(&event, &data) {
                return (event, data);
            }
        }
        panic!("the stream ended first:\n{}", self.seen);
    }
}

/// Waits until `ready` returns `Some`, asking every 200 ms.
pub(crate) fn eventually<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = ready() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The row of run `name` in a page.
pub(crate) fn row<'a>(page: &'a Value, name: &str) -> Option<&'a Value> {
    page["runs"].as_array().unwrap().iter().find(|r| r["identity"]["name"] == name)
}

/// A code dir with `talker.yaml`: a CPU job that says `ready`, then prints what the test writes
/// into `say` (each write once), until cancelled.
struct Talker {
    code: tempfile::TempDir,
}

impl Talker {
    fn new() -> Talker {
        let code = tempfile::tempdir().unwrap();
        let say = code.path().join("say");
        std::fs::write(
            code.path().join("talker.yaml"),
            format!(
                "entrypoint: sh -c 'echo ready; while true; do if [ -f {say} ]; then cat {say}; rm -f {say}; fi; sleep 0.1; done'\n\
                 request: {{chip: cpu}}\n",
                say = say.display()
            ),
        )
        .unwrap();
        Talker { code }
    }

    fn say(&self, line: &str) {
        let tmp = self.code.path().join("say.tmp");
        std::fs::write(&tmp, format!("{line}\n")).unwrap();
        std::fs::rename(tmp, self.code.path().join("say")).unwrap();
    }
}

/// Cancels the named runs when dropped: a test that fails leaves no job running.
pub(crate) struct CancelOnDrop<'a>(pub(crate) &'a TestContext, pub(crate) &'a [&'a str]);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        for name in self.1 {
            let _ = self.0.run(&["cancel", name]);
        }
    }
}

/// A `--secret-env` value of the local run.
const LOCAL_SECRET: &str = "local-s3cr3t-4b1d";

#[test]
fn the_api_lists_local_runs_streams_a_live_log_and_cancels_through_real_http() {
    let ctx = TestContext::new();
    let done = ctx.run(&["submit", "hello", "examples/hello/experiment.yaml", "-p", "demo", "--follow"]);
    assert!(done.status.success(), "{}", text(&done.stderr));
    let talker = Talker::new();
    let exp = talker.code.path().join("talker.yaml");
    let code = talker.code.path().to_str().unwrap();
    let live = ctx
        .cmd()
        .env("TALKER_SECRET", LOCAL_SECRET)
        .args([
            "submit",
            "talker",
            exp.to_str().unwrap(),
            "--code",
            code,
            "-g",
            "chat",
            "--secret-env",
            "TALKER_SECRET",
        ])
        .output()
        .unwrap();
    assert!(live.status.success(), "{}", text(&live.stderr));
    let _cancel = CancelOnDrop(&ctx, &["talker"]);
    let ui = Ui::start(&ctx, &[]);
    let mut answers = Vec::new();
    // The refresher (every second here) asks the local host: the run starts.
    eventually("the run running in the list", || {
        row(&ui.json("/api/runs"), "talker").filter(|r| r["state"] == "running").map(drop)
    });

    // Nothing without the token, not even the health check; a wrong token is no token.
    for path in ["/api/runs", "/api/health", "/", "/api/capacity"] {
        assert_eq!(http(ui.addr, "GET", path, &[]).status, 401, "{path}");
    }
    assert_eq!(http(ui.addr, "GET", "/api/runs", &[("X-Theseus-Token", "0000")]).status, 401);
    let by_query = http(ui.addr, "GET", &format!("/api/runs?token={}", ui.token), &[]);
    assert_eq!(by_query.status, 200, "{}", by_query.body);
    let head = by_query.head.to_ascii_lowercase();
    let cookie_name = format!("theseus_ui_token_{}", ui.addr.port());
    assert!(
        head.contains(&format!("set-cookie: {cookie_name}=")) && head.contains("cache-control: no-store"),
        "{head}"
    );

    // The list: both runs with their states, chips, counts, facets; paging and filters.
    let page = ui.json("/api/runs");
    assert_eq!(page["total"], 2, "{page}");
    let hello = row(&page, "hello").expect("the completed run is listed");
    assert_eq!(hello["state"], "completed", "{page}");
    assert_eq!(hello["exit_code"], 0, "{page}");
    assert!(hello["chips"].as_str().is_some_and(|c| c.contains("cpu")), "chips are recorded at submit: {page}");
    let talker_row = row(&page, "talker").expect("the live run is listed");
    let run_id = talker_row["identity"]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(talker_row["state"], "running", "{page}");
    assert_eq!(page["runs"][0]["identity"]["name"], "talker", "newest first: {page}");
    assert_eq!(page["counts"], serde_json::json!({"completed": 1, "running": 1}), "{page}");
    assert_eq!(page["facets"]["project"], serde_json::json!(["demo", "general"]), "{page}");
    assert_eq!(page["facets"]["group"], serde_json::json!(["chat", "default"]), "{page}");
    assert_eq!(page["facets"]["host"], serde_json::json!(["local"]), "{page}");
    let second = ui.json("/api/runs?offset=1&limit=1");
    assert_eq!(
        (second["total"].as_u64(), second["offset"].as_u64(), second["limit"].as_u64()),
        (Some(2), Some(1), Some(1))
    );
    assert_eq!(second["runs"].as_array().unwrap().len(), 1);
    assert_eq!(second["runs"][0]["identity"]["name"], "hello", "{second}");
    let running = ui.json("/api/runs?state=running&project=&host=local");
    assert_eq!(running["total"], 1, "{running}");
    assert_eq!(running["counts"]["completed"], 1, "counts leave the state filter out: {running}");
    assert_eq!(ui.json("/api/runs?project=demo")["runs"][0]["identity"]["name"], "hello");
    assert_eq!(ui.json("/api/runs?group=chat")["total"], 1);
    assert_eq!(ui.json("/api/runs?host=elsewhere")["total"], 0);
    for bad in ["/api/runs?state=sleeping", "/api/runs?limit=0", "/api/runs?limit=100000"] {
        let (status, body) = ui.get(bad);
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string(), "{body}");
    }

    // A run's page, by name or by run id.
    let detail = ui.json("/api/runs/talker");
    assert_eq!(detail["run"]["identity"]["run_id"], run_id.as_str(), "{detail}");
    assert_eq!(detail["status"]["state"], "running", "{detail}");
    assert!(!detail["status"]["ranks"].as_array().unwrap().is_empty(), "ranks: {detail}");
    assert_eq!(detail["commands"]["shell"], format!("theseus shell {run_id}"), "{detail}");
    assert_eq!(detail["commands"]["forward"], format!("theseus forward {run_id} 8888"), "{detail}");
    assert!(detail["files_note"].is_null(), "the local host reads run files: {detail}");
    let ended = ui.json(&format!("/api/runs/{}", hello["identity"]["run_id"].as_str().unwrap()));
    assert_eq!(ended["metadata"]["status"], "completed", "metadata.json of the run: {ended}");
    assert_eq!(ended["metadata"]["project"], "demo", "{ended}");
    assert!(ended["checkpoints"]["dir"].is_string(), "checkpoints.json of the run: {ended}");
    assert!(ended["checkpoints"]["checkpoints"].is_array(), "{ended}");
    assert_eq!(ui.get("/api/runs/no-such-run").0, 404);
    answers.extend([page.to_string(), detail.to_string(), ended.to_string()]);

    // The history of an ended run, then its end.
    let history = ui.json("/api/runs/hello/logs");
    let lines: Vec<&str> = history["lines"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap()).collect();
    assert!(lines.contains(&"done"), "{history}");
    assert_eq!(history["end"]["state"], "completed", "{history}");

    // The live log: a line printed after the stream opened arrives.
    let mut events = Events::open(&ui, &format!("/api/runs/{run_id}/logs/stream"));
    events.until(|event, data| event == "line" && data["text"] == "ready");
    talker.say("said after the stream opened");
    let (_, line) = events.until(|event, data| event == "line" && data["text"] == "said after the stream opened");
    assert_eq!(line["event"], "line", "{}", events.seen);

    // Cancel: only by a header (not the query, not a cookie), then the stream ends.
    let path = format!("/api/runs/{run_id}/cancel");
    assert_eq!(http(ui.addr, "POST", &format!("{path}?token={}", ui.token), &[]).status, 401);
    let cookie = format!("{cookie_name}={}", ui.token);
    // The cookie lets a GET in, never a POST.
    assert_eq!(http(ui.addr, "GET", "/api/health", &[("Cookie", &cookie)]).status, 200);
    assert_eq!(http(ui.addr, "POST", &path, &[("Cookie", &cookie)]).status, 401);
    let status = text(&ctx.run(&["status", &run_id]).stdout);
    assert!(status.contains("running"), "a refused cancel cancels nothing: {status}");
    let cancelled = http(ui.addr, "POST", &path, &[("X-Theseus-Token", &ui.token)]);
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    let cancelled: Value = serde_json::from_str(&cancelled.body).unwrap();
    assert_eq!(cancelled["run"]["state"], "cancelled", "{cancelled}");
    let (_, end) = events.until(|event, _| event == "end");
    assert_eq!(end["state"], "cancelled", "{}", events.seen);
    assert!(events.next().is_none(), "the stream closes after its end");
    let status = ctx.run(&["status", &run_id]);
    assert!(text(&status.stdout).contains("cancelled"), "{}{}", text(&status.stdout), text(&status.stderr));
    answers.extend([events.seen.clone(), ui.json(&format!("/api/runs/{run_id}")).to_string()]);
    answers.push(ui.get(&format!("/api/runs/{run_id}/logs")).1);
    for answer in &answers {
        assert!(!answer.contains(LOCAL_SECRET), "the secret env value reached the API: {answer}");
    }

    // The capacity page lists the configured host.
    let capacity = ui.json("/api/capacity");
    let hosts = capacity["hosts"].as_array().unwrap();
    let local = hosts.iter().find(|h| h["host"] == "local" && h["kind"] == "local");
    let local = local.unwrap_or_else(|| panic!("{capacity}"));
    assert!(local["availability"]["kind"].is_string() && local["request"].is_string(), "{capacity}");
    assert!(local["queues"].is_null() && local["queues_error"].is_null(), "no queues on this machine: {capacity}");
    assert!(capacity["probed_at"].is_string(), "{capacity}");

    let stderr = ui.stderr();
    assert_eq!(ui.stop("-TERM"), Some(0), "SIGTERM is its normal end:\n{stderr}");
}

#[test]
fn a_stream_the_page_drops_stops_following_and_sigint_ends_with_0() {
    let ctx = TestContext::new();
    let talker = Talker::new();
    let exp = talker.code.path().join("talker.yaml");
    let code = talker.code.path().to_str().unwrap();
    let live = ctx.run(&["submit", "talker", exp.to_str().unwrap(), "--code", code]);
    assert!(live.status.success(), "{}", text(&live.stderr));
    let _cancel = CancelOnDrop(&ctx, &["talker"]);
    let ui = Ui::start(&ctx, &["--output", "json"]);
    // A follow holds the run's log file open in the server: count them.
    let pid = ui.child.id();
    let follows = move || {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().contains("/logs/") && target.to_string_lossy().ends_with(".log"))
            .count()
    };
    let mut streams: Vec<Events> = (0..10).map(|_| Events::open(&ui, "/api/runs/talker/logs/stream")).collect();
    for events in &mut streams {
        events.until(|event, data| event == "line" && data["text"] == "ready");
    }
    assert!(follows() >= 10, "each open stream follows the log: {} open", follows());
    // The pages go away: each follow stops (its log file closed), none is left behind.
    drop(streams);
    eventually("every dropped follow stopped", || (follows() == 0).then_some(()));
    let mut events = Events::open(&ui, "/api/runs/talker/logs/stream");
    events.until(|event, data| event == "line" && data["text"] == "ready");
    talker.say("still followed");
    events.until(|event, data| event == "line" && data["text"] == "still followed");
    assert_eq!(events.seen.matches(r#""text":"ready""#).count(), 1, "each line once:\n{}", events.seen);
    assert_eq!(follows(), 1);
    drop(events);
    eventually("the last follow stopped", || (follows() == 0).then_some(()));
    assert!(ctx.run(&["cancel", "talker"]).status.success());
    assert_eq!(ui.stop("-INT"), Some(0));
}

#[test]
fn the_url_line_is_json_with_output_json_and_a_port_in_use_names_the_fix() {
    let ctx = TestContext::new();
    let mut child = ctx
        .cmd()
        .args(["--output", "json", "ui", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    let port = v["port"].as_u64().unwrap();
    assert!(port > 0, "{v}");
    assert_eq!(v["bind"], "127.0.0.1");
    assert_eq!(v["token"].as_str().unwrap().len(), 48, "{v}");
    assert_eq!(v["url"], format!("http://127.0.0.1:{port}/?token={}", v["token"].as_str().unwrap()));

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = ctx.run(&["ui", "--port", &port]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--port") && stderr.contains(&port) && stderr.contains("in use"), "{stderr}");
    assert!(out.stdout.is_empty(), "no URL for a server that does not listen");

    let all = Ui::start(&ctx, &["--bind", "0.0.0.0"]);
    assert!(all.url.starts_with("http://127.0.0.1:"), "{}", all.url);
    let warned = eventually("the warning", || Some(all.stderr()).filter(|s| s.contains("all addresses")));
    assert!(warned.contains("token") && warned.contains("TLS"), "{warned}");
    assert_eq!(all.stop("-TERM"), Some(0));
}

#[test]
fn a_volcano_run_shows_its_pending_reason_and_no_secret_reaches_the_api() {
    const KUBE_TOKEN: &str = "kube-tok-5ecret-7f3a";
    const SECRET: &str = "s3cr3t-env-value-91c2";
    let ctx = TestContext::new();
    let rbac = std::fs::read_to_string(crate::repo_root().join("docs/rbac.yaml")).unwrap();
    let authz = theseus_kube_sim::Authz::from_files(&format!("{KUBE_TOKEN},researcher,1\n"), &rbac).unwrap();
    let world = crate::volcano::SimWorld::start_with(&ctx, Some((authz, KUBE_TOKEN)));
    world.sim.faults().make_image_unpullable("theseus-test:local");
    // A host that does not answer is given up on within api_timeout + 5 s (10 s at least).
    let config = ctx.home().join(".theseus.yaml");
    let mut text_of = std::fs::read_to_string(&config).unwrap();
    text_of.push_str("    api_timeout: 2s\n");
    std::fs::write(&config, text_of).unwrap();
    let out = ctx
        .cmd()
        .env("MY_SECRET", SECRET)
        .args(["submit", "pull", &world.exp("exp.yaml"), "--code", world.code(), "--host", "k8s"])
        .args(["--chip", "h100", "-n", "4", "--secret-env", "MY_SECRET"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let _cancel = CancelOnDrop(&ctx, &["pull"]);
    let ui = Ui::start(&ctx, &[]);
    let mut answers = Vec::new();
    // The refresher asks the host in the background: the row shows why the run waits.
    let page = eventually("the pending reason in the list", || {
        let page = ui.json("/api/runs?host=k8s");
        let reason = row(&page, "pull")?["message"].as_str()?.to_owned();
        (reason.contains("ImagePullBackOff")).then_some(page)
    });
    let pull = row(&page, "pull").unwrap();
    assert_eq!(pull["state"], "pending", "{page}");
    assert_eq!(pull["handle"]["kind"], "volcano", "{page}");
    assert!(pull["chips"].as_str().is_some_and(|c| c.contains("h100")), "{page}");
    answers.push(page.to_string());
    let detail = ui.json("/api/runs/pull");
    assert_eq!(detail["status"]["state"], "pending", "{detail}");
    assert!(detail["files_note"].as_str().is_some_and(|n| n.contains("volcano")), "{detail}");
    answers.push(detail.to_string());
    let capacity = ui.json("/api/capacity");
    let k8s = capacity["hosts"].as_array().unwrap().iter().find(|h| h["host"] == "k8s").cloned();
    let k8s = k8s.unwrap_or_else(|| panic!("{capacity}"));
    assert_eq!(k8s["kind"], "volcano", "{capacity}");
    assert!(k8s["queues"]["queues"].as_array().is_some_and(|q| !q.is_empty()), "the queues: {capacity}");
    answers.push(capacity.to_string());
    answers.push(ui.get("/api/runs/pull/logs").1);

    // The cluster stops answering: the list still answers at once from the ledger (before the
    // refresher's round gives up on the host), then names the silent host and marks its row.
    world.sim.faults().outage(theseus_kube_sim::Outage::Hang, None);
    let first = ui.json("/api/runs");
    assert_eq!(first["unanswered"], serde_json::json!({}), "answered without waiting on the host: {first}");
    let silent = eventually("the silent host in the list", || {
        let page = ui.json("/api/runs");
        page["unanswered"]["k8s"].is_string().then_some(page)
    });
    let row_of = row(&silent, "pull").unwrap();
    assert!(row_of["unanswered"].is_string(), "its live row is marked: {silent}");
    assert_eq!(row_of["state"], "pending", "shown in its last known state: {silent}");
    world.sim.faults().end_outage();
    eventually("the host answering again", || {
        let page = ui.json("/api/runs");
        page["unanswered"].as_object().is_some_and(|u| u.is_empty()).then_some(())
    });
    let mut events = Events::open(&ui, "/api/runs/pull/logs/stream");
    let run_id = pull["identity"]["run_id"].as_str().unwrap().to_owned();
    events.until(|event, data| event == "note" && data["text"].as_str().is_some_and(|t| t.contains("ImagePull")));
    let cancelled = http(ui.addr, "POST", &format!("/api/runs/{run_id}/cancel"), &[("X-Theseus-Token", &ui.token)]);
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    events.until(|event, _| event == "end");
    answers.push(events.seen.clone());
    answers.push(cancelled.body);
    answers.push(ui.get("/api/runs").1);
    for answer in &answers {
        assert!(!answer.contains(SECRET), "the secret env value reached the API: {answer}");
        assert!(!answer.contains(KUBE_TOKEN), "the kubeconfig's token reached the API: {answer}");
    }
    assert!(!ui.stderr().contains(SECRET) && !ui.stderr().contains(KUBE_TOKEN), "{}", ui.stderr());
    assert!(text(&ctx.run(&["status", "pull"]).stdout).contains("cancelled"));
    assert_eq!(ui.stop("-TERM"), Some(0));
    drop(world);
}

#[test]
fn a_followed_volcano_log_says_when_it_loses_and_regains_the_cluster() {
    let ctx = TestContext::new();
    let world = crate::volcano::SimWorld::start(&ctx);
    let code = std::path::Path::new(world.code());
    std::fs::write(
        code.join("count.py"),
        "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(0.2)\n",
    )
    .unwrap();
    std::fs::write(code.join("count.yaml"), "entrypoint: python count.py\n").unwrap();
    let out = ctx.run(&[
        "submit",
        "ticks",
        &world.exp("count.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let _cancel = CancelOnDrop(&ctx, &["ticks"]);
    let ui = Ui::start(&ctx, &[]);
    let mut events = Events::open(&ui, "/api/runs/ticks/logs/stream");
    events.until(|event, data| event == "line" && data["text"] == "tick 3");
    world.sim.faults().outage(theseus_kube_sim::Outage::Refuse, Some(Duration::from_secs(4)));
    let (_, lost) = events.until(|event, _| event == "note");
    let lost = lost["text"].as_str().unwrap().to_owned();
    assert!(lost.contains("lost contact") && lost.contains(&world.sim.url()), "{}", events.seen);
    let (_, back) = events.until(|event, _| event == "note");
    assert!(back["text"].as_str().unwrap().contains("reconnected"), "{}", events.seen);
    // The lines go on after the outage.
    events.until(|event, _| event == "line");
    let cancelled = http(ui.addr, "POST", "/api/runs/ticks/cancel", &[("X-Theseus-Token", &ui.token)]);
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    let (_, end) = events.until(|event, _| event == "end");
    let status = text(&ctx.run(&["status", "ticks"]).stdout);
    assert!(status.contains("cancelled"), "the ledger says: {status}");
    assert_eq!(end["state"], "cancelled", "{}", events.seen);
    assert_eq!(ui.stop("-TERM"), Some(0));
    drop(world);
}
