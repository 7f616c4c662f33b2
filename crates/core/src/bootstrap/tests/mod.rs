//! Tests of the bootstrap: rendered scripts are checked with `bash -n` and actually run with
//! bash in temp work dirs, and what the job sees is compared byte for byte with the input.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

mod batch;
mod checkpoints;
mod hold;
mod output;
mod overrides;
mod resume;
mod setup;
mod stages;

/// Values that break naive quoting. `{tmp}` is replaced by the temp dir.
const HOSTILE: &[&str] = &[
    "it's",
    "say \"hi\"",
    "$(touch {tmp}/pwned-dollar)",
    "`touch {tmp}/pwned-backtick`",
    "'; touch {tmp}/pwned-quote; '",
    "\"; touch {tmp}/pwned-dquote; \"",
    "line1\nline2\n",
    "$HOME",
    "${HOME}",
    "héllo ✓",
    "trailing\\",
    "",
    "  spaced  out ",
    "--",
    "-m",
    "*",
    "%s %d",
];

/// The job used by most tests: dumps argv, env, cwd and the config to `$THESEUS_RUN_DIR/dump.json`
/// and exits with `$DUMP_EXIT`; with `DUMP_SLEEP`, first writes `started` and sleeps.
const DUMP_PY: &str = r#"
import json, os, sys, time
run_dir = os.environ["THESEUS_RUN_DIR"]
if os.environ.get("DUMP_SLEEP"):
    # Written whole, then renamed: the test reads it as soon as it exists.
    with open(os.path.join(run_dir, "started.part"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(run_dir, "started.part"), os.path.join(run_dir, "started"))
    time.sleep(float(os.environ["DUMP_SLEEP"]))
metadata = None
if os.environ.get("DUMP_METADATA"):
    with open(os.path.join(run_dir, "metadata.json"), encoding="utf-8") as f:
        metadata = json.load(f)
with open(os.environ["THESEUS_CONFIG"], encoding="utf-8") as f:
    config = f.read()
out = {"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(), "config": config,
       "name": __name__, "path0": sys.path[0], "metadata": metadata}
with open(os.path.join(run_dir, "dump.json"), "w", encoding="utf-8") as f:
    json.dump(out, f)
sys.exit(int(os.environ.get("DUMP_EXIT", "0")))
"#;

/// A temp dir with a work dir (holding `dump.py`) and a run dir.
struct Harness {
    tmp: tempfile::TempDir,
    work: PathBuf,
    run: PathBuf,
}

impl Harness {
    fn new() -> Harness {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work dir");
        let run = tmp.path().join("status/run");
        std::fs::create_dir_all(work.join("pkg")).unwrap();
        std::fs::write(work.join("dump.py"), DUMP_PY).unwrap();
        std::fs::write(work.join("dumpmod.py"), DUMP_PY).unwrap();
        Harness { tmp, work, run }
    }

    /// A path under the temp dir, as a string.
    fn dir(&self, rel: &str) -> String {
        format!("{}/{rel}", self.tmp.path().display())
    }

    fn hostile(&self) -> Vec<String> {
        HOSTILE.iter().map(|v| v.replace("{tmp}", self.tmp.path().to_str().unwrap())).collect()
    }

    fn input(&self, entrypoint: &[&str]) -> BootstrapInput {
        BootstrapInput {
            identity: JobIdentity {
                name: "job".into(),
                project: "proj".into(),
                group: "grp".into(),
                run_id: "20260101-000000-abcdef".into(),
            },
            work_dir: self.work.to_str().unwrap().to_owned(),
            run_dir: self.run.to_str().unwrap().to_owned(),
            root_dir: "/srv/theseus".into(),
            log_dir: None,
            uv_cache_dir: None,
            data_dirs: DataDirs {
                data: self.dir("data"),
                checkpoints: self.dir("shared/check points/"),
                results: self.dir("results"),
            },
            hardware: None,
            env: Vec::new(),
            uv_groups: Vec::new(),
            entrypoint: entrypoint.iter().map(|w| w.to_string()).collect(),
            distributed: Distributed::None,
            launch: Launch::Single,
            config: json!({"lr": 0.001}),
            resume: Resume::default(),
            stages: Vec::new(),
            source: String::new(),
            batch_search: false,
            job_config: None,
        }
    }

    /// Renders `input` into the work dir and starts it with bash from the temp dir, with a
    /// clean environment plus `env`.
    fn spawn(&self, input: &BootstrapInput, env: &[(&str, &str)]) -> (RenderedBootstrap, std::process::Child) {
        let rendered = self.install(input);
        let child = self.start(&rendered, env);
        (rendered, child)
    }

    /// Renders `input` into the work dir.
    fn install(&self, input: &BootstrapInput) -> RenderedBootstrap {
        let rendered = render(input).unwrap();
        for file in &rendered.files {
            let path = self.work.join(&file.path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &file.contents).unwrap();
            let mode = if file.executable { 0o755 } else { 0o644 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        rendered
    }

    /// Starts an installed bootstrap (one process of the job).
    fn start(&self, rendered: &RenderedBootstrap, env: &[(&str, &str)]) -> std::process::Child {
        let mut cmd = Command::new("bash");
        cmd.arg(self.work.join(&rendered.entry))
            .current_dir(self.tmp.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", self.tmp.path())
            .env("PYTHONUTF8", "1")
            .env("THESEUS_PYTHON", "python3")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Ok(pyenv) = std::env::var("PYENV_ROOT") {
            cmd.env("PYENV_ROOT", pyenv);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    }

    fn run(&self, input: &BootstrapInput, env: &[(&str, &str)]) -> (RenderedBootstrap, Output) {
        let (rendered, child) = self.spawn(input, env);
        (rendered, child.wait_with_output().unwrap())
    }

    fn dump(&self) -> Value {
        read_json(&self.run.join("dump.json"))
    }

    fn metadata(&self, name: &str) -> Value {
        read_json(&self.run.join(name))
    }

    fn assert_no_injection(&self) {
        for entry in std::fs::read_dir(self.tmp.path()).unwrap() {
            let name = entry.unwrap().file_name();
            assert!(!name.to_string_lossy().starts_with("pwned"), "injection created {name:?}");
        }
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn env_var(name: &str, value: &str, secret: bool) -> EnvVar {
    EnvVar { name: name.into(), value: value.into(), secret }
}

fn script(rendered: &RenderedBootstrap) -> &str {
    &rendered.files.iter().find(|f| f.path == rendered.entry).unwrap().contents
}

/// `bash -n` on a rendered script.
fn assert_parses(script: &str) {
    let mut child = Command::new("bash").arg("-n").stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "bash -n: {}\n{script}", stderr(&out));
}

#[test]
fn hostile_values_reach_a_python_job_byte_for_byte() {
    let h = Harness::new();
    let hostile = h.hostile();
    let mut input = h.input(&["python", "dump.py"]);
    input.entrypoint.extend(hostile.iter().cloned());
    input.identity.name = hostile.join("|");
    input.identity.project = "it's \"$(touch pwned-project)\"".into();
    input.identity.group = "héllo ✓\\".into();
    input.root_dir = hostile[2].clone();
    input.uv_cache_dir = Some(hostile[3].clone());
    input.env = hostile.iter().enumerate().map(|(i, v)| env_var(&format!("HOSTILE_{i}"), v, false)).collect();
    input.config = json!({"strings": hostile, "nested": {"it's": "$(x)", "n": 3}});
    input.data_dirs.data = h.dir(&format!("data {}/", hostile[0]));
    input.data_dirs.results = h.dir(&format!("results {}", hostile[1]));
    input.hardware = Some(Hardware { chip: Some("h100".into()), count: 16, nodes: 2, host: hostile[4].clone() });
    let (rendered, out) = h.run(&input, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_parses(script(&rendered));
    assert!(out.stdout.is_empty(), "the bootstrap prints nothing on stdout");
    for line in stderr(&out).lines() {
        // Only our own lines, all prefixed (the job prints nothing), one line each.
        assert!(line.starts_with("[theseus] "), "{line:?}");
    }

    let dump = h.dump();
    let argv: Vec<&str> = dump["argv"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(argv[0], "dump.py");
    assert_eq!(argv[1..], hostile.iter().map(String::as_str).collect::<Vec<_>>()[..]);
    for (i, value) in hostile.iter().enumerate() {
        assert_eq!(dump["env"][format!("HOSTILE_{i}")], Value::from(value.as_str()), "HOSTILE_{i}");
    }
    let env = &dump["env"];
    assert_eq!(env["THESEUS_JOB_NAME"], Value::from(input.identity.name.as_str()));
    assert_eq!(env["THESEUS_PROJECT"], Value::from(input.identity.project.as_str()));
    assert_eq!(env["THESEUS_GROUP"], Value::from(input.identity.group.as_str()));
    assert_eq!(env["THESEUS_ROOT"], Value::from(hostile[2].as_str()));
    assert_eq!(env["UV_CACHE_DIR"], Value::from(hostile[3].as_str()));
    assert_eq!(env["THESEUS_WORK_DIR"], Value::from(input.work_dir.as_str()));
    assert_eq!(env["THESEUS_RUN_DIR"], Value::from(input.run_dir.as_str()));
    assert_eq!(env["THESEUS_RUN_ID"], "20260101-000000-abcdef");
    assert_eq!(env["THESEUS_DATA_DIR"], Value::from(input.data_dirs.data.trim_end_matches('/')));
    assert_eq!(env["THESEUS_CHECKPOINTS_DIR"], Value::from(input.data_dirs.checkpoints.trim_end_matches('/')));
    assert_eq!(env["THESEUS_RESULTS_DIR"], Value::from(input.data_dirs.results.as_str()));
    for dir in [&input.data_dirs.data, &input.data_dirs.checkpoints, &input.data_dirs.results] {
        assert!(Path::new(dir).is_dir(), "{dir} was not created");
    }
    assert_eq!(env["XLA_PYTHON_CLIENT_MEM_FRACTION"], "0.95");
    assert_eq!(dump["cwd"], Value::from(input.work_dir.as_str()));
    assert_eq!(dump["name"], "__main__");
    assert_eq!(dump["path0"], Value::from(input.work_dir.as_str()));
    let config_file = rendered.files.iter().find(|f| f.path == ".theseus/config.json").unwrap();
    assert_eq!(dump["config"], Value::from(config_file.contents.as_str()));
    let config: Value = serde_json::from_str(dump["config"].as_str().unwrap()).unwrap();
    assert_eq!(config, input.config);

    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["name"], Value::from(input.identity.name.as_str()));
    assert_eq!(metadata["project"], Value::from(input.identity.project.as_str()));
    assert_eq!(metadata["group"], Value::from(input.identity.group.as_str()));
    assert_eq!(metadata["status"], "completed");
    assert_eq!(metadata["exit_code"], 0);
    assert_eq!((metadata["rank"].clone(), metadata["num_processes"].clone()), (json!(0), json!(1)));
    assert!(metadata["hostname"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(metadata["pid"].as_u64().is_some());
    let id = &input.identity;
    assert_eq!(metadata["run_key"], Value::from(format!("{}/{}/{}/{}", id.project, id.group, id.name, id.run_id)));
    // As in the original: `job_key` names what runs (an experiment's entrypoint line here), and
    // `hardware` has `total_chips` and the `hosts` names beside theseus's own fields.
    assert_eq!(metadata["job_key"], Value::from(crate::shell::join(&input.entrypoint)));
    assert_eq!(
        metadata["hardware"],
        json!({"chip": "h100", "count": 16, "total_chips": 16, "nodes": 2, "host": hostile[4],
               "hosts": [hostile[4], "host-1"]})
    );
    assert_eq!(metadata["config"], input.config);
    assert_eq!(metadata["slurm_job_id"], Value::Null);
    h.assert_no_injection();
    assert!(!h.work.join("pwned-project").exists());
}

#[test]
fn metadata_records_the_slurm_job_id_and_no_hardware_when_none_is_given() {
    let h = Harness::new();
    let input = h.input(&["python", "dump.py"]);
    let (_, out) = h.run(&input, &[("SLURM_JOB_ID", "4242")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["slurm_job_id"], "4242");
    assert_eq!(metadata["hardware"], Value::Null);
    assert_eq!(metadata["config"], json!({"lr": 0.001}));
    // A value that is not a job id never reaches the JSON.
    let (_, out) = h.run(&input, &[("SLURM_JOB_ID", "1\", \"x\": \"y")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(h.metadata("metadata.json")["slurm_job_id"], Value::Null);
}

#[test]
fn hostile_args_reach_a_non_python_job_byte_for_byte() {
    let h = Harness::new();
    let hostile = h.hostile();
    let mut input = h.input(&["/bin/sh", "-c", r#"printf '%s\0' "$@" > "$THESEUS_RUN_DIR/argv"; exit 0"#, "sh"]);
    input.entrypoint.extend(hostile.iter().cloned());
    let (rendered, out) = h.run(&input, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_parses(script(&rendered));
    let argv = std::fs::read(h.run.join("argv")).unwrap();
    let expected: Vec<u8> = hostile.iter().flat_map(|v| v.bytes().chain([0])).collect();
    assert_eq!(argv, expected);
    h.assert_no_injection();
}

#[test]
fn every_rendered_script_parses() {
    let h = Harness::new();
    let launches = [Launch::Single, Launch::Local { coordinator_port: 1234 }, wired(1), wired(65535)];
    for launch in launches {
        for distributed in [Distributed::Auto, Distributed::None, Distributed::Jax] {
            for value in h.hostile() {
                let mut input = h.input(&["python3.11", "-m", "pkg.main", &value]);
                input.launch = launch.clone();
                input.distributed = distributed;
                input.identity.name = value.clone();
                input.env = vec![env_var("A", &value, false), env_var("S", &value, true)];
                input.uv_groups = vec![value.clone(), "gpu".into()];
                input.work_dir = format!("/w/{value}");
                input.run_dir = format!("/r/{value}");
                let rendered = render(&input).unwrap();
                assert_parses(script(&rendered));
                assert_eq!(rendered.entry, ".theseus/bootstrap.sh");
                let paths: Vec<_> = rendered.files.iter().map(|f| (f.path.as_str(), f.executable)).collect();
                assert_eq!(
                    paths,
                    [
                        (".theseus/bootstrap.sh", true),
                        (".theseus/launcher.py", false),
                        (".theseus/batch_search.py", false),
                        (".theseus/config.json", false),
                        (".theseus/env.sh", false)
                    ]
                );
            }
        }
    }
}

#[test]
fn env_sh_gives_a_shell_the_jobs_variables_but_no_secret() {
    let h = Harness::new();
    for value in h.hostile() {
        let mut input = h.input(&["python3", "main.py"]);
        input.env = vec![env_var("A", &value, false), env_var("S", "hunter2-secret", true)];
        let rendered = render(&input).unwrap();
        let env = &rendered.files.iter().find(|f| f.path == ".theseus/env.sh").unwrap().contents;
        assert!(!env.contains("hunter2") && !env.contains("theseus_require_secret"), "{env}");
        let out = Command::new("sh")
            .args(["-c", &format!("{env}\nprintf '%s|%s|%s' \"$A\" \"$THESEUS_RUN_ID\" \"${{S-unset}}\"")])
            .env_remove("S")
            .output()
            .unwrap();
        assert!(out.status.success() && out.stderr.is_empty(), "{}", stderr(&out));
        assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{value}|{}|unset", input.identity.run_id));
    }
}

#[test]
fn the_exit_code_of_the_job_is_the_exit_code_of_the_script() {
    let h = Harness::new();
    let input = h.input(&["python3", "dump.py"]);
    let (_, out) = h.run(&input, &[("DUMP_EXIT", "3")]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["status"], "failed");
    assert_eq!(metadata["exit_code"], 3);
    assert!(stderr(&out).contains("[theseus] the job exited with 3"), "{}", stderr(&out));
}

#[test]
fn secrets_are_checked_but_never_written() {
    let h = Harness::new();
    let mut input = h.input(&["python3", "dump.py"]);
    input.env = vec![env_var("WANDB_API_KEY", "s3cr3t-value", true), env_var("PLAIN", "shown", false)];
    let rendered = render(&input).unwrap();
    for file in &rendered.files {
        assert!(!file.contents.contains("s3cr3t-value"), "{} holds the secret", file.path);
    }
    let (_, out) = h.run(&input, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("[theseus] error: secret environment variable WANDB_API_KEY is not set"), "{err}");
    assert!(!h.run.join("dump.json").exists(), "the job did not start");

    let (_, out) = h.run(&input, &[("WANDB_API_KEY", "from-the-backend")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(h.dump()["env"]["WANDB_API_KEY"], "from-the-backend");
    assert_eq!(h.dump()["env"]["PLAIN"], "shown");
}

#[test]
fn invalid_env_names_are_render_errors() {
    let h = Harness::new();
    for name in ["1X", "A-B", "A B", "", "X;touch y", "É"] {
        let mut input = h.input(&["python", "dump.py"]);
        input.env = vec![env_var(name, "v", false)];
        let err = render(&input).unwrap_err();
        assert!(err.to_string().contains("is not valid"), "{name}: {err}");
    }
}

#[test]
fn jax_needs_a_python_entrypoint() {
    let h = Harness::new();
    let mut input = h.input(&["bash", "train.sh"]);
    input.distributed = Distributed::Jax;
    let err = render(&input).unwrap_err().to_string();
    assert!(err.contains("distributed: jax needs a python entrypoint") && err.contains("bash train.sh"), "{err}");
    input.entrypoint.clear();
    input.distributed = Distributed::None;
    assert!(render(&input).unwrap_err().to_string().contains("entrypoint is empty"));
}

/// The launcher's flag per mode, from the bootstrap's `running:` line; `auto` (the default)
/// cannot reach an entrypoint that does not run through the launcher, and says nothing of it.
#[test]
fn each_distributed_mode_gives_the_launcher_its_flag() {
    let h = Harness::new();
    for (mode, flag) in
        [(Distributed::Auto, " --jax-auto --"), (Distributed::Jax, " --jax --"), (Distributed::None, " --")]
    {
        let mut input = h.input(&["python", "dump.py"]);
        input.distributed = mode;
        let (_, out) = h.run(&input, &[]);
        assert!(out.status.success(), "{mode:?}: {}", stderr(&out));
        let running = stderr(&out).lines().find(|l| l.starts_with("[theseus] running: ")).unwrap().to_owned();
        assert!(running.ends_with(&format!("/.theseus/launcher.py{flag} dump.py")), "{mode:?}: {running}");
    }
    let mut input = h.input(&["bash", "-c", "exit 0"]);
    input.distributed = Distributed::Auto;
    let (_, out) = h.run(&input, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("[theseus] running: bash -c exit\\ 0"), "{}", stderr(&out));
}

/// `plan` and `--dry-run` say which mode applies.
#[test]
fn the_distributed_mode_is_described() {
    use crate::job::{Entrypoint, Experiment};
    let experiment = |line: &str, distributed| Experiment {
        entrypoint: Entrypoint::Line(line.into()),
        distributed,
        ..Experiment::default()
    };
    let (python, bash) = ("python3 train.py", "bash run.sh");
    assert_eq!(describe_distributed(&experiment(python, Distributed::Auto), 2), "auto (on import of jax)");
    assert_eq!(
        describe_distributed(&experiment(bash, Distributed::Auto), 2),
        "off: not a python entrypoint (auto cannot reach it)"
    );
    assert_eq!(describe_distributed(&experiment(python, Distributed::Auto), 1), "off: one process");
    assert_eq!(describe_distributed(&experiment(python, Distributed::Jax), 8), "jax (before the entrypoint runs)");
    assert_eq!(describe_distributed(&experiment(python, Distributed::None), 8), "off (distributed: none)");
}

/// Without jax installed (the system python3), `--jax-auto` with several processes leaves a job
/// that never imports jax untouched, and a job's `import jax` fails as it would without theseus.
#[test]
fn auto_without_jax_leaves_the_job_alone() {
    let h = Harness::new();
    let probe = "import sys, json, os; json.dump({'jax': 'jax' in sys.modules, 'finders': [type(f).__name__ for f in sys.meta_path]}, open(os.environ['THESEUS_RUN_DIR'] + '/probe.json', 'w'))";
    let mut input = h.input(&["python3", "-c", probe]);
    input.distributed = Distributed::Auto;
    input.launch = Launch::Local { coordinator_port: 1 };
    let env = [("THESEUS_LOCAL_RANK", "0"), ("THESEUS_LOCAL_WORLD_SIZE", "2")];
    let (_, out) = h.run(&input, &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let probe = read_json(&h.run.join("probe.json"));
    assert_eq!(probe["jax"], false, "{probe}");
    assert!(probe["finders"].as_array().unwrap().iter().any(|f| f == "JaxImportHook"), "the hook waits: {probe}");
    assert!(!stderr(&out).contains("jax.distributed"), "{}", stderr(&out));

    let mut input = h.input(&["python3", "-c", "import jax"]);
    input.distributed = Distributed::Auto;
    input.launch = Launch::Local { coordinator_port: 1 };
    let (_, out) = h.run(&input, &env);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("ModuleNotFoundError: No module named 'jax'"), "{}", stderr(&out));
}

#[test]
fn jax_with_one_process_runs_without_initializing() {
    let h = Harness::new();
    let mut input = h.input(&["python", "-m", "dumpmod", "x y"]);
    input.distributed = Distributed::Jax;
    let (_, out) = h.run(&input, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dump = h.dump();
    assert_eq!(dump["argv"][1], "x y");
    assert!(dump["argv"][0].as_str().unwrap().ends_with("dumpmod.py"), "{}", dump["argv"]);
    assert_eq!(dump["name"], "__main__");
    assert!(dump["env"].get("JAX_COORDINATOR_ADDRESS").is_none());
}

#[test]
fn python_dash_c_runs_code() {
    let h = Harness::new();
    let code =
        "import sys, os; open(os.environ['THESEUS_RUN_DIR'] + '/c.txt', 'w').write('|'.join(sys.argv)); sys.exit(4)";
    let input = h.input(&["python", "-c", code, "a'b", ""]);
    let (_, out) = h.run(&input, &[]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(h.run.join("c.txt")).unwrap(), "-c|a'b|");
}

#[test]
fn local_launch_exports_rank_and_coordinator() {
    let h = Harness::new();
    let mut input = h.input(&["python", "dump.py"]);
    input.launch = Launch::Local { coordinator_port: 4567 };
    let (_, out) = h.run(&input, &[("THESEUS_LOCAL_RANK", "1"), ("THESEUS_LOCAL_WORLD_SIZE", "2")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let env = &h.dump()["env"];
    for (name, value) in [
        ("THESEUS_PROCESS_ID", "1"),
        ("THESEUS_NUM_PROCESSES", "2"),
        ("JAX_COORDINATOR_ADDRESS", "127.0.0.1:4567"),
        ("JAX_COORDINATOR_BIND_ADDRESS", "127.0.0.1:4567"),
        ("JAX_NUM_PROCESSES", "2"),
        ("JAX_PROCESS_ID", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "4568"),
        ("WORLD_SIZE", "2"),
        ("RANK", "1"),
        ("LOCAL_RANK", "1"),
    ] {
        assert_eq!(env[name], value, "{name}");
    }
    let metadata = h.metadata("metadata.rank-1.json");
    assert_eq!((metadata["rank"].clone(), metadata["num_processes"].clone()), (json!(1), json!(2)));
    assert!(!h.run.join("metadata.json").exists(), "rank 1 leaves rank 0's file alone");
}

#[test]
fn single_launch_exports_no_coordinator() {
    let h = Harness::new();
    let (_, out) = h.run(&h.input(&["python", "dump.py"]), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let env = &h.dump()["env"];
    assert_eq!((env["RANK"].clone(), env["WORLD_SIZE"].clone()), (json!("0"), json!("1")));
    for name in ["JAX_COORDINATOR_ADDRESS", "MASTER_ADDR", "JAX_NUM_PROCESSES"] {
        assert!(env.get(name).is_none(), "{name}");
    }
}

/// As the original's banner: the host and the GPU variables the scheduler set, one line.
#[test]
fn the_log_names_the_host_and_the_gpus_it_was_given() {
    let h = Harness::new();
    let env = [("HOSTNAME", "node7"), ("CUDA_VISIBLE_DEVICES", "0,1"), ("SLURM_JOB_GPUS", "0,1")];
    let (_, out) = h.run(&h.input(&["python", "dump.py"]), &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let line = err.lines().find(|l| l.starts_with("[theseus] on ")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.starts_with("[theseus] on node7, CUDA_VISIBLE_DEVICES=0,1, SLURM_JOB_GPUS=0,1"), "{line}");
}

#[test]
fn a_wired_launch_exports_what_the_host_types_wiring_found() {
    let h = Harness::new();
    let mut input = h.input(&["python", "dump.py"]);
    input.launch = wired(1234);
    let ranks = [("TEST_RANK", "2"), ("TEST_COUNT", "3"), ("TEST_LOCAL_RANK", "1"), ("TEST_FIRST_HOST", "node-a")];
    let (_, out) = h.run(&input, &ranks);
    assert!(out.status.success(), "{}", stderr(&out));
    let env = &h.dump()["env"];
    assert_eq!(env["JAX_COORDINATOR_ADDRESS"], "node-a:1234");
    // torch's rendezvous gets the next port: a job may start both it and JAX's coordinator.
    assert_eq!((env["MASTER_ADDR"].clone(), env["MASTER_PORT"].clone()), (json!("node-a"), json!("1235")));
    assert_eq!((env["RANK"].clone(), env["WORLD_SIZE"].clone()), (json!("2"), json!("3")));
    assert_eq!((env["JAX_PROCESS_ID"].clone(), env["JAX_NUM_PROCESSES"].clone()), (json!("2"), json!("3")));
    assert_eq!(env["LOCAL_RANK"], "1");
    assert!(env.get("JAX_COORDINATOR_BIND_ADDRESS").is_none());

    // An explicit coordinator wins (clusters whose node names do not resolve).
    let (_, out) = h.run(&input, &[ranks[0], ranks[1], ranks[3], ("THESEUS_COORDINATOR_ADDRESS", "127.0.0.1:9999")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(h.dump()["env"]["JAX_COORDINATOR_ADDRESS"], "127.0.0.1:9999");
    assert_eq!(h.dump()["env"]["MASTER_PORT"], "10000");
    // A port with no next port, or none at all, stops the job naming it.
    for bad in ["127.0.0.1:65535", "node-a:x", "node-a"] {
        let (_, out) = h.run(&input, &[ranks[0], ranks[1], ranks[3], ("THESEUS_COORDINATOR_ADDRESS", bad)]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        let expected = format!("the coordinator's port is not a number below 65535: {bad}");
        assert!(stderr(&out).contains(&expected), "{bad}: {}", stderr(&out));
    }

    // A wiring that cannot find the ranks stops the job with its reason.
    let (_, out) = h.run(&input, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("test: TEST_RANK is not set"), "{}", stderr(&out));

    // A rank the wiring got wrong is caught by the bootstrap.
    let (_, out) = h.run(&input, &[("TEST_RANK", "3"), ranks[1], ranks[3]]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("rank 3 is not below the process count 3"), "{}", stderr(&out));
}

#[test]
fn heartbeat_rewrites_metadata_while_running() {
    let h = Harness::new();
    let input = h.input(&["python", "dump.py"]);
    let started = Instant::now();
    let (_, out) = h.run(&input, &[("THESEUS_HEARTBEAT_SECONDS", "1"), ("DUMP_SLEEP", "2.5"), ("DUMP_METADATA", "1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = &h.dump()["metadata"];
    assert_eq!(seen["status"], "running");
    assert!(seen["last_heartbeat"].as_str().unwrap() > seen["start_time"].as_str().unwrap(), "{seen}");
    // No heartbeat process kept the output pipes open after the script ended.
    assert!(started.elapsed() < Duration::from_secs(20));
    let leftovers: Vec<_> = std::fs::read_dir(&h.run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn sigterm_stops_the_job_and_records_preemption() {
    let h = Harness::new();
    let input = h.input(&["python", "dump.py"]);
    let (_, child) = h.spawn(&input, &[("DUMP_SLEEP", "60")]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h.run.join("started").exists() {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let job_pid: i32 = std::fs::read_to_string(h.run.join("started")).unwrap().parse().unwrap();
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(stderr(&out).contains("[theseus] received SIGTERM"), "{}", stderr(&out));
    let metadata = h.metadata("metadata.json");
    assert_eq!(metadata["status"], "preempted");
    assert_eq!(metadata["exit_code"], 143);
    let alive = Command::new("kill").args(["-0", &job_pid.to_string()]).stderr(Stdio::null()).status().unwrap();
    assert!(!alive.success(), "the job process {job_pid} is still running");
}

/// A job that leaves a process in the background (its parent exits, so it descends from nobody
/// of the job) and then runs: `(sleep & write its pid); touch started; sleep`.
const ORPHAN_JOB: &str = r#"(sleep 300 > /dev/null 2>&1 & echo $! > "$THESEUS_RUN_DIR/orphan"); touch "$THESEUS_RUN_DIR/started"; [ "$1" = end ] || exec sleep 300"#;

/// Whether `pid` is alive (not a zombie) after waiting up to 10 s for it to end.
fn still_alive_after_a_while(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        let alive = state.is_some_and(|s| s.rsplit(") ").next().is_some_and(|rest| !rest.starts_with('Z')));
        if !alive || Instant::now() > deadline {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn orphan_pid(h: &Harness) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h.run.join("started").exists() {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(h.run.join("orphan")).unwrap().trim().parse().unwrap()
}

#[test]
fn sigterm_also_stops_what_the_job_left_in_the_background() {
    let h = Harness::new();
    let input = h.input(&["/bin/sh", "-c", ORPHAN_JOB, "sh", "run"]);
    let (_, child) = h.spawn(&input, &[]);
    let orphan = orphan_pid(&h);
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let alive = still_alive_after_a_while(orphan);
    if alive {
        let _ = Command::new("kill").args(["-KILL", &orphan.to_string()]).status();
    }
    assert!(!alive, "the job's background process {orphan} outlived the job");
}

/// A job that ignores TERM: its shell and what it left in the background.
const DEAF_JOB: &str = r#"trap '' TERM; (sleep 300 > /dev/null 2>&1 & echo $! > "$THESEUS_RUN_DIR/orphan"); touch "$THESEUS_RUN_DIR/started"; sleep 300"#;

/// The grace a TERMed bootstrap gave a job that ignores TERM, read from its log line.
fn grace_given(env: &[(&str, &str)]) -> String {
    let h = Harness::new();
    let input = h.input(&["/bin/sh", "-c", DEAF_JOB]);
    let (_, child) = h.spawn(&input, env);
    let orphan = orphan_pid(&h);
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(!still_alive_after_a_while(orphan), "the KILL reached what the job left in the background");
    let err = stderr(&out);
    let line = err.lines().find(|l| l.contains("did not stop within")).unwrap_or_else(|| panic!("{err}"));
    line.split("within ").nth(1).unwrap().split(';').next().unwrap().to_owned()
}

#[test]
fn the_grace_ends_a_second_before_the_schedulers_own_kill() {
    // Slurm's KillWait of 2 s: the group is KILLed after 1 s, not the 30 s asked for.
    assert_eq!(grace_given(&[("THESEUS_TERM_GRACE_SECONDS", "30"), ("THESEUS_KILL_DEADLINE_SECONDS", "2")]), "1s");
    // A later deadline, or none that can be read, leaves the grace as it is.
    assert_eq!(grace_given(&[("THESEUS_TERM_GRACE_SECONDS", "1"), ("THESEUS_KILL_DEADLINE_SECONDS", "30")]), "1s");
    assert_eq!(grace_given(&[("THESEUS_TERM_GRACE_SECONDS", "2"), ("THESEUS_KILL_DEADLINE_SECONDS", "soon")]), "2s");
    // The original's name for the grace counts when theseus's is unset; theseus's wins.
    assert_eq!(grace_given(&[("THESEUS_MAIN_CHILD_TERM_GRACE_SECONDS", "1")]), "1s");
    let both = [("THESEUS_TERM_GRACE_SECONDS", "2"), ("THESEUS_MAIN_CHILD_TERM_GRACE_SECONDS", "1")];
    assert_eq!(grace_given(&both), "2s");
    // Numbers with a leading zero are decimal (bash would read 09 as a bad octal number).
    assert_eq!(grace_given(&[("THESEUS_TERM_GRACE_SECONDS", "09"), ("THESEUS_KILL_DEADLINE_SECONDS", "03")]), "2s");
}

#[test]
fn what_a_finished_job_left_in_the_background_ends_with_it() {
    let h = Harness::new();
    let input = h.input(&["/bin/sh", "-c", ORPHAN_JOB, "sh", "end"]);
    let (_, out) = h.run(&input, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(h.metadata("metadata.json")["status"], "completed");
    let orphan = orphan_pid(&h);
    let alive = still_alive_after_a_while(orphan);
    if alive {
        let _ = Command::new("kill").args(["-KILL", &orphan.to_string()]).status();
    }
    assert!(!alive, "the job's background process {orphan} outlived the job");
}

#[test]
fn pyproject_runs_uv_sync_frozen_and_falls_back_to_uv_sync_with_a_warning() {
    let h = Harness::new();
    let bin = h.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake_uv = "#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$UV_LOG\"\n\
        if [ \"$1 $2\" = \"sync --frozen\" ] && [ -n \"$UV_FROZEN_EXIT\" ]; then exit \"$UV_FROZEN_EXIT\"; fi\n\
        if [ \"$1\" = sync ]; then exit \"${UV_SYNC_EXIT:-0}\"; fi\n\
        if [ \"$1\" = run ]; then shift 3; exec python3 \"$@\"; fi\nexit 9\n";
    std::fs::write(bin.join("uv"), fake_uv).unwrap();
    std::fs::set_permissions(bin.join("uv"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(h.work.join("pyproject.toml"), "[project]\nname = \"x\"\n").unwrap();
    std::fs::write(h.work.join("uv.lock"), "").unwrap();
    let log = h.tmp.path().join("uv.log");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut input = h.input(&["python", "dump.py", "a"]);
    input.uv_groups = vec!["gpu".into(), "it's".into()];
    let env = [("PATH", path.as_str()), ("UV_LOG", log.to_str().unwrap())];
    let (_, out) = h.run(&input, &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        calls,
        format!(
            "sync --frozen --group gpu --group it's\nrun --no-sync python {}/.theseus/launcher.py -- dump.py a\n",
            h.work.display()
        )
    );
    assert_eq!(h.dump()["argv"][1], "a");

    // A stale lock (the frozen sync fails): the original's fallback to `uv sync`, said once,
    // and the job runs.
    std::fs::remove_file(&log).unwrap();
    let (_, out) = h.run(&input, &[env[0], env[1], ("UV_FROZEN_EXIT", "1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let warnings: Vec<String> = stderr(&out).lines().filter(|l| l.contains("warning")).map(str::to_owned).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("[theseus] warning: uv sync --frozen failed: uv.lock is stale"), "{warnings:?}");
    assert!(warnings[0].contains("re-resolved environment, not the locked one"), "{warnings:?}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!(
            "sync --frozen --group gpu --group it's\nsync --group gpu --group it's\n\
             run --no-sync python {}/.theseus/launcher.py -- dump.py a\n",
            h.work.display()
        )
    );
    assert_eq!(h.metadata("metadata.json")["status"], "completed");

    // Both fail: the job stops before it runs, saying what to do.
    std::fs::remove_file(&log).unwrap();
    let (_, out) = h.run(&input, &[env[0], env[1], ("UV_SYNC_EXIT", "1")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("uv sync failed after uv sync --frozen failed; run uv lock"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "sync --frozen --group gpu --group it's\nsync --group gpu --group it's\n",
        "the job does not run"
    );

    std::fs::remove_file(&log).unwrap();
    std::fs::remove_file(h.work.join("uv.lock")).unwrap();
    let (_, out) = h.run(&input, &env);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read_to_string(&log).unwrap().starts_with("sync --group gpu --group it's\n"));
}

/// A host type's wiring as the backend crates write theirs (Slurm's and Volcano's are tested in
/// their crates with [`crate::testing::run_wiring`]): the ranks from `TEST_*` variables.
fn wired(coordinator_port: u16) -> Launch {
    const SHELL: &str = r#"[[ -n "${TEST_RANK:-}" ]] || theseus_die "test: TEST_RANK is not set"
theseus_rank=$TEST_RANK
theseus_count=${TEST_COUNT:-1}
theseus_local_rank=${TEST_LOCAL_RANK:-0}
theseus_first_host=${TEST_FIRST_HOST:-}"#;
    Launch::Wired { coordinator_port, wiring: super::Wiring { scheme: "test", shell: SHELL } }
}
