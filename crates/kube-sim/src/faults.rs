//! Fault injection at run time (failed requests, dropped watches, cut log streams, API outages
//! that refuse or hang, unpullable images, slow scheduling) and the request log tests assert on.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::status::ApiError;

/// One rule: fail the next `remaining` requests with this verb on this resource.
#[derive(Debug, Clone)]
struct FailRule {
    verb: String,
    resource: String,
    remaining: usize,
    code: u16,
    retry_after: Option<u64>,
}

/// How the API server fails during an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// Connections are closed at once, without an answer (a crashed or restarting apiserver,
    /// a load balancer without backends).
    Refuse,
    /// Connections are accepted (the TLS handshake completes) and requests read, but nothing
    /// is answered while it lasts (a wedged apiserver whose etcd is gone).
    Hang,
}

/// What happens to the request that [`Faults::fail_nth_request`] picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFault {
    /// An API error with this HTTP status (`Retry-After: 1` on 429).
    Status(u16),
    /// The connection is closed without an answer.
    Reset,
    /// The request is never answered (the connection stays open).
    Hang,
    /// The request is served, but first every open watch stream ends and every followed log
    /// stream is reset ([`Faults::drop_watches`], [`Faults::cut_log_streams`]): the streams
    /// drop at this stage of the client's flow.
    DropStreams,
}

#[derive(Debug, Default)]
struct State {
    /// Requests still to pass before the armed fault, and the fault.
    nth: Option<(usize, RequestFault)>,
    rules: Vec<FailRule>,
    hang_rules: Vec<FailRule>,
    outage: Option<(Outage, Option<Instant>)>,
    log_cut_after: Option<Duration>,
    unpullable_images: HashSet<String>,
    scheduling_delay: Option<Duration>,
    requests: Vec<(String, String)>,
    v4_only: bool,
    exec_stdin_cut: Option<u64>,
}

/// A handle on the simulator's faults; clones share state.
#[derive(Debug, Clone)]
pub struct Faults {
    state: Arc<Mutex<State>>,
    drop_watches: Arc<watch::Sender<u64>>,
    cut_logs: Arc<watch::Sender<u64>>,
    stall_logs: Arc<watch::Sender<u64>>,
}

