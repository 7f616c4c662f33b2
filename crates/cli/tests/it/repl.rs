//! `theseus repl` with a real Jupyter Lab (from PyPI, in the test venvs) on all four backends
//! through the real binary: the printed local URL reaches Jupyter's `/api/status` with its
//! token (through the plain host's ssh master, the Slurm login node to the allocated node, and
//! the simulator's `pods/portforward`; the local host needs no tunnel), the session is listed
//! with kind `repl`, SIGTERM closes only the tunnel, and `cancel` leaves nothing running. A
//! session whose Jupyter dies at once fails with the log's last lines, not after the timeout.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::targets::{Kind, Target};
use crate::text;

/// `GET /api/status` of the Jupyter behind `url` (`http://127.0.0.1:PORT/lab?token=T`), with
/// the token in the `Authorization` header; the HTTP status line and the body.
fn api_status(url: &str) -> std::io::Result<(String, String)> {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (authority, path) = rest.split_once('/').expect("a path");
    let token = path.split_once("token=").map(|(_, t)| t).unwrap_or("");
    let mut stream = std::net::TcpStream::connect(authority)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(stream, "GET /api/status HTTP/1.0\r\nHost: {authority}\r\nAuthorization: token {token}\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    Ok((head.lines().next().unwrap_or("").to_owned(), body.to_owned()))
}

fn repl_args<'a>(target: &'a Target, python_env: &'a str, code: &'a str) -> Vec<&'a str> {
    let mut args = vec!["repl", "--name", "nb", "--chip", "cpu", "--env", python_env, "--code", code, "--port", "0"];
    args.extend(["--startup-timeout", "240"]);
    if let Some(host) = target.host() {
        args.extend(["--host", host]);
    }
    args
}

fn repl_on(kind: Kind) {
    let Some(target) = Target::new(kind, "repl") else { return };
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("notebook_helper.py"), "X = 1\n").unwrap();
    let python_env = format!("THESEUS_PYTHON={}", target.python());
    let code_str = code.path().to_str().unwrap().to_owned();
    let mut child = target
        .cmd(&repl_args(&target, &python_env, &code_str))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut url).unwrap();
    let url = url.trim().to_owned();
    if !url.starts_with("http://127.0.0.1:") {
        let out = child.wait_with_output().unwrap();
        panic!("{kind:?}: no local URL ({url:?}): {}", text(&out.stderr));
    }
    assert!(url.contains("/lab?token="), "{kind:?}: {url}");
    let (status, body) = api_status(&url).unwrap_or_else(|e| panic!("{kind:?}: {url}: {e}"));
    assert!(status.contains(" 200"), "{kind:?}: {status} {body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{kind:?}: {e}: {body}"));
    assert!(json.get("started").is_some() && json.get("kernels").is_some(), "{kind:?}: {json}");
    // Without the token Jupyter refuses: the printed token is the one that counts.
    let bare = url.split_once('?').unwrap().0;
    let (status, _) = api_status(bare).unwrap();
    assert!(status.contains(" 403") || status.contains(" 401"), "{kind:?}: without a token: {status}");

    let list = target.run(&["list", "--output", "json"]);
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let row = rows.as_array().unwrap().iter().find(|r| r["identity"]["name"] == "nb").expect("the session is listed");
    assert_eq!(row["kind"], "repl", "{kind:?}: {row}");
    let table = text(&target.run(&["list"]).stdout);
    assert!(table.lines().any(|l| l.contains(" nb ") && l.contains(" repl ")), "{kind:?}: {table}");

    // SIGTERM: the tunnel closes, the session stays.
    std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{kind:?}: {stderr}");
    assert!(stderr.contains("keeps running") && stderr.contains("theseus cancel nb"), "{kind:?}: {stderr}");
    if kind != Kind::Local {
        assert!(api_status(&url).is_err(), "{kind:?}: the tunnel is closed");
    }
    let status = target.run(&["status", "nb", "--output", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["status"]["state"], "running", "{kind:?}: {status}");
    if let Some(sim) = target.sim() {
        assert!(sim.requests().iter().any(|(_, p)| p.contains("/portforward")), "through pods/portforward");
    }

    // `cancel` ends the session: Jupyter no longer answers (the local host's direct URL too).
    let cancel = target.run(&["cancel", "nb"]);
    assert!(cancel.status.success(), "{kind:?}: {}", text(&cancel.stderr));
    if kind == Kind::Local {
        // Its port may already be another Jupyter's (each takes 8888 or the next free port, and
        // the other hosts' sessions of these tests run on this machine too): what counts is that
        // nothing accepts this session's token any more.
        if let Ok((status, body)) = api_status(&url) {
            assert!(!status.contains(" 200"), "the local Jupyter is gone, yet its token works: {status} {body}");
        }
    }
    let status = target.run(&["status", "nb", "--output", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["status"]["state"], "cancelled", "{kind:?}: {status}");
}

#[test]
fn repl_opens_jupyter_on_the_local_host() {
    repl_on(Kind::Local);
}

#[test]
fn repl_tunnels_to_jupyter_on_a_plain_host() {
    repl_on(Kind::Plain);
}

#[test]
fn repl_tunnels_to_jupyter_on_a_slurm_node_through_the_login_node() {
    repl_on(Kind::Slurm);
}

#[test]
fn repl_tunnels_to_jupyter_in_a_volcano_pod() {
    repl_on(Kind::Volcano);
}

/// A "Python" that has Jupyter as far as the entrypoint's check goes, and whose Jupyter dies
/// at once with a message.
fn dying_python(dir: &std::path::Path) -> String {
    let path = dir.join("python");
    std::fs::write(
        &path,
        "#!/bin/sh\nif [ \"$1\" = -c ]; then exit 0; fi\necho 'jupyter: fatal: cannot bind: the lab broke this on purpose' >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[test]
fn a_session_whose_jupyter_dies_fails_at_once_with_the_log_tail() {
    let target = Target::new(Kind::Local, "repl startup failure").unwrap();
    let code = tempfile::tempdir().unwrap();
    let python_env = format!("THESEUS_PYTHON={}", dying_python(code.path()));
    let code_str = code.path().to_str().unwrap().to_owned();
    let started = Instant::now();
    let out = target.run(&repl_args(&target, &python_env, &code_str));
    let elapsed = started.elapsed();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "no URL: {}", text(&out.stdout));
    assert!(stderr.contains("the session ended (failed) before Jupyter Lab started"), "{stderr}");
    assert!(stderr.contains("cannot bind: the lab broke this on purpose"), "the log's last lines: {stderr}");
    // The startup timeout is 240 s: failing long before it shows the end was seen, not waited out.
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
    let status = target.run(&["status", "nb", "--output", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["status"]["state"], "failed", "{status}");
}
