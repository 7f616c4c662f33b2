//! Inputs that must be refused early and clearly, through the real binary: names that would
//! leave the work dir, counts beyond the machine, durations that cannot be, files that are not
//! files, secrets in parse errors, and a closed stdout.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{TestContext, run_bounded, text};

#[test]
fn a_project_or_group_that_leaves_the_work_dir_is_refused() {
    let ctx = TestContext::new();
    let out = ctx.run(&["submit", "t", "examples/hello/experiment.yaml", "-p", "../../../../escaped", "-g", "y"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stdout:\n{}\nstderr:\n{stderr}", text(&out.stdout));
    assert!(stderr.contains("--project") && stderr.contains("`/` is not allowed"), "{stderr}");
    // `~/.local/share/theseus/work/../../../../escaped` is `$HOME/escaped`.
    assert!(!ctx.home().join("escaped").exists(), "a run dir was made outside the work dir");
    assert!(!ctx.home().join(".local/share/theseus").exists(), "nothing was written");

    for args in [
        &["submit", "-g", "y", "--", "-rf", "examples/hello/experiment.yaml"][..],
        &["submit", "t", "examples/hello/experiment.yaml", "-g", "a b"][..],
        &["submit", "..", "examples/hello/experiment.yaml", "-g", "y"][..],
    ] {
        let out = ctx.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("names may use letters, digits"), "{args:?}: {}", text(&out.stderr));
    }
    assert!(!ctx.home().join(".local/share/theseus").exists(), "nothing was written");
}

#[test]
fn a_local_cpu_request_beyond_the_machine_is_refused_unless_oversubscribed() {
    let ctx = TestContext::new();
    let cpus = std::thread::available_parallelism().unwrap().get();
    let many = (cpus + 1).to_string();
    let out = ctx.run(&["plan", "p", "examples/hello/experiment.yaml", "--chip", "cpu", "-n", &many]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains(&format!("this machine has {cpus} CPU")), "{stderr}");
    assert!(stderr.contains("--oversubscribe"), "the opt-in is named: {stderr}");

    let out =
        ctx.run(&["plan", "p", "examples/hello/experiment.yaml", "--chip", "cpu", "-n", &many, "--oversubscribe"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("runs {many} processes here")), "{}", text(&out.stdout));

    // No count this large is ever planned, with or without the opt-in.
    for extra in [&[][..], &["--oversubscribe"][..]] {
        let mut args = vec!["plan", "p", "examples/hello/experiment.yaml", "--chip", "cpu", "-n", "4294967295"];
        args.extend_from_slice(extra);
        let out = ctx.run(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stdout));
        assert!(stderr.contains("4294967295"), "{stderr}");
        assert!(!text(&out.stdout).contains("chosen"), "{}", text(&out.stdout));
    }
    let out = ctx.run(&["plan", "p", "examples/hello/experiment.yaml", "--chip", "h100", "-n", "4294967295"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("at most"), "{}", text(&out.stderr));
}

#[test]
fn durations_that_cannot_be_are_clear_errors() {
    let ctx = TestContext::new();
    for bad in ["inf", "NaN", "-1", "1e30"] {
        let out = ctx.run(&["plan", "p", "examples/hello/experiment.yaml", &format!("--probe-timeout={bad}")]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--probe-timeout {bad}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains("--probe-timeout"), "the flag is named: {stderr}");
    }
    let out = ctx.run(&["plan", "p", "examples/hello/experiment.yaml", "--probe-timeout", "30s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ctx.run(&["gc", "--older-than", "99999999999999999d"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--older-than"), "{}", text(&out.stderr));
}

#[test]
fn a_closed_stdout_ends_commands_quietly() {
    let ctx = TestContext::new();
    let run = ctx.run(&["submit", "hello", "examples/hello/experiment.yaml", "--follow"]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    for args in [&["chips"][..], &["list"][..], &["logs", "hello"][..], &["config", "show"][..]] {
        // The read end is closed before the child starts, so its first write fails with EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = ctx.cmd().args(args).stdout(writer).stderr(Stdio::piped()).output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?} printed: {stderr}");
    }
}

#[test]
fn experiment_and_config_files_must_be_small_regular_files() {
    let ctx = TestContext::new();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.yaml");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let fifo = fifo.to_str().unwrap();

    let mut plan = ctx.cmd();
    plan.args(["plan", "a", fifo]);
    let out = run_bounded(plan, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a regular file (a FIFO)"), "{}", text(&out.stderr));

    let mut check = ctx.cmd();
    check.args(["-d", fifo, "config", "check"]);
    let out = run_bounded(check, Duration::from_secs(20));
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("not a regular file (a FIFO)"), "{}", text(&out.stderr));

    let out = run_bounded(
        {
            let mut c = ctx.cmd();
            c.args(["plan", "a", "/dev/zero"]);
            c
        },
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/dev/zero: not a regular file"), "{}", text(&out.stderr));

    let big = dir.path().join("big.yaml");
    let mut file = std::fs::File::create(&big).unwrap();
    file.write_all(b"entrypoint: echo\n").unwrap();
    for _ in 0..(5 << 10) {
        file.write_all(&[b'#'; 1024]).unwrap();
        file.write_all(b"\n").unwrap();
    }
    drop(file);
    let out = ctx.run(&["plan", "a", big.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("big.yaml: larger than the limit of 4 MiB"), "{}", text(&out.stderr));
}

#[test]
fn parse_errors_of_secret_files_show_the_place_not_the_text() {
    let ctx = TestContext::new();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {token: SECRETTOKEN123, x: [}\n",
    )
    .unwrap();
    let config = format!(
        "clusters:\n  c: {{root: /workspace, work: /workspace/w}}\nhosts:\n  k:\n    type: volcano\n    cluster: c\n    image: img\n    \
         pvc_name: p\n    kubeconfig: {}\n    chips: {{h100: 8}}\n",
        kubeconfig.display()
    );
    std::fs::write(ctx.home().join(".theseus.yaml"), config).unwrap();
    let out = ctx.run(&["plan", "a", "examples/hello/experiment.yaml", "--host", "k", "--chip", "h100", "-n", "1"]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(all.contains("line 5"), "the place is shown: {all}");
    assert!(all.contains(&kubeconfig.display().to_string()), "the file is named: {all}");
    assert!(!all.contains("SECRETTOKEN123"), "the token was printed: {all}");

    std::fs::write(
        ctx.home().join(".theseus.yaml"),
        "clusters:\n  c: {root: /r, work: /w, wandb: SECRETTOKEN123, x: [}\n",
    )
    .unwrap();
    let out = ctx.run(&["config", "check"]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("~/.theseus.yaml") && stderr.contains("line 2"), "{stderr}");
    assert!(!stderr.contains("SECRETTOKEN123"), "{stderr}");

    std::fs::remove_file(ctx.home().join(".theseus.yaml")).unwrap();
    let exp = dir.path().join("exp.yaml");
    std::fs::write(&exp, "entrypoint: echo\nenv: {TOKEN: SECRETTOKEN123, x: [}\n").unwrap();
    let out = ctx.run(&["plan", "a", exp.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("exp.yaml") && stderr.contains("line 2"), "{stderr}");
    assert!(!stderr.contains("SECRETTOKEN123"), "{stderr}");
}

#[test]
fn cluster_paths_must_be_absolute_and_normalised() {
    let ctx = TestContext::new();
    for (cluster, key) in [
        ("{root: '', work: /w}", "clusters.c.root"),
        ("{root: /r, work: relative/dir}", "clusters.c.work"),
        ("{root: /r, work: /w, log: /w/../../etc}", "clusters.c.log"),
    ] {
        std::fs::write(ctx.home().join(".theseus.yaml"), format!("clusters:\n  c: {cluster}\n")).unwrap();
        let out = ctx.run(&["config", "check"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cluster}: {stderr}");
        assert!(stderr.contains(&format!("~/.theseus.yaml: {key}: ")), "{cluster}: {stderr}");
    }
}

#[test]
fn invalid_kubernetes_names_and_ssh_destinations_fail_config_check() {
    let ctx = TestContext::new();
    let volcano = "clusters:\n  c: {root: /r, work: /w}\nhosts:\n  k:\n    type: volcano\n    cluster: c\n    image: img\n    pvc_name: p\n";
    for (extra, key) in [
        ("    queue: a b\n", "hosts.k.queue"),
        ("    queue: Team\n", "hosts.k.queue"),
        ("    priority_class: 'high prio'\n", "hosts.k.priority_class"),
        ("    node_selector: {'bad key': x}\n", "hosts.k.node_selector"),
        ("    labels: {team: 'a b'}\n", "hosts.k.labels.team"),
    ] {
        std::fs::write(ctx.home().join(".theseus.yaml"), format!("{volcano}{extra}")).unwrap();
        let out = ctx.run(&["config", "check"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra}: {stderr}");
        assert!(stderr.contains(&format!("~/.theseus.yaml: {key}")), "{extra}: {stderr}");
    }
    for kind in ["plain", "slurm"] {
        let config = format!(
            "clusters:\n  c: {{root: /r, work: /w}}\nhosts:\n  h: {{type: {kind}, ssh: '-oProxyCommand=touch /tmp/x', cluster: c}}\n"
        );
        std::fs::write(ctx.home().join(".theseus.yaml"), config).unwrap();
        let out = ctx.run(&["config", "check"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{kind}: {stderr}");
        assert!(
            stderr.contains("~/.theseus.yaml: hosts.h.ssh: ") && stderr.contains("starts with `-`"),
            "{kind}: {stderr}"
        );
    }
}

#[test]
fn a_job_name_with_a_refused_character_names_it() {
    let ctx = TestContext::new();
    for (name, shown) in [("a:b", "':' (U+003A)"), ("ñame", "'ñ' (U+00F1)"), ("a b", "' ' (U+0020)")] {
        let out = ctx.run(&["submit", name, "examples/hello/experiment.yaml"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(shown) && stderr.contains("letters, digits"), "{name}: {stderr}");
    }
}

#[test]
fn a_damaged_ledger_names_its_file_and_the_mv_that_sets_it_aside() {
    let ctx = TestContext::new();
    let ledger = ctx.home().join("state/theseus/ledger.sqlite3");
    std::fs::create_dir_all(ledger.parent().unwrap()).unwrap();
    // Not a database at all, then a file with SQLite's magic and garbage after it.
    for junk in [&b"this is not sqlite\n"[..], &[b"SQLite format 3\0".as_slice(), &[0xAB; 4096]].concat()] {
        std::fs::write(&ledger, junk).unwrap();
        for args in [&["list"][..], &["status", "some-run"][..]] {
            let out = ctx.run(args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            let fix = format!("mv {} {}.bad", ledger.display(), ledger.display());
            assert!(stderr.contains(&fix), "{args:?}: the file and the fix are named: {stderr}");
        }
    }
    std::fs::rename(&ledger, ledger.with_extension("sqlite3.bad")).unwrap();
    let submitted = ctx.run(&["submit", "after", "examples/hello/experiment.yaml", "--follow"]);
    assert!(submitted.status.success(), "{}", text(&submitted.stderr));
    let list = ctx.run(&["list"]);
    assert!(list.status.success() && text(&list.stdout).contains("after"), "{}", text(&list.stderr));
    let status = ctx.run(&["status", "after"]);
    assert!(status.status.success() && text(&status.stdout).contains("completed"), "{}", text(&status.stdout));
}
