//! Tests of the ledger: records, concurrent clients, schema versions and crashes.

use super::*;
use crate::config::HostKind;

#[test]
fn many_clients_opening_a_new_ledger_at_once_all_succeed() {
    // Two first-ever submits at once: switching a new database to WAL needs its lock, and
    // SQLite answers "database is locked" at once, without the busy handler.
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let opened: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || Ledger::open(&path).map(drop).map_err(|e| e.to_string()))
            })
            .collect();
        for handle in opened {
            handle.join().unwrap().unwrap();
        }
    }
}

fn record(name: &str, run_id: &str, at: &str) -> Record {
    Record {
        identity: JobIdentity {
            name: name.into(),
            project: "general".into(),
            group: "default".into(),
            run_id: run_id.into(),
        },
        kind: RunKind::Job,
        host: "local".into(),
        handle: JobHandle {
            kind: HostKind::LOCAL,
            host: "local".into(),
            id: run_id.into(),
            data: serde_json::json!({"x": 1}),
        },
        submitted_at: at.into(),
        updated_at: at.into(),
        state: JobState::Running,
        exit_code: None,
        message: None,
    }
}

#[test]
fn insert_find_update_list() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    ledger.insert(&record("a", "r1", "2026-01-01T00:00:00Z")).unwrap();
    ledger.insert(&record("a", "r2", "2026-01-02T00:00:00Z")).unwrap();
    ledger.insert(&record("b", "r3", "2026-01-03T00:00:00Z")).unwrap();
    assert_eq!(ledger.find("a").unwrap().unwrap().identity.run_id, "r2", "newest run of a name");
    assert_eq!(ledger.find("r1").unwrap().unwrap().identity.name, "a", "by run id");
    assert!(ledger.find("nope").unwrap().is_none());
    ledger.update_state("r2", JobState::Failed, Some(3), Some("boom")).unwrap();
    let r2 = ledger.find("r2").unwrap().unwrap();
    assert_eq!((r2.state, r2.exit_code, r2.message.as_deref()), (JobState::Failed, Some(3), Some("boom")));
    assert_eq!(r2.handle.data, serde_json::json!({"x": 1}));
    let ids: Vec<_> = ledger.list(10).unwrap().into_iter().map(|r| r.identity.run_id).collect();
    assert_eq!(ids, ["r3", "r2", "r1"]);
    assert!(ledger.insert(&record("a", "r1", "2026-01-04T00:00:00Z")).is_err(), "run ids are unique");
}

#[test]
fn a_submitting_record_knows_whether_its_client_still_works_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    let guard = ledger.begin_submit(&record("a", "r1", "2026-01-01T00:00:00Z")).unwrap();
    let r1 = ledger.find("r1").unwrap().unwrap();
    assert_eq!(r1.state, JobState::Submitting);
    assert!(ledger.submit_in_progress("r1"), "the guard holds the lock");
    assert!(Ledger::open(dir.path()).unwrap().submit_in_progress("r1"), "seen from another connection");
    drop(guard);
    assert!(!ledger.submit_in_progress("r1"), "a dropped guard (or a dead client) holds nothing");
    let handle = placeholder_handle(HostKind::LOCAL, "local", "r1");
    assert!(is_placeholder(&handle));
    ledger.settle("r1", &handle, JobState::Pending, None).unwrap();
    let r1 = ledger.find("r1").unwrap().unwrap();
    assert_eq!((r1.state, is_placeholder(&r1.handle)), (JobState::Pending, true));
    ledger.insert(&record("a", "r2", "2026-01-02T00:00:00Z")).unwrap();
    ledger.insert(&record("b", "r3", "2026-01-02T00:00:00Z")).unwrap();
    ledger.update_state("r2", JobState::Completed, Some(0), None).unwrap();
    let mine =
        JobIdentity { name: "a".into(), project: "general".into(), group: "default".into(), run_id: "r9".into() };
    let live: Vec<_> = ledger.live_of_name(&mine, "local").unwrap().into_iter().map(|r| r.identity.run_id).collect();
    assert_eq!(live, ["r1"], "same name, not terminal");
    ledger.delete("r1").unwrap();
    assert!(ledger.find("r1").unwrap().is_none());
}

