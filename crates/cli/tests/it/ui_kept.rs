//! `theseus ui` and an ended Volcano run on the simulator: the run page shows the files the
//! run left on the PVC (`metadata.json`, `checkpoints.json` with its `latest` marker), read once
//! through a short-lived helper vcjob that is deleted after the read, and deleted too when the
//! dashboard is stopped in the middle of a read.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::ui::Ui;
use crate::volcano::SimWorld;
use crate::{TestContext, text};

const PATIENCE: Duration = Duration::from_secs(90);

/// A job that saves a checkpoint `step_3` and marks it `latest`.
const SAVER: &str = "import os\n\
d = os.environ['THESEUS_CHECKPOINT_DIR']\n\
os.makedirs(os.path.join(d, 'step_3'), exist_ok=True)\n\
open(os.path.join(d, 'latest'), 'w').write('step_3\\n')\n\
print('saved step_3', flush=True)\n";

/// The vcjobs created so far whose name starts with `prefix` (from the simulator's requests:
/// a helper is deleted once it is done, so its object alone would not tell).
fn created(world: &SimWorld) -> usize {
    world
        .sim
        .requests()
        .iter()
        .filter(|(method, path)| {
            method == "POST" && path.contains("/apis/batch.volcano.sh/v1alpha1/") && path.contains("/jobs")
        })
        .count()
}

/// The helper vcjobs that read run files, still in the simulator.
fn helpers(world: &SimWorld) -> Vec<String> {
    let jobs = world.sim.objects("batch.volcano.sh/v1alpha1", "Job");
    let names = jobs.iter().filter_map(|j| j["metadata"]["name"].as_str());
    names.filter(|n| n.starts_with("theseus-files-")).map(str::to_owned).collect()
}

fn wait_until<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = ready() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Submits the saver as run `name` on the simulator and waits until the ledger has it completed.
fn saved_run(ctx: &TestContext, world: &SimWorld, name: &str) -> String {
    std::fs::write(std::path::Path::new(world.code()).join("saver.py"), SAVER).unwrap();
    std::fs::write(std::path::Path::new(world.code()).join("saver.yaml"), "entrypoint: python saver.py\n").unwrap();
    let exp = world.exp("saver.yaml");
    let out = ctx.run(&["submit", name, &exp, "--code", world.code(), "--host", "k8s", "--chip", "cpu"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run_id = text(&out.stdout).trim().to_owned();
    wait_until("the run completed", || {
        let status = ctx.run(&["status", name, "--output", "json"]);
        let v: Value = serde_json::from_slice(&status.stdout).ok()?;
        (v.to_string().contains("\"completed\"")).then_some(())
    });
    run_id
}

#[test]
fn an_ended_volcano_runs_files_are_read_once_from_the_pvc() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    let run_id = saved_run(&ctx, &world, "saver");
    let before = created(&world);
    let ui = Ui::start(&ctx, &[]);

    // The first look starts the read and answers at once, saying so.
    let first = ui.json("/api/runs/saver");
    assert_eq!(first["run"]["state"], "completed", "{first}");
    assert_eq!(first["files_pending"], true, "{first}");
    let note = first["files_note"].as_str().unwrap_or_default();
    assert!(note.contains("PVC") && note.contains("helper pod"), "{first}");
    assert!(first["metadata"].is_null(), "{first}");

    let detail = wait_until("the run's files from the PVC", || {
        let d = ui.json("/api/runs/saver");
        (d["files_pending"] == false).then_some(d)
    });
    assert!(detail["files_note"].is_null(), "{detail}");
    assert_eq!(detail["metadata"]["status"], "completed", "{detail}");
    assert_eq!(detail["metadata"]["run_id"], run_id.as_str(), "{detail}");
    let checkpoints = &detail["checkpoints"];
    assert_eq!(checkpoints["latest"], "step_3", "{detail}");
    let names: Vec<&str> =
        checkpoints["checkpoints"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["step_3"], "{detail}");
    assert_eq!(created(&world), before + 1, "one helper vcjob read the files");
    wait_until("the helper deleted", || helpers(&world).is_empty().then_some(()));

    // Kept: more looks start no helper.
    for _ in 0..3 {
        let again = ui.json("/api/runs/saver");
        assert_eq!(again["checkpoints"]["latest"], "step_3", "{again}");
    }
    assert_eq!(created(&world), before + 1, "the files were read once");
    assert_eq!(ui.stop("-INT"), Some(0));
}

#[test]
fn a_failed_read_says_why_and_a_dashboard_stopped_during_a_read_deletes_its_helper() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    saved_run(&ctx, &world, "saver");
    // The helper cannot start: its image cannot be pulled.
    world.sim.faults().make_image_unpullable("busybox:1.36");
    let ui = Ui::start(&ctx, &[]);
    assert_eq!(ui.json("/api/runs/saver")["files_pending"], true);
    let failed = wait_until("the read given up", || {
        let d = ui.json("/api/runs/saver");
        (d["files_pending"] == false).then_some(d)
    });
    let note = failed["files_note"].as_str().unwrap_or_default();
    assert!(note.contains("could not be read") && note.contains("busybox:1.36"), "{failed}");
    assert!(failed["metadata"].is_null(), "{failed}");
    wait_until("the helper deleted", || helpers(&world).is_empty().then_some(()));
    assert_eq!(ui.stop("-INT"), Some(0));

    // The helper is never scheduled: the dashboard is stopped while it waits.
    world.sim.faults().make_image_pullable("busybox:1.36");
    world.sim.faults().delay_scheduling(Some(Duration::from_secs(3600)));
    let before = created(&world);
    let ui = Ui::start(&ctx, &[]);
    assert_eq!(ui.json("/api/runs/saver")["files_pending"], true);
    wait_until("the helper created", || (!helpers(&world).is_empty()).then_some(()));
    assert_eq!(created(&world), before + 1);
    let said = ui.stderr();
    assert_eq!(ui.stop("-INT"), Some(0), "{said}");
    // Deleted before the dashboard exited.
    assert_eq!(helpers(&world), Vec::<String>::new());
}
