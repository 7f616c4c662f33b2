//! Reading and following the log file of a local run as a stream of lines. A follow waits
//! between reads for a change of the log's dir or the run dir (inotify, [`super::watch`]: a
//! write, the exit code), for at most [`WAIT_AT_MOST`], or [`POLL`] where it cannot watch.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::supervisor::files;
use super::watch::Changes;
use super::{LocalHandleData, read_status};
use crate::backend::{JobState, LogLine, LogOptions, LogStream};
use crate::{Error, Result};

/// The wait between reads where the run's dirs cannot be watched.
const POLL: Duration = Duration::from_millis(200);
/// The longest wait between reads of a watched run (the end of a run whose processes died
/// without an exit code shows in its status, not in its files).
const WAIT_AT_MOST: Duration = Duration::from_secs(1);
/// Delay before a second look at an `Unknown` state.
const RECHECK: Duration = Duration::from_millis(500);

struct Tail {
    run_id: String,
    data: LocalHandleData,
    options: LogOptions,
    reader: Option<BufReader<tokio::fs::File>>,
    partial: String,
    draining: bool,
    done: bool,
    /// Changes of the log's dir and the run dir, watched from before the first read.
    changes: Option<Changes>,
    /// When the run's status was last read (its processes looked for).
    checked: Option<Instant>,
}

/// Lines of the run's log. With `follow`, waits for new lines until the run is terminal and the
/// file is read to its end.
pub(crate) fn stream(run_id: String, data: LocalHandleData, options: LogOptions) -> LogStream {
    let tail = Tail {
        run_id,
        data,
        options,
        reader: None,
        partial: String::new(),
        draining: false,
        done: false,
        changes: None,
        checked: None,
    };
    futures::stream::unfold(tail, |mut tail| async move {
        loop {
            if tail.done {
                return None;
            }
            match next_line(&mut tail).await {
                Ok(Some(line)) => {
                    let line = parse(&line);
                    if tail.options.rank.is_some() && line.rank.is_some() && line.rank != tail.options.rank {
                        continue;
                    }
                    return Some((Ok(line), tail));
                }
                Ok(None) => return None,
                Err(e) => {
                    tail.done = true;
                    return Some((Err(e), tail));
                }
            }
        }
    })
    .boxed()
}

/// Splits a `[rank-N] ` prefix off a line.
fn parse(line: &str) -> LogLine {
    if let Some((n, text)) = line.strip_prefix("[rank-").and_then(|rest| rest.split_once("] "))
        && let Ok(rank) = n.parse()
    {
        return LogLine { rank: Some(rank), text: text.to_owned(), source: None };
    }
    LogLine { rank: None, text: line.to_owned(), source: None }
}

async fn next_line(tail: &mut Tail) -> Result<Option<String>> {
    if tail.options.follow && tail.changes.is_none() {
        let dirs: Vec<&std::path::Path> =
            tail.data.log_file.parent().into_iter().chain([tail.data.run_dir.as_path()]).collect();
        tail.changes = Some(Changes::watch(&dirs));
    }
    loop {
        if tail.reader.is_none() {
            match tokio::fs::File::open(&tail.data.log_file).await {
                Ok(f) => tail.reader = Some(BufReader::new(f)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if !tail.options.follow || tail.draining {
                        return Ok(None);
                    }
                    // A short job may start, write its log and end between the failed open
                    // and this look: once the run is over, open once more and read what it left.
                    if ended(tail).await {
                        tail.draining = true;
                    } else {
                        wait(tail).await;
                    }
                    continue;
                }
                Err(e) => return Err(Error::io("read", tail.data.log_file.clone(), e)),
            }
        }
        let reader = tail.reader.as_mut().expect("opened above");
        let mut buf = Vec::new();
        let n = reader
            .read_until(b'\n', &mut buf)
            .await
            .map_err(|e| Error::io("read", PathBuf::from(&tail.data.log_file), e))?;
        tail.partial.push_str(&String::from_utf8_lossy(&buf));
        if tail.partial.ends_with('\n') {
            let mut line = std::mem::take(&mut tail.partial);
            line.pop();
            return Ok(Some(line));
        }
        if n > 0 {
            continue;
        }
        // End of file for now.
        if !tail.options.follow || tail.draining {
            if tail.partial.is_empty() {
                return Ok(None);
            }
            return Ok(Some(std::mem::take(&mut tail.partial)));
        }
        if ended(tail).await {
            // One more pass reads what was written between the last read and the exit.
            tail.draining = true;
            continue;
        }
        wait(tail).await;
    }
}

/// Waits for a change of the run's files (or [`POLL`]).
async fn wait(tail: &mut Tail) {
    match tail.changes.as_mut() {
        Some(changes) => changes.wait(WAIT_AT_MOST, POLL).await,
        None => tokio::time::sleep(POLL).await,
    }
}

/// Whether the run has ended, looked at after each change: at once when it left its exit code,
/// else (a look for its processes costs a scan of `/proc`) at most every [`POLL`].
async fn ended(tail: &mut Tail) -> bool {
    let exited = tail.data.run_dir.join(files::EXIT_CODE).exists();
    if !exited && tail.checked.is_some_and(|at| at.elapsed() < POLL) {
        return false;
    }
    tail.checked = Some(Instant::now());
    terminal(tail).await
}

/// Whether the run has ended. `Unknown` (no process found and no exit code) is taken for the end
/// only when a second look, a moment later, still finds neither: a single look can fall between
/// two steps of a process (an `exec`, a rename) under load.
async fn terminal(tail: &Tail) -> bool {
    let state = read_status(&tail.run_id, &tail.data).state;
    if state != JobState::Unknown {
        return state.is_terminal();
    }
    tokio::time::sleep(RECHECK).await;
    let state = read_status(&tail.run_id, &tail.data).state;
    state.is_terminal() || state == JobState::Unknown
}
