//! Watch streams: newline-delimited `{"type": ..., "object": ...}` events over a chunked
//! response, resumable from a `resourceVersion`, with bookmarks, timeouts and selectors.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use crate::discovery::ResourceInfo;
use crate::selector::Selectors;
use crate::status::ApiError;
use crate::store::{Change, ChangeKind, Store};

/// The query of one watch request.
#[derive(Debug, Clone)]
pub(crate) struct WatchOptions {
    /// `resourceVersion` to resume after (`None`/0: replay the current state first).
    pub(crate) from_rv: Option<u64>,
    /// Namespace filter (`None` for all namespaces or cluster-scoped types).
    pub(crate) namespace: Option<String>,
    /// `labelSelector` and `fieldSelector`.
    pub(crate) selectors: Selectors,
    /// `allowWatchBookmarks`.
    pub(crate) bookmarks: bool,
    /// `sendInitialEvents`: replay the state, then a bookmark marking the end of it.
    pub(crate) send_initial_events: bool,
    /// `timeoutSeconds` (capped by the server).
    pub(crate) timeout: Duration,
    /// How often bookmarks are sent.
    pub(crate) bookmark_interval: Duration,
}

/// Starts a watch; the receiver yields one JSON line per event and closes when the watch ends.
/// A `resourceVersion` older than the history yields a single 410 ERROR event, as the
/// apiserver does.
pub(crate) fn start(
    store: &Store,
    res: &'static ResourceInfo,
    opts: WatchOptions,
    mut drops: watch::Receiver<u64>,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(256);
    let from = if opts.send_initial_events { None } else { opts.from_rv };
    let start = store.watch(res, from);
    tokio::spawn(async move {
        let start = match start {
            Ok(start) => start,
            Err(err) => {
                let _ = tx.send(line("ERROR", err.to_status())).await;
                return;
            }
        };
        for change in &start.backlog {
            if let Some(ev) = render(change, &opts)
                && tx.send(ev).await.is_err()
            {
                return;
            }
        }
        // Every change up to the start version has now been considered.
        let mut last_rv = start.rv;
        if opts.send_initial_events {
            let mut bm = bookmark(res, last_rv);
            bm["object"]["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            if tx.send(to_line(&bm)).await.is_err() {
                return;
            }
        }
        drops.mark_unchanged();
        let mut live = start.live;
        let deadline = tokio::time::sleep(opts.timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(opts.bookmark_interval.max(Duration::from_millis(10)));
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = drops.changed() => return,
                _ = tx.closed() => return,
                _ = ticker.tick(), if opts.bookmarks => {
                    if tx.send(to_line(&bookmark(res, last_rv))).await.is_err() {
                        return;
                    }
                }
                change = live.recv() => match change {
                    Ok(change) => {
                        last_rv = last_rv.max(change.rv);
                        if !std::ptr::eq(change.resource, res) {
                            continue;
                        }
                        if let Some(ev) = render(&change, &opts)
                            && tx.send(ev).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let _ = tx.send(line("ERROR", ApiError::gone(last_rv, last_rv + 1).to_status())).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    rx
}

fn bookmark(res: &ResourceInfo, rv: u64) -> Value {
    json!({"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.api_version(), "metadata": {"resourceVersion": rv.to_string()}}})
}

fn line(kind: &str, object: Value) -> Bytes {
    to_line(&json!({"type": kind, "object": object}))
}

fn to_line(event: &Value) -> Bytes {
    let mut text = event.to_string();
    text.push('\n');
    Bytes::from(text)
}

/// Turns a store change into the event this watch sees, if any: an object that starts or
/// stops matching the selectors is ADDED or DELETED, as on the apiserver.
fn render(change: &Arc<Change>, opts: &WatchOptions) -> Option<Bytes> {
    let in_scope = |obj: &Value| {
        opts.namespace
            .as_deref()
            .is_none_or(|ns| obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns))
            && opts.selectors.matches(obj)
    };
    let now = in_scope(&change.object);
    let kind = match change.kind {
        ChangeKind::Added => now.then_some("ADDED")?,
        ChangeKind::Deleted => now.then_some("DELETED")?,
        ChangeKind::Modified => match (change.old.as_ref().is_some_and(in_scope), now) {
            (true, true) => "MODIFIED",
            (false, true) => "ADDED",
            (true, false) => "DELETED",
            (false, false) => return None,
        },
    };
    Some(line(kind, change.object.clone()))
}
