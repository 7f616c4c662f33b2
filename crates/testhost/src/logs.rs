//! A sandbox run's output: the lines of its log file, and with `follow`, the lines still to
//! come until the run is over.

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use futures::stream;
use theseus_core::backend::{LogLine, LogStream};

/// Where a tail is.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    ready: VecDeque<String>,
    follow: bool,
    done: bool,
    ended: Box<dyn Fn() -> bool + Send>,
}

impl Tail {
    /// Reads what was appended since the last read into whole lines.
    fn read_more(&mut self) {
        let Ok(mut file) = std::fs::File::open(&self.path) else { return };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        let Ok(n) = file.read_to_end(&mut bytes) else { return };
        self.offset += n as u64;
        self.partial.extend_from_slice(&bytes);
        while let Some(at) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=at).collect();
            self.ready.push_back(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
        }
    }

    /// The last line when it has no newline.
    fn flush(&mut self) {
        if !self.partial.is_empty() {
            self.ready.push_back(String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned());
        }
    }
}

/// The lines of `path`; with `follow`, until `ended()` says the run is over and all it wrote
/// was read.
pub(crate) fn stream(path: PathBuf, follow: bool, ended: impl Fn() -> bool + Send + 'static) -> LogStream {
    let tail = Tail {
        path,
        offset: 0,
        partial: Vec::new(),
        ready: VecDeque::new(),
        follow,
        done: false,
        ended: Box::new(ended),
    };
    Box::pin(stream::unfold(tail, |mut tail| async move {
        loop {
            if let Some(text) = tail.ready.pop_front() {
                return Some((Ok(LogLine { rank: None, text, source: None }), tail));
            }
            if tail.done {
                return None;
            }
            // Seen over before the read: the read gets everything it wrote.
            let over = !tail.follow || (tail.ended)();
            tail.read_more();
            if over {
                tail.flush();
                tail.done = true;
            } else if tail.ready.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }))
}