#[test]
fn concurrent_writers_do_not_lose_records() {
    let dir = tempfile::tempdir().unwrap();
    Ledger::open(dir.path()).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let path = dir.path().to_owned();
            std::thread::spawn(move || {
                let ledger = Ledger::open(&path).unwrap();
                for i in 0..25 {
                    ledger.insert(&record("job", &format!("r-{t}-{i}"), "2026-01-01T00:00:00Z")).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(Ledger::open(dir.path()).unwrap().list(1000).unwrap().len(), 200);
}

#[test]
fn a_ledger_from_a_newer_theseus_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(LEDGER_FILE);
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE runs (run_id TEXT, future TEXT); PRAGMA user_version = 99;").unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = Ledger::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("newer theseus") && err.contains("schema 99"), "{err}");
    assert!(err.contains(&format!("mv {}", path.display())), "says how to move it aside: {err}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "not a byte written");
    assert!(!dir.path().join(format!("{LEDGER_FILE}-wal")).exists(), "not even switched to WAL");
}

#[test]
fn a_ledger_from_before_schema_versions_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(LEDGER_FILE);
    {
        let conn = Connection::open(&path).unwrap();
        // The first schema: no `kind`, no user_version.
        conn.execute_batch(
            "CREATE TABLE runs (run_id TEXT PRIMARY KEY, name TEXT NOT NULL, project TEXT NOT NULL,
                grp TEXT NOT NULL, host TEXT NOT NULL, handle TEXT NOT NULL, submitted_at TEXT NOT NULL,
                updated_at TEXT NOT NULL, state TEXT NOT NULL, exit_code INTEGER, message TEXT);
             INSERT INTO runs VALUES ('r0', 'old', 'general', 'default', 'local',
                '{\"kind\":\"local\",\"host\":\"local\",\"id\":\"r0\",\"data\":null}',
                '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z', 'completed', 0, NULL);",
        )
        .unwrap();
    }
    let ledger = Ledger::open(dir.path()).unwrap();
    let old = ledger.find("old").unwrap().unwrap();
    assert_eq!((old.identity.run_id.as_str(), old.kind, old.state), ("r0", RunKind::Job, JobState::Completed));
    let version: i64 = ledger.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, schema::SCHEMA_VERSION);
    ledger.insert(&record("new", "r1", "2026-01-01T00:00:00Z")).unwrap();
    assert_eq!(Ledger::open(dir.path()).unwrap().list(10).unwrap().len(), 2);
}

/// Env var that turns [`crash_writer_child`] into a writer (it is a no-op otherwise).
const CRASH_DIR: &str = "THESEUS_LEDGER_CRASH_DIR";

#[test]
fn crash_writer_child() {
    let Some(dir) = std::env::var_os(CRASH_DIR) else { return };
    let ledger = Ledger::open(std::path::Path::new(&dir)).unwrap();
    for i in 0.. {
        let id = format!("r{i:06}");
        ledger.insert(&record(&format!("job-{i}"), &id, "2026-01-01T00:00:00Z")).unwrap();
        ledger.update_state(&id, JobState::Failed, Some(i % 200), Some(&"x".repeat(i as usize % 5000))).unwrap();
    }
}

