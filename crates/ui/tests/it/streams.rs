//! The event streams: the framing of a run's log events, a line printed after the stream opened,
//! `end` closing it, pings, `/api/events` announcing a changed mark, and shutdown ending them.

use std::time::Duration;

use http::{Method, StatusCode};
use theseus_core::backend::JobState;
use theseus_ui::LogEvent;

use crate::harness::{Events, PATIENCE, TOKEN, get, line, request, send, start};

async fn open(addr: std::net::SocketAddr, path: &str) -> Events {
    let response = send(addr, Method::GET, path, &[("x-theseus-token", TOKEN)]).await;
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    let headers = response.headers();
    assert_eq!(headers["content-type"], "text/event-stream; charset=utf-8");
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    Events::new(response.into_body())
}

#[tokio::test]
async fn a_run_s_events_are_framed_by_tag_and_end_closes_the_stream() {
    let server = start().await;
    let mut events = open(server.addr, "/api/runs/done/logs/stream").await;
    let want = [
        "event: line\ndata: {\"event\":\"line\",\"rank\":0,\"text\":\"first\"}\n\n",
        "event: note\ndata: {\"event\":\"note\",\"text\":\"a note\"}\n\n",
        "event: line\ndata: {\"event\":\"line\",\"rank\":0,\"text\":\"second\"}\n\n",
        "event: end\ndata: {\"event\":\"end\",\"state\":\"completed\",\"exit_code\":0}\n\n",
    ];
    for frame in want {
        assert_eq!(events.next().await.as_deref(), Some(frame));
    }
    assert_eq!(events.next().await, None, "the stream stays open after `end`");
}

#[tokio::test]
async fn a_line_printed_after_the_stream_opened_arrives_and_end_closes_it() {
    let server = start().await;
    // The head comes before any event: the page's EventSource opens at once.
    let mut events = open(server.addr, "/api/runs/live/logs/stream").await;
    assert_eq!(
        events.next().await.unwrap(),
        "event: line\ndata: {\"event\":\"line\",\"rank\":0,\"text\":\"before\"}\n\n"
    );
    server.live.send(line("printed later")).unwrap();
    assert!(events.next().await.unwrap().contains("\"text\":\"printed later\""));
    server.live.send(LogEvent::Note { text: "reconnecting".into() }).unwrap();
    assert!(events.next().await.unwrap().starts_with("event: note\n"));
    server.live.send(LogEvent::End { state: JobState::Cancelled, exit_code: None }).unwrap();
    assert_eq!(
        events.next().await.unwrap(),
        "event: end\ndata: {\"event\":\"end\",\"state\":\"cancelled\",\"exit_code\":null}\n\n"
    );
    // Whatever the source would send after `end` is not read.
    let _ = server.live.send(line("after the end"));
    assert_eq!(events.next().await, None);
}

#[tokio::test]
async fn an_error_event_closes_the_stream() {
    let server = start().await;
    let mut events = open(server.addr, "/api/runs/live/logs/stream").await;
    events.next().await.unwrap();
    server.live.send(LogEvent::Error { error: "lost the host".into() }).unwrap();
    assert_eq!(
        events.next().await.unwrap(),
        "event: error\ndata: {\"event\":\"error\",\"error\":\"lost the host\"}\n\n"
    );
    assert_eq!(events.next().await, None);
}

#[tokio::test]
async fn follow_0_streams_the_history_only() {
    let server = start().await;
    let mut events = open(server.addr, "/api/runs/live/logs/stream?follow=0").await;
    assert!(events.next().await.unwrap().contains("before"));
    assert!(events.next().await.unwrap().contains("\"state\":\"running\""));
    assert_eq!(events.next().await, None);
}

#[tokio::test(start_paused = true)]
async fn an_open_stream_is_pinged_every_15_s() {
    let server = start().await;
    let mut events = open(server.addr, "/api/runs/live/logs/stream").await;
    events.next().await.unwrap();
    let opened = tokio::time::Instant::now();
    // The clock is paused: it jumps to the next timer whenever everything waits.
    let patience = Duration::from_secs(60);
    assert_eq!(events.next_within(patience).await.as_deref(), Some(": ping\n\n"));
    assert!(opened.elapsed() >= Duration::from_secs(15), "pinged after {:?}", opened.elapsed());
    assert_eq!(events.next_within(patience).await.as_deref(), Some(": ping\n\n"));
    assert!(opened.elapsed() >= Duration::from_secs(30));
    server.live.send(line("still here")).unwrap();
    assert!(events.next().await.unwrap().contains("still here"));
}

#[tokio::test]
async fn a_reader_that_leaves_drops_the_run_s_stream() {
    let server = start().await;
    let mut events = open(server.addr, "/api/runs/live/logs/stream").await;
    events.next().await.unwrap();
    drop(events);
    // The server notices the closed connection (at once, or at the latest at the next line it
    // writes) and drops the source's stream: the feed's receiver is gone.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !server.live.is_closed() {
        let _ = server.live.send(line("anyone?"));
        assert!(tokio::time::Instant::now() < deadline, "the source's stream outlived its reader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn events_announce_the_mark_at_connect_and_when_it_changes() {
    let server = start().await;
    let mut events = open(server.addr, "/api/events").await;
    assert_eq!(events.next().await.unwrap(), "event: changed\ndata: {\"mark\":\"mark-1\"}\n\n");
    let reply = request(server.addr, Method::POST, "/api/runs/live/cancel", &[("x-theseus-token", TOKEN)]).await;
    assert_eq!(reply.status, StatusCode::OK);
    // Polled every 2 s: the next event is the new mark (no repeat of the old one).
    assert_eq!(events.next().await.unwrap(), "event: changed\ndata: {\"mark\":\"mark-2\"}\n\n");
}

#[tokio::test]
async fn events_outlive_a_change_mark_that_cannot_be_read() {
    let server = start().await;
    *server.fake.version_broken.lock().unwrap() = true;
    let mut events = open(server.addr, "/api/events").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    *server.fake.version_broken.lock().unwrap() = false;
    assert_eq!(events.next().await.unwrap(), "event: changed\ndata: {\"mark\":\"mark-1\"}\n\n");
}

#[tokio::test]
async fn shutdown_ends_open_streams_and_run_returns() {
    let mut server = start().await;
    let mut changes = open(server.addr, "/api/events").await;
    changes.next().await.unwrap();
    let mut logs = open(server.addr, "/api/runs/live/logs/stream").await;
    logs.next().await.unwrap();
    server.shut_down();
    assert_eq!(changes.next().await, None);
    assert_eq!(logs.next().await, None);
    let ended = server.ended.take().unwrap();
    tokio::time::timeout(PATIENCE, ended).await.expect("`run` did not return after shutdown").unwrap();
    // And it accepts no more.
    assert!(tokio::net::TcpStream::connect(server.addr).await.is_err(), "still accepting after shutdown");
}

#[tokio::test]
async fn shutdown_lets_an_answer_in_flight_finish() {
    let mut server = start().await;
    let addr = server.addr;
    let asked = tokio::spawn(async move { get(addr, "/api/runs/slow").await });
    server.fake.slow_started.notified().await;
    server.shut_down();
    let reply = asked.await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["run"]["identity"]["name"], "done");
    let ended = server.ended.take().unwrap();
    tokio::time::timeout(PATIENCE, ended).await.expect("`run` did not return after shutdown").unwrap();
}
