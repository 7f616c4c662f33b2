//! What the tests share: a [`Source`] holding its runs in memory (with a log stream a test
//! feeds through a channel), a server on 127.0.0.1 port 0 over it, and a small HTTP/1.1 client.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use theseus_core::backend::{JobHandle, JobState, LogLine};
use theseus_core::config::HostKind;
use theseus_core::job::JobIdentity;
use theseus_core::ledger::{Record, RunKind};
use theseus_ui::{
    Commands, LogEvent, LogEvents, RunDetail, RunPage, RunQuery, RunRow, ServeOptions, Source, SourceError,
};
use tokio::sync::{Notify, mpsc, oneshot};

/// The token of every test server but one.
pub(crate) const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

/// How long a test waits for something that should come at once.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// Runs in memory: `done` (completed, two lines of history), `live` (running: one line of
/// history, then what the test sends), `long` (completed, [`LONG_LINES`] lines).
pub(crate) struct Fake {
    states: Mutex<BTreeMap<String, JobState>>,
    mark: Mutex<u64>,
    live: Mutex<Option<mpsc::UnboundedReceiver<LogEvent>>>,
    /// The last query `runs` was asked.
    pub(crate) last_query: Mutex<Option<RunQuery>>,
    /// How many times `cancel` was called.
    pub(crate) cancels: Mutex<u32>,
    /// While set, `version` fails (a ledger that cannot be read).
    pub(crate) version_broken: Mutex<bool>,
    /// Told when `run("slow")` (which answers after 300 ms) starts.
    pub(crate) slow_started: Notify,
}

/// The lines of run `long`.
pub(crate) const LONG_LINES: usize = 200_003;

impl Fake {
    /// The source, and the sender of run `live`'s new events.
    pub(crate) fn new() -> (Arc<Fake>, mpsc::UnboundedSender<LogEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let states = [("done", JobState::Completed), ("live", JobState::Running), ("long", JobState::Completed)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let fake = Fake {
            states: Mutex::new(states),
            mark: Mutex::new(1),
            live: Mutex::new(Some(rx)),
            last_query: Mutex::new(None),
            cancels: Mutex::new(0),
            version_broken: Mutex::new(false),
            slow_started: Notify::new(),
        };
        (Arc::new(fake), tx)
    }

    fn state(&self, run: &str) -> Result<JobState, SourceError> {
        match run {
            "boom" => Err(SourceError::Failed("the host said no\nsecond line".into())),
            _ => self.states.lock().unwrap().get(run).copied().ok_or_else(|| SourceError::NotFound(run.to_owned())),
        }
    }

    fn detail(&self, run: &str) -> Result<RunDetail, SourceError> {
        let state = self.state(run)?;
        let record = Record {
            identity: JobIdentity {
                name: run.to_owned(),
                project: "general".into(),
                group: "default".into(),
                run_id: format!("id-{run}"),
            },
            kind: RunKind::Job,
            host: "local".into(),
            handle: JobHandle {
                kind: HostKind::named("local"),
                host: "local".into(),
                id: "1".into(),
                data: serde_json::Value::Null,
            },
            submitted_at: "2026-01-01T00:00:00Z".into(),
            updated_at: "2026-01-01T00:00:00Z".into(),
            state,
            exit_code: None,
            message: None,
        };
        let command = |verb: &str| format!("theseus {verb} id-{run}");
        Ok(RunDetail {
            run: RunRow { record, chips: Some("2 x cpu".into()), unanswered: None },
            status: None,
            status_error: None,
            resume: None,
            batch_search: None,
            metadata: None,
            checkpoints: None,
            files_note: None,
            files_pending: false,
            commands: Commands {
                status: command("status"),
                logs: command("logs -f"),
                shell: command("shell"),
                forward: command("forward"),
                cancel: command("cancel"),
            },
        })
    }
}

/// A line of run output.
pub(crate) fn line(text: &str) -> LogEvent {
    LogEvent::Line(LogLine { rank: Some(0), text: text.to_owned(), source: None })
}

#[async_trait]
impl Source for Fake {
    async fn runs(&self, query: &RunQuery) -> Result<RunPage, SourceError> {
        *self.last_query.lock().unwrap() = Some(query.clone());
        Ok(RunPage {
            total: 0,
            offset: query.offset,
            limit: query.limit.unwrap_or(0),
            runs: Vec::new(),
            counts: BTreeMap::new(),
            facets: BTreeMap::new(),
            unanswered: BTreeMap::new(),
            refreshed_at: None,
        })
    }

    async fn run(&self, run: &str) -> Result<RunDetail, SourceError> {
        if run == "slow" {
            self.slow_started.notify_one();
            tokio::time::sleep(Duration::from_millis(300)).await;
            return self.detail("done");
        }
        self.detail(run)
    }