#[test]
fn a_writer_killed_in_the_middle_leaves_a_whole_readable_ledger() {
    // The writer is this test binary itself, running `crash_writer_child`, killed with SIGKILL
    // at five different moments while it inserts and updates as fast as it can.
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    for round in 0..5 {
        let mut child = std::process::Command::new(&exe)
            .args(["--exact", "ledger::tests::crash_writer_child", "--nocapture", "--test-threads=1"])
            .env(CRASH_DIR, dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until this round has written something, then a little more.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let n = Ledger::open(dir.path()).unwrap().list(usize::MAX >> 1).unwrap().len();
            if n > 0 || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(3 + 7 * round));
        child.kill().unwrap();
        child.wait().unwrap();
        let ledger = Ledger::open(dir.path()).unwrap();
        let check: String = ledger.conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok", "round {round}");
        let records = ledger.list(usize::MAX >> 1).unwrap();
        assert!(!records.is_empty(), "round {round} wrote something before it was killed");
        for r in &records {
            let i: i32 = r.identity.run_id[1..].parse().unwrap();
            assert_eq!(r.identity.name, format!("job-{i}"), "a whole record");
            // Either the insert alone or the insert and its whole update.
            match r.state {
                JobState::Running => assert_eq!((r.exit_code, r.message.as_ref()), (None, None)),
                JobState::Failed => {
                    assert_eq!(r.exit_code, Some(i % 200));
                    assert_eq!(r.message.as_deref().map(str::len), Some(i as usize % 5000));
                }
                other => panic!("round {round}: run {i} in state {other:?}"),
            }
        }
        // The next round's writer starts again from run 0.
        ledger.conn.execute("DELETE FROM runs", []).unwrap();
    }
}

/// Issue 23 point 12: after a `--replace` race the newest row of a name may be a loser that
/// failed (or a run that ended); `status NAME` and `cancel NAME` must reach the live run.
#[test]
fn a_name_finds_its_live_run_before_newer_ended_or_unknown_rows() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    ledger.insert(&record("a", "r1", "2026-01-01T00:00:00Z")).unwrap();
    ledger.insert(&record("a", "r2", "2026-01-02T00:00:00Z")).unwrap();
    ledger.insert(&record("a", "r3", "2026-01-03T00:00:00Z")).unwrap();
    ledger.update_state("r1", JobState::Cancelled, None, Some("replaced by run r2")).unwrap();
    ledger.update_state("r3", JobState::Failed, None, Some("lost the name")).unwrap();
    assert_eq!(ledger.find("a").unwrap().unwrap().identity.run_id, "r2", "the live run, not the newest row");
    ledger.insert(&record("a", "r4", "2026-01-04T00:00:00Z")).unwrap();
    ledger.update_state("r4", JobState::Unknown, None, Some("the client stopped during submit")).unwrap();
    assert_eq!(ledger.find("a").unwrap().unwrap().identity.run_id, "r2", "a known live run before an unknown one");
    ledger.update_state("r2", JobState::Completed, Some(0), None).unwrap();
    assert_eq!(ledger.find("a").unwrap().unwrap().identity.run_id, "r4", "else the newest not ended");
    ledger.update_state("r4", JobState::Failed, None, None).unwrap();
    assert_eq!(ledger.find("a").unwrap().unwrap().identity.run_id, "r4", "else the newest");
}

/// Issue 23 point 12: a ledger on a read-only filesystem can still be read.
#[test]
fn a_read_only_ledger_opens_for_reading() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = Ledger::open(dir.path()).unwrap();
        ledger.insert(&record("a", "r1", "2026-01-01T00:00:00Z")).unwrap();
    }
    let ledger = Ledger::open_read_only(dir.path()).unwrap();
    assert!(ledger.is_read_only());
    assert_eq!(ledger.find("a").unwrap().unwrap().identity.run_id, "r1");
    ledger.update_state("r1", JobState::Failed, None, None).unwrap();
    assert_eq!(ledger.find("a").unwrap().unwrap().state, JobState::Running, "nothing is written");
}

