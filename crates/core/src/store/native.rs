//! [`ship_local`]: the store protocol done in-process on this machine, for the local backend.
//!
//! Same layout and guarantees as the scripts ([`super::scripts`]) driven through
//! [`super::LocalShell`], without their cost (a process per prefix dir, `read` builtins that
//! take a byte per system call, each file hashed three times). Each file the hash cache does
//! not know is read once and written once:
//!
//! 1. the run dir's dirs are made under `<dest>.partial`;
//! 2. hash and publish (on several threads): each such file is copied straight to its place in
//!    `<dest>.partial` (with `copy`, to a private temp file of the store instead), read-only
//!    with mtime 0 as objects are, hashed on the way, then published into the store with
//!    `link()`, which is atomic: a second ship of the same content, concurrent or not, finds
//!    the name taken (`EEXIST`), and its own file is then swapped for a link to the object
//!    already there, so that runs share one copy. An object with a recent mtime was written in
//!    place by a job: it is removed and published again, as [`super::scripts::MISSING`] does;
//! 3. files whose hash came from the cache are linked from the store (or copied from the
//!    snapshot, checked against their key and published, when the store lacks them or an
//!    object vanished under a concurrent `gc`);
//! 4. with `copy`, each file is copied out of the store as a private, writable file; symlinks
//!    and the per-run files are added, and `<dest>.partial` is renamed to `<dest>`.
//!
//! Every step checks [`crate::interrupt`] between files and removes what it made when stopped
//! or failing.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::archive::ExtraFile;
use super::plan::{ObjectKey, PlanEntry, StorePlan};
use super::ship::{ShipReport, ShipRequest, mib};
use super::{Materialize, OBJECTS_DIR};
use crate::snapshot::Snapshot;
use crate::{Error, Result};

/// An object modified within this long is one a job wrote in place (objects carry mtime 0);
/// the same window as [`super::scripts::MISSING`]'s `find -mtime -3650`.
const TAMPERED: Duration = Duration::from_secs(3650 * 24 * 3600);

/// Ships `request` on this machine without any external tool (see the module docs).
pub async fn ship_local(request: ShipRequest) -> Result<ShipReport> {
    tokio::task::spawn_blocking(move || ship_blocking(&request))
        .await
        .map_err(|e| Error::backend("store", format!("shipping task failed: {e}")))?
}

fn ship_blocking(request: &ShipRequest) -> Result<ShipReport> {
    crate::paths::check_under(&request.root, &request.dest).map_err(Error::InvalidConfig)?;
    let root = Path::new(&request.root);
    let objects = root.join(OBJECTS_DIR);
    let incoming = root.join(".theseus/incoming").join(super::ship::upload_dir_name(&request.dest));
    fs::create_dir_all(&objects).map_err(|e| Error::io("create", &objects, e))?;
    fs::create_dir_all(&incoming).map_err(|e| Error::io("create", &incoming, e))?;
    let result = ship_run_dir(request, &objects, &incoming);
    let _ = fs::remove_dir_all(&incoming);
    result
}

/// Builds the run dir under `<dest>.partial` and renames it into place; on any failure
/// nothing of it is left.
fn ship_run_dir(request: &ShipRequest, objects: &Path, incoming: &Path) -> Result<ShipReport> {
    let dest = Path::new(&request.dest);
    let partial = PathBuf::from(format!("{}.partial", request.dest));
    let exists = || Error::AlreadyExists { what: format!("run dir `{}` on this machine", request.dest) };
    if dest.exists() {
        return Err(exists());
    }
    let _ = fs::remove_dir_all(&partial);
    let result = ship_into(request, objects, incoming, &partial).and_then(|report| {
        if dest.exists() {
            return Err(exists());
        }
        fs::rename(&partial, dest).map_err(|e| Error::io("rename into place", dest, e))?;
        Ok(report)
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&partial);
    }
    result
}

