//! How soon `submit --follow` ends after its job's end, on the built-in local host, on a plain
//! host over the lab's sshd and on the lab's Slurm (the remote two skipped without the lab's
//! `THESEUSTEST_*` env, `cargo xtask lab env`).
//!
//! The job prints `date +%s.%N` as its last line and exits; a sample is the time from that
//! stamp to the moment the `theseus` process exited (the lab runs on this machine's clock).
//! The floor, measured the same way in the same run, is what a user would do by hand: the same
//! lines run by `sh` here, by `ssh HOST sh -c` on the plain host, and by `ssh LOGIN srun` on
//! Slurm (the end of a Slurm step seen by its own `srun`).
//!
//! Code and cluster dirs live in temp dirs removed on every path ([`TempDir`]).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};

use super::repo::TempDir;
use super::{Goal, Measure, local_cmd};
use crate::e2e::text;

/// The job's lines: a first one, a second of work, then the stamp as the last write.
const JOB: &str = "echo follow-end: started; sleep 1; date +%s.%N";

/// The goal of the issue: the follow ends within 1 s of the job's end.
const GOAL: Goal = Goal::AtMost(1.0);

/// The figures: for each target, the follow's end after the job's, its floor beside it.
pub(super) fn measure(bin: &Path, python: &Path, runs: usize) -> Result<Vec<Measure>> {
    let code = TempDir::new("follow-end-code", true)?;
    std::fs::write(code.path().join("last.sh"), format!("{JOB}\n"))?;
    std::fs::write(code.path().join("exp.yaml"), "entrypoint: sh last.sh\n")?;
    let mut out = local(bin, python, code.path(), runs)?;
    out.extend(plain(bin, python, code.path(), runs)?);
    out.extend(slurm(bin, python, code.path(), runs)?);
    Ok(out)
}

/// The time from the last stamp `cmd` prints on stdout to its exit, failing unless it exits 0.
fn after_last_stamp(mut cmd: Command, what: &str) -> Result<f64> {
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("cannot run {what}"))?;
    let exited = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let stdout = text(&out.stdout);
    ensure!(out.status.success(), "{what} failed ({}):\n{stdout}{}", out.status, text(&out.stderr));
    let stamp = last_stamp(&stdout).with_context(|| format!("{what} printed no stamp:\n{stdout}"))?;
    Ok(exited - stamp)
}

/// The last `SECONDS.NANOS` stamp of `stdout`, after any prefix a backend puts on its lines.
fn last_stamp(stdout: &str) -> Option<f64> {
    stdout.lines().rev().find_map(|line| {
        let word = line.split_whitespace().last()?;
        let stamp: f64 = word.parse().ok()?;
        (word.contains('.') && stamp > 1e9).then_some(stamp)
    })
}

/// `runs` samples of `follow(i)` as the figure `names.0`, beside as many of `floor()` (what
/// `names.1` says it is).
fn figures(
    names: (&'static str, &'static str),
    runs: usize,
    follow: &dyn Fn(usize) -> Result<f64>,
    floor: &dyn Fn() -> Result<f64>,
) -> Result<Vec<Measure>> {
    let (mut theseus, mut by_hand) = (Vec::new(), Vec::new());
    for i in 0..runs {
        theseus.push(follow(i)?);
        by_hand.push(floor()?);
    }
    eprintln!("bench: {} done", names.0);
    Ok(vec![Measure { values: theseus, ..Measure::new(names.0, "s", GOAL) }.with_floor(names.1, by_hand)])
}

fn submit_args(name: &str, code: &Path, host: &str) -> Vec<String> {
    let exp = code.join("exp.yaml").display().to_string();
    let code = code.display().to_string();
    [name, &exp, "--code", &code, "--host", host, "--chip", "cpu", "--follow"].into_iter().map(str::to_owned).collect()
}

