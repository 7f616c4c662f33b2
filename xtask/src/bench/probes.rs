//! `plan` over hosts that do not answer their availability probe (loopback only): 50 plain
//! hosts whose port refuses (each must be answered at once: goal 1 s in all) and 5 that accept
//! TCP and never speak SSH (each costs the probe timeout, all at once: goal the timeout + 0.5 s).

use std::net::TcpListener;
use std::path::Path;

use anyhow::Result;

use super::{Goal, Measure, local_cmd, repo::TempDir, timed};

/// theseus's default probe timeout (`theseus_core::probe::DEFAULT_TIMEOUT`; xtask links no
/// theseus crate).
const PROBE_TIMEOUT_SECS: f64 = 5.0;
const REFUSED_HOSTS: usize = 50;
const SILENT_HOSTS: usize = 5;

pub(super) fn measure(root: &Path, bin: &Path, python: &Path, _scratch: &Path, runs: usize) -> Result<Vec<Measure>> {
    // A port nobody listens on (bound, then closed), and listeners that never accept: the
    // kernel completes the handshake and the connection then stays silent.
    let refused = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let silent: Vec<TcpListener> =
        (0..SILENT_HOSTS).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;

    let mut refused_plan = Measure::new("plan over 50 plain hosts whose port refuses", "s", Goal::AtMost(1.0));
    let home = TempDir::new("probes-refused", false)?;
    let hosts: Vec<(String, u16)> = (0..REFUSED_HOSTS).map(|i| (format!("refused-{i:02}"), refused)).collect();
    write_config(home.path(), &hosts)?;
    for _ in 0..runs {
        refused_plan.values.push(timed(plan(root, bin, python, home.path()), "theseus plan (refused hosts)")?);
    }
    eprintln!("bench: plan over refused hosts done");

    let goal = PROBE_TIMEOUT_SECS + 0.5;
    let mut silent_plan = Measure::new("plan over 5 hosts that never speak SSH", "s", Goal::AtMost(goal));
    silent_plan.note = Some(format!("goal: the default probe timeout ({PROBE_TIMEOUT_SECS} s) + 0.5 s"));
    let home = TempDir::new("probes-silent", false)?;
    let hosts: Vec<(String, u16)> = silent
        .iter()
        .enumerate()
        .map(|(i, l)| Ok((format!("silent-{i}"), l.local_addr()?.port())))
        .collect::<Result<_>>()?;
    write_config(home.path(), &hosts)?;
    for _ in 0..runs {
        silent_plan.values.push(timed(plan(root, bin, python, home.path()), "theseus plan (silent hosts)")?);
    }
    eprintln!("bench: plan over silent hosts done");
    drop(silent);
    Ok(vec![refused_plan, silent_plan])
}

/// `theseus plan` of the bundled example as a 1-process CPU job, ssh reading the bench's config.
fn plan(root: &Path, bin: &Path, python: &Path, home: &Path) -> std::process::Command {
    let args = ["plan", "bench-probe", "examples/hello/experiment.yaml", "--chip", "cpu", "-n", "1"];
    let mut cmd = local_cmd(bin, home, python, root, &args);
    cmd.env("THESEUS_SSH_CONFIG", home.join("ssh_config"));
    cmd
}

/// An ssh config with one alias per host (all on 127.0.0.1) and a dispatch config with one
/// plain host per alias.
fn write_config(home: &Path, hosts: &[(String, u16)]) -> Result<()> {
    let mut ssh = String::new();
    let mut dispatch = String::from(
        "clusters:\n  bench: {root: /tmp/theseus-bench-unused, work: /tmp/theseus-bench-unused/work}\nhosts:\n",
    );
    for (name, port) in hosts {
        ssh.push_str(&format!("Host {name}\n  HostName 127.0.0.1\n  Port {port}\n"));
        dispatch.push_str(&format!("  {name}: {{type: plain, ssh: {name}, cluster: bench}}\n"));
    }
    std::fs::write(home.join("ssh_config"), ssh)?;
    std::fs::write(home.join(".theseus.yaml"), dispatch)?;
    Ok(())
}
