//! `GET pods/{name}/log`: a container's output from its log file, optionally followed until the
//! pod is terminal, with `tailLines`. A followed stream can be reset by the faults
//! ([`crate::Faults::cut_log_streams`]), as a proxy or an apiserver restart would.

use std::io::SeekFrom;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use crate::Shared;
use crate::discovery::known;
use crate::response::{Body, text};
use crate::status::{ApiError, Result};

/// How often a followed log checks for new output.
const FOLLOW_POLL: Duration = Duration::from_millis(50);

/// Serves one log request.
pub(crate) async fn serve(
    shared: &Arc<Shared>,
    ns: &str,
    name: &str,
    query: &[(String, String)],
) -> Result<Response<Body>> {
    let get = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let truthy = |key: &str| matches!(get(key), Some("true" | "1"));
    let pod = shared.store.get(known::pods(), ns, name)?;
    if truthy("previous") {
        return Err(ApiError::bad_request(format!(
            "previous terminated container not found in pod \"{name}\" (containers are never restarted in the simulator)"
        )));
    }
    let names: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect();
    let container = match get("container") {
        Some(c) if names.iter().any(|n| n == c) => c.to_owned(),
        Some(c) => return Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}"))),
        None if names.len() == 1 => names[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    let tail = match get("tailLines") {
        Some(n) => Some(n.parse::<usize>().map_err(|_| ApiError::bad_request(format!("invalid tailLines `{n}`")))?),
        None => None,
    };
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_owned();
    let Some(path) = shared.runtime.log_path(ns, name, &uid, &container) else {
        let reason = pod
            .pointer("/status/containerStatuses/0/state/waiting/reason")
            .and_then(Value::as_str)
            .unwrap_or("ContainerCreating");
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
        )));
    };
    let content = tokio::fs::read(&path).await.unwrap_or_default();
    let start = match tail {
        Some(n) => tail_offset(&content, n),
        None => 0,
    };
    if !truthy("follow") {
        return Ok(text(StatusCode::OK, Bytes::copy_from_slice(&content[start..])));
    }
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(16);
    let shared = shared.clone();
    let (ns, name) = (ns.to_owned(), name.to_owned());
    let (mut cuts, mut stalls, cut_after) = shared.faults.log_cuts();
    cuts.borrow_and_update();
    stalls.borrow_and_update();
    let cut_at = cut_after.map(|d| tokio::time::Instant::now() + d);
    tokio::spawn(async move {
        let Ok(mut file) = tokio::fs::File::open(&path).await else { return };
        if file.seek(SeekFrom::Start(start as u64)).await.is_err() {
            return;
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // Decide about the end before reading, so output written just before the pod
            // finished is still sent.
            let finished = match shared.store.get(known::pods(), &ns, &name) {
                Ok(pod) => {
                    pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid.as_str())
                        || container_finished(&pod, &container)
                }
                Err(_) => true,
            };
            loop {
                match file.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(Ok(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                            return;
                        }
                    }
                }
            }
            if finished {
                return;
            }
            let cut = async {
                match cut_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
                _ = tx.closed() => return,
                _ = cuts.changed() => {
                    let _ = tx.send(Err(reset())).await;
                    return;
                }
                () = cut => {
                    let _ = tx.send(Err(reset())).await;
                    return;
                }
                _ = stalls.changed() => {
                    // Silent for good: hold the connection open until the client gives up.
                    tx.closed().await;
                    return;
                }
            }
        }
    });
    let mut resp = Response::new(result_body(rx));
    resp.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
    Ok(resp)
}

fn reset() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "log stream cut by a simulated fault")
}

/// A chunked body fed by a channel whose errors abort the response (the client sees the
/// connection reset mid-body).
fn result_body(mut rx: mpsc::Receiver<std::io::Result<Bytes>>) -> Body {
    let stream =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|b| b.map(|b| b.map(hyper::body::Frame::data))));
    http_body_util::BodyExt::boxed(http_body_util::StreamBody::new(stream))
}

fn container_finished(pod: &Value, container: &str) -> bool {
    if matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed")) {
        return true;
    }
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["name"].as_str() == Some(container) && c.pointer("/state/terminated").is_some())
}

/// Byte offset where the last `n` lines start.
fn tail_offset(content: &[u8], n: usize) -> usize {
    if n == 0 {
        return content.len();
    }
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return i + 1;
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::tail_offset;

    #[test]
    fn tails_lines() {
        let text = b"a\nb\nc\n";
        assert_eq!(&text[tail_offset(text, 2)..], b"b\nc\n");
        assert_eq!(&text[tail_offset(text, 5)..], b"a\nb\nc\n");
        assert_eq!(&text[tail_offset(text, 0)..], b"");
        assert_eq!(&b"a\nb"[tail_offset(b"a\nb", 1)..], b"b");
    }
}
