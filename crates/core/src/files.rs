//! Reading the small files users point theseus at (experiment, dispatch config, kubeconfig):
//! only regular files, and only up to a size bound, so that `/dev/zero`, a FIFO or a huge file
//! is refused at once with an error naming the file and the limit, instead of hanging or
//! reading until memory runs out.
//!
//! The file is opened without blocking (`O_NONBLOCK`, which does nothing for regular files but
//! keeps a FIFO from blocking the open), then checked with `fstat` on the open descriptor (no
//! race between the check and the read), then read through a `take(limit + 1)`.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::{Error, Result};

/// Size bound of experiment and dispatch config files: 4 MiB.
pub const CONFIG_LIMIT: u64 = 4 << 20;

/// Size bound of kubeconfig files: 16 MiB (they can embed many clusters' certificates).
pub const KUBECONFIG_LIMIT: u64 = 16 << 20;

/// Reads `path` as UTF-8 text when it is a regular file of at most `limit` bytes. `what` names
/// the kind of file in errors, e.g. `experiment file`.
///
/// # Errors
/// [`Error::InvalidConfig`] naming the file (and the limit) when it is not a regular file, is
/// larger than `limit` or is not UTF-8; [`Error::Io`] when it cannot be opened or read.
pub fn read_bounded(path: &Path, limit: u64, what: &str) -> Result<String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| Error::io("read", path, e))?;
    let meta = file.metadata().map_err(|e| Error::io("read", path, e))?;
    if !meta.is_file() {
        return Err(Error::InvalidConfig(format!(
            "{what} {}: not a regular file ({}); give the path of a file",
            path.display(),
            kind(&meta.file_type())
        )));
    }
    let too_big =
        || Error::InvalidConfig(format!("{what} {}: larger than the limit of {}", path.display(), human(limit)));
    if meta.len() > limit {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|e| Error::io("read", path, e))?;
    // The file may have grown since `fstat`.
    if bytes.len() as u64 > limit {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::InvalidConfig(format!(
            "{what} {}: not UTF-8 text (at byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

/// A file type for messages.
fn kind(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// `4 MiB` style sizes for limits.
fn human(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("exp.yaml");
        std::fs::write(&path, "entrypoint: echo\n").unwrap();
        assert_eq!(read_bounded(&path, 1024, "experiment file").unwrap(), "entrypoint: echo\n");
    }

    #[test]
    fn refuses_devices_fifos_dirs_and_large_files() {
        let err = read_bounded(Path::new("/dev/zero"), CONFIG_LIMIT, "experiment file").unwrap_err().to_string();
        assert!(
            err.contains("/dev/zero") && err.contains("not a regular file") && err.contains("character device"),
            "{err}"
        );

        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Nobody writes to it: a blocking open would hang this test.
        let err = read_bounded(&fifo, CONFIG_LIMIT, "dispatch config file").unwrap_err().to_string();
        assert!(err.contains("a FIFO"), "{err}");

        let err = read_bounded(dir.path(), CONFIG_LIMIT, "experiment file").unwrap_err().to_string();
        assert!(err.contains("a directory"), "{err}");

        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'a'; 2048]).unwrap();
        let err = read_bounded(&big, 1024, "experiment file").unwrap_err().to_string();
        assert!(err.contains("big.yaml") && err.contains("limit of 1 KiB"), "{err}");
    }
}