    async fn logs(&self, run: &str, follow: bool) -> Result<LogEvents, SourceError> {
        let state = self.state(run)?;
        let end = LogEvent::End { state, exit_code: Some(0) };
        let history: Vec<LogEvent> = match run {
            "done" => vec![line("first"), LogEvent::Note { text: "a note".into() }, line("second")],
            "long" => (0..LONG_LINES).map(|n| line(&format!("line {n}"))).collect(),
            _ => vec![line("before")],
        };
        let history = futures::stream::iter(history);
        if run != "live" || !follow {
            return Ok(history.chain(futures::stream::iter([end])).boxed());
        }
        let rx = self.live.lock().unwrap().take().expect("run `live` is followed once per test");
        let fed = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
        Ok(history.chain(fed).boxed())
    }

    async fn cancel(&self, run: &str) -> Result<RunDetail, SourceError> {
        self.state(run)?;
        *self.cancels.lock().unwrap() += 1;
        self.states.lock().unwrap().insert(run.to_owned(), JobState::Cancelled);
        *self.mark.lock().unwrap() += 1;
        self.detail(run)
    }

    async fn capacity(&self) -> Result<serde_json::Value, SourceError> {
        Ok(serde_json::json!({"hosts": [], "probed_at": "2026-01-01T00:00:00Z"}))
    }

    async fn version(&self) -> Result<String, SourceError> {
        if *self.version_broken.lock().unwrap() {
            return Err(SourceError::Failed("the ledger is locked".into()));
        }
        Ok(format!("mark-{}", self.mark.lock().unwrap()))
    }
}

/// A running test server.
pub(crate) struct Running {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// Its source.
    pub(crate) fake: Arc<Fake>,
    /// Feeds run `live`.
    pub(crate) live: mpsc::UnboundedSender<LogEvent>,
    stop: Option<oneshot::Sender<()>>,
    /// Resolves when `Server::run` returned.
    pub(crate) ended: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Asks the server to shut down.
    pub(crate) fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A server over a fresh [`Fake`] with `token`.
pub(crate) async fn start_with(token: &str) -> Running {
    let (fake, live) = Fake::new();
    let options = ServeOptions { bind: "127.0.0.1:0".parse().unwrap(), token: token.to_owned() };
    let server = theseus_ui::bind(fake.clone(), options).await.unwrap();
    let addr = server.local_addr;
    let (stop, stopped) = oneshot::channel::<()>();
    let ended = tokio::spawn(async move {
        server
            .run(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Running { addr, fake, live, stop: Some(stop), ended: Some(ended) }
}

/// A server over a fresh [`Fake`] with [`TOKEN`].
pub(crate) async fn start() -> Running {
    start_with(TOKEN).await
}

/// A whole answer.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Reply {
    /// The body as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// A header's value ("" when absent).
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(|v| v.to_str().unwrap()).unwrap_or("")
    }
}

/// Sends `method path` with `headers` on a new connection and returns the answer's head and
/// body (not read yet).
pub(crate) async fn send(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> http::Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder().method(method).uri(path).header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    tokio::time::timeout(PATIENCE, sender.send_request(request)).await.expect("no answer in time").unwrap()
}

/// Sends `method path` with `headers` and reads the whole answer.
pub(crate) async fn request(addr: SocketAddr, method: Method, path: &str, headers: &[(&str, &str)]) -> Reply {
    let response = send(addr, method, path, headers).await;
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(PATIENCE, body.collect()).await.expect("no whole body in time").unwrap();
    Reply { status: parts.status, headers: parts.headers, body: String::from_utf8(body.to_bytes().to_vec()).unwrap() }
}

/// `GET path` with the token header.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, Method::GET, path, &[("x-theseus-token", TOKEN)]).await
}

/// Reads an event stream's body chunk by chunk.
pub(crate) struct Events {
    body: Incoming,
    buffered: String,
}

impl Events {
    /// The reader of `body`.
    pub(crate) fn new(body: Incoming) -> Events {
        Events { body, buffered: String::new() }
    }

    /// The next whole frame (up to its blank line), or `None` once the stream ended.
    pub(crate) async fn next(&mut self) -> Option<String> {
        self.next_within(PATIENCE).await
    }

    /// [`Events::next`], waiting at most `patience` for each chunk.
    pub(crate) async fn next_within(&mut self, patience: Duration) -> Option<String> {
        loop {
            if let Some(at) = self.buffered.find("\n\n") {
                let frame = self.buffered[..at + 2].to_owned();
                self.buffered.drain(..at + 2);
                return Some(frame);
            }
            let frame = tokio::time::timeout(patience, self.body.frame()).await.expect("no event in time");
            match frame {
                None => {
                    assert!(self.buffered.is_empty(), "the stream ended mid-frame: {:?}", self.buffered);
                    return None;
                }
                Some(frame) => {
                    if let Ok(data) = frame.expect("the stream broke").into_data() {
                        self.buffered.push_str(std::str::from_utf8(&data).unwrap());
                    }
                }
            }
        }
    }
}
