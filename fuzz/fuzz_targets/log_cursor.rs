//! The log follower's line cursor: a pod's log read again and again from its first line as it
//! grows (a stream that broke and was reopened), then once more when the container has ended.
//! Whatever the log and wherever the reads stop, each line is delivered once, in order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use theseus_backend_volcano::log_cursor::LineCursor;

fuzz_target!(|data: &[u8]| {
    // The first bytes say where the growing reads stop; the rest is the log.
    let Some((&cuts, rest)) = data.split_first() else { return };
    let cuts = usize::from(cuts % 8);
    if rest.len() < cuts {
        return;
    }
    let (stops, log) = rest.split_at(cuts);
    let mut stops: Vec<usize> = stops.iter().map(|&b| usize::from(b) * log.len() / 255).collect();
    stops.sort_unstable();
    let mut cursor = LineCursor::default();
    let mut got = Vec::new();
    for stop in stops {
        got.extend(cursor.read_all(&log[..stop], false));
    }
    got.extend(cursor.read_all(log, true));
    let mut want: Vec<String> = Vec::new();
    let mut lines = log.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        if lines.peek().is_none() && line.is_empty() {
            break;
        }
        let line = if lines.peek().is_some() { line.strip_suffix(b"\r").unwrap_or(line) } else { line };
        want.push(String::from_utf8_lossy(line).into_owned());
    }
    assert_eq!(got, want);
    assert_eq!(cursor.delivered(), want.len());
});