/// A run keeps what it was submitted to resume from; a ledger from before gains the column
/// in place (its rows have none), and an older ledger's reader still finds every run.
#[test]
fn a_run_keeps_its_resume_and_an_older_ledger_gains_the_column() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = Ledger::open(dir.path()).unwrap();
        ledger.insert(&record("a", "r1", "2026-01-01T00:00:00Z")).unwrap();
        ledger.conn.execute_batch("ALTER TABLE runs DROP COLUMN resume").unwrap();
    }
    let ledger = Ledger::open(dir.path()).unwrap();
    assert_eq!(ledger.resume("r1").unwrap(), None);
    let resume = crate::bootstrap::Resume { restore: Some("/ck/general/default/a/step_40".into()), fresh: false };
    ledger.set_resume("r1", &resume).unwrap();
    assert_eq!(ledger.resume("r1").unwrap(), Some(serde_json::json!({"restore": "/ck/general/default/a/step_40"})));
    ledger.set_resume("r1", &crate::bootstrap::Resume { restore: None, fresh: true }).unwrap();
    assert_eq!(ledger.resume("r1").unwrap(), Some(serde_json::json!({"fresh": true})));
    assert_eq!(ledger.find("a").unwrap().unwrap().identity.run_id, "r1");
}

/// The config of a run's host is kept with the run, for commands run without `-d FILE`.
#[test]
fn a_run_keeps_its_host_config() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path()).unwrap();
    ledger.insert(&record("a", "r1", "2026-01-01T00:00:00Z")).unwrap();
    assert_eq!(ledger.host_config("r1").unwrap(), None);
    ledger.set_host_config("r1", &serde_json::json!({"hosts": {"x": {}}})).unwrap();
    assert_eq!(ledger.host_config("r1").unwrap(), Some(serde_json::json!({"hosts": {"x": {}}})));
}

#[test]
fn processes_opening_and_closing_one_ledger_at_once_all_succeed() {
    // Each client process opens the ledger, writes one record and closes it, 30 times. The last
    // connection to close cleans up the WAL under an exclusive lock, and a client opening at that
    // moment can be told "database is locked" at once (SQLite's "Sometimes Queries Return
    // SQLITE_BUSY In WAL Mode"); under load a writer can also hold the lock for long. The clients
    // are processes (this test binary run again), as submits are: locks between threads of one
    // process do not contend the same way.
    const CLIENT: &str = "THESEUS_LEDGER_TEST_CLIENT";
    if let Some(dir) = std::env::var_os(CLIENT) {
        let dir = std::path::PathBuf::from(dir);
        let me = std::process::id();
        for i in 0..30 {
            let ledger = Ledger::open(&dir).unwrap_or_else(|e| panic!("open: {e}"));
            let run = format!("r{me}-{i}");
            ledger.insert(&record("n", &run, "2026-01-01T00:00:00Z")).unwrap_or_else(|e| panic!("insert: {e}"));
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    Ledger::open(dir.path()).unwrap();
    let test = "ledger::tests::processes_opening_and_closing_one_ledger_at_once_all_succeed";
    let clients: Vec<_> = (0..24)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", test, "--nocapture", "--test-threads=1"])
                .env(CLIENT, dir.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let failures: Vec<String> = clients
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .filter(|o| !o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains("panicked") || l.contains("open:") || l.contains("insert:"))
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect();
    assert!(failures.is_empty(), "{} of 24 clients failed: {failures:?}", failures.len());
    let ledger = Ledger::open(dir.path()).unwrap();
    assert_eq!(ledger.list(100_000).unwrap().len(), 24 * 30);
}

#[test]
fn a_client_waits_for_a_writer_that_holds_the_lock_for_long() {
    // Under load a writer can be descheduled while it holds the ledger's lock: 8 of 200
    // concurrent submits on 2 busy cores once gave up after 10 s with "database is locked".
    let dir = tempfile::tempdir().unwrap();
    Ledger::open(dir.path()).unwrap();
    let holder = Connection::open(dir.path().join(LEDGER_FILE)).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(12));
        holder.execute_batch("COMMIT").unwrap();
    });
    let ledger = Ledger::open(dir.path()).unwrap();
    ledger.insert(&record("n", "r1", "2026-01-01T00:00:00Z")).unwrap();
    release.join().unwrap();
    assert_eq!(ledger.list(10).unwrap().len(), 1);
}
