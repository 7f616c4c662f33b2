//! Shipping through the content-addressed store over the real sshd (plain): run dirs hold
//! exactly the snapshot, a re-submit after a one-line edit sends one object
//! and links the rest, concurrent uploads of the same objects, an upload killed mid-stream, jobs
//! that write into their shipped files (link and copy mode), and the full-ship fallback on a
//! remote whose `PATH` lacks `sha256sum`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use theseus_backend_ssh::plain::PlainHost;
use theseus_backend_ssh::plain::{PlainBackend, PlainHandleData};
use theseus_backend_ssh::ssh::SshHost;
use theseus_backend_ssh::testing::{
    Seen, assert_run_dir_is, code_tree, error_chain, files_under, job_of, log_lines, write_file,
};
use theseus_core::backend::{Backend, JobHandle, JobState, JobStatus, PreparedJob, SubmitOptions};
use theseus_core::config::ClusterConfig;
use theseus_core::store::Materialize;

use crate::plain::{plan, quick};
use crate::require_lab;
use crate::support::{ALIAS, Lab, kill_masters};

/// A plain backend on `work` (the cluster's work root; status dirs under `<work>/../root`),
/// with its own connection `name`.
fn plain_at(lab: &Lab, name: &str, work: &Path, mode: Option<Materialize>) -> (Arc<PlainBackend>, Arc<SshHost>) {
    plain_with(lab.options(name), work, mode)
}

fn plain_with(
    options: theseus_backend_ssh::ssh::SshOptions,
    work: &Path,
    mode: Option<Materialize>,
) -> (Arc<PlainBackend>, Arc<SshHost>) {
    let cluster = ClusterConfig {
        root: work.with_file_name("root").display().to_string(),
        work: work.display().to_string(),
        materialize: mode,
        ..ClusterConfig::default()
    };
    let host = PlainHost { ssh: ALIAS.into(), cluster: "lab".into(), ..PlainHost::default() };
    let ssh = Arc::new(SshHost::new(options));
    (Arc::new(PlainBackend::with_ssh("lab", host, cluster, ssh.clone(), quick())), ssh)
}

fn plain_data(h: &JobHandle) -> PlainHandleData {
    serde_json::from_value(h.data.clone()).unwrap()
}