impl Faults {
    pub(crate) fn new(unpullable_images: HashSet<String>, scheduling_delay: Option<Duration>) -> Self {
        let state = State { unpullable_images, scheduling_delay, ..State::default() };
        Self {
            state: Arc::new(Mutex::new(state)),
            drop_watches: Arc::new(watch::channel(0).0),
            cut_logs: Arc::new(watch::channel(0).0),
            stall_logs: Arc::new(watch::channel(0).0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails the next `count` requests with `verb` (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`) on `resource` (a plural such as `pods` or `jobs`,
    /// or `pods/log`, `jobs/status`; `*` matches any) with HTTP `code`. 429 responses carry
    /// `Retry-After: 1`.
    pub fn fail_requests(&self, verb: &str, resource: &str, count: usize, code: u16) {
        let retry_after = (code == 429).then_some(1);
        self.lock().rules.push(FailRule {
            verb: verb.to_owned(),
            resource: resource.to_owned(),
            remaining: count,
            code,
            retry_after,
        });
    }

    /// Makes the `n`-th request from now (1 for the next one, whatever it is) fail with
    /// `fault`; the chaos matrix tries every `n` of a command's flow. Replaces an armed one.
    pub fn fail_nth_request(&self, n: usize, fault: RequestFault) {
        self.lock().nth = (n > 0).then_some((n, fault));
    }

    /// Disarms [`Faults::fail_nth_request`] and every per-request rule.
    pub fn clear_request_faults(&self) {
        let mut state = self.lock();
        state.nth = None;
        state.rules.clear();
        state.hang_rules.clear();
    }

    /// The fault for this request when it is the armed `n`-th one.
    pub(crate) fn take_nth(&self) -> Option<RequestFault> {
        let mut state = self.lock();
        let (left, fault) = state.nth?;
        if left <= 1 {
            state.nth = None;
            Some(fault)
        } else {
            state.nth = Some((left - 1, fault));
            None
        }
    }

    /// Leaves the next `count` requests with `verb` on `resource` (as for
    /// [`Faults::fail_requests`]) unanswered forever, e.g. an exec whose upgrade never completes.
    pub fn hang_requests(&self, verb: &str, resource: &str, count: usize) {
        self.lock().hang_rules.push(FailRule {
            verb: verb.to_owned(),
            resource: resource.to_owned(),
            remaining: count,
            code: 0,
            retry_after: None,
        });
    }

    /// Whether this request is to hang (a matching rule is used up by it).
    pub(crate) fn hangs(&self, verb: &str, resource: &str) -> bool {
        let mut state = self.lock();
        let Some(rule) = state.hang_rules.iter_mut().find(|r| {
            r.remaining > 0 && (r.verb == verb || r.verb == "*") && (r.resource == resource || r.resource == "*")
        }) else {
            return false;
        };
        rule.remaining -= 1;
        true
    }

    /// Makes `pods/exec` offer only `v4.channel.k8s.io` (clusters before Kubernetes 1.30), or
    /// both protocols again.
    pub fn exec_v4_only(&self, v4_only: bool) {
        self.lock().v4_only = v4_only;
    }

    /// Resets every `pods/exec` connection once `bytes` of its stdin have arrived (`None`: never):
    /// an upload cut mid-stream by an API server restart or a proxy. The command is killed (a
    /// real container runtime may instead only close its stdin; either way it gets no more
    /// input and its status never reaches the client). Sessions that send less stdin are not
    /// affected.
    pub fn cut_exec_stdin_after(&self, bytes: Option<u64>) {
        self.lock().exec_stdin_cut = bytes;
    }

    pub(crate) fn exec_stdin_cut(&self) -> Option<u64> {
        self.lock().exec_stdin_cut
    }

    pub(crate) fn exec_protocols(&self) -> crate::exec::Protocols {
        if self.lock().v4_only { crate::exec::Protocols::V4Only } else { crate::exec::Protocols::V5AndV4 }
    }

    /// Ends every open watch stream now (clients see the stream close and must re-watch).
    pub fn drop_watches(&self) {
        self.drop_watches.send_modify(|n| *n += 1);
    }

    /// Resets every open followed log stream now (`pods/log?follow=true`): the client sees the
    /// connection reset while the container still runs, and must open the log again.
    pub fn cut_log_streams(&self) {
        self.cut_logs.send_modify(|n| *n += 1);
    }

    /// Resets each followed log stream `after` it opened (`None`: never).
    pub fn cut_log_streams_after(&self, after: Option<Duration>) {
        self.lock().log_cut_after = after;
    }

    /// Makes every open followed log stream go silent for good: the connection stays open but
    /// nothing more is sent (a connection a NAT or proxy dropped without telling either end).
    pub fn stall_log_streams(&self) {
        self.stall_logs.send_modify(|n| *n += 1);
    }

    /// Starts an API outage of kind `kind` for `duration` (`None`: until [`Faults::end_outage`]).
    /// With [`Outage::Refuse`] open watches and log streams are reset at once; with
    /// [`Outage::Hang`] open log streams go silent for good. New connections and requests are
    /// refused or left unanswered until it ends.
    pub fn outage(&self, kind: Outage, duration: Option<Duration>) {
        self.lock().outage = Some((kind, duration.map(|d| Instant::now() + d)));
        match kind {
            Outage::Refuse => {
                self.drop_watches();
                self.cut_log_streams();
            }
            Outage::Hang => self.stall_log_streams(),
        }
    }

    /// Ends an outage.
    pub fn end_outage(&self) {
        self.lock().outage = None;
    }

    /// The outage in effect now, if any.
    pub fn current_outage(&self) -> Option<Outage> {
        let mut state = self.lock();
        match state.outage {
            Some((_, Some(until))) if Instant::now() >= until => {
                state.outage = None;
                None
            }
            Some((kind, _)) => Some(kind),
            None => None,
        }
    }

    /// Waits while a [`Outage::Hang`] outage lasts (forever for an open-ended one).
    pub(crate) async fn hang_while_out(&self) {
        while self.current_outage() == Some(Outage::Hang) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn log_cuts(&self) -> (watch::Receiver<u64>, watch::Receiver<u64>, Option<Duration>) {
        (self.cut_logs.subscribe(), self.stall_logs.subscribe(), self.lock().log_cut_after)
    }

    /// Makes pods using `image` stay Pending in `ImagePullBackOff`.
    pub fn make_image_unpullable(&self, image: &str) {
        self.lock().unpullable_images.insert(image.to_owned());
    }

    /// Makes `image` pullable again.
    pub fn make_image_pullable(&self, image: &str) {
        self.lock().unpullable_images.remove(image);
    }

    /// Delays the admission of every job by `delay` after the controller first sees it.
    pub fn delay_scheduling(&self, delay: Option<Duration>) {
        self.lock().scheduling_delay = delay;
    }

    /// Every request served so far: (method, path and query).
    pub fn requests(&self) -> Vec<(String, String)> {
        self.lock().requests.clone()
    }

    /// The requests served after the first `from` ones, in order.
    pub fn requests_since(&self, from: usize) -> Vec<(String, String)> {
        self.lock().requests.get(from..).map(<[_]>::to_vec).unwrap_or_default()
    }

    pub(crate) fn is_unpullable(&self, image: &str) -> bool {
        self.lock().unpullable_images.contains(image)
    }

    pub(crate) fn scheduling_delay(&self) -> Option<Duration> {
        self.lock().scheduling_delay
    }

    pub(crate) fn watch_drops(&self) -> watch::Receiver<u64> {
        self.drop_watches.subscribe()
    }

    pub(crate) fn record(&self, method: &str, path_and_query: &str) {
        self.lock().requests.push((method.to_owned(), path_and_query.to_owned()));
    }

    /// The injected error for this request, if a rule matches (and is used up by it).
    pub(crate) fn check(&self, verb: &str, resource: &str) -> Option<ApiError> {
        let mut state = self.lock();
        let rule = state.rules.iter_mut().find(|r| {
            r.remaining > 0 && (r.verb == verb || r.verb == "*") && (r.resource == resource || r.resource == "*")
        })?;
        rule.remaining -= 1;
        Some(ApiError::injected(rule.code, rule.retry_after))
    }
}
