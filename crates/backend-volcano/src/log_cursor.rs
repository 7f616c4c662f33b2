//! Pure: which lines of a pod's log are new, across reopened streams.
//!
//! The kubelet serves a container's log from its first line on every read, so a stream that
//! broke is opened again and its first lines are the ones already delivered: they are skipped
//! by count. A line without its newline yet is held back until it is complete, unless the read
//! is the last one (the container has ended), when it is delivered as it is. `\r\n` endings
//! lose their `\r`; invalid UTF-8 is replaced. Fuzzed (`fuzz/fuzz_targets/log_cursor.rs`): for
//! any log and any sequence of growing reads, every line is delivered once, in order.

/// How far a log has been delivered, and where the current read is.
#[derive(Debug, Default, Clone)]
pub struct LineCursor {
    /// Lines delivered (complete ones, and a last partial one).
    delivered: usize,
    /// Complete lines seen in the current read.
    index: usize,
}

impl LineCursor {
    /// A new read of the log from its first line.
    pub fn reopen(&mut self) {
        self.index = 0;
    }

    /// The next complete line of the current read (`line` ends with `\n`): its text when it
    /// was not delivered before.
    pub fn complete(&mut self, line: &[u8]) -> Option<String> {
        let at = self.index;
        self.index += 1;
        if at < self.delivered {
            return None;
        }
        self.delivered += 1;
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        Some(String::from_utf8_lossy(line).into_owned())
    }

    /// What followed the last newline at the end of the last read: its text when it is not
    /// empty and was not delivered before.
    pub fn tail(&mut self, partial: &[u8]) -> Option<String> {
        if partial.is_empty() || self.index < self.delivered {
            return None;
        }
        self.delivered += 1;
        Some(String::from_utf8_lossy(partial).into_owned())
    }

    /// Lines delivered so far.
    pub fn delivered(&self) -> usize {
        self.delivered
    }

    /// Every new line of one read of the log whose bytes so far are `log` (the sync form of
    /// what the follower does with a stream).
    pub fn read_all(&mut self, log: &[u8], last: bool) -> Vec<String> {
        self.reopen();
        let mut out = Vec::new();
        let mut rest = log;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            out.extend(self.complete(&rest[..=end]));
            rest = &rest[end + 1..];
        }
        if last {
            out.extend(self.tail(rest));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_reads_deliver_each_line_once() {
        let mut cursor = LineCursor::default();
        assert_eq!(cursor.read_all(b"a\nb\npar", false), ["a", "b"]);
        assert_eq!(cursor.read_all(b"a\nb\npartial\r\nc\n", false), ["partial", "c"]);
        assert!(cursor.read_all(b"a\nb\npartial\r\nc\n", false).is_empty());
        assert_eq!(cursor.read_all(b"a\nb\npartial\r\nc\nend", true), ["end"]);
        assert_eq!(cursor.delivered(), 5);
    }
}