fn local(bin: &Path, python: &Path, code: &Path, runs: usize) -> Result<Vec<Measure>> {
    let home = TempDir::new("follow-end-local", false)?;
    let follow = |i: usize| {
        let args = submit_args(&format!("bench-follow-end-{i}"), code, "local");
        let mut all = vec!["submit"];
        all.extend(args.iter().map(String::as_str));
        after_last_stamp(local_cmd(bin, home.path(), python, code, &all), "local submit --follow")
    };
    let floor = || {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", JOB]);
        after_last_stamp(cmd, "sh")
    };
    figures(("submit --follow, local: exit after the job's last write", "sh"), runs, &follow, &floor)
}

/// The lab's env var `key`, or the name of the missing one.
fn var(key: &str) -> Result<String, String> {
    std::env::var(key).ok().filter(|v| !v.is_empty()).ok_or_else(|| key.to_owned())
}

/// An ssh config with host `alias` on the lab's `port` (`THESEUSTEST_SSH_KEY`, `_KNOWN_HOSTS`).
fn ssh_config(home: &Path, alias: &str, port: &str, user: &str) -> Result<std::path::PathBuf, String> {
    let (key, known) = (var("THESEUSTEST_SSH_KEY")?, var("THESEUSTEST_SSH_KNOWN_HOSTS")?);
    let path = home.join("ssh_config");
    let body = format!(
        "Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  IdentitiesOnly yes\n  \
         UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n"
    );
    std::fs::write(&path, body).map_err(|e| e.to_string())?;
    Ok(path)
}

/// `submit --follow` samples on the host `host` of `home`'s config, and `ssh ALIAS floor_cmd`.
fn remote(
    names: (&'static str, &'static str),
    (bin, python, code): (&Path, &Path, &Path),
    (home, config): (&Path, &Path),
    (host, alias): (&str, &str),
    floor_argv: &[&str],
    runs: usize,
) -> Result<Vec<Measure>> {
    let follow = |i: usize| {
        let args = submit_args(&format!("bench-follow-end-{i}"), code, host);
        let mut all = vec!["submit"];
        all.extend(args.iter().map(String::as_str));
        let mut cmd = local_cmd(bin, home, python, code, &all);
        cmd.env("THESEUS_SSH_CONFIG", config);
        after_last_stamp(cmd, &format!("submit --follow on {host}"))
    };
    let floor = || {
        let mut cmd = Command::new("ssh");
        cmd.arg("-F").arg(config).arg(alias).args(floor_argv);
        after_last_stamp(cmd, &format!("ssh {alias}"))
    };
    figures(names, runs, &follow, &floor)
}

/// The same job on a plain host over the lab's sshd, its cluster in a temp dir the lab user
/// may write.
fn plain(bin: &Path, python: &Path, code: &Path, runs: usize) -> Result<Vec<Measure>> {
    let names = ("submit --follow, plain (sshd): exit after the job's last write", "ssh HOST sh -c");
    let home = TempDir::new("follow-end-plain", false)?;
    let base = TempDir::new("follow-end-plain-cluster", true)?;
    let lab = var("THESEUSTEST_SSH_PORT").and_then(|port| {
        let user = var("THESEUSTEST_SSH_USER")?;
        ssh_config(home.path(), "bench-lab", &port, &user)
    });
    let config = match lab {
        Ok(config) => config,
        Err(missing) => return Ok(skipped(names, &missing)),
    };
    let b = base.path().display();
    let env = var("THESEUSTEST_REMOTE_PYTHON").map_or(String::new(), |p| format!(", env: {{THESEUS_PYTHON: {p:?}}}"));
    std::fs::write(
        home.path().join(".theseus.yaml"),
        format!(
            "clusters:\n  lab: {{root: {b}, work: {b}/work}}\nhosts:\n  lab: {{type: plain, ssh: bench-lab, cluster: lab{env}}}\n"
        ),
    )?;
    let floor = ["sh", "-c", &format!("'{JOB}'")];
    let result = remote(names, (bin, python, code), (home.path(), &config), ("lab", "bench-lab"), &floor, runs);
    cleanup(&config, "bench-lab", &b.to_string());
    result
}

