//! A small, blocking Chrome DevTools Protocol driver for tests and the bench: starts headless
//! Chromium as a child (its own process group, killed by PID on drop, its profile dir removed),
//! reads the `DevToolsActivePort` it writes, and speaks CDP over one websocket to the browser,
//! with a flat session per page. It offers what the dashboard's tests need: navigate and wait
//! for the load, evaluate JS (promises awaited), wait until a JS condition holds (polled, bounded),
//! click a selector with real mouse events, screenshot to a PNG file, and a fresh incognito
//! context (`Target.createBrowserContext`: no cookies of the default one).
//!
//! `xtask`'s bench includes this same file (`#[path]`), so it uses only what both have:
//! anyhow, serde_json, rustix, base64 and tokio-tungstenite's blocking `tungstenite`.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, Message, WebSocket};

/// How long one CDP command may take before the driver gives up (a hang is a failure).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);
/// How long Chromium may take to write `DevToolsActivePort`.
const START_WITHIN: Duration = Duration::from_secs(60);
/// How many times a browser that dies at start is started.
const START_ATTEMPTS: usize = 3;
/// The window (and so the screenshots) size.
pub(crate) const WINDOW: (u32, u32) = (1280, 900);

/// A running headless Chromium.
pub(crate) struct Chromium {
    child: Child,
    profile: PathBuf,
    conn: Arc<Mutex<Conn>>,
}

/// A page (a target with its own flat session).
pub(crate) struct Page {
    conn: Arc<Mutex<Conn>>,
    session: String,
    target: String,
}

struct Conn {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    /// Events read while waiting for answers: (session, method), kept for `wait_event`.
    events: Vec<(String, String)>,
}

