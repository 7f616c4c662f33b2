//! Tests of the setup phase: one `uv sync` per run, the start barrier across ranks, a failure
//! or a missing rank that stops the others with a sentence naming it, hosts with private work
//! dirs (one sync per host, no wait across hosts), and uv installed privately on a Python that
//! PEP 668 marks "externally managed".

use std::process::Child;

use super::*;

/// A fake `uv`: logs `<time> <rank> <args>`, sleeps `UV_SYNC_SLEEP` on `sync` and exits
/// `UV_SYNC_EXIT`; `run --no-sync python ARGS` runs python3.
const FAKE_UV: &str = r#"#!/bin/sh
printf '%s %s %s\n' "$(date +%s.%N)" "${RANK:-?}" "$*" >> "$UV_LOG"
case "$1" in
  sync)
    sleep "${UV_SYNC_SLEEP:-0}"
    printf '%s %s sync-end\n' "$(date +%s.%N)" "${RANK:-?}" >> "$UV_LOG"
    exit "${UV_SYNC_EXIT:-0}" ;;
  run) shift 3; exec python3 "$@" ;;
esac
exit 9
"#;

/// The job of these tests: records when this rank's job started.
const STAMP: &str = r#"date +%s.%N > "$THESEUS_RUN_DIR/start.$RANK""#;

struct Setup {
    h: Harness,
    log: PathBuf,
    path: String,
}

impl Setup {
    /// A two-process local job with a `pyproject.toml` and the fake uv first on PATH.
    fn new() -> (Setup, RenderedBootstrap) {
        let h = Harness::new();
        let bin = h.tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("uv"), FAKE_UV).unwrap();
        std::fs::set_permissions(bin.join("uv"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(h.work.join("pyproject.toml"), "[project]\nname = \"x\"\nversion = \"0\"\n").unwrap();
        let mut input = h.input(&["/bin/sh", "-c", STAMP]);
        input.launch = Launch::Local { coordinator_port: 1 };
        let rendered = h.install(&input);
        let log = h.tmp.path().join("uv.log");
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        (Setup { h, log, path }, rendered)
    }

    fn start(&self, rendered: &RenderedBootstrap, rank: u32, extra: &[(&str, &str)]) -> std::process::Child {
        let rank = rank.to_string();
        let mut env = vec![
            ("PATH", self.path.as_str()),
            ("UV_LOG", self.log.to_str().unwrap()),
            ("THESEUS_LOCAL_RANK", rank.as_str()),
            ("THESEUS_LOCAL_WORLD_SIZE", "2"),
        ];
        env.extend_from_slice(extra);
        self.h.start(rendered, &env)
    }

    /// `(time, rank, what)` per line of the fake uv's log.
    fn calls(&self) -> Vec<(f64, String, String)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .map(|l| {
                let mut parts = l.splitn(3, ' ');
                let time = parts.next().unwrap().parse().unwrap();
                (time, parts.next().unwrap().to_owned(), parts.next().unwrap_or("").to_owned())
            })
            .collect()
    }

    fn started(&self, rank: u32) -> Option<f64> {
        let text = std::fs::read_to_string(self.h.run.join(format!("start.{rank}"))).ok()?;
        Some(text.trim().parse().unwrap())
    }
}

#[test]
fn one_rank_syncs_and_no_rank_starts_before_every_rank_is_set_up() {
    let (s, rendered) = Setup::new();
    // Rank 1 comes first and must wait for rank 0's slow sync, whichever rank is faster.
    for first in [1, 0] {
        std::fs::remove_file(&s.log).ok();
        let slow = [("UV_SYNC_SLEEP", "2")];
        let a = s.start(&rendered, first, &slow);
        std::thread::sleep(Duration::from_millis(300));
        let b = s.start(&rendered, 1 - first, &slow);
        for (child, rank) in [(a, first), (b, 1 - first)] {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "rank {rank}: {}", stderr(&out));
            assert!(stderr(&out).contains("every rank finished its setup"), "rank {rank}: {}", stderr(&out));
        }
        let calls = s.calls();
        let syncs: Vec<_> = calls.iter().filter(|(_, _, what)| what == "sync").collect();
        assert_eq!(syncs.len(), 1, "one uv sync per start of the run: {calls:?}");
        assert_eq!(syncs[0].1, "0", "rank 0 syncs: {calls:?}");
        let sync_end = calls.iter().find(|(_, _, what)| what == "sync-end").unwrap().0;
        for rank in 0..2 {
            let started = s.started(rank).unwrap();
            assert!(
                started >= sync_end,
                "rank {rank} started its job at {started}, before the sync ended at {sync_end}"
            );
        }
    }
}

