//! A real client against the simulator's `pods/portforward`: `kubectl port-forward` to the pod
//! of a theseus job that serves HTTP, and a request through it. (theseus's own tunnel, kube-rs'
//! portforward, is tested through the binary in the CLI's tests; this checks that the
//! simulator speaks the protocol as the API server does to the client users have.)

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};

use super::{HOST, World, text, wait_for, wait_seen};

/// Submits a job serving its code dir over HTTP, forwards a local port to its pod with
/// `kubectl port-forward`, fetches a file through it, then stops kubectl and cancels the job.
pub(crate) fn kubectl_port_forward(world: &World, server: &str) -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    std::fs::write(
        world.code.join("serve.yaml"),
        format!(
            "entrypoint: python -m http.server {port} --bind 127.0.0.1\nrequest: {{chip: cpu}}\nenv:\n  PYTHONUNBUFFERED: \"1\"\n"
        ),
    )?;
    std::fs::write(world.code.join("forward-hello.txt"), "through kubectl port-forward\n")?;
    world.theseus_ok(&["submit", "e2e-forward", "serve.yaml", "--code", ".", "--host", HOST])?;
    let result = forward_and_fetch(world, server, port);
    let cancelled = world.theseus_ok(&["cancel", "e2e-forward"]);
    result?;
    cancelled.map(drop)
}

fn forward_and_fetch(world: &World, server: &str, port: u16) -> Result<()> {
    let pod = wait_for("the e2e-forward pod to run", Duration::from_secs(120), Duration::from_millis(500), || {
        let out = world
            .kubectl_sim(server)
            .args(["-n", &world.namespace, "get", "pods", "--field-selector=status.phase=Running", "-o", "name"])
            .output()
            .context("cannot run kubectl")?;
        Ok(text(&out.stdout).lines().find(|l| l.contains("e2e-forward")).map(str::to_owned))
    })?;
    // kubectl port-forward ends at the first connection the pod refuses ("lost connection to
    // pod"), so the server must listen before it starts: http.server says so once it does.
    wait_seen("the pod's server to listen", Duration::from_secs(120), Duration::from_millis(300), || {
        let logs = world.theseus(&["logs", "e2e-forward"])?;
        let logs = text(&logs.stdout);
        Ok(if logs.contains("Serving HTTP on") { Ok(()) } else { Err(logs) })
    })?;
    let mut child = world
        .kubectl_sim(server)
        .args(["-n", &world.namespace, "port-forward", &pod, &format!(":{port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run kubectl port-forward")?;
    let fetched = (|| -> Result<String> {
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        stdout.read_line(&mut line)?;
        // kubectl prints a second line (the IPv6 listener): keep reading, or it dies of SIGPIPE.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        // "Forwarding from 127.0.0.1:40123 -> 8000"
        let local: u16 = line
            .split_once("127.0.0.1:")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("kubectl port-forward said {line:?}"))?;
        wait_seen("the pod's server through kubectl", Duration::from_secs(60), Duration::from_millis(300), || {
            let answer = (|| -> std::io::Result<String> {
                let mut stream = std::net::TcpStream::connect(("127.0.0.1", local))?;
                stream.set_read_timeout(Some(Duration::from_secs(20)))?;
                stream.write_all(b"GET /forward-hello.txt HTTP/1.0\r\n\r\n")?;
                let mut answer = String::new();
                stream.read_to_string(&mut answer)?;
                Ok(answer)
            })();
            Ok(match answer {
                Ok(a) if a.contains("through kubectl port-forward") => Ok(a),
                Ok(a) => Err(format!("answer {a:?}")),
                Err(e) => Err(format!("{e}")),
            })
        })
    })();
    // Ours, by PID.
    let _ = child.kill();
    let out = child.wait_with_output()?;
    match fetched {
        Ok(answer) => {
            ensure!(answer.starts_with("HTTP/1.0 200"), "through kubectl port-forward: {answer}");
            Ok(())
        }
        Err(e) => bail!("{e:#}\nkubectl port-forward said: {}", text(&out.stderr)),
    }
}
