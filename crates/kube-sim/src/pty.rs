//! A pseudo-terminal for an exec with `tty=true`, as the container runtime gives one: the
//! process gets the terminal's slave side as stdin, stdout and stderr, in a session of its own
//! with that terminal as its controlling terminal (`setsid --ctty`, from util-linux, so that no
//! unsafe `pre_exec` is needed); the server reads and writes the master side and sets the size
//! that resize frames carry (`TIOCSWINSZ`).

use std::io;
use std::os::fd::OwnedFd;
use std::process::Stdio;

use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;

/// A terminal's master side.
pub(crate) struct Pty {
    master: OwnedFd,
}

impl Pty {
    /// Opens a new terminal of `cols` x `rows`, returning it and its slave side.
    pub(crate) fn open(cols: u16, rows: u16) -> io::Result<(Pty, OwnedFd)> {
        let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        let name = rustix::pty::ptsname(&master, Vec::new())?;
        let slave = rustix::fs::open(name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())?;
        let pty = Pty { master };
        pty.resize(cols, rows)?;
        Ok((pty, slave))
    }

    /// Sets the terminal's size (the process gets SIGWINCH).
    pub(crate) fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        let size = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        Ok(rustix::termios::tcsetwinsize(&self.master, size)?)
    }

    /// A reader and a writer of the master side.
    pub(crate) fn streams(&self) -> io::Result<(tokio::fs::File, tokio::fs::File)> {
        let reader = std::fs::File::from(self.master.try_clone()?);
        let writer = std::fs::File::from(self.master.try_clone()?);
        Ok((tokio::fs::File::from_std(reader), tokio::fs::File::from_std(writer)))
    }
}

/// `program args…` as a command that runs on the terminal whose slave side is `slave`, as its
/// controlling terminal, in a session (and process group) of its own.
pub(crate) fn command(program: &str, args: &[String], slave: &OwnedFd) -> io::Result<tokio::process::Command> {
    let mut cmd = tokio::process::Command::new("setsid");
    cmd.arg("--ctty")
        .arg(program)
        .args(args)
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave.try_clone()?));
    Ok(cmd)
}

/// The size in a resize frame's JSON (`{"Width": 80, "Height": 24}`, as `remotecommand`'s
/// `TerminalSize` is encoded).
pub(crate) fn parse_resize(payload: &[u8]) -> Option<(u16, u16)> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let dim = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).and_then(|n| u16::try_from(n).ok());
    Some((dim("Width")?, dim("Height")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_frames() {
        assert_eq!(parse_resize(br#"{"Width":120,"Height":40}"#), Some((120, 40)));
        assert_eq!(parse_resize(br#"{"Width":120}"#), None);
        assert_eq!(parse_resize(b"junk"), None);
    }

    #[tokio::test]
    async fn a_process_on_the_terminal_sees_a_tty_of_the_given_size() {
        use tokio::io::AsyncReadExt as _;
        let (pty, slave) = Pty::open(101, 33).unwrap();
        let mut cmd = command("sh", &["-c".into(), "tty; stty size".into()], &slave).unwrap();
        let mut child = cmd.spawn().unwrap();
        drop(cmd);
        drop(slave);
        let (mut reader, _writer) = pty.streams().unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        // The master reads EIO once the last slave descriptor is closed.
        while let Ok(n) = reader.read(&mut buf).await {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        assert!(child.wait().await.unwrap().success());
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("/dev/pts/") && text.contains("33 101"), "{text}");
    }
}