fn ship_into(request: &ShipRequest, objects: &Path, incoming: &Path, partial: &Path) -> Result<ShipReport> {
    let snapshot = &request.snapshot;
    let started = std::time::Instant::now();
    make_dirs(snapshot, &request.extra, partial)?;
    let store = Store::new(objects, incoming, partial, request.mode);
    let read: Vec<AtomicBool> = snapshot.files.iter().map(|_| AtomicBool::new(false)).collect();
    // Bytes copied while hashing, reported (total unknown yet) at most once a MiB.
    let copied = AtomicU64::new(0);
    let (digests, hashed) = snapshot.digests_through(snapshot.hash_cache.as_deref(), &|i, reader| {
        stop_if_interrupted()?;
        let file = &snapshot.files[i];
        let source = || snapshot.root.join(&file.path);
        let target = store.target(i, &file.path)?;
        let sha256 = write_new(reader, &target, file.executable)
            .map_err(|e| Error::io("copy into the object store", source(), e))?;
        store.publish(&target, &ObjectKey { sha256, executable: file.executable })?;
        read[i].store(true, Ordering::Relaxed);
        let size = file.size;
        let before = copied.fetch_add(size, Ordering::Relaxed);
        if let Some(progress) = &request.progress
            && (before + size) >> 20 > before >> 20
        {
            progress(before + size, None);
        }
        Ok(sha256)
    })?;
    tracing::debug!(
        "hashed and stored {} files ({} from the cache) in {:?}",
        hashed.hashed,
        hashed.cached,
        started.elapsed()
    );
    let copied = copied.into_inner();
    if let Some(progress) = &request.progress
        && copied >= 1 << 20
    {
        // Closes the progress line: what was copied is known now.
        progress(copied, Some(copied));
    }
    let plan = StorePlan::new(snapshot, &digests);
    let cached: Vec<usize> = (0..plan.files.len())
        .filter(|&i| matches!(plan.files[i].1, PlanEntry::Object(_)) && !read[i].load(Ordering::Relaxed))
        .collect();
    let lacking = link_cached(&store, &plan, &cached)?;
    store_lacking(request, &store, &plan, &lacking)?;
    tracing::debug!("stored every object; {:?} since the start", started.elapsed());
    let created: Vec<ObjectKey> = store.created.into_inner().expect("not poisoned").into_iter().collect();
    let bytes = plan.bytes_of(&created);
    let (files, present) = (plan.regular_files(), plan.files_present(&created));
    if let Some(status) = &request.status {
        status(&format!("{present} of {files} files already there; sending {}", mib(bytes)));
    }
    finish(request.mode, &plan, &request.extra, objects, partial)?;
    tracing::debug!("made the run dir; {:?} since the start", started.elapsed());
    Ok(ShipReport { files, files_present: present, objects_sent: created.len(), bytes_sent: bytes })
}

/// The object store of one ship, and where the ship writes the files it reads.
struct Store<'a> {
    objects: &'a Path,
    incoming: &'a Path,
    partial: &'a Path,
    mode: Materialize,
    /// Seconds since the epoch: an object modified since was written in place.
    recent: i64,
    /// Objects this ship published.
    created: Mutex<BTreeSet<ObjectKey>>,
    /// Groups of the incoming dir made so far.
    staging_dirs: Mutex<HashSet<usize>>,
    /// Numbers the temp names of links swapped into the run dir.
    swaps: AtomicU64,
}

impl<'a> Store<'a> {
    fn new(objects: &'a Path, incoming: &'a Path, partial: &'a Path, mode: Materialize) -> Store<'a> {
        let recent = SystemTime::now().checked_sub(TAMPERED).unwrap_or(UNIX_EPOCH);
        Store {
            objects,
            incoming,
            partial,
            mode,
            recent: recent.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64),
            created: Mutex::new(BTreeSet::new()),
            staging_dirs: Mutex::new(HashSet::new()),
            swaps: AtomicU64::new(0),
        }
    }

    /// Where the content of file `i` (at `path` in the snapshot) is written: its place in the
    /// run dir with `link`; with `copy`, a temp file of the store (the run dir gets a private,
    /// writable copy later).
    fn target(&self, i: usize, path: &str) -> Result<PathBuf> {
        match self.mode {
            Materialize::Link => Ok(self.partial.join(path)),
            Materialize::Copy => staging_path(self.incoming, i, &self.staging_dirs),
        }
    }