#[test]
fn a_failed_setup_on_rank_0_stops_the_other_rank_with_the_reason() {
    let (s, rendered) = Setup::new();
    let fail = [("UV_SYNC_SLEEP", "1"), ("UV_SYNC_EXIT", "1")];
    let waiting = s.start(&rendered, 1, &fail);
    std::thread::sleep(Duration::from_millis(300));
    let failing = s.start(&rendered, 0, &fail);
    let (waiting, failing) = (waiting.wait_with_output().unwrap(), failing.wait_with_output().unwrap());
    assert_eq!(failing.status.code(), Some(2), "{}", stderr(&failing));
    assert_eq!(waiting.status.code(), Some(2), "{}", stderr(&waiting));
    let text = stderr(&waiting);
    assert!(text.contains("rank 0 failed to set up the job: uv sync failed (on "), "{text}");
    assert!(s.started(1).is_none() && s.started(0).is_none(), "no job started");
}

#[test]
fn a_rank_that_never_comes_ends_the_wait_with_the_timeout_named() {
    let (s, rendered) = Setup::new();
    let out = s.start(&rendered, 1, &[("THESEUS_SETUP_TIMEOUT_SECONDS", "1")]).wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("waited 1s for rank 0 to start its setup (THESEUS_SETUP_TIMEOUT_SECONDS)"),
        "{}",
        stderr(&out)
    );
    assert!(s.calls().is_empty(), "rank 1 never syncs");
}

/// A wiring whose hosts each have their own disk (`TEST_PRIVATE_DIRS=1`), as a cloud VM's
/// workers: the ranks from `TEST_*` variables.
fn private_wired() -> Launch {
    const SHELL: &str = r#"theseus_rank=$TEST_RANK
theseus_count=$TEST_COUNT
theseus_local_rank=$TEST_LOCAL_RANK
theseus_first_host=127.0.0.1
theseus_private_dirs=${TEST_PRIVATE_DIRS:-1}"#;
    Launch::Wired { coordinator_port: 1, wiring: super::super::Wiring { scheme: "test_private", shell: SHELL } }
}

/// Two "hosts", each with its own work dir (a [`Setup`] of its own) and a job of three ranks:
/// rank 0 on host `a`, ranks 1 and 2 (local ranks 0 and 1) on host `b`; the fake uv logs into
/// one file.
fn two_hosts() -> [(Setup, RenderedBootstrap); 2] {
    let (a, _) = Setup::new();
    let (b, _) = Setup::new();
    let log = a.h.tmp.path().join("uv of both hosts.log");
    [a, b].map(|mut s| {
        let mut input = s.h.input(&["/bin/sh", "-c", STAMP]);
        input.launch = private_wired();
        let rendered = s.h.install(&input);
        s.log = log.clone();
        (s, rendered)
    })
}

impl Setup {
    /// Starts rank `rank` of [`two_hosts`]'s three-rank job on this host as local rank `local`.
    fn start_wired(&self, rendered: &RenderedBootstrap, rank: &str, local: &str, extra: &[(&str, &str)]) -> Child {
        let mut env = vec![
            ("PATH", self.path.as_str()),
            ("UV_LOG", self.log.to_str().unwrap()),
            ("TEST_RANK", rank),
            ("TEST_COUNT", "3"),
            ("TEST_LOCAL_RANK", local),
        ];
        env.extend_from_slice(extra);
        self.h.start(rendered, &env)
    }
}

