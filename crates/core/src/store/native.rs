//! [`ship_local`]: the store protocol done in-process on this machine, for the local backend.
//!
//! Same layout and guarantees as the scripts ([`super::scripts`]) driven through
//! [`super::LocalShell`], without their cost (a process per prefix dir, `read` builtins that
//! take a byte per system call, each file hashed three times):
//!
//! 1. hash: files the hash cache does not know are read once, into a private temp dir of the
//!    store (`.theseus/incoming/<random>/`), hashed as they are written, made read-only with
//!    mtime 0;
//! 2. missing: an object counts as present when it exists with mtime 0 (one written in place
//!    since is removed, as [`super::scripts::MISSING`] does); each missing object is renamed
//!    into place from its temp file (or first copied there from the snapshot and checked
//!    against its key, for a file whose hash came from the cache);
//! 3. materialise: the run dir is built under `<dest>.partial` from hard links (or private,
//!    writable copies) of the objects, symlinks and the per-run files, and renamed to `<dest>`
//!    only when complete.
//!
//! Every step checks [`crate::interrupt`] between files and removes what it made when stopped
//! or failing; a concurrent `gc` that takes an object before it is linked restarts the ship
//! once.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::archive::ExtraFile;
use super::plan::{ObjectKey, PlanEntry, StorePlan};
use super::ship::{ShipReport, ShipRequest, mib};
use super::{Materialize, OBJECTS_DIR};
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
    let incoming = root.join(".theseus/incoming").join(format!("{:016x}", rand::random::<u64>()));
    fs::create_dir_all(&objects).map_err(|e| Error::io("create", &objects, e))?;
    fs::create_dir_all(&incoming).map_err(|e| Error::io("create", &incoming, e))?;
    let result = ship_with(request, &objects, &incoming);
    let _ = fs::remove_dir_all(&incoming);
    result
}