    /// Whether `object` is in the store and sound (not written in place since it was stored).
    fn sound(&self, object: &Path) -> Result<bool> {
        match fs::symlink_metadata(object) {
            Ok(meta) => Ok(meta.is_file() && meta.mtime() < self.recent),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("read", object, e)),
        }
    }

    /// Publishes `file` (holding the content of `key`, read-only, mtime 0) as the object of
    /// `key`. When a sound object is there already, the run dir's `file` becomes a link to it.
    fn publish(&self, file: &Path, key: &ObjectKey) -> Result<()> {
        let object = object_path(self.objects, key);
        let failed = |e| Error::io("move into the object store", &object, e);
        let linked = match fs::hard_link(file, &object) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let dir = object.parent().expect("an object has a prefix dir");
                fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
                fs::hard_link(file, &object)
            }
            other => other,
        };
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if self.sound(&object)? {
                    if self.mode == Materialize::Link {
                        self.share(&object, file)?;
                    }
                    return Ok(());
                }
                // Written in place by a job: drop it and publish ours.
                match fs::remove_file(&object) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        return Err(Error::io("remove the tampered object", &object, e));
                    }
                    _ => {}
                }
                match fs::hard_link(file, &object) {
                    // A concurrent ship published it first: the same content, sound.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
                    other => other.map_err(failed)?,
                }
            }
            Err(e) => return Err(failed(e)),
        }
        self.created.lock().expect("not poisoned").insert(*key);
        Ok(())
    }

    /// Replaces `file` of the run dir with a link to `object` (same content), atomically; when
    /// the object vanished meanwhile (a concurrent `gc`), `file` stays as it is.
    fn share(&self, object: &Path, file: &Path) -> Result<()> {
        let temp = self.incoming.join(format!("swap-{}", self.swaps.fetch_add(1, Ordering::Relaxed)));
        match fs::hard_link(object, &temp) {
            Ok(()) => fs::rename(&temp, file).map_err(|e| Error::io("link from the object store", file, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("link from the object store", file, e)),
        }
    }
}

/// Makes `partial` and every dir of the run dir in it, a parent before its children, on up
/// to `available_parallelism` threads (grouped by top-level dir).
fn make_dirs(snapshot: &Snapshot, extra: &[ExtraFile], partial: &Path) -> Result<()> {
    if let Some(parent) = partial.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
    }
    fs::create_dir(partial).map_err(|e| Error::io("create", partial, e))?;
    // Every dir, a parent before its children (a prefix sorts first).
    let mut dirs: BTreeSet<&str> = BTreeSet::new();
    for path in snapshot.files.iter().map(|f| f.path.as_str()).chain(extra.iter().map(|f| f.path.as_str())) {
        let mut rest = path;
        while let Some((dir, _)) = rest.rsplit_once('/') {
            if !dirs.insert(dir) {
                break;
            }
            rest = dir;
        }
    }
    let mut groups: Vec<Vec<&str>> = Vec::new();
    for dir in dirs {
        let top = dir.split('/').next().unwrap_or(dir);
        match groups.last_mut() {
            Some(group) if group[0] == top => group.push(dir),
            _ => groups.push(vec![dir]),
        }
    }
    let threads = threads_for(snapshot.files.len());
    on_threads(threads, |worker| {
        for group in groups.iter().skip(worker).step_by(threads) {
            for dir in group {
                let dir = partial.join(dir);
                fs::create_dir(&dir).map_err(|e| Error::io("create", &dir, e))?;
            }
        }
        Ok(())
    })
}

