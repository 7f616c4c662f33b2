//! The live answers as event-stream bodies: a run's log events, and `/api/events` (the source's
//! change mark, polled). Both send a ping every 15 s and end when the server shuts down.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};

use crate::api::LogEvents;
use crate::respond::{self, Body};
use crate::source::Source;
use crate::sse;

/// Says when the server shuts down (`true`); a closed channel means the same.
pub(crate) type Stop = watch::Receiver<bool>;

/// The response for `/api/runs/{id}/logs/stream`: each event as it comes, then the stream ends
/// after `end` or `error` (or when the source's stream ends).
pub(crate) fn logs(events: LogEvents, stop: Stop) -> Response<Body> {
    struct State {
        events: LogEvents,
        ping: Interval,
        stop: Stop,
        done: bool,
    }
    let state = State { events, ping: ping(), stop, done: false };
    let frames = futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        tokio::select! {
            event = s.events.next() => {
                let (frame, last) = sse::log_frame(&event?);
                s.done = last;
                Some((frame, s))
            }
            _ = s.ping.tick() => Some((sse::PING.to_owned(), s)),
            _ = stopped(&mut s.stop) => None,
        }
    });
    event_stream(frames)
}

/// The response for `/api/events`: `changed` with the source's mark at once, then whenever the
/// mark differs from the last one sent (asked every 2 s).
pub(crate) fn changes(source: Arc<dyn Source>, stop: Stop) -> Response<Body> {
    struct State {
        source: Arc<dyn Source>,
        last: Option<String>,
        poll: Interval,
        ping: Interval,
        stop: Stop,
    }
    let mut poll = tokio::time::interval(sse::POLL_EVERY);
    poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = State { source, last: None, poll, ping: ping(), stop };
    let frames = futures::stream::unfold(state, |mut s| async move {
        loop {
            tokio::select! {
                _ = s.poll.tick() => {
                    // A slow answer must not hold the stream open past shutdown.
                    let mark = tokio::select! {
                        mark = s.source.version() => mark,
                        () = stopped(&mut s.stop) => return None,
                    };
                    match mark {
                    Ok(mark) if s.last.as_ref() != Some(&mark) => {
                        let frame = sse::changed(&mark);
                        s.last = Some(mark);
                        return Some((frame, s));
                    }
                    Ok(_) => {}
                    // The page keeps what it shows; the next poll tries again.
                    Err(e) => tracing::warn!("theseus ui: cannot read the ledger's change mark: {e}"),
                    }
                }
                _ = s.ping.tick() => return Some((sse::PING.to_owned(), s)),
                _ = stopped(&mut s.stop) => return None,
            }
        }
    });
    event_stream(frames)
}

/// The response carrying `frames` as `text/event-stream`.
fn event_stream(frames: impl futures::Stream<Item = String> + Send + 'static) -> Response<Body> {
    let body = StreamBody::new(frames.map(|frame| Ok::<_, Infallible>(Frame::data(Bytes::from(frame)))));
    let mut response = respond::with_body(StatusCode::OK, "text/event-stream; charset=utf-8", body.boxed_unsync());
    // Tells a buffering reverse proxy (nginx) to pass each event on at once.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// A ping timer whose first tick is one period from now.
fn ping() -> Interval {
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + sse::PING_EVERY, sse::PING_EVERY);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ping
}

/// Resolves once the server shuts down.
pub(crate) async fn stopped(stop: &mut Stop) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}