fn ship_with(request: &ShipRequest, objects: &Path, incoming: &Path) -> Result<ShipReport> {
    let snapshot = &request.snapshot;
    let staged: Mutex<BTreeMap<usize, PathBuf>> = Mutex::new(BTreeMap::new());
    let staging_dirs = Mutex::new(HashSet::new());
    // Bytes copied while hashing, reported (total unknown yet) at most once a MiB.
    let copied = AtomicU64::new(0);
    let started = std::time::Instant::now();
    let (digests, hashed) = snapshot.digests_through(snapshot.hash_cache.as_deref(), &|i, reader| {
        stop_if_interrupted()?;
        let temp = staging_path(incoming, i, &staging_dirs)?;
        let digest = stage(reader, &temp, snapshot.files[i].executable)
            .map_err(|e| Error::io("copy into the object store", snapshot.root.join(&snapshot.files[i].path), e))?;
        staged.lock().expect("not poisoned").insert(i, temp);
        let size = snapshot.files[i].size;
        let before = copied.fetch_add(size, Ordering::Relaxed);
        if let Some(progress) = &request.progress
            && (before + size) >> 20 > before >> 20
        {
            progress(before + size, None);
        }
        Ok(digest)
    })?;
    tracing::debug!("hashed {} files ({} from the cache) in {:?}", hashed.hashed, hashed.cached, started.elapsed());
    let copied = copied.into_inner();
    if let Some(progress) = &request.progress
        && copied >= 1 << 20
    {
        // Closes the progress line: what was copied is known now.
        progress(copied, Some(copied));
    }
    let plan = StorePlan::new(snapshot, &digests);
    let mut staged_by_key = BTreeMap::new();
    for (i, temp) in staged.into_inner().expect("not poisoned") {
        if let PlanEntry::Object(key) = plan.files[i].1 {
            staged_by_key.entry(key).or_insert(temp);
        }
    }
    let mut first = true;
    loop {
        let missing = missing(&plan, objects)?;
        let bytes = plan.bytes_of(&missing);
        let (files, present) = (plan.regular_files(), plan.files_present(&missing));
        if first && let Some(status) = &request.status {
            status(&format!("{present} of {files} files already there; sending {}", mib(bytes)));
        }
        store_objects(request, &plan, &missing, &mut staged_by_key, objects, incoming)?;
        tracing::debug!("stored {} missing objects; {:?} since the start", missing.len(), started.elapsed());
        let built = materialize(request, &plan, objects);
        tracing::debug!("made the run dir; {:?} since the start", started.elapsed());
        match built {
            Ok(()) => {
                return Ok(ShipReport {
                    files,
                    files_present: present,
                    objects_sent: missing.len(),
                    bytes_sent: bytes,
                });
            }
            Err(BuildError::Gone(path)) if first => {
                tracing::warn!(
                    "object `{}` of the store disappeared (a concurrent gc?); shipping again",
                    path.display()
                );
                first = false;
            }
            Err(BuildError::Gone(path)) => {
                return Err(Error::backend(
                    "store",
                    format!("object `{}` of the store disappeared twice", path.display()),
                ));
            }
            Err(BuildError::Failed(e)) => return Err(e),
        }
    }
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

/// Copies `reader` into a new file `temp`, hashing what is written; the file is made read-only
/// (0444, or 0555 when `executable`) with mtime 0, as objects are.
fn stage(reader: &mut dyn Read, temp: &Path, executable: bool) -> io::Result<[u8; 32]> {
    let mut file = fs::File::create(temp)?;
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
    file.set_permissions(fs::Permissions::from_mode(if executable { 0o555 } else { 0o444 }))?;
    file.set_modified(UNIX_EPOCH)?;
    Ok(hasher.finalize().into())
}

/// The objects of `plan` the store lacks; an object written in place since it was stored is
/// removed and counts as missing.
fn missing(plan: &StorePlan, objects: &Path) -> Result<Vec<ObjectKey>> {
    let recent = SystemTime::now().checked_sub(TAMPERED).unwrap_or(UNIX_EPOCH);
    let recent = recent.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let mut missing = Vec::new();
    for key in plan.objects.keys() {
        let path = object_path(objects, key);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() && meta.mtime() < recent => {}
            Ok(_) => {
                fs::remove_file(&path).map_err(|e| Error::io("remove the tampered object", &path, e))?;
                missing.push(*key);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(*key),
            Err(e) => return Err(Error::io("read", &path, e)),
        }
    }
    Ok(missing)
}

/// Renames each of `keys` into the store: from its staged temp file, or after copying the
/// snapshot's file into one and checking it against its key.
fn store_objects(
    request: &ShipRequest,
    plan: &StorePlan,
    keys: &[ObjectKey],
    staged: &mut BTreeMap<ObjectKey, PathBuf>,
    objects: &Path,
    incoming: &Path,
) -> Result<()> {
    let snapshot = &request.snapshot;
    let unstaged: Vec<usize> = keys.iter().filter(|k| !staged.contains_key(k)).map(|k| plan.objects[k].0).collect();
    let total: u64 = unstaged.iter().map(|&i| snapshot.files[i].size).sum();
    let staging_dirs = Mutex::new(HashSet::new());
    let mut sent = 0;
    snapshot.for_each_content(&unstaged, &mut |i, file, _, reader| {
        stop_if_interrupted()?;
        let temp = staging_path(incoming, i, &staging_dirs)?;
        let changed = || {
            Error::InvalidConfig(format!(
                "`{}` changed while it was being shipped; submit again",
                snapshot.root.join(&file.path).display()
            ))
        };
        let PlanEntry::Object(key) = plan.files[i].1 else { return Err(changed()) };
        let digest = stage(reader, &temp, file.executable)
            .map_err(|e| Error::io("copy into the object store", snapshot.root.join(&file.path), e))?;
        if digest != key.sha256 {
            return Err(changed());
        }
        staged.insert(key, temp);
        let before = sent;
        sent += file.size;
        if let Some(progress) = &request.progress
            && (sent >> 20 > before >> 20 || sent == total)
        {
            progress(sent, Some(total));
        }
        Ok(())
    })?;
    let mut dirs = HashSet::new();
    for key in keys {
        stop_if_interrupted()?;
        let dest = object_path(objects, key);
        let dir = dest.parent().expect("an object has a prefix dir");
        if dirs.insert(dir.to_owned()) {
            fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
        }
        let temp = staged.remove(key).expect("every missing object was staged");
        fs::rename(&temp, &dest).map_err(|e| Error::io("move into the object store", &dest, e))?;
    }
    Ok(())
}

/// Why a run dir could not be built.
enum BuildError {
    /// An object disappeared before it was linked (a concurrent `gc`): ship again.
    Gone(PathBuf),
    /// Anything else.
    Failed(Error),
}

impl From<Error> for BuildError {
    fn from(e: Error) -> Self {
        BuildError::Failed(e)
    }
}

/// Builds the run dir under `<dest>.partial` and renames it into place; on any failure
/// nothing of it is left.
fn materialize(request: &ShipRequest, plan: &StorePlan, objects: &Path) -> Result<(), BuildError> {
    let dest = Path::new(&request.dest);
    let partial = PathBuf::from(format!("{}.partial", request.dest));
    let exists =
        || BuildError::Failed(Error::AlreadyExists { what: format!("run dir `{}` on this machine", request.dest) });
    if dest.exists() {
        return Err(exists());
    }
    let _ = fs::remove_dir_all(&partial);
    let result = build(request.mode, plan, &request.extra, objects, &partial).and_then(|()| {
        if dest.exists() {
            return Err(exists());
        }
        fs::rename(&partial, dest).map_err(|e| BuildError::Failed(Error::io("rename into place", dest, e)))
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&partial);
    }
    result
}

/// Writes every file of the run dir into `partial`: its dirs first, then the files, each on
/// up to `available_parallelism` threads (mkdir and link dominate a re-ship).
fn build(
    mode: Materialize,
    plan: &StorePlan,
    extra: &[ExtraFile],
    objects: &Path,
    partial: &Path,
) -> Result<(), BuildError> {
    if let Some(parent) = partial.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
    }
    fs::create_dir(partial).map_err(|e| Error::io("create", partial, e))?;
    // Every dir, a parent before its children (a prefix sorts first), grouped by top-level dir.
    let mut dirs: BTreeSet<&str> = BTreeSet::new();
    for path in plan.files.iter().map(|(p, _)| p.as_str()).chain(extra.iter().map(|f| f.path.as_str())) {
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
    let threads =
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(plan.files.len().div_ceil(256)).max(1);
    on_threads(threads, |worker| {
        for group in groups.iter().skip(worker).step_by(threads) {
            for dir in group {
                let dir = partial.join(dir);
                fs::create_dir(&dir).map_err(|e| Error::io("create", &dir, e))?;
            }
        }
        Ok(())
    })?;
    let per_thread = plan.files.len().div_ceil(threads).max(1);
    on_threads(threads, |worker| {
        for (path, entry) in plan.files.iter().skip(worker * per_thread).take(per_thread) {
            stop_if_interrupted()?;
            let to = partial.join(path);
            match entry {
                PlanEntry::Object(key) => {
                    let object = object_path(objects, key);
                    let made = match mode {
                        Materialize::Link => fs::hard_link(&object, &to),
                        Materialize::Copy => fs::copy(&object, &to).and_then(|_| {
                            let mode = if key.executable { 0o755 } else { 0o644 };
                            fs::set_permissions(&to, fs::Permissions::from_mode(mode))
                        }),
                    };
                    match made {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound && !object.exists() => {
                            return Err(BuildError::Gone(object));
                        }
                        Err(e) => {
                            let what = if mode == Materialize::Link { "link" } else { "copy" };
                            return Err(Error::io(what, &to, e).into());
                        }
                    }
                }
                PlanEntry::Symlink(target) => {
                    std::os::unix::fs::symlink(target, &to).map_err(|e| Error::io("create the symlink", &to, e))?;
                }
            }
        }
        Ok(())
    })?;
    for file in extra {
        let to = partial.join(&file.path);
        fs::write(&to, &file.contents).map_err(|e| Error::io("write", &to, e))?;
        fs::set_permissions(&to, fs::Permissions::from_mode(file.mode)).map_err(|e| Error::io("chmod", &to, e))?;
    }
    Ok(())
}

/// Runs `work(0..threads)` on `threads` threads (the caller's alone for one); the first error
/// of the lowest worker wins.
fn on_threads(threads: usize, work: impl Fn(usize) -> Result<(), BuildError> + Sync) -> Result<(), BuildError> {
    if threads <= 1 {
        return work(0);
    }
    let results: Vec<Result<(), BuildError>> = std::thread::scope(|scope| {
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