/// Links the files of `cached` (whose hashes came from the cache) from the store into the run
/// dir (with `copy`, checks that their objects are there); returns those the store lacks (or
/// whose objects vanished or were written in place).
fn link_cached(store: &Store<'_>, plan: &StorePlan, cached: &[usize]) -> Result<Vec<usize>> {
    let threads = threads_for(cached.len());
    let per_thread = cached.len().div_ceil(threads).max(1);
    let lacking = Mutex::new(Vec::new());
    on_threads(threads, |worker| {
        for &i in cached.iter().skip(worker * per_thread).take(per_thread) {
            stop_if_interrupted()?;
            let (path, PlanEntry::Object(key)) = &plan.files[i] else { continue };
            let object = object_path(store.objects, key);
            let present = store.sound(&object)?
                && match store.mode {
                    Materialize::Copy => true,
                    Materialize::Link => {
                        let to = store.partial.join(path);
                        match fs::hard_link(&object, &to) {
                            Ok(()) => true,
                            Err(e) if e.kind() == io::ErrorKind::NotFound && !object.exists() => false,
                            Err(e) => return Err(Error::io("link", &to, e)),
                        }
                    }
                };
            if !present {
                lacking.lock().expect("not poisoned").push(i);
            }
        }
        Ok(())
    })?;
    let mut lacking = lacking.into_inner().expect("not poisoned");
    lacking.sort_unstable();
    Ok(lacking)
}

/// Copies each of `lacking` from the snapshot to its target, checks it against its key, and
/// publishes it.
fn store_lacking(request: &ShipRequest, store: &Store<'_>, plan: &StorePlan, lacking: &[usize]) -> Result<()> {
    let snapshot = &request.snapshot;
    let total: u64 = lacking.iter().map(|&i| snapshot.files[i].size).sum();
    let mut sent = 0;
    snapshot.for_each_content(lacking, &mut |i, file, _, reader| {
        stop_if_interrupted()?;
        let changed = || {
            Error::InvalidConfig(format!(
                "`{}` changed while it was being shipped; submit again",
                snapshot.root.join(&file.path).display()
            ))
        };
        let PlanEntry::Object(key) = plan.files[i].1 else { return Err(changed()) };
        let target = store.target(i, &file.path)?;
        let digest = write_new(reader, &target, file.executable)
            .map_err(|e| Error::io("copy into the object store", snapshot.root.join(&file.path), e))?;
        if digest != key.sha256 {
            return Err(changed());
        }
        store.publish(&target, &key)?;
        let before = sent;
        sent += file.size;
        if let Some(progress) = &request.progress
            && (sent >> 20 > before >> 20 || sent == total)
        {
            progress(sent, Some(total));
        }
        Ok(())
    })
}

/// The temp file of the content of file `i`: threads hash neighbouring files, and each group
/// of them gets its own dir, so that they do not contend for one directory's lock.
fn staging_path(incoming: &Path, i: usize, made: &Mutex<HashSet<usize>>) -> Result<PathBuf> {
    let group = i / 64;
    let dir = incoming.join(group.to_string());
    // Held while the dir is made: no thread writes into it before it exists.
    let mut made = made.lock().expect("not poisoned");
    if made.insert(group) {
        match fs::create_dir(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(Error::io("create", &dir, e)),
            _ => {}
        }
    }
    Ok(dir.join(i.to_string()))
}

/// Copies `reader` into a new file `path`, created read-only (0444, or 0555 when
/// `executable`), as objects are, hashing what is written; its mtime is set to 0.
fn write_new(reader: &mut dyn Read, path: &Path, executable: bool) -> io::Result<[u8; 32]> {
    let mut file =
        fs::OpenOptions::new().write(true).create_new(true).mode(if executable { 0o555 } else { 0o444 }).open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Some(signal) = crate::interrupt::triggered() {
            return Err(io::Error::other(format!("interrupted ({})", signal.name())));
        }
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])?;
    }
    file.set_modified(UNIX_EPOCH)?;
    Ok(hasher.finalize().into())
}

