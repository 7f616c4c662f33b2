//! The checks of their own that some passes of `cargo xtask e2e --sim` make after the
//! scenarios: an exec credential plugin runs at most once per theseus command (kubectl keeps
//! the token it prints until it expires), and theseus goes through an HTTP proxy when
//! `HTTPS_PROXY` says so and around it when `NO_PROXY` covers the server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};

use super::proxy::{self, Tinyproxy};
use super::{HOST, SECRET_VALUE, World, text, wait_for};

/// Where the plugin counts its runs, one line each.
fn calls_file(home: &Path) -> PathBuf {
    home.join("exec-plugin-calls")
}

/// `text` single-quoted for sh.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Writes `HOME/bin/e2e-credential`, an exec credential plugin
/// (`client.authentication.k8s.io/v1`) that appends a line to `HOME/exec-plugin-calls` and
/// prints an ExecCredential holding `token`. Returns its path.
pub(crate) fn write_exec_plugin(home: &Path, token: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = home.join("bin");
    std::fs::create_dir_all(&dir)?;
    let plugin = dir.join("e2e-credential");
    let credential = serde_json::json!({
        "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": token},
    });
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\n# Written by `cargo xtask e2e --sim`: counts its runs, prints the credential.\n\
             echo run >> {}\nprintf '%s\\n' {}\n",
            sh_quote(&calls_file(home).display().to_string()),
            sh_quote(&credential.to_string())
        ),
    )?;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755))?;
    Ok(plugin)
}

/// Runs `theseus args` and returns how often the exec plugin ran meanwhile.
fn plugin_runs(world: &World, args: &[&str]) -> Result<usize> {
    let calls = calls_file(&world.home);
    std::fs::write(&calls, "")?;
    world.theseus_ok(args)?;
    Ok(std::fs::read_to_string(&calls).with_context(|| format!("cannot read {}", calls.display()))?.lines().count())
}

/// The exec pass: submit, status (until the job ends), logs, list and cancel each run the
/// plugin at most once; the commands that must reach the cluster run it at least once (the
/// plugin is what authenticates them).
pub(crate) fn exec_plugin_runs_once_per_command(world: &World, _proxy: Option<&Tinyproxy>) -> Result<()> {
    let job = "e2e-exec-plugin";
    let mut seen = Vec::new();
    let submit = ["submit", job, "hello.yaml", "--code", ".", "--host", HOST, "--chip", "cpu", "--cpu", "100m"];
    seen.push((submit.join(" "), plugin_runs(world, &submit)?, true));
    let mut status_runs = Vec::new();
    wait_for(&format!("{job} to end"), Duration::from_secs(300), Duration::from_millis(500), || {
        let calls = calls_file(&world.home);
        std::fs::write(&calls, "")?;
        let out = world.theseus_ok(&["status", job, "--output", "json"])?;
        status_runs.push(std::fs::read_to_string(&calls)?.lines().count());
        let v: serde_json::Value = serde_json::from_str(&out).with_context(|| format!("status is not JSON: {out}"))?;
        let state = v["status"]["state"].as_str().unwrap_or("").to_owned();
        Ok(matches!(state.as_str(), "completed" | "failed" | "cancelled").then_some(()))
    })?;
    seen.push((format!("status {job}"), status_runs.iter().copied().max().unwrap_or(0), true));
    seen.push((format!("logs {job}"), plugin_runs(world, &["logs", job])?, true));
    seen.push(("list".to_owned(), plugin_runs(world, &["list"])?, false));
    let cancel = world.theseus(&["cancel", job])?;
    let _ = cancel; // a completed job: cancel may say there is nothing to cancel
    let bad: Vec<String> = seen
        .iter()
        .filter(|(_, runs, must)| *runs > 1 || (*must && *runs == 0))
        .map(|(cmd, runs, _)| format!("`theseus {cmd}` ran the exec plugin {runs} times"))
        .collect();
    ensure!(
        bad.is_empty(),
        "an exec credential plugin must run at most once per command (kubectl keeps its token until it expires), \
         and at least once where the cluster is called: {}",
        bad.join("; ")
    );
    Ok(())
}