async fn wait_done(b: &dyn Backend, h: &JobHandle) -> JobStatus {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = b.status(h).await.unwrap();
        if status.state.is_terminal() {
            return status;
        }
        assert!(Instant::now() < deadline, "{status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn log_text(b: &dyn Backend, h: &JobHandle) -> String {
    log_lines(b, h).await.join("\n")
}

fn plain_extra(job: &PreparedJob) -> Vec<String> {
    let mut extra: Vec<String> = job.bootstrap.files.iter().map(|f| f.path.clone()).collect();
    extra.push(".theseus/supervise.sh".into());
    extra
}

/// Every object in the store at `work` has the content its name says, and nothing is left in
/// `incoming/`.
fn assert_store_sound(work: &Path) {
    use sha2::Digest;
    let objects = work.join(".theseus/objects");
    for rel in files_under(&objects) {
        let name = rel.trim_end_matches(".x").replace('/', "");
        let sum = hex(&sha2::Sha256::digest(std::fs::read(objects.join(&rel)).unwrap()));
        assert_eq!(sum, name, "object {rel} holds what its name says");
        let mode = std::fs::metadata(objects.join(&rel)).unwrap().mode();
        assert_eq!(mode & 0o222, 0, "object {rel} is read-only");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Entries of `<work>/.theseus/incoming` and `.partial` dirs under `work`, polled until the
/// remote side has cleaned up (a killed upload's script still runs for a moment) or 30 s.
async fn leftovers(work: &Path) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut found: Vec<String> = std::fs::read_dir(work.join(".theseus/incoming"))
            .map(|d| d.flatten().map(|e| e.path().display().to_string()).collect())
            .unwrap_or_default();
        found.extend(partials(work));
        if found.is_empty() || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn partials(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            if path.to_string_lossy().contains(".partial") {
                found.push(path.display().to_string());
            } else {
                found.extend(partials(&path));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_run_dirs_hold_exactly_the_snapshot_and_a_one_line_edit_sends_one_object() {
    let lab = require_lab!();
    let work = lab.scratch("store-exact").join("work");
    let (b, _) = plain_at(lab, "store-exact", &work, None);
    let code = code_tree();
    let seen = Seen::default();
    let job1 = job_of(&*b, &plan(), "exact", code.path(), &["sh", "run.sh"]);
    let h1 = b.submit(&job1, &seen.options()).await.unwrap();
    let status = wait_done(&*b, &h1).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    assert!(log_text(&*b, &h1).await.contains("run-sh-ran"));
    let run1 = PathBuf::from(plain_data(&h1).work_dir);
    assert_run_dir_is(code.path(), &run1, &plain_extra(&job1));
    let first = seen.reports();
    assert_eq!(first.len(), 1, "one report per submit: {first:?}");
    assert_eq!((first[0].files, first[0].files_present, first[0].objects_sent), (7, 0, 6), "{first:?}");
    assert!(seen.notes().iter().any(|n| n.contains("0 of 7 files already there")), "{:?}", seen.notes());

    // One line of one file changes: one object goes, everything else is linked from the store.
    write_file(&code.path().join("pkg/a.py"), b"A = 2\n", 0o644);
    let seen2 = Seen::default();
    let job2 = job_of(&*b, &plan(), "exact", code.path(), &["sh", "run.sh"]);
    let h2 = b.submit(&job2, &seen2.options()).await.unwrap();
    let run2 = PathBuf::from(plain_data(&h2).work_dir);
    assert_eq!(wait_done(&*b, &h2).await.state, JobState::Completed);
    assert_run_dir_is(code.path(), &run2, &plain_extra(&job2));
    let second = seen2.reports();
    assert_eq!(second.len(), 1);
    assert_eq!((second[0].files, second[0].files_present, second[0].objects_sent), (7, 6, 1), "{second:?}");
    assert_eq!(second[0].bytes_sent, 6);
    let ino = |run: &Path, f: &str| std::fs::metadata(run.join(f)).unwrap().ino();
    for same in ["train.py", "run.sh", "pkg/same.py", "pkg/deep/data.txt", "with space.txt", "empty"] {
        assert_eq!(ino(&run1, same), ino(&run2, same), "{same} is one inode in both runs (link mode)");
    }
    assert_ne!(ino(&run1, "pkg/a.py"), ino(&run2, "pkg/a.py"));
    assert_store_sound(&work);
    assert_eq!(leftovers(&work).await, Vec::<String>::new());
}

/// Blocks each caller until `n` callers arrived (or 60 s passed): both uploads are under way
/// at once.
struct Rendezvous {
    count: Mutex<usize>,
    all: Condvar,
    n: usize,
}

impl Rendezvous {
    fn arrive(&self) {
        let mut count = self.count.lock().unwrap();
        *count += 1;
        self.all.notify_all();
        let deadline = Instant::now() + Duration::from_secs(60);
        while *count < self.n && Instant::now() < deadline {
            count = self.all.wait_timeout(count, Duration::from_millis(100)).unwrap().0;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_submits_that_upload_the_same_objects_both_succeed() {
    let lab = require_lab!();
    let work = lab.scratch("store-race").join("work");
    let code = code_tree();
    write_file(&code.path().join("big.bin"), &vec![7u8; 3 << 20], 0o644);
    let meet = Arc::new(Rendezvous { count: Mutex::new(0), all: Condvar::new(), n: 2 });
    let mut runs = Vec::new();
    let mut mets = Vec::new();
    for i in 0..2 {
        let (b, _) = plain_at(lab, &format!("store-race-{i}"), &work, None);
        let job = job_of(&*b, &plan(), &format!("race{i}"), code.path(), &["true"]);
        let seen = Seen::default();
        let met = Arc::new(AtomicBool::new(false));
        mets.push(met.clone());
        let options = SubmitOptions {
            progress: Some({
                let (meet, met) = (meet.clone(), met.clone());
                Arc::new(move |sent, _| {
                    if sent > 1 << 20 && !met.swap(true, Ordering::SeqCst) {
                        meet.arrive();
                    }
                })
            }),
            ..seen.options()
        };
        runs.push((b, job, seen, options));
    }
    let (r0, r1) = (&runs[0], &runs[1]);
    let (a, b) = tokio::join!(r0.0.submit(&r0.1, &r0.3), r1.0.submit(&r1.1, &r1.3));
    assert!(mets.iter().all(|m| m.load(Ordering::SeqCst)), "both uploads were under way at once");
    for (run, handle) in runs.iter().zip([a, b]) {
        let handle = handle.expect("both submits succeed");
        let report = run.2.reports();
        assert_eq!(report.len(), 1);
        // Each upload met the other mid-stream (the rendezvous), so both sent every object;
        // a ship that then found an object gone while linking ships again, and that second
        // attempt finds everything there (said in a note).
        let notes = run.2.notes();
        let retried = notes.iter().any(|n| n.contains("shipping again"));
        assert!(
            report[0].objects_sent == 7 || (retried && report[0].objects_sent == 0),
            "both uploaded every object: {report:?}; notes: {notes:?}"
        );
        assert_run_dir_is(code.path(), Path::new(&plain_data(&handle).work_dir), &plain_extra(&run.1));
        assert_eq!(wait_done(&*run.0, &handle).await.state, JobState::Completed);
    }
    assert_store_sound(&work);
    assert_eq!(leftovers(&work).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_killed_mid_stream_leaves_a_sound_store_and_the_next_submit_succeeds() {
    let lab = require_lab!();
    let work = lab.scratch("store-kill").join("work");
    let (b, ssh) = plain_at(lab, "store-kill", &work, None);
    let ctl = ssh.options().control_dir.clone().unwrap();
    let code = code_tree();
    let block: Vec<u8> = (0..1u32 << 20).map(|i| (i % 241) as u8).collect();
    write_file(&code.path().join("big.bin"), &block.repeat(16), 0o644);
    // Every attempt loses its connection once 1 MiB of the upload went out.
    let kills = Arc::new(AtomicUsize::new(0));
    let options = SubmitOptions {
        progress: Some({
            let (ctl, kills) = (ctl.clone(), kills.clone());
            let armed = Arc::new(AtomicBool::new(true));
            Arc::new(move |sent, _| {
                if sent < 1 << 20 {
                    armed.store(true, Ordering::SeqCst);
                } else if armed.swap(false, Ordering::SeqCst) {
                    kills.fetch_add(kill_masters(&ctl), Ordering::SeqCst);
                }
            })
        }),
        ..SubmitOptions::default()
    };
    let job = job_of(&*b, &plan(), "killed", code.path(), &["true"]);
    let err = b.submit(&job, &options).await.expect_err("the upload never completes");
    let text = error_chain(&err);
    assert!(kills.load(Ordering::SeqCst) >= 2, "killed on every attempt");
    let named = text.contains(&work.display().to_string()) && text.contains(ALIAS);
    assert!(text.contains("broke") && named, "names the path and the host: {text}");
    assert!(!Path::new(&plain_data(&b.planned_handle(&job).unwrap()).work_dir).exists());
    assert_eq!(leftovers(&work).await, Vec::<String>::new(), "no staging dir or .partial left");
    assert_store_sound(&work);

    let seen = Seen::default();
    let again = job_of(&*b, &plan(), "killed", code.path(), &["true"]);
    let h = b.submit(&again, &seen.options()).await.expect("the next submit succeeds");
    assert_run_dir_is(code.path(), Path::new(&plain_data(&h).work_dir), &plain_extra(&again));
    assert_eq!(wait_done(&*b, &h).await.state, JobState::Completed);
    assert_store_sound(&work);
}

const EDIT_SH: &str = "echo edited >> pkg/deep/data.txt && echo edit-worked\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_change_another_runs_files_in_link_or_copy_mode() {
    let lab = require_lab!();
    let work = lab.scratch("store-edit").join("work");
    let code = code_tree();
    write_file(&code.path().join("edit.sh"), EDIT_SH.as_bytes(), 0o644);

    // Link mode: the shipped file is a read-only object; the job (a non-root user) cannot write it.
    let (link, _) = plain_at(lab, "store-edit-link", &work, Some(Materialize::Link));
    let job = job_of(&*link, &plan(), "edit-link", code.path(), &["sh", "edit.sh"]);
    let h_link = link.submit(&job, &SubmitOptions::default()).await.unwrap();
    let status = wait_done(&*link, &h_link).await;
    assert_eq!(status.state, JobState::Failed, "{status:?}");
    let log = log_text(&*link, &h_link).await;
    assert!(log.contains("Permission denied") && !log.contains("edit-worked"), "{log}");
    let linked = PathBuf::from(plain_data(&h_link).work_dir).join("pkg/deep/data.txt");
    assert_eq!(std::fs::read(&linked).unwrap(), b"data\n");

    // Copy mode on the same store: the job edits its own copy; the linked run is unchanged.
    let (copy, _) = plain_at(lab, "store-edit-copy", &work, Some(Materialize::Copy));
    let job = job_of(&*copy, &plan(), "edit-copy", code.path(), &["sh", "edit.sh"]);
    let h_copy = copy.submit(&job, &SubmitOptions::default()).await.unwrap();
    let status = wait_done(&*copy, &h_copy).await;
    assert_eq!(status.state, JobState::Completed, "{status:?}");
    assert!(log_text(&*copy, &h_copy).await.contains("edit-worked"));
    let copied = PathBuf::from(plain_data(&h_copy).work_dir).join("pkg/deep/data.txt");
    assert_eq!(std::fs::read(&copied).unwrap(), b"data\nedited\n");
    assert_ne!(std::fs::metadata(&copied).unwrap().ino(), std::fs::metadata(&linked).unwrap().ino());
    assert_eq!(std::fs::read(&linked).unwrap(), b"data\n", "the other run's copy is unchanged");
    assert_store_sound(&work);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_without_sha256sum_gets_the_whole_code_and_is_told_once() {
    let lab = require_lab!();
    let scratch = lab.scratch("store-notool");
    let sshd = crate::support::RestrictedSshd::start(lab, &scratch, &["sha256sum"]);
    let work = scratch.join("work");
    let (b, _) = plain_with(sshd.options(lab, "store-notool"), &work, None);
    let code = code_tree();
    let seen = Seen::default();
    let job = job_of(&*b, &plan(), "notool", code.path(), &["sh", "run.sh"]);
    let h = b.submit(&job, &seen.options()).await.expect("the full ship works without sha256sum");
    assert_eq!(wait_done(&*b, &h).await.state, JobState::Completed);
    assert_run_dir_is(code.path(), Path::new(&plain_data(&h).work_dir), &plain_extra(&job));
    let said: Vec<String> = seen.notes().into_iter().filter(|n| n.contains("sha256sum")).collect();
    assert_eq!(said.len(), 1, "said once: {:?}", seen.notes());
    assert!(said[0].contains("whole"), "{said:?}");
    assert!(seen.reports().is_empty(), "nothing went through the store");
    assert!(!work.join(".theseus/objects").read_dir().is_ok_and(|mut d| d.next().is_some()));
}
