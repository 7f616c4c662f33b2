//! `theseus forward` to a job that serves HTTP, through the real binary on all four backends: the
//! local host (loopback), Volcano (the simulator's `pods/portforward`), a plain host and Slurm
//! (over the lab's sshd, Slurm reaching the rank's node through the login node); SIGTERM closes the forward and
//! leaves the job running.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::targets::{Kind, Target};
use crate::volcano::SimWorld;
use crate::{TestContext, text};

/// A port free on this machine, below the kernel's ephemeral range (32768 and up by default):
/// the Slurm lab's nodes have a network namespace of their own, where this machine cannot see
/// what is bound, and where srun and slurmstepd bind ephemeral ports all the time (a port
/// picked by binding port 0 here was once taken there, and the job's server exited 1).
fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    loop {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let port = 20_000 + (hasher.finish() % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// An experiment whose job serves its working dir over HTTP on 127.0.0.1:`port`.
fn serving(dir: &std::path::Path, port: u16) -> String {
    let exp = dir.join("serve.yaml");
    std::fs::write(
        &exp,
        format!("entrypoint: python3 -m http.server {port} --bind 127.0.0.1\nrequest: {{chip: cpu}}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("hello.txt"), "hello through the tunnel\n").unwrap();
    exp.display().to_string()
}

/// `GET /hello.txt` through `addr`.
fn fetch(addr: &str) -> std::io::Result<String> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    stream.write_all(b"GET /hello.txt HTTP/1.0\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// Starts `theseus forward` (retrying while the job is not listening yet) and returns the
/// child and the local address it printed.
fn forward(cmd: impl Fn() -> Command) -> (std::process::Child, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut child = cmd().stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        if !line.trim().is_empty() {
            return (child, line.trim().to_owned());
        }
        let out = child.wait_with_output().unwrap();
        assert!(Instant::now() < deadline, "forward never started: {}", text(&out.stderr));
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn stop(child: std::process::Child) -> (Option<i32>, String) {
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), text(&out.stderr))
}

#[test]
fn forward_reaches_a_local_job_and_sigterm_closes_only_the_forward() {
    let ctx = TestContext::new();
    let code = tempfile::tempdir().unwrap();
    let port = free_port();
    let exp = serving(code.path(), port);
    let out = ctx.run(&["submit", "web", &exp, "--code", code.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (child, addr) = forward(|| {
        let mut cmd = ctx.cmd();
        cmd.args(["forward", "web", &format!("0:{port}")]);
        cmd
    });
    assert_ne!(addr, format!("127.0.0.1:{port}"), "0: picks a free local port");
    let answer = fetch(&addr).unwrap();
    assert!(answer.starts_with("HTTP/1.0 200") && answer.contains("hello through the tunnel"), "{answer}");
    let (code_, stderr) = stop(child);
    assert_eq!(code_, Some(143), "{stderr}");
    assert!(stderr.contains("the job keeps running"), "{stderr}");
    let status = text(&ctx.run(&["status", "web"]).stdout);
    assert!(status.contains("running"), "{status}");
    assert!(ctx.run(&["cancel", "web"]).status.success());
    // Nothing listens any more: forward fails at once, saying so.
    let out = ctx.run(&["forward", "web", &format!("0:{port}")]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("has ended") || text(&out.stderr).contains("nothing answers"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn forward_reaches_a_volcano_pod_through_the_api_server() {
    let ctx = TestContext::new();
    let world = SimWorld::start(&ctx);
    let code = tempfile::tempdir().unwrap();
    let port = free_port();
    let exp = serving(code.path(), port);
    let out = ctx.run(&["submit", "board", &exp, "--code", code.path().to_str().unwrap(), "--host", "k8s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The simulator's pods are local processes: wait until the server listens (a real
    // forward learns of a closed port only when it is used).
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the pod's server never listened");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (child, addr) = forward(|| {
        let mut cmd = ctx.cmd();
        cmd.args(["forward", "board", &format!("0:{port}")]);
        cmd
    });
    let answer = fetch(&addr).unwrap();
    if !answer.contains("hello through the tunnel") {
        let (_, stderr) = stop(child);
        panic!("answer {answer:?}; forward said: {stderr}");
    }
    assert!(
        world.sim.requests().iter().any(|(_, path)| path.contains("/portforward")),
        "the connection went through pods/portforward"
    );
    let (code_, stderr) = stop(child);
    assert_eq!(code_, Some(143), "{stderr}");
    let cancel = ctx.run(&["cancel", "board"]);
    assert!(cancel.status.success(), "{}{}", text(&cancel.stdout), text(&cancel.stderr));
}

/// A job on a plain host or on Slurm: the forward goes over the host's (login node's) ssh
/// master, to 127.0.0.1 on a plain host and to the rank's node `NodeAddr` on Slurm.
fn forward_over_ssh(kind: Kind) {
    let Some(target) = Target::new(kind, "forward over ssh") else { return };
    let code = tempfile::tempdir().unwrap();
    let remote = free_port();
    let exp = serving(code.path(), remote);
    target.submit("remote-web", &exp, code.path());
    target.wait_running("remote-web");
    let (child, addr) = forward(|| target.cmd(&["forward", "remote-web", &format!("0:{remote}")]));
    // The Slurm lab's nodes live in a network namespace of their own (as a cluster's nodes are
    // other machines): the only way to see the server is through the forward, which answers
    // with a closed connection until it listens.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !fetch(&addr).is_ok_and(|a| a.contains("hello through the tunnel")) {
        if Instant::now() > deadline {
            let logs = target.run(&["logs", "remote-web"]);
            panic!("{kind:?}: the job's server never answered: {}{}", text(&logs.stdout), text(&logs.stderr));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    for _ in 0..3 {
        // Several connections share the one ssh forward.
        let answer = fetch(&addr).unwrap();
        assert!(answer.contains("hello through the tunnel"), "{answer}");
    }
    let (code_, stderr) = stop(child);
    assert_eq!(code_, Some(143), "{stderr}");
    let cancel = target.run(&["cancel", "remote-web"]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
}

#[test]
fn forward_reaches_a_job_on_a_plain_host_through_its_ssh_master() {
    forward_over_ssh(Kind::Plain);
}

#[test]
fn forward_reaches_a_slurm_job_on_its_node_through_the_login_node() {
    forward_over_ssh(Kind::Slurm);
}
