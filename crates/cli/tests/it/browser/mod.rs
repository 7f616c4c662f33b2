//! The dashboard (`theseus ui`) driven in a real browser: headless Chromium through a small
//! Chrome DevTools Protocol driver ([`cdp`]), against real runs on the local host and the
//! simulator ([`ui`]), and its JSON API over plain HTTP ([`api`]). Chromium comes from `THESEUSTEST_CHROMIUM` (`cargo xtask test` installs
//! Debian's `chromium` and sets it); without it the tests say they did not run, and fail when
//! `THESEUSTEST_REQUIRE_ALL=1`. Screenshots go to `<target dir>/ui-screenshots/`.

mod api;
pub(crate) mod cdp;
mod driver;
mod ui;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::TestContext;

/// Headless Chromium for `test`, or `None` (after saying loudly that the test did not run).
pub(crate) fn chromium(test: &str) -> Option<cdp::Chromium> {
    let binary = match std::env::var("THESEUSTEST_CHROMIUM") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let msg = format!(
                "{test}: NOT RUN: THESEUSTEST_CHROMIUM (a Chromium binary) is not set; `cargo xtask test` installs \
                 Debian's chromium and sets it"
            );
            if std::env::var("THESEUSTEST_REQUIRE_ALL").is_ok_and(|v| v == "1") {
                panic!("{msg}");
            }
            eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
            return None;
        }
    };
    Some(cdp::Chromium::start(&binary).unwrap_or_else(|e| panic!("{test}: {e:#}")))
}

/// Where the screenshots are kept: `ui-screenshots/` in the target dir the tests were built in
/// (the artifacts CI keeps).
pub(crate) fn screenshot_dir() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_theseus"));
    // <target>/<profile>/theseus
    bin.parent().and_then(|p| p.parent()).expect("the binary sits in <target>/<profile>/").join("ui-screenshots")
}

/// `theseus ui --port 0` of a test's HOME, stopped with SIGTERM by PID on drop.
pub(crate) struct UiServer {
    child: Child,
    /// The URL it printed (`http://127.0.0.1:PORT/?token=T`).
    pub(crate) url: String,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    /// `127.0.0.1:PORT`.
    pub(crate) addr: String,
    pub(crate) token: String,
    stderr: PathBuf,
}

impl UiServer {
    /// Starts it with `args` after `ui --port 0` and reads the one line it prints.
    pub(crate) fn start(ctx: &TestContext, args: &[&str]) -> UiServer {
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr = ctx.home().join(format!("ui-{n}.stderr"));
        let mut child = ctx
            .cmd()
            .args(["ui", "--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
        let mut server = UiServer {
            child,
            url: line.trim().to_owned(),
            base: String::new(),
            addr: String::new(),
            token: String::new(),
            stderr,
        };
        let Some((base, token)) = server.url.split_once("/?token=") else {
            panic!("`theseus ui` printed {:?}, not its URL; stderr:\n{}", server.url, server.stderr());
        };
        (server.base, server.token) = (base.to_owned(), token.to_owned());
        server.addr = base.strip_prefix("http://").expect("an http URL").to_owned();
        server
    }

    /// What it wrote on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// A request over a fresh connection: `(status, head, body)`. `headers` are whole lines.
    pub(crate) fn request(&self, method: &str, path: &str, headers: &[String]) -> (u16, String, String) {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", self.addr);
        for h in headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        if method == "POST" {
            head.push_str("Content-Length: 0\r\n");
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).unwrap();
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        let response = String::from_utf8_lossy(&bytes).into_owned();
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
        (status, head.to_owned(), if chunked { dechunk(body) } else { body.to_owned() })
    }

    /// A GET with the token header: `(status, JSON body)`.
    pub(crate) fn get_json(&self, path: &str) -> (u16, serde_json::Value) {
        let (status, _, body) = self.request("GET", path, &[self.token_header()]);
        let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path} ({status}): {e}: {body}"));
        (status, json)
    }

    /// `X-Theseus-Token: T`.
    pub(crate) fn token_header(&self) -> String {
        format!("X-Theseus-Token: {}", self.token)
    }
}

impl Drop for UiServer {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        body = rest[size..].strip_prefix("\r\n").unwrap_or(&rest[size..]);
    }
    out
}

/// Cancels the test's runs when it ends, passed or failed (nothing left running).
pub(crate) struct CancelOnDrop<'a>(pub(crate) &'a TestContext, pub(crate) Vec<String>);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        for run in &self.1 {
            let _ = self.0.cmd().args(["cancel", run]).output();
        }
    }
}

/// Submits `exp` of `code` as `name` with `extra` args; its run id.
pub(crate) fn submit(ctx: &TestContext, code: &std::path::Path, exp: &str, name: &str, extra: &[&str]) -> String {
    let out = ctx
        .cmd()
        .args(["submit", name, code.join(exp).to_str().unwrap(), "--code", code.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "submit {name}: {}", crate::text(&out.stderr));
    crate::text(&out.stdout).trim().lines().last().unwrap().to_owned()
}

/// Waits (bounded) until `theseus status RUN` names `state`; its output.
pub(crate) fn wait_state(ctx: &TestContext, run: &str, state: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let out = ctx.run(&["status", run]);
        let stdout = crate::text(&out.stdout);
        if stdout.split_whitespace().any(|w| w.trim_end_matches(',') == state) {
            return stdout;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{run} never became {state}:\n{stdout}{}",
            crate::text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