impl Chromium {
    /// Starts `binary` (`/usr/bin/chromium`) headless on an empty profile. A browser that dies
    /// before it listens (seen on a loaded CI machine: a SIGSEGV at start, crashpad's "no stack
    /// mapping") is started again on a fresh profile, three times at most.
    pub(crate) fn start(binary: &Path) -> Result<Chromium> {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            match Chromium::start_once(binary) {
                Ok(chromium) => return Ok(chromium),
                Err(err) => failures.push(format!("{err:#}")),
            }
        }
        Err(anyhow!("{} starts failed:\n{}", START_ATTEMPTS, failures.join("\n---\n")))
    }

    fn start_once(binary: &Path) -> Result<Chromium> {
        let profile = unique_dir("theseus-chromium")?;
        let log = std::fs::File::create(profile.join("chromium.log"))
            .with_context(|| format!("cannot write in {}", profile.display()))?;
        let mut cmd = Command::new(binary);
        cmd.args([
            "--headless=new",
            "--no-sandbox",
            "--remote-debugging-port=0",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--hide-scrollbars",
            "--mute-audio",
        ])
        .arg(format!("--window-size={},{}", WINDOW.0, WINDOW.1))
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(err) => {
                let _ = std::fs::remove_dir_all(&profile);
                return Err(anyhow!(err).context(format!("cannot start {}", binary.display())));
            }
        };
        let mut child = child;
        match connect(&mut child, &profile) {
            Ok(ws) => {
                Ok(Chromium { child, profile, conn: Arc::new(Mutex::new(Conn { ws, next_id: 0, events: Vec::new() })) })
            }
            Err(err) => {
                stop(&mut child);
                let log = std::fs::read_to_string(profile.join("chromium.log")).unwrap_or_default();
                let _ = std::fs::remove_dir_all(&profile);
                Err(err.context(format!(
                    "headless Chromium ({}) did not start (its profile {} is removed); its output:\n{log}",
                    binary.display(),
                    profile.display()
                )))
            }
        }
    }

    /// The browser's PID (its process group's id too).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its profile dir (`--user-data-dir`), removed on drop.
    pub(crate) fn profile(&self) -> &Path {
        &self.profile
    }

    /// A new page in the default context (cookies shared with the other default pages).
    pub(crate) fn page(&self) -> Result<Page> {
        self.new_page(None)
    }

    /// A new page in a fresh incognito context: no cookies, no storage of any other page.
    pub(crate) fn incognito_page(&self) -> Result<Page> {
        let context = self.call("Target.createBrowserContext", json!({"disposeOnDetach": true}))?;
        let id = context["browserContextId"].as_str().context("no browserContextId")?.to_owned();
        self.new_page(Some(id))
    }

    fn new_page(&self, context: Option<String>) -> Result<Page> {
        let mut params = json!({"url": "about:blank"});
        if let Some(context) = context {
            params["browserContextId"] = json!(context);
        }
        let target = self.call("Target.createTarget", params)?;
        let target = target["targetId"].as_str().context("no targetId")?.to_owned();
        let attached = self.call("Target.attachToTarget", json!({"targetId": target, "flatten": true}))?;
        let session = attached["sessionId"].as_str().context("no sessionId")?.to_owned();
        let page = Page { conn: self.conn.clone(), session, target };
        page.call("Page.enable", json!({}))?;
        page.call("Runtime.enable", json!({}))?;
        Ok(page)
    }

    /// Grants the pages of `origin` the clipboard, as a user's browser does for a click.
    pub(crate) fn grant_clipboard(&self, origin: &str) -> Result<()> {
        let permissions = json!(["clipboardReadWrite", "clipboardSanitizedWrite"]);
        self.call("Browser.grantPermissions", json!({"origin": origin, "permissions": permissions})).map(drop)
    }

    fn call(&self, method: &str, params: Value) -> Result<Value> {
        lock(&self.conn).call(None, method, params)
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = lock(&self.conn).send(None, "Browser.close", json!({}));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        // The whole group, whether or not it closed: no renderer outlives the test.
        stop(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

impl Page {
    fn call(&self, method: &str, params: Value) -> Result<Value> {
        lock(&self.conn).call(Some(&self.session), method, params)
    }

    /// Goes to `url` and waits for its load event (a 401 or 404 page loads too).
    pub(crate) fn navigate(&self, url: &str) -> Result<()> {
        let mut conn = lock(&self.conn);
        conn.events.retain(|(session, _)| session != &self.session);
        let answer = conn.call(Some(&self.session), "Page.navigate", json!({"url": url}))?;
        if let Some(error) = answer["errorText"].as_str() {
            bail!("navigating to {url}: {error}");
        }
        conn.wait_event(&self.session, "Page.loadEventFired").with_context(|| format!("loading {url}"))
    }

    /// The value of `expression` (a promise is awaited), as JSON.
    pub(crate) fn eval(&self, expression: &str) -> Result<Value> {
        let answer = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "awaitPromise": true, "returnByValue": true, "userGesture": true}),
        )?;
        if let Some(details) = answer.get("exceptionDetails") {
            let what = details["exception"]["description"].as_str().or(details["text"].as_str()).unwrap_or("?");
            bail!("`{expression}` threw: {what}");
        }
        Ok(answer["result"]["value"].clone())
    }

    /// Polls `condition` until it is truthy (or `limit` passes: an error naming `what` and the
    /// last value); returns that value.
    pub(crate) fn wait_until(&self, what: &str, condition: &str, limit: Duration) -> Result<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let value = match self.eval(condition) {
                Ok(value) => value,
                // A navigation under way (a link clicked): the old document is gone, ask again.
                Err(err) if navigating(&err) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                Err(err) => return Err(err),
            };
            let truthy = match &value {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return Ok(value);
            }
            if Instant::now() > deadline {
                let body = self.eval("document.body ? document.body.innerText.slice(0, 2000) : ''").unwrap_or_default();
                bail!("waited {limit:?} for {what} (`{condition}` was {value}); the page shows:\n{body}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks the element `selector` names as a user would: scrolled into view, a left press
    /// and release at its centre (an error when it is missing, hidden or covered).
    pub(crate) fn click(&self, selector: &str) -> Result<()> {
        let sel = serde_json::to_string(selector)?;
        let point = self.eval(&format!(
            "(() => {{ const el = document.querySelector({sel}); if (!el) throw new Error('no element ' + {sel}); \
             el.scrollIntoView({{block: 'center'}}); const r = el.getBoundingClientRect(); \
             if (r.width === 0 || r.height === 0) throw new Error({sel} + ' is not shown'); \
             const x = r.left + r.width / 2, y = r.top + r.height / 2; const top = document.elementFromPoint(x, y); \
             if (top !== el && !el.contains(top)) throw new Error({sel} + ' is covered by ' + (top ? top.outerHTML.slice(0, 200) : 'nothing')); \
             return {{x, y}}; }})()"
        ))?;
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": point["x"], "y": point["y"], "button": "left", "buttons": 1, "clickCount": 1}),
            )?;
        }
        Ok(())
    }

    /// Writes a PNG of the viewport to `path` (its dir made).
    pub(crate) fn screenshot(&self, path: &Path) -> Result<()> {
        use base64::Engine as _;
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}))?;
        let data = shot["data"].as_str().context("no screenshot data")?;
        let png = base64::engine::general_purpose::STANDARD.decode(data)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Makes the page behave as the focused one (a headless page has no window focus, which the
    /// clipboard asks for).
    pub(crate) fn emulate_focus(&self) -> Result<()> {
        self.call("Emulation.setFocusEmulationEnabled", json!({"enabled": true})).map(drop)
    }

    /// The page's target id.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }
}

