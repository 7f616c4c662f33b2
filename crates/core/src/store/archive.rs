//! The two archives of the store protocol, written in constant memory: the missing objects
//! (content read from the snapshot once; the receiver checks each against its name), and the
//! run dir as links into the store.

use std::io::{self, Read, Write};

use super::plan::{ObjectKey, PlanEntry, StorePlan};
use super::{Materialize, OBJECTS_DIR, SENTINEL};
use crate::snapshot::Snapshot;
use crate::{Error, Result};

/// A per-run file written into the run dir after the snapshot (the bootstrap, a batch script).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFile {
    /// Path relative to the run dir.
    pub path: String,
    /// Content.
    pub contents: Vec<u8>,
    /// Mode (0644 or 0755).
    pub mode: u32,
}

impl ExtraFile {
    /// The rendered bootstrap files of a job.
    pub fn bootstrap(bootstrap: &crate::bootstrap::RenderedBootstrap) -> Vec<ExtraFile> {
        bootstrap
            .files
            .iter()
            .map(|f| ExtraFile {
                path: f.path.clone(),
                contents: f.contents.clone().into_bytes(),
                mode: if f.executable { 0o755 } else { 0o644 },
            })
            .collect()
    }
}

/// A tar header with fixed owner and mtime 0.
pub(super) fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}

/// Writes the objects `keys` of `plan` as a tar (entries `ab/cdef…[.x]`, read-only modes,
/// mtime 0), reading each from `snapshot` once. A file whose size changed since it was hashed
/// is an error naming it. Content is not hashed again here: the receiving script checks every
/// object against its name ([`super::scripts::UPLOAD`]), which catches a file edited in place
/// since it was hashed (see [`super::ship()`], which names the file).
pub fn write_objects(snapshot: &Snapshot, plan: &StorePlan, keys: &[ObjectKey], out: &mut dyn Write) -> Result<()> {
    let mut by_file: Vec<(usize, ObjectKey)> =
        keys.iter().filter_map(|k| plan.objects.get(k).map(|(i, _)| (*i, *k))).collect();
    by_file.sort();
    let indices: Vec<usize> = by_file.iter().map(|(i, _)| *i).collect();
    let mut builder = tar::Builder::new(out);
    let mut next = 0;
    let tar_err = |e: io::Error| Error::io("write the object archive of", &snapshot.root, e);
    snapshot.for_each_content(&indices, &mut |i, file, size, reader| {
        let key = by_file[next].1;
        debug_assert_eq!(by_file[next].0, i);
        next += 1;
        let changed = || {
            Error::InvalidConfig(format!(
                "`{}` changed while it was being shipped; submit again",
                snapshot.root.join(&file.path).display()
            ))
        };
        if size != file.size {
            return Err(changed());
        }
        let mut counting = CountingReader { inner: reader.take(size), read: 0 };
        let mut header = header(tar::EntryType::Regular, key.mode(), size);
        builder.append_data(&mut header, key.path(), &mut counting).map_err(tar_err)?;
        if counting.read != size {
            return Err(changed());
        }
        Ok(())
    })?;
    builder.finish().map_err(tar_err)?;
    Ok(())
}

/// The exact length of the archive [`write_objects`] writes for `keys`: a 512-byte header per
/// object (its name, `ab/` and 62 hex digits plus `.x`, fits the header), its content padded to
/// 512 bytes, and the two zero blocks that end a tar. Known without reading a byte, so the
/// archive streams once.
pub fn objects_len(plan: &StorePlan, keys: &[ObjectKey]) -> u64 {
    let padded = |size: u64| size.div_ceil(512) * 512;
    keys.iter().filter_map(|k| plan.objects.get(k)).map(|(_, size)| 512 + padded(*size)).sum::<u64>() + 1024
}

/// The length of what `write` writes, found by writing it into a counter (for archives of
/// headers only, such as [`write_materialize`]'s, whose length is cheap to count).
pub fn counted_len(write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<u64> {
    struct Counter(u64);
    impl Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    write(&mut counter)?;
    Ok(counter.0)
}

/// Writes the run dir's archive for [`super::scripts::MATERIALIZE`]: entries relative to the
/// work root `root`, under `<dest>.partial` (`dest` relative to `root`), then `extra` (with
/// modification time `mtime`, in seconds), then the token entry last. The same arguments give
/// the same bytes: a transport may write the archive twice and compare.
#[allow(clippy::too_many_arguments)]
pub fn write_materialize(
    plan: &StorePlan,
    root: &str,
    dest: &str,
    mode: Materialize,
    extra: &[ExtraFile],
    token: &str,
    mtime: u64,
    out: &mut dyn Write,
) -> io::Result<()> {
    let partial = format!("{dest}.partial");
    let copies = format!("{dest}.partial.copy");
    let mut builder = tar::Builder::new(out);
    for (path, entry) in &plan.files {
        match entry {
            PlanEntry::Object(key) => match mode {
                Materialize::Link => {
                    let mut h = header(tar::EntryType::Link, key.mode(), 0);
                    builder.append_link(&mut h, format!("{partial}/{path}"), format!("{OBJECTS_DIR}/{key}"))?;
                }
                Materialize::Copy => {
                    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                    let target = format!("{}/{OBJECTS_DIR}/{key}", root.trim_end_matches('/'));
                    builder.append_link(&mut h, format!("{copies}/{path}"), target)?;
                }
            },
            PlanEntry::Symlink(target) => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                builder.append_link(&mut h, format!("{partial}/{path}"), target)?;
            }
        }
    }
    let sentinel = ExtraFile { path: SENTINEL.into(), contents: token.as_bytes().to_vec(), mode: 0o644 };
    for file in extra.iter().chain(std::iter::once(&sentinel)) {
        let mut h = header(tar::EntryType::Regular, file.mode, file.contents.len() as u64);
        h.set_mtime(mtime);
        builder.append_data(&mut h, format!("{partial}/{}", file.path), file.contents.as_slice())?;
    }
    builder.finish()
}

/// Counts everything read through it.
struct CountingReader<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}