#[test]
fn with_private_dirs_each_host_sets_up_its_own_dir_and_waits_for_no_other_host() {
    let [(a, on_a), (b, on_b)] = two_hosts();
    // Host b's second rank comes first and waits for its own host's first rank, never for rank 0.
    let slow = [("UV_SYNC_SLEEP", "1"), ("THESEUS_SETUP_TIMEOUT_SECONDS", "20")];
    let second = b.start_wired(&on_b, "2", "1", &slow);
    std::thread::sleep(Duration::from_millis(300));
    let first = b.start_wired(&on_b, "1", "0", &slow);
    for (child, rank) in [(second, 2), (first, 1)] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "rank {rank}: {}", stderr(&out));
        assert!(stderr(&out).contains("this host's setup is done"), "rank {rank}: {}", stderr(&out));
    }
    let calls = b.calls();
    let syncs: Vec<&str> = calls.iter().filter(|(_, _, what)| what == "sync").map(|(_, r, _)| r.as_str()).collect();
    assert_eq!(syncs, ["1"], "host b's first local rank syncs its dir, alone: {calls:?}");
    let sync_end = calls.iter().find(|(_, _, what)| what == "sync-end").unwrap().0;
    assert!(b.started(2).unwrap() >= sync_end, "rank 2 started before its host's sync ended");
    assert!(!a.h.work.join(".theseus/start").exists(), "nothing of host b's setup is in host a's dir");

    // Host a, later: its rank 0 syncs its own dir.
    let out = a.start_wired(&on_a, "0", "0", &[]).wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let syncs = a.calls().iter().filter(|(_, _, what)| what == "sync").count();
    assert_eq!(syncs, 2, "one sync per host");
}

#[test]
fn without_private_dirs_a_rank_of_another_host_waits_for_rank_0_as_before() {
    let [_a, (b, on_b)] = two_hosts();
    let shared = [("TEST_PRIVATE_DIRS", "0"), ("THESEUS_SETUP_TIMEOUT_SECONDS", "1")];
    let out = b.start_wired(&on_b, "1", "0", &shared).wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("waited 1s for rank 0 to start its setup"), "{}", stderr(&out));
    let bad = b.start_wired(&on_b, "1", "0", &[("TEST_PRIVATE_DIRS", "yes")]).wait_with_output().unwrap();
    assert!(stderr(&bad).contains("theseus_private_dirs is not 0 or 1: yes"), "{}", stderr(&bad));
}

/// Debian's own python3, whose stdlib dir carries PEP 668's `EXTERNALLY-MANAGED` marker, from
/// `THESEUSTEST_MANAGED_PYTHON` (set by `cargo xtask test`).
fn managed_python() -> Option<PathBuf> {
    match std::env::var("THESEUSTEST_MANAGED_PYTHON") {
        Ok(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            let msg = "NOT RUN: THESEUSTEST_MANAGED_PYTHON (an externally managed python3 with pip) is not set; \
                       `cargo xtask test` sets it";
            assert!(std::env::var("THESEUSTEST_REQUIRE_ALL").as_deref() != Ok("1"), "{msg}");
            eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
            None
        }
    }
}

#[test]
fn uv_is_installed_privately_where_the_system_python_is_externally_managed() {
    let Some(python) = managed_python() else { return };
    let h = Harness::new();
    // PATH: that python3 and the base system, no uv anywhere.
    let bin = h.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(&python, bin.join("python3")).unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let which = Command::new("sh").args(["-c", "command -v uv"]).env("PATH", &path).output().unwrap();
    assert!(!which.status.success(), "uv is on {path}; this test needs a PATH without it");
    // What the bootstrap used to do fails here, as on Debian and Ubuntu images.
    let user = Command::new("python3")
        .args(["-m", "pip", "install", "--user", "--dry-run", "uv"])
        .env_clear()
        .env("PATH", &path)
        .env("HOME", h.tmp.path())
        .output()
        .unwrap();
    assert!(!user.status.success(), "pip install --user worked: this python is not externally managed");
    assert!(stderr(&user).contains("externally-managed-environment"), "{}", stderr(&user));

    std::fs::write(h.work.join("pyproject.toml"), "[project]\nname = \"x\"\nversion = \"0\"\n").unwrap();
    let mut input = h.input(&["python", "dump.py", "a"]);
    let cache = h.dir("uv cache");
    input.uv_cache_dir = Some(cache.clone());
    let (_, out) = h.run(&input, &[("PATH", path.as_str())]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("installing it into a private venv"), "{}", stderr(&out));
    let uv = Path::new(&cache).join("theseus-uv/bin/uv");
    assert!(uv.is_file(), "{} is missing", uv.display());
    assert!(!h.tmp.path().join(".local").exists(), "nothing went into the user's site-packages");
    let dump = h.dump();
    assert_eq!(dump["argv"][1], "a");
    let prefix =
        Command::new(h.work.join(".venv/bin/python")).args(["-c", "import sys; print(sys.prefix)"]).output().unwrap();
    assert!(prefix.status.success(), "uv sync made no .venv in the work dir");

    // A second run of the same cluster finds the uv it installed.
    let (_, out) = h.run(&input, &[("PATH", path.as_str())]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("installing it"), "{}", stderr(&out));
}
