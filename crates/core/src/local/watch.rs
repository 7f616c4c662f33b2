//! Waiting for a change of a local run's files (its log, its run dir) with inotify, so that a
//! log follow wakes when the job writes or ends instead of on a timer; a short timer where
//! inotify cannot watch (no inotify, its limits reached, no such dir).

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
use tokio::io::unix::AsyncFd;

/// Changes of some dirs, or a timer.
pub(crate) struct Changes {
    fd: Option<AsyncFd<OwnedFd>>,
}

impl Changes {
    /// Watches the dirs `dirs` (those that can be watched: a file written, created, renamed
    /// into or closed there is a change).
    pub(crate) fn watch(dirs: &[&Path]) -> Changes {
        let watched = || {
            let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
            let flags = WatchFlags::MODIFY
                | WatchFlags::CLOSE_WRITE
                | WatchFlags::CREATE
                | WatchFlags::MOVED_TO
                | WatchFlags::ATTRIB;
            // Every dir is tried (not short-circuited): each that can be watched is.
            let watched = dirs.iter().filter(|dir| inotify::add_watch(&fd, **dir, flags).is_ok()).count();
            if watched == 0 {
                return None;
            }
            // (Deprecated because an fd it does not own may be closed under it; an `OwnedFd` it
            // owns cannot, which is what `register` asks its unsafe caller to promise.)
            #[allow(deprecated)]
            let fd = AsyncFd::new(fd).ok();
            fd
        };
        Changes { fd: watched() }
    }

    /// Whether the dirs are watched (else [`Changes::wait`] is a timer).
    #[cfg(test)]
    fn watching(&self) -> bool {
        self.fd.is_some()
    }

    /// Waits until a watched dir changes (the changes queued meanwhile are taken with it), for
    /// at most `at_most`; without a watch, sleeps `poll`.
    pub(crate) async fn wait(&mut self, at_most: Duration, poll: Duration) {
        let Some(fd) = &self.fd else {
            tokio::time::sleep(poll).await;
            return;
        };
        let changed = async {
            loop {
                let Ok(mut ready) = fd.readable().await else { return false };
                let mut buf = [0u8; 4096];
                match ready.try_io(|fd| rustix::io::read(fd.get_ref(), &mut buf).map_err(std::io::Error::from)) {
                    Ok(Ok(_)) => break,
                    Ok(Err(_)) => return false,
                    Err(_would_block) => {}
                }
            }
            // The rest of a burst of writes.
            let mut buf = [0u8; 4096];
            while rustix::io::read(fd.get_ref(), &mut buf).is_ok_and(|n| n > 0) {}
            true
        };
        if let Ok(false) = tokio::time::timeout(at_most, changed).await {
            // inotify failed: a timer from now on.
            self.fd = None;
            tokio::time::sleep(poll).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write in a watched dir ends the wait at once; a wait with no change ends after its
    /// bound.
    #[tokio::test]
    async fn a_write_ends_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let mut changes = Changes::watch(&[dir.path(), Path::new("/no/such/dir")]);
        assert!(changes.watching());
        let day = Duration::from_secs(86_400);
        let path = dir.path().join("log");
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            std::fs::write(path, "a line\n").unwrap();
        });
        tokio::time::timeout(Duration::from_secs(60), changes.wait(day, day)).await.expect("the write ends the wait");
        writer.await.unwrap();
        changes.wait(Duration::from_millis(10), day).await;
        assert!(!Changes::watch(&[Path::new("/no/such/dir")]).watching());
    }
}
