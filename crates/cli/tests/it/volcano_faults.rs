//! The `theseus` binary against a Volcano API server that accepts connections and never answers
//! (the simulator's hang fault): every command ends with one clear line naming the server, and
//! no library log lines or colour codes reach a non-terminal stderr.

use std::process::{Output, Stdio};
use std::time::Duration;

use theseus_kube_sim::Outage;

use crate::volcano::SimWorld;
use crate::{TestContext, run_bounded, text};

pub(crate) fn set_api_timeout(ctx: &TestContext, value: &str) {
    let path = ctx.home().join(".theseus.yaml");
    let config = std::fs::read_to_string(&path).unwrap() + &format!("    api_timeout: {value}\n");
    std::fs::write(&path, config).unwrap();
}

/// One error line that names the server and says it did not answer; nothing from libraries.
fn assert_one_clear_line(what: &str, out: &Output, server: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    assert!(!stderr.contains('\x1b'), "{what}: colour codes on a non-terminal stderr: {stderr:?}");
    assert!(!stderr.contains("ERROR") && !stderr.contains("failed with error"), "{what}: library log lines: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{what}: one error line: {stderr}");
    assert!(errors[0].contains(server) && errors[0].contains("did not answer"), "{what}: {stderr}");
    assert_eq!(stderr.lines().filter(|l| l.contains("caused by")).count(), 0, "{what}: {stderr}");
}

#[test]
fn a_hung_api_server_ends_status_cancel_submit_and_plan_with_one_clear_line() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    set_api_timeout(&ctx, "3s");
    let out = ctx.run(&[
        "submit",
        "hung",
        &world.exp("sleep.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    world.sim.faults().outage(Outage::Hang, None);
    let server = world.sim.url();
    let limit = Duration::from_secs(90);
    let run = |args: &[&str]| {
        let mut cmd = ctx.cmd();
        cmd.args(args);
        run_bounded(cmd, limit)
    };
    assert_one_clear_line("status", &run(&["status", "hung"]), &server);
    assert_one_clear_line("cancel", &run(&["cancel", "hung"]), &server);
    let submit =
        run(&["submit", "other", &world.exp("exp.yaml"), "--code", world.code(), "--host", "k8s", "--chip", "cpu"]);
    assert_one_clear_line("submit", &submit, &server);
    let plan = run(&["plan", "p", &world.exp("exp.yaml"), "--host", "k8s", "--chip", "h100", "-n", "4"]);
    // A host that does not answer is planned with unknown capacity (the scheduler queues the
    // job), and the note says which server did not answer what.
    let (stdout, stderr) = (text(&plan.stdout), text(&plan.stderr));
    assert!(plan.status.success(), "{stdout}{stderr}");
    assert!(!stderr.contains('\x1b') && !stderr.contains("ERROR"), "library log lines: {stderr}");
    let notes: Vec<&str> = stdout.lines().filter(|l| l.starts_with("note:") && l.contains("did not answer")).collect();
    assert_eq!(notes.len(), 1, "{stdout}");
    assert!(notes[0].contains(&server) && notes[0].contains("queues"), "{stdout}");
    // And the host is listed among those that did not answer, once.
    let unknown: Vec<&str> = stdout.lines().filter(|l| l.starts_with("unknown: k8s: ")).collect();
    assert_eq!(unknown.len(), 1, "{stdout}");
    assert!(unknown[0].contains(&server), "{stdout}");
    let list = run(&["list"]);
    assert!(list.status.success(), "list ends and shows what the ledger knows: {}", text(&list.stderr));
    assert!(text(&list.stdout).contains("hung"), "{}", text(&list.stdout));
    world.sim.faults().end_outage();
}

#[test]
fn two_concurrent_submits_of_one_name_leave_one_live_job_and_one_clean_message() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    for round in 0..3 {
        let name = format!("race{round}");
        let spawn = || {
            let mut cmd = ctx.cmd();
            cmd.args([
                "submit",
                &name,
                &world.exp("sleep.yaml"),
                "--code",
                world.code(),
                "--host",
                "k8s",
                "--chip",
                "cpu",
            ]);
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let won: Vec<&Output> = outs.iter().filter(|o| o.status.success()).collect();
        let lost: Vec<&Output> = outs.iter().filter(|o| !o.status.success()).collect();
        assert_eq!(
            (won.len(), lost.len()),
            (1, 1),
            "round {round}: {:?}",
            outs.iter().map(|o| text(&o.stderr)).collect::<Vec<_>>()
        );
        let stderr = text(&lost[0].stderr);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(errors.len(), 1, "round {round}: {stderr}");
        assert!(errors[0].contains("live run of job") && errors[0].contains("--replace"), "round {round}: {stderr}");
        assert_eq!(errors[0].matches("already").count(), 1, "round {round}: {stderr}");
        assert!(
            !stderr.contains("starting helper") && !stderr.contains("waiting for helper"),
            "round {round}: the loser shipped: {stderr}"
        );
        let cancel = ctx.run(&["cancel", &name]);
        assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    }
}

#[test]
fn submit_follow_survives_reset_log_streams_and_an_api_outage_and_says_it_reconnects() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    let code = std::path::Path::new(world.code());
    std::fs::write(
        code.join("count.py"),
        "import time\nfor i in range(40):\n    print('tick', i, flush=True)\n    time.sleep(0.2)\n",
    )
    .unwrap();
    std::fs::write(code.join("count.yaml"), "entrypoint: python count.py\n").unwrap();
    let faults = world.sim.faults();
    faults.cut_log_streams_after(Some(Duration::from_millis(900)));
    let mut cmd = ctx.cmd();
    cmd.args([
        "submit",
        "ticks",
        &world.exp("count.yaml"),
        "--code",
        world.code(),
        "--host",
        "k8s",
        "--chip",
        "cpu",
        "--follow",
    ]);
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // An outage of a few seconds once the job ticks (the job itself runs on).
    let stdout_pipe = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stdout_pipe).lines() {
            let line = line.unwrap();
            if line.ends_with("] tick 3") {
                faults.outage(Outage::Refuse, Some(Duration::from_secs(4)));
            }
            seen.push(line);
        }
        seen.join("\n")
    });
    let mut out = child.wait_with_output().unwrap();
    out.stdout = reader.join().unwrap().into_bytes();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let ticks: Vec<&str> = stdout.lines().filter(|l| l.contains("] tick ")).collect();
    let expected: Vec<String> = (0..40).map(|i| format!("[worker-0] tick {i}")).collect();
    assert_eq!(ticks, expected, "every line once, in order:\n{stdout}");
    assert!(stderr.contains("completed (exit code 0)"), "{stderr}");
    let lost: Vec<&str> = stderr.lines().filter(|l| l.contains("lost contact")).collect();
    assert!(
        !lost.is_empty() && lost.iter().all(|l| l.contains(&world.sim.url()) && l.contains("reconnecting")),
        "{stderr}"
    );
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
}

