//! The `THESEUS_DISPATCH_*_OVERRIDE` variables (issue 28, part `standalone`): set in the job's
//! environment they win over the rendered paths; every case runs the real script with bash.

use super::*;

/// An input whose root, status, log and data dirs are under `<tmp>/old root`, and whose code
/// is the harness's work dir (not under the root).
fn rooted(h: &Harness) -> BootstrapInput {
    let mut input = h.input(&["python3", "dump.py"]);
    let root = h.dir("old root");
    input.root_dir = root.clone();
    input.run_dir = format!("{root}/status/{}", input.identity.run_path());
    input.log_dir = Some(format!("{root}/logs"));
    input.data_dirs = DataDirs {
        data: format!("{root}/data"),
        checkpoints: format!("{root}/checkpoints/"),
        results: format!("{root}/results"),
    };
    input
}

/// Runs `input` with `env`; returns the job's environment (read from where the job wrote it).
fn job_env(h: &Harness, input: &BootstrapInput, env: &[(&str, &str)], run_dir: &str) -> Value {
    let (_, out) = h.run(input, env);
    assert!(out.status.success(), "{}", stderr(&out));
    read_json(&Path::new(run_dir).join("dump.json"))["env"].clone()
}

fn paths(env: &Value) -> Vec<(String, String)> {
    [
        "THESEUS_ROOT",
        "THESEUS_WORK_DIR",
        "THESEUS_RUN_DIR",
        "THESEUS_STATUS_DIR",
        "THESEUS_LOG_DIR",
        "THESEUS_DATA_DIR",
        "THESEUS_CHECKPOINTS_DIR",
        "THESEUS_RESULTS_DIR",
        "THESEUS_CHECKPOINT_DIR",
        "THESEUS_CONFIG",
    ]
    .iter()
    .map(|k| ((*k).to_owned(), env[*k].as_str().unwrap_or("<unset>").to_owned()))
    .collect()
}