/// Runs `theseus args` with extra environment `env`; fails unless it exits 0 (and if the
/// secret shows).
fn theseus_with(world: &World, env: &[(&str, &str)], args: &[&str]) -> Result<String> {
    let out = world.theseus_cmd(args).envs(env.iter().copied()).output().context("cannot run theseus")?;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    ensure!(
        !stdout.contains(SECRET_VALUE) && !stderr.contains(SECRET_VALUE),
        "`theseus {}` printed the secret",
        args.join(" ")
    );
    if !out.status.success() {
        bail!("`theseus {}` with {env:?} failed ({}):\n{stdout}{stderr}", args.join(" "), out.status);
    }
    Ok(stdout)
}

/// The proxy pass (after its scenarios ran with `HTTPS_PROXY` set): the proxy saw CONNECTs to
/// the simulator; with lowercase `https_proxy` a submit, status and cancel go through it too;
/// then with `NO_PROXY` naming the server (upper and lower case) the same commands work and
/// the proxy's log shows not one more CONNECT.
pub(crate) fn through_an_http_proxy(world: &World, proxy: Option<&Tinyproxy>) -> Result<()> {
    let proxy = proxy.context("the proxy pass runs with a proxy")?;
    let server = world.kubectl_server.clone().context("the simulator's URL")?;
    // The kubeconfig may name the simulator by the host name: the port tells it apart.
    let port = server.rsplit(':').next().unwrap_or_default().to_owned();
    let to_sim = |connects: &[String]| connects.iter().filter(|c| c.rsplit(':').next() == Some(port.as_str())).count();
    let job = "e2e-proxy";
    let submit = ["submit", job, "sleep.yaml", "--code", ".", "--host", HOST, "--chip", "cpu", "--cpu", "100m"];

    // What NO_PROXY lists to cover the server (its name in the kubeconfig) and not the proxy
    // (127.0.0.2), in a list as sites write it.
    let covering = match proxy::proxied_server_name() {
        Some((name, _)) => format!("example.invalid,{name}"),
        None => "example.invalid,127.0.0.1".to_owned(),
    };
    let before = to_sim(&proxy.connects()?);
    let lower = [("https_proxy", proxy.url.as_str())];
    theseus_with(world, &lower, &submit)?;
    theseus_with(world, &lower, &["status", job])?;
    let through = to_sim(&proxy.connects()?);
    ensure!(
        through > before,
        "with https_proxy={} theseus did not go through the proxy (no CONNECT to port {port} in its log)",
        proxy.url
    );

    for no_proxy in ["NO_PROXY", "no_proxy"] {
        let bypass = [("HTTPS_PROXY", proxy.url.as_str()), (no_proxy, covering.as_str())];
        let start = to_sim(&proxy.connects()?);
        theseus_with(world, &bypass, &["status", job])?;
        theseus_with(world, &bypass, &["logs", job])?;
        let after = to_sim(&proxy.connects()?);
        ensure!(
            after == start,
            "{no_proxy}={covering} covers the server, yet theseus sent {} CONNECT(s) to the proxy",
            after - start
        );
    }
    theseus_with(world, &[("HTTPS_PROXY", proxy.url.as_str()), ("NO_PROXY", covering.as_str())], &["cancel", job])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plugin_prints_a_credential_and_counts_its_runs() {
        let home = std::env::temp_dir().join(format!("xtask-exec-plugin-{}", std::process::id()));
        let plugin = super::write_exec_plugin(&home, "t-it's").unwrap();
        for _ in 0..2 {
            let out = std::process::Command::new(&plugin).output().unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["status"]["token"], "t-it's");
            assert_eq!(v["kind"], "ExecCredential");
        }
        assert_eq!(std::fs::read_to_string(super::calls_file(&home)).unwrap().lines().count(), 2);
        std::fs::remove_dir_all(&home).unwrap();
    }
}