/// The same job on the lab's Slurm (partition `cpu`), its cluster under the lab's shared dir.
fn slurm(bin: &Path, python: &Path, code: &Path, runs: usize) -> Result<Vec<Measure>> {
    let names = ("submit --follow, Slurm: exit after the job's last write", "ssh LOGIN srun");
    let home = TempDir::new("follow-end-slurm", false)?;
    let lab = var("THESEUSTEST_SLURM_SSH_PORT").and_then(|port| {
        let user = var("THESEUSTEST_SLURM_SSH_USER")?;
        let shared = var("THESEUSTEST_SLURM_SHARED")?;
        Ok((ssh_config(home.path(), "bench-login", &port, &user)?, shared))
    });
    let (config, shared) = match lab {
        Ok(lab) => lab,
        Err(missing) => return Ok(skipped(names, &missing)),
    };
    let base = format!("{shared}/bench-follow-end-{}", std::process::id());
    std::fs::write(
        home.path().join(".theseus.yaml"),
        format!(
            "clusters:\n  lab: {{root: {base}, work: {base}/work, log: {base}/logs, status: {base}/status}}\n\
             hosts:\n  slurm: {{type: slurm, cluster: lab, ssh: bench-login, partitions: [gpu], cpu_partitions: [cpu], \
             mem: 300M, time: \"10\"}}\n"
        ),
    )?;
    let floor = ["srun", "--partition=cpu", "--mem=300M", "sh", "-c", &format!("'{JOB}'")];
    let result = remote(names, (bin, python, code), (home.path(), &config), ("slurm", "bench-login"), &floor, runs);
    cleanup(&config, "bench-login", &base);
    result
}

/// Removes the runs' dirs under `base` on the host (the lab user owns them).
fn cleanup(config: &Path, alias: &str, base: &str) {
    let script = format!("chmod -R u+w '{base}' 2>/dev/null; rm -rf '{base}'/* '{base}'");
    let _ = Command::new("ssh").arg("-F").arg(config).args([alias, &script]).stdin(Stdio::null()).output();
}

fn skipped(names: (&'static str, &'static str), missing: &str) -> Vec<Measure> {
    let why = format!("no lab: {missing} not set (`cargo xtask lab up`, then `cargo xtask lab env`)");
    eprintln!("bench: {} skipped: {why}", names.0);
    vec![Measure::skipped(names.0, "s", GOAL, why)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_found_after_prefixes() {
        assert_eq!(last_stamp("banner 3\n0: 1764240000.250000000\ndone\n"), Some(1_764_240_000.25));
        assert_eq!(last_stamp("[rank-0] 1764240001.5\n"), Some(1_764_240_001.5));
        assert_eq!(last_stamp("7\n"), None);
    }

    /// The figures now, for a binary built elsewhere: `THESEUS_FOLLOW_END_BIN=DIR` (holding
    /// `theseus`), with the lab's env; prints them.
    #[test]
    #[ignore = "measures; run by hand with THESEUS_FOLLOW_END_BIN"]
    fn measure_now() {
        let bin = std::path::PathBuf::from(std::env::var("THESEUS_FOLLOW_END_BIN").unwrap());
        let python = std::path::PathBuf::from(std::env::var("THESEUS_PYTHON").unwrap_or_else(|_| "python3".into()));
        let runs = std::env::var("THESEUS_FOLLOW_END_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
        for m in measure(&bin, &python, runs).unwrap() {
            let mut v = m.values.clone();
            v.sort_by(f64::total_cmp);
            let shown: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
            println!("{}: [{}] {}", m.name, shown.join(", "), m.skipped.clone().unwrap_or_default());
            if let Some(floor) = &m.floor {
                let mut v = floor.values.clone();
                v.sort_by(f64::total_cmp);
                let shown: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
                println!("  floor ({}): [{}]", floor.what, shown.join(", "));
            }
        }
    }
}
