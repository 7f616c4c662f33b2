//! `theseus ui` over the real Slurm lab (`cargo xtask lab`), reached over SSH as a user's own
//! ssh config says: a 2-node run is listed running, its log streams both ranks' lines live
//! (a line printed after the stream opened arrives), its page shows the nodes, its end and the
//! `metadata.json` read over SSH, and a cancel from the API ends another run (checked through
//! `theseus status`).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::slurm::{lab, write_configs};
use crate::ui::{Events, Ui, eventually, http, row};
use crate::{TestContext, text};

/// How long a run may wait for the lab's nodes, which other tests share.
const QUEUE_PATIENCE: Duration = Duration::from_secs(300);

/// Each rank says which it is, waits until the file `GATE` exists, then says it passed.
const GATED: &str = "import os, sys, time\n\
rank = os.environ.get('SLURM_PROCID')\n\
print('task', rank, 'of', os.environ.get('SLURM_NTASKS'), flush=True)\n\
deadline = time.time() + 300\n\
while not os.path.exists(sys.argv[1]) and time.time() < deadline:\n    time.sleep(0.2)\n\
print('task', rank, 'passed the gate', flush=True)\n";

/// Cancels the named runs (over the lab's ssh config) when dropped.
struct CancelOnDrop<'a>(&'a TestContext, &'a str, [&'a str; 2]);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        for name in self.2 {
            let _ = self.0.cmd().env("THESEUS_SSH_CONFIG", self.1).args(["cancel", name]).output();
        }
    }
}

/// Reads the stream until ranks 0 and 1 each printed `line(rank)`, each line with its rank.
fn both_ranks(events: &mut Events, line: impl Fn(usize) -> String) {
    let mut seen = [false; 2];
    events.until(|event, data| {
        if event == "line" {
            for (rank, seen) in seen.iter_mut().enumerate() {
                if data["text"] == line(rank).as_str() {
                    assert_eq!(data["rank"], rank, "{data}");
                    *seen = true;
                }
            }
        }
        seen == [true; 2]
    });
}

#[test]
fn the_dashboard_streams_shows_and_cancels_slurm_runs_over_ssh() {
    let Some((port, user, key, known, shared)) = lab("ui over the Slurm lab") else { return };
    let ctx = TestContext::new();
    let ssh_config = write_configs(&ctx, &port, &user, &key, &known, &shared);
    let code = tempfile::tempdir().unwrap();
    // The gate is on the shared dir, which the nodes see at the same path.
    let gate_dir = tempfile::Builder::new().prefix("ui-gate-").tempdir_in(&shared).unwrap();
    // The jobs run as the lab's user: they must see into it.
    let mode = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755);
    std::fs::set_permissions(gate_dir.path(), mode).unwrap();
    let gate = gate_dir.path().join("go");
    std::fs::write(code.path().join("gated.py"), GATED).unwrap();
    std::fs::write(code.path().join("gated.yaml"), format!("entrypoint: python3 gated.py {}\n", gate.display()))
        .unwrap();
    std::fs::write(code.path().join("sleep.yaml"), "entrypoint: sleep 600\n").unwrap();
    let ssh = |args: &[&str]| ctx.cmd().env("THESEUS_SSH_CONFIG", &ssh_config).args(args).output().unwrap();
    let code_dir = code.path().to_str().unwrap();
    let exp = |name: &str| code.path().join(name).display().to_string();
    let _cancel = CancelOnDrop(&ctx, &ssh_config, ["ui-pair", "ui-sleep"]);
    let gated = exp("gated.yaml");
    let pair = ssh(&["submit", "ui-pair", &gated, "--code", code_dir, "--host", "slurm", "--chip", "h100", "-n", "8"]);
    assert!(pair.status.success(), "{}", text(&pair.stderr));
    let run_id = text(&pair.stdout).trim().to_owned();
    let sleeper =
        ssh(&["submit", "ui-sleep", &exp("sleep.yaml"), "--code", code_dir, "--host", "slurm", "--chip", "cpu"]);
    assert!(sleeper.status.success(), "{}", text(&sleeper.stderr));
    let ui = Ui::start_with_env(&ctx, &[], &[("THESEUS_SSH_CONFIG", &ssh_config)]);

    // The refresher asks the lab over SSH: the pair runs.
    let deadline = Instant::now() + QUEUE_PATIENCE;
    loop {
        let page = ui.json("/api/runs?host=slurm");
        let state = row(&page, "ui-pair").map(|r| r["state"].clone()).unwrap_or_default();
        if state == "running" {
            break;
        }
        assert!(Instant::now() < deadline, "ui-pair never ran: {page}");
        std::thread::sleep(Duration::from_millis(500));
    }

    // Both ranks' lines stream, each with its rank; the lines after the gate arrive live.
    let mut events = Events::open(&ui, &format!("/api/runs/{run_id}/logs/stream"));
    both_ranks(&mut events, |rank| format!("task {rank} of 2"));
    std::fs::write(&gate, "").unwrap();
    both_ranks(&mut events, |rank| format!("task {rank} passed the gate"));
    let (_, end) = events.until(|event, _| event == "end");
    assert_eq!(end["state"], "completed", "{}", events.seen);

    // Its page: the end, a row per rank on its node, and metadata.json read over SSH.
    let detail = ui.json("/api/runs/ui-pair");
    assert_eq!(detail["status"]["state"], "completed", "{detail}");
    let ranks = detail["status"]["ranks"].as_array().cloned().unwrap_or_default();
    assert_eq!(ranks.len(), 2, "{detail}");
    for r in &ranks {
        assert!(r["location"].as_str().is_some_and(|l| !l.is_empty()), "a rank without its node: {detail}");
    }
    assert_eq!(detail["metadata"]["status"], "completed", "{detail}");
    assert_eq!(detail["metadata"]["num_processes"], 2, "{detail}");
    assert!(detail["checkpoints"]["dir"].is_string(), "{detail}");
    assert!(detail["files_note"].is_null(), "{detail}");
    assert_eq!(detail["run"]["chips"], "8 x h100", "{detail}");

    // Cancel from the API (the token in a header), checked through `theseus status`.
    eventually("the sleeper submitted", || {
        let page = ui.json("/api/runs?host=slurm");
        row(&page, "ui-sleep").filter(|r| r["state"] == "running" || r["state"] == "pending").map(drop)
    });
    let cancelled = http(ui.addr, "POST", "/api/runs/ui-sleep/cancel", &[("X-Theseus-Token", &ui.token)]);
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    let after: Value = serde_json::from_str(&cancelled.body).unwrap();
    assert_eq!(after["run"]["state"], "cancelled", "{after}");
    let status = ssh(&["status", "ui-sleep", "--output", "json"]);
    let v: Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
    assert_eq!(v["status"]["state"], "cancelled", "{v} {}", text(&status.stderr));
    assert_eq!(ui.stop("-INT"), Some(0));
}