impl Conn {
    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<u64> {
        self.next_id += 1;
        let mut message = json!({"id": self.next_id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        self.ws.send(Message::text(message.to_string())).with_context(|| format!("cannot send {method}"))?;
        Ok(self.next_id)
    }

    /// Reads one message: `Ok(None)` for one that is not JSON text.
    fn read(&mut self, waiting_for: &str) -> Result<Option<Value>> {
        match self.ws.read() {
            Ok(Message::Text(text)) => Ok(Some(serde_json::from_str(&text)?)),
            Ok(_) => Ok(None),
            Err(tungstenite::Error::Io(e)) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                bail!("Chromium did not answer {waiting_for} within {ANSWER_WITHIN:?}")
            }
            Err(e) => Err(anyhow!("reading from Chromium (waiting for {waiting_for}): {e}")),
        }
    }

    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        let id = self.send(session, method, params)?;
        // Bounded as a whole too: a chatty page (events all the time) never hits the read timeout.
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            ensure!(Instant::now() < deadline, "Chromium did not answer {method} within {ANSWER_WITHIN:?}");
            let Some(message) = self.read(method)? else { continue };
            if message["id"].as_u64() == Some(id) {
                if let Some(error) = message.get("error") {
                    bail!("{method} failed: {error}");
                }
                return Ok(message["result"].clone());
            }
            self.keep_event(&message);
        }
    }

    fn keep_event(&mut self, message: &Value) {
        if let (Some(method), Some(session)) = (message["method"].as_str(), message["sessionId"].as_str())
            && method == "Page.loadEventFired"
        {
            self.events.push((session.to_owned(), method.to_owned()));
        }
    }

    fn wait_event(&mut self, session: &str, method: &str) -> Result<()> {
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            ensure!(Instant::now() < deadline, "no {method} within {ANSWER_WITHIN:?}");
            if let Some(i) = self.events.iter().position(|(s, m)| s == session && m == method) {
                self.events.remove(i);
                return Ok(());
            }
            if let Some(message) = self.read(method)? {
                self.keep_event(&message);
            }
        }
    }
}

/// Waits for the `DevToolsActivePort` Chromium writes in `profile` and opens the browser's
/// websocket.
fn connect(child: &mut Child, profile: &Path) -> Result<WebSocket<TcpStream>> {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + START_WITHIN;
    let (port, path) = loop {
        if let Ok(text) = std::fs::read_to_string(&file)
            && let Some((port, path)) = text.split_once('\n')
            && !path.trim().is_empty()
        {
            break (port.trim().to_owned(), path.trim().to_owned());
        }
        if let Some(status) = child.try_wait()? {
            bail!("Chromium exited ({status}) before it wrote {}", file.display());
        }
        ensure!(Instant::now() < deadline, "no {} within {START_WITHIN:?}", file.display());
        std::thread::sleep(Duration::from_millis(50));
    };
    let stream = TcpStream::connect(("127.0.0.1", port.parse::<u16>().context("bad DevToolsActivePort")?))?;
    stream.set_read_timeout(Some(ANSWER_WITHIN))?;
    let url = format!("ws://127.0.0.1:{port}{path}");
    let (ws, _) = tungstenite::client(url.as_str(), stream).map_err(|e| anyhow!("websocket to {url}: {e}"))?;
    Ok(ws)
}

/// Kills Chromium's whole process group (renderers, zygote) by the browser's PID, and reaps it.
fn stop(child: &mut Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether `err` says the page's document went away under an evaluation (a navigation).
fn navigating(err: &anyhow::Error) -> bool {
    let text = err.to_string();
    [
        "Execution context was destroyed",
        "Cannot find context with specified id",
        "Cannot find default execution context",
        // Asked while the old document was being replaced (seen on a loaded CI machine).
        "Inspected target navigated or closed",
    ]
    .iter()
    .any(|m| text.contains(m))
}

fn lock(conn: &Mutex<Conn>) -> std::sync::MutexGuard<'_, Conn> {
    conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A new, empty dir under the temp dir (removed by its owner).
fn unique_dir(prefix: &str) -> Result<PathBuf> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}
