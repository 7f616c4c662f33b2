//! `theseus ui` and a Volcano run's own files on the simulator: the page of an ended run shows
//! the files the run left on the PVC (`metadata.json`, `checkpoints.json` with its `latest`
//! marker), read once through a short-lived helper vcjob that is deleted after the read (two at
//! most at once), and deleted too when the dashboard is stopped in the middle of a read; a live
//! run's files that RBAC forbids reading (no `pods/exec`) are said to be refused, and why.

use std::time::Duration;

use serde_json::Value;

use crate::ui::{Ui, eventually};
use crate::volcano::SimWorld;
use crate::{TestContext, text};

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

/// Submits the saver as run `name` on the simulator and waits until the ledger has it completed.
fn saved_run(ctx: &TestContext, world: &SimWorld, name: &str) -> String {
    std::fs::write(std::path::Path::new(world.code()).join("saver.py"), SAVER).unwrap();
    std::fs::write(std::path::Path::new(world.code()).join("saver.yaml"), "entrypoint: python saver.py\n").unwrap();
    let exp = world.exp("saver.yaml");
    let out = ctx.run(&["submit", name, &exp, "--code", world.code(), "--host", "k8s", "--chip", "cpu"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run_id = text(&out.stdout).trim().to_owned();
    eventually("the run completed", || {
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

    let detail = eventually("the run's files from the PVC", || {
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
    eventually("the helper deleted", || helpers(&world).is_empty().then_some(()));

    // Kept: more looks start no helper.
    for _ in 0..3 {
        let again = ui.json("/api/runs/saver");
        assert_eq!(again["checkpoints"]["latest"], "step_3", "{again}");
    }
    assert_eq!(created(&world), before + 1, "the files were read once");
    assert_eq!(ui.stop("-INT"), Some(0));
}

#[test]
fn a_failed_read_says_why_and_a_dashboard_stopped_during_reads_deletes_their_helpers() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    for name in ["saver", "saver-2", "saver-3"] {
        saved_run(&ctx, &world, name);
    }
    // The helper cannot start: its image cannot be pulled.
    world.sim.faults().make_image_unpullable("busybox:1.36");
    let ui = Ui::start(&ctx, &[]);
    assert_eq!(ui.json("/api/runs/saver")["files_pending"], true);
    let failed = eventually("the read given up", || {
        let d = ui.json("/api/runs/saver");
        (d["files_pending"] == false).then_some(d)
    });
    let note = failed["files_note"].as_str().unwrap_or_default();
    assert!(note.contains("could not be read") && note.contains("busybox:1.36"), "{failed}");
    assert!(failed["metadata"].is_null(), "{failed}");
    eventually("the helper deleted", || helpers(&world).is_empty().then_some(()));
    assert_eq!(ui.stop("-INT"), Some(0));

    // The helpers are never scheduled: the dashboard is stopped while they wait. Of three
    // ended runs looked at, two are read at once; the third waits for a turn.
    world.sim.faults().make_image_pullable("busybox:1.36");
    world.sim.faults().delay_scheduling(Some(Duration::from_secs(3600)));
    let before = created(&world);
    let ui = Ui::start(&ctx, &[]);
    for name in ["saver", "saver-2", "saver-3"] {
        assert_eq!(ui.json(&format!("/api/runs/{name}"))["files_pending"], true);
    }
    eventually("two helpers created", || (helpers(&world).len() == 2).then_some(()));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(created(&world), before + 2, "a third helper: {:?}", helpers(&world));
    let said = ui.stderr();
    assert_eq!(ui.stop("-INT"), Some(0), "{said}");
    // Deleted before the dashboard exited.
    assert_eq!(helpers(&world), Vec::<String>::new());
}

#[test]
fn a_live_runs_files_refused_by_rbac_say_so_on_its_page() {
    let ctx = TestContext::new();
    let rbac = std::fs::read_to_string(crate::repo_root().join("docs/rbac.yaml")).unwrap();
    // A second user with the documented rights but `pods/exec`.
    let viewer = rbac
        .replace("[\"pods/exec\", \"pods/portforward\"]", "[\"pods/portforward\"]")
        .replace("name: theseus", "name: viewer-theseus")
        .replace("name: researcher", "name: viewer");
    assert!(!viewer.contains("pods/exec"));
    let tokens = "tok-full-7a1e,researcher,1\ntok-view-93c0,viewer,2\n";
    let authz = theseus_kube_sim::Authz::from_files(tokens, &format!("{rbac}\n---\n{viewer}")).unwrap();
    let world = SimWorld::start_with(&ctx, Some((authz, "tok-full-7a1e")));
    let out = ctx.run(&["submit", "sleeper", &world.exp("sleep.yaml"), "--code", world.code(), "--host", "k8s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let _cancel = crate::ui::CancelOnDrop(&ctx, &["sleeper"]);
    eventually("the run running", || {
        let status = ctx.run(&["status", "sleeper", "--output", "json"]);
        let v: Value = serde_json::from_slice(&status.stdout).ok()?;
        (v["status"]["state"] == "running").then_some(())
    });
    // The same cluster as the user who may not exec.
    std::fs::write(ctx.home().join(".kube/config"), world.sim.kubeconfig("{token: tok-view-93c0}", "default")).unwrap();
    let ui = Ui::start(&ctx, &[]);
    let detail = ui.json("/api/runs/sleeper");
    assert_eq!(detail["status"]["state"], "running", "{detail}");
    assert!(detail["metadata"].is_null(), "{detail}");
    let note = detail["files_note"].as_str().unwrap_or_default();
    assert!(note.contains("could not be read") && note.contains("pods/exec"), "{detail}");
    assert_eq!(ui.stop("-INT"), Some(0));
}
