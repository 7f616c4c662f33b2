//! Server-sent events as text: an event's frame (`event:` then `data:` lines), the comment
//! ping, and the frames of a run's [`LogEvent`]s and of `/api/events`.
//! Pure: no IO (checked by `cargo xtask tidy`).

use std::time::Duration;

use crate::api::LogEvent;

/// How often an open stream sends [`PING`] (keeps proxies from closing it, and finds a reader
/// that left).
pub(crate) const PING_EVERY: Duration = Duration::from_secs(15);

/// How often `/api/events` asks the source for its change mark.
pub(crate) const POLL_EVERY: Duration = Duration::from_secs(2);

/// A comment line: readers ignore it.
pub(crate) const PING: &str = ": ping\n\n";

/// The frame of one event named `name` carrying `data` (one `data:` line per line of it).
pub(crate) fn frame(name: &str, data: &str) -> String {
    let mut out = format!("event: {name}\n");
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line.strip_suffix('\r').unwrap_or(line));
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The frame of a run's log event, its `event:` the tag and its `data:` the whole event as
/// JSON; and whether it is the last (`end`, `error`).
pub(crate) fn log_frame(event: &LogEvent) -> (String, bool) {
    let (name, last) = match event {
        LogEvent::Line(_) => ("line", false),
        LogEvent::Note { .. } => ("note", false),
        LogEvent::End { .. } => ("end", true),
        LogEvent::Error { .. } => ("error", true),
    };
    let data = serde_json::to_string(event).unwrap_or_else(|e| {
        serde_json::json!({"event": "error", "error": format!("cannot encode a log event: {e}")}).to_string()
    });
    (frame(name, &data), last)
}

/// The `changed` event of `/api/events` for the change mark `mark`.
pub(crate) fn changed(mark: &str) -> String {
    frame("changed", &serde_json::json!({ "mark": mark }).to_string())
}

#[cfg(test)]
mod tests {
    use theseus_core::backend::{JobState, LogLine};

    use super::*;

    #[test]
    fn frames_one_data_line_per_line() {
        assert_eq!(frame("x", "{}"), "event: x\ndata: {}\n\n");
        assert_eq!(frame("x", "a\nb\r\nc"), "event: x\ndata: a\ndata: b\ndata: c\n\n");
    }

    #[test]
    fn log_events_are_tagged_and_end_the_stream() {
        let line = LogEvent::Line(LogLine { rank: Some(1), text: "a\nb \"q\"".into(), source: None });
        let (text, last) = log_frame(&line);
        assert_eq!(text, "event: line\ndata: {\"event\":\"line\",\"rank\":1,\"text\":\"a\\nb \\\"q\\\"\"}\n\n");
        assert!(!last);
        let (text, last) = log_frame(&LogEvent::Note { text: "waiting".into() });
        assert_eq!(text, "event: note\ndata: {\"event\":\"note\",\"text\":\"waiting\"}\n\n");
        assert!(!last);
        let (text, last) = log_frame(&LogEvent::End { state: JobState::Failed, exit_code: Some(3) });
        assert_eq!(text, "event: end\ndata: {\"event\":\"end\",\"state\":\"failed\",\"exit_code\":3}\n\n");
        assert!(last);
        let (text, last) = log_frame(&LogEvent::Error { error: "gone".into() });
        assert_eq!(text, "event: error\ndata: {\"event\":\"error\",\"error\":\"gone\"}\n\n");
        assert!(last);
    }

    #[test]
    fn changed_carries_the_mark() {
        assert_eq!(changed("12:ab"), "event: changed\ndata: {\"mark\":\"12:ab\"}\n\n");
        assert_eq!(PING, ": ping\n\n");
    }
}