/// With `copy`, gives each regular file of the run dir a private, writable copy of its object;
/// then adds the symlinks, the per-run files and the code manifest ([`super::manifest::MANIFEST`]).
fn finish(mode: Materialize, plan: &StorePlan, extra: &[ExtraFile], objects: &Path, partial: &Path) -> Result<()> {
    let threads = threads_for(plan.files.len());
    let per_thread = plan.files.len().div_ceil(threads).max(1);
    on_threads(threads, |worker| {
        for (path, entry) in plan.files.iter().skip(worker * per_thread).take(per_thread) {
            stop_if_interrupted()?;
            let to = partial.join(path);
            match entry {
                PlanEntry::Object(key) if mode == Materialize::Copy => {
                    let object = object_path(objects, key);
                    fs::copy(&object, &to)
                        .and_then(|_| {
                            let mode = if key.executable { 0o755 } else { 0o644 };
                            fs::set_permissions(&to, fs::Permissions::from_mode(mode))
                        })
                        .map_err(|e| Error::io("copy", &to, e))?;
                }
                PlanEntry::Object(_) => {}
                PlanEntry::Symlink(target) => {
                    std::os::unix::fs::symlink(target, &to).map_err(|e| Error::io("create the symlink", &to, e))?;
                }
            }
        }
        Ok(())
    })?;
    let manifest = super::manifest::Manifest::of(plan).file();
    for file in extra.iter().chain(std::iter::once(&manifest)) {
        let to = partial.join(&file.path);
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
        }
        fs::write(&to, &file.contents).map_err(|e| Error::io("write", &to, e))?;
        fs::set_permissions(&to, fs::Permissions::from_mode(file.mode)).map_err(|e| Error::io("chmod", &to, e))?;
    }
    if mode == Materialize::Link {
        intern(objects, &partial.join(&manifest.path), &manifest.contents)
            .map_err(|e| Error::io("share the code manifest through", objects, e))?;
    }
    Ok(())
}

/// Makes the run's code manifest an object of the store, so that the runs of one tree share
/// one copy of it: the file becomes read-only with mtime 0, then is published with `link()`
/// or, when the store has it already, swapped for a link to the object there (as
/// [`super::scripts::MATERIALIZE`] does).
fn intern(objects: &Path, path: &Path, contents: &[u8]) -> io::Result<()> {
    let key = ObjectKey { sha256: Sha256::digest(contents).into(), executable: false };
    let object = object_path(objects, &key);
    fs::File::options().write(true).open(path)?.set_modified(UNIX_EPOCH)?;
    fs::set_permissions(path, fs::Permissions::from_mode(key.mode()))?;
    if let Some(dir) = object.parent() {
        fs::create_dir_all(dir)?;
    }
    match fs::hard_link(path, &object) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let swap = path.with_extension("json.link");
            fs::hard_link(&object, &swap)?;
            fs::rename(&swap, path)
        }
        Err(e) => Err(e),
    }
}

/// Threads for `items` files: `available_parallelism`, but one per 256 files at most.
fn threads_for(items: usize) -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.div_ceil(256)).max(1)
}

/// Runs `work(0..threads)` on `threads` threads (the caller's alone for one); the first error
/// of the lowest worker wins.
fn on_threads(threads: usize, work: impl Fn(usize) -> Result<()> + Sync) -> Result<()> {
    if threads <= 1 {
        return work(0);
    }
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|worker| {
                scope.spawn({
                    let work = &work;
                    move || work(worker)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a materialising thread panicked")).collect()
    });
    results.into_iter().collect()
}

/// `<objects>/ab/cdef…[.x]`, as [`ObjectKey::path`] writes it, without a formatter per call
/// (10k of these per ship).
fn object_path(objects: &Path, key: &ObjectKey) -> PathBuf {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut name = Vec::with_capacity(67);
    for (i, byte) in key.sha256.iter().enumerate() {
        if i == 1 {
            name.push(b'/');
        }
        name.push(HEX[usize::from(byte >> 4)]);
        name.push(HEX[usize::from(byte & 0xf)]);
    }
    if key.executable {
        name.extend_from_slice(b".x");
    }
    let name = String::from_utf8(name).expect("hex is ASCII");
    objects.join(name)
}

/// An error once the program was asked to stop.
fn stop_if_interrupted() -> Result<()> {
    match crate::interrupt::triggered() {
        Some(signal) => Err(Error::backend("store", format!("interrupted ({})", signal.name()))),
        None => Ok(()),
    }
}