/// A kubeconfig whose contexts point at `servers` (`name` → URL), and one volcano host per
/// context in the theseus config, with a short API timeout and one attempt's worth of retries.
fn unreachable_clusters(ctx: &TestContext, servers: &[(&str, String)]) {
    let mut kubeconfig =
        String::from("apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {token: not-a-secret}\nclusters:\n");
    for (name, url) in servers {
        kubeconfig.push_str(&format!("- name: {name}\n  cluster: {{server: \"{url}\"}}\n"));
    }
    kubeconfig.push_str("contexts:\n");
    for (name, _) in servers {
        kubeconfig.push_str(&format!("- name: {name}\n  context: {{cluster: {name}, user: u}}\n"));
    }
    kubeconfig.push_str(&format!("current-context: {}\n", servers[0].0));
    std::fs::write(ctx.home().join("kubeconfig"), kubeconfig).unwrap();
    let mut config = String::from("clusters:\n  k8s: {root: /mnt/pvc, work: /mnt/pvc/work}\nhosts:\n");
    for (name, _) in servers {
        config.push_str(&format!(
            "  {name}:\n    type: volcano\n    cluster: k8s\n    namespace: ml\n    queue: q\n    image: img\n    pvc_name: shared\n    \
             pvc_mount_path: /mnt/pvc\n    chips: {{h100: 8}}\n    kubeconfig: {}\n    context: {name}\n    api_timeout: 3s\n",
            ctx.home().join("kubeconfig").display()
        ));
    }
    std::fs::write(ctx.home().join(".theseus.yaml"), config).unwrap();
}

#[test]
fn unreachable_refused_dns_and_non_tls_api_servers_end_with_one_plain_line() {
    let ctx = TestContext::new();
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // A server that speaks something other than TLS (as an ssh port would).
    let garbage = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let garbage_port = garbage.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in garbage.incoming().flatten() {
            let mut stream = stream;
            let _ = std::io::Write::write_all(&mut stream, b"SSH-2.0-OpenSSH_9.2\r\n");
        }
    });
    unreachable_clusters(
        &ctx,
        &[
            ("refused", format!("https://127.0.0.1:{refused}")),
            ("dns", "https://nonexistent.invalid:6443".to_owned()),
            ("not-tls", format!("https://127.0.0.1:{garbage_port}")),
        ],
    );
    for host in ["refused", "dns", "not-tls"] {
        let mut cmd = ctx.cmd();
        cmd.args(["submit", "x", "examples/hello/experiment.yaml", "--host", host, "--chip", "cpu", "--no-check"]);
        let out = run_bounded(cmd, Duration::from_secs(90));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{host}: {stderr}");
        assert!(!stderr.contains('\x1b'), "{host}: colour codes on a non-terminal stderr: {stderr:?}");
        assert!(!stderr.contains("ERROR") && !stderr.contains("DEBUG"), "{host}: library log lines: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(errors.len(), 1, "{host}: one error line: {stderr}");
        assert!(errors[0].contains(&format!("volcano({host})")), "{host}: names the host: {stderr}");
        assert!(!stderr.contains("not-a-secret"), "{host}: the token stays out: {stderr}");

        // `-v` tells more (the library's own lines), still without colour off a terminal.
        let mut cmd = ctx.cmd();
        cmd.args([
            "-v",
            "submit",
            "x",
            "examples/hello/experiment.yaml",
            "--host",
            host,
            "--chip",
            "cpu",
            "--no-check",
        ]);
        let verbose = text(&run_bounded(cmd, Duration::from_secs(90)).stderr);
        assert!(verbose.lines().count() > stderr.lines().count(), "{host}: -v says more:\n{verbose}");
        assert!(!verbose.contains('\x1b'), "{host}: {verbose:?}");
    }
}
