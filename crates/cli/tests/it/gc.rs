//! `theseus gc` and `theseus du` on the local host: a finished run's code dir goes, its log and
//! a running run stay, and `du` follows.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{TestContext, text};

fn work(ctx: &TestContext) -> PathBuf {
    ctx.home().join(".local/share/theseus/work")
}

fn submit(ctx: &TestContext, name: &str, script: &str, code: &Path, follow: bool) -> String {
    std::fs::write(code.join(format!("{name}.py")), script).unwrap();
    let exp = code.join(format!("{name}.yaml"));
    std::fs::write(&exp, format!("entrypoint: python {name}.py\nrequest: {{chip: cpu}}\n")).unwrap();
    let mut args = vec!["submit", name, exp.to_str().unwrap(), "--code", code.to_str().unwrap()];
    if follow {
        args.push("--follow");
    }
    let out = ctx.cmd().args(&args).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let run_id = stdout.lines().find(|l| l.starts_with("20")).map(str::to_owned);
    run_id.unwrap_or_else(|| {
        let list = ctx.run(&["list", "--output", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
        v.as_array().unwrap().iter().find(|r| r["identity"]["name"] == name).unwrap()["identity"]["run_id"]
            .as_str()
            .unwrap()
            .to_owned()
    })
}

fn du(ctx: &TestContext) -> serde_json::Value {
    let out = ctx.run(&["du", "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let local = v.as_array().unwrap().iter().find(|h| h["host"] == "local").cloned();
    local.unwrap_or_else(|| panic!("no local host in {v}"))
}

struct CancelOnDrop<'a>(&'a TestContext, &'a str);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["cancel", self.1]);
    }
}

#[test]
fn gc_removes_a_finished_runs_code_dir_keeps_its_log_and_a_running_run_and_du_follows() {
    let ctx = TestContext::new();
    let code = tempfile::tempdir().unwrap();
    let done = submit(&ctx, "finished", "print('done', flush=True)\n", code.path(), true);
    let running =
        submit(&ctx, "running", "import time\nprint('waiting', flush=True)\ntime.sleep(600)\n", code.path(), false);
    let _cancel = CancelOnDrop(&ctx, "running");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !text(&ctx.run(&["logs", &running]).stdout).contains("waiting") {
        assert!(Instant::now() < deadline, "the running job never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (done_dir, running_dir) = (
        work(&ctx).join("general/default/finished").join(&done),
        work(&ctx).join("general/default/running").join(&running),
    );
    let done_log = work(&ctx).join("logs/general/default/finished").join(format!("{done}.log"));
    assert!(done_dir.join("finished.py").exists() && running_dir.join("running.py").exists() && done_log.exists());
    assert_eq!(du(&ctx)["usage"]["run_dirs"], 2);

    let dry = ctx.run(&["gc", "--older-than", "0s", "--dry-run", "--output", "json"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let report: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    let local = report.as_array().unwrap().iter().find(|h| h["host"] == "local").unwrap().clone();
    let items = local["reclaim"]["items"].as_array().unwrap();
    assert!(items.iter().any(|i| i["kind"] == "run_dir" && i["path"] == done_dir.to_str().unwrap()), "{local}");
    assert!(items.iter().all(|i| i["path"] != running_dir.to_str().unwrap()), "{local}");
    assert!(items.iter().all(|i| i["bytes"].as_u64().is_some()), "{local}");
    assert!(text(&dry.stderr).contains("would free"), "{}", text(&dry.stderr));
    assert!(done_dir.exists(), "a dry run removes nothing");

    let gc = ctx.run(&["gc", "--older-than", "0s"]);
    let stderr = text(&gc.stderr);
    assert!(gc.status.success(), "{stderr}");
    assert!(stderr.contains(done_dir.to_str().unwrap()) && stderr.contains("freed"), "{stderr}");
    assert!(!done_dir.exists(), "the finished run's code dir is gone");
    assert!(done_log.exists(), "its log stays");
    assert!(running_dir.join("running.py").exists(), "the running run is untouched");
    let used = du(&ctx);
    assert_eq!(used["usage"]["run_dirs"], 1, "{used}");
    let table = text(&ctx.run(&["du"]).stdout);
    assert!(table.lines().any(|l| l.starts_with("local")), "{table}");
}

#[test]
fn gc_reclaims_a_finished_runs_code_dir_on_a_volcano_pvc_and_du_sees_it() {
    let ctx = TestContext::new();
    let world = crate::volcano::SimWorld::start(&ctx);
    let out = ctx.run(&[
        "submit",
        "once",
        &world.exp("exp.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
        "--follow",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let usage = |ctx: &TestContext| -> serde_json::Value {
        let du = ctx.run(&["du", "--host", "k8s", "--output", "json"]);
        assert!(du.status.success(), "{}", text(&du.stderr));
        serde_json::from_slice::<serde_json::Value>(&du.stdout).unwrap()[0]["usage"].clone()
    };
    let before = usage(&ctx);
    assert_eq!(before["run_dirs"], 1, "{before}");
    assert!(before["objects"].as_u64().unwrap() >= 3, "the code went through the store: {before}");

    let gc = ctx.run(&["gc", "--older-than", "0s", "--host", "k8s", "--output", "json"]);
    let stderr = text(&gc.stderr);
    assert!(gc.status.success(), "{stderr}");
    assert!(!stderr.contains("not yet"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&gc.stdout).unwrap();
    assert_eq!(report[0]["deleted"], serde_json::json!([]), "no Kubernetes leftovers: {report}");
    let items = report[0]["reclaim"]["items"].as_array().unwrap();
    assert!(items.iter().any(|i| i["kind"] == "run_dir" && i["path"].as_str().unwrap().contains("/once/")), "{report}");
    let after = usage(&ctx);
    assert_eq!((after["run_dirs"].as_u64(), after["objects"].as_u64()), (Some(0), Some(0)), "{after}");
    drop(world);
}