fn expect(list: &[(&str, String)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

#[test]
fn without_overrides_the_rendered_paths_are_exported_with_the_status_and_log_dirs() {
    let h = Harness::new();
    let input = rooted(&h);
    let root = h.dir("old root");
    let env = job_env(&h, &input, &[], &input.run_dir);
    let work = h.work.to_str().unwrap();
    assert_eq!(
        paths(&env),
        expect(&[
            ("THESEUS_ROOT", root.clone()),
            ("THESEUS_WORK_DIR", work.to_owned()),
            ("THESEUS_RUN_DIR", input.run_dir.clone()),
            ("THESEUS_STATUS_DIR", format!("{root}/status")),
            ("THESEUS_LOG_DIR", format!("{root}/logs")),
            ("THESEUS_DATA_DIR", format!("{root}/data")),
            ("THESEUS_CHECKPOINTS_DIR", format!("{root}/checkpoints")),
            ("THESEUS_RESULTS_DIR", format!("{root}/results")),
            ("THESEUS_CHECKPOINT_DIR", format!("{root}/checkpoints/proj/grp/job")),
            ("THESEUS_CONFIG", format!("{work}/.theseus/config.json")),
        ])
    );
    assert!(!h.work.join(".theseus/paths.sh").exists(), "nothing moved, so no paths.sh");
}

#[test]
fn the_root_override_moves_every_dir_under_the_old_root_and_the_others_win_over_it() {
    let h = Harness::new();
    let input = rooted(&h);
    let new = h.dir("new 'root' $x");
    let run_rel = input.identity.run_path();
    let env = job_env(
        &h,
        &input,
        &[("THESEUS_DISPATCH_ROOT_OVERRIDE", &format!("{new}//"))],
        &format!("{new}/status/{run_rel}"),
    );
    let work = h.work.to_str().unwrap();
    assert_eq!(
        paths(&env),
        expect(&[
            ("THESEUS_ROOT", new.clone()),
            ("THESEUS_WORK_DIR", work.to_owned()),
            ("THESEUS_RUN_DIR", format!("{new}/status/{run_rel}")),
            ("THESEUS_STATUS_DIR", format!("{new}/status")),
            ("THESEUS_LOG_DIR", format!("{new}/logs")),
            ("THESEUS_DATA_DIR", format!("{new}/data")),
            ("THESEUS_CHECKPOINTS_DIR", format!("{new}/checkpoints")),
            ("THESEUS_RESULTS_DIR", format!("{new}/results")),
            ("THESEUS_CHECKPOINT_DIR", format!("{new}/checkpoints/proj/grp/job")),
            ("THESEUS_CONFIG", format!("{work}/.theseus/config.json")),
        ])
    );
    let metadata = read_json(&Path::new(&format!("{new}/status/{run_rel}")).join("metadata.json"));
    assert_eq!(metadata["status"], "completed", "the status tree is under the new root");
    assert!(!Path::new(&h.dir("old root/status")).exists(), "nothing was written under the old root");

    // Each dir's own override wins over the root's; blank ones count as unset.
    let own = |name: &str| h.dir(&format!("own {name}"));
    let env = job_env(
        &h,
        &input,
        &[
            ("THESEUS_DISPATCH_ROOT_OVERRIDE", new.as_str()),
            ("THESEUS_DISPATCH_DATA_OVERRIDE", &own("data")),
            ("THESEUS_DISPATCH_CHECKPOINTS_OVERRIDE", &own("ckpt")),
            ("THESEUS_DISPATCH_RESULTS_OVERRIDE", &own("results")),
            ("THESEUS_DISPATCH_STATUS_OVERRIDE", &own("status")),
            ("THESEUS_DISPATCH_LOG_OVERRIDE", &own("log")),
            ("THESEUS_DISPATCH_WORK_OVERRIDE", "  "),
        ],
        &format!("{}/{run_rel}", own("status")),
    );
    let got = paths(&env);
    assert_eq!(got[2], ("THESEUS_RUN_DIR".to_owned(), format!("{}/{run_rel}", own("status"))));
    assert_eq!(got[3].1, own("status"));
    assert_eq!(got[4].1, own("log"));
    assert_eq!(got[5].1, own("data"));
    assert_eq!(got[6].1, own("ckpt"));
    assert_eq!(got[7].1, own("results"));
    assert_eq!(got[8].1, format!("{}/proj/grp/job", own("ckpt")));
    assert!(Path::new(&own("data")).is_dir(), "the data dirs are created where they moved");
    // `theseus shell` sees the moved paths: env.sh sources the paths.sh the bootstrap wrote.
    let out = Command::new("sh")
        .current_dir(&h.work)
        .args(["-c", ". ./.theseus/env.sh && printf '%s|%s' \"$THESEUS_ROOT\" \"$THESEUS_DATA_DIR\""])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{new}|{}", own("data")), "{}", stderr(&out));
}

#[test]
fn the_work_override_runs_the_code_where_the_same_storage_is_seen_and_refuses_a_dir_without_it() {
    let h = Harness::new();
    let mut input = rooted(&h);
    // The code dir as a backend lays it out: <work>/<project>/<group>/<name>/<run>.
    let rel = input.identity.run_path();
    let mount = h.tmp.path().join("login view");
    std::fs::create_dir_all(mount.join(&rel)).unwrap();
    for f in ["dump.py", "dumpmod.py"] {
        std::fs::copy(h.work.join(f), mount.join(&rel).join(f)).unwrap();
    }
    input.work_dir = format!("{}/{rel}", mount.display());
    input.log_dir = Some(format!("{}/logs", mount.display()));
    let rendered = render(&input).unwrap();
    for file in &rendered.files {
        let path = mount.join(&rel).join(&file.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &file.contents).unwrap();
    }
    // The same storage seen at another path (a symlink here, a mount on a cluster).
    let other = h.tmp.path().join("node view");
    std::os::unix::fs::symlink(&mount, &other).unwrap();
    let run = |env: &[(&str, &str)]| {
        Command::new("bash")
            .arg(mount.join(&rel).join(&rendered.entry))
            .current_dir(h.tmp.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", h.tmp.path())
            .env("THESEUS_PYTHON", "python3")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let out = run(&[("THESEUS_DISPATCH_WORK_OVERRIDE", other.to_str().unwrap())]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dump = read_json(&Path::new(&input.run_dir).join("dump.json"));
    let env = &dump["env"];
    let expected = format!("{}/{rel}", other.display());
    assert_eq!(env["THESEUS_WORK_DIR"], expected.as_str());
    assert_eq!(env["THESEUS_CONFIG"], format!("{expected}/.theseus/config.json").as_str());
    assert_eq!(env["THESEUS_LOG_DIR"], format!("{}/logs", other.display()).as_str(), "the log dir under work moves");

    // A work dir that does not hold the job's code is refused before anything runs.
    let empty = h.dir("empty");
    let out = run(&[("THESEUS_DISPATCH_WORK_OVERRIDE", empty.as_str())]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not hold this job's code"), "{}", stderr(&out));
    // A relative override is refused, naming the variable.
    let out = run(&[("THESEUS_DISPATCH_DATA_OVERRIDE", "data")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("THESEUS_DISPATCH_DATA_OVERRIDE is not an absolute path"), "{}", stderr(&out));
}

#[test]
fn a_bootstrap_made_without_a_root_demands_one_at_run_time() {
    let h = Harness::new();
    let mut input = rooted(&h);
    let root = RUNTIME_ROOT;
    input.root_dir = root.into();
    input.run_dir = format!("{root}/status/{}", input.identity.run_path());
    input.log_dir = Some(format!("{root}/work/logs"));
    input.data_dirs = DataDirs {
        data: format!("{root}/data"),
        checkpoints: format!("{root}/ckpt"),
        results: format!("{root}/results"),
    };
    let (_, out) = h.run(&input, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("pass --root PATH"), "{}", stderr(&out));
    let given = h.dir("given root");
    // `--restore` under the root moves with it.
    input.resume.restore = Some(format!("{root}/ckpt/proj/grp/job/step_1"));
    std::fs::create_dir_all(format!("{given}/ckpt/proj/grp/job/step_1")).unwrap();
    let env = job_env(
        &h,
        &input,
        &[("THESEUS_DISPATCH_ROOT_OVERRIDE", &given)],
        &format!("{given}/status/{}", input.identity.run_path()),
    );
    assert_eq!(env["THESEUS_ROOT"], given.as_str());
    assert_eq!(env["THESEUS_CHECKPOINT_DIR"], format!("{given}/ckpt/proj/grp/job").as_str());
    assert_eq!(env["THESEUS_RESTORE_FROM"], format!("{given}/ckpt/proj/grp/job/step_1").as_str());
    // And with the checkpoints dir's own override.
    let own = h.dir("own ckpt");
    std::fs::create_dir_all(format!("{own}/proj/grp/job/step_1")).unwrap();
    let env = job_env(
        &h,
        &input,
        &[("THESEUS_DISPATCH_ROOT_OVERRIDE", &given), ("THESEUS_DISPATCH_CHECKPOINTS_OVERRIDE", &own)],
        &format!("{given}/status/{}", input.identity.run_path()),
    );
    assert_eq!(env["THESEUS_RESTORE_FROM"], format!("{own}/proj/grp/job/step_1").as_str());
}
