//! Load: many clients at once. 200 concurrent `submit`s on the local host and 50 against the
//! simulator, each its own job name, all started before any ends. Every one must succeed, none
//! may see "database is locked", and the ledger must hold each once with a distinct run id and
//! run dir (and, on the local host, every job must have run exactly once).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::hosts;
use crate::matrix::{Case, Verdict};
use crate::volcano;

/// Starts every command, then waits for all; returns (exit code, stderr) per command.
fn all_at_once(commands: Vec<Command>, bound: Duration) -> Result<Vec<(Option<i32>, String)>, String> {
    let mut children: Vec<Child> = Vec::new();
    for mut cmd in commands {
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        children.push(cmd.spawn().map_err(|e| format!("cannot start a client: {e}"))?);
    }
    let deadline = Instant::now() + bound;
    let mut out = Vec::new();
    for mut child in children {
        let mut stderr = child.stderr.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
            text
        });
        let code = loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                break status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        out.push((code, reader.join().unwrap_or_default()));
    }
    Ok(out)
}

/// What went wrong with a load run, from the clients' ends and the ledger.
fn judge(ends: &[(Option<i32>, String)], rows: &Value, clients: usize) -> Vec<String> {
    let mut problems = Vec::new();
    let failed: Vec<&(Option<i32>, String)> = ends.iter().filter(|(code, _)| *code != Some(0)).collect();
    if let Some((code, stderr)) = failed.first() {
        problems.push(format!(
            "{} of {clients} submits failed; the first (exit {code:?}): {}",
            failed.len(),
            stderr.lines().find(|l| l.starts_with("error:")).unwrap_or(stderr.trim())
        ));
    }
    let locked = ends.iter().filter(|(_, e)| e.contains("database is locked")).count();
    if locked > 0 {
        problems.push(format!("{locked} clients saw \"database is locked\""));
    }
    let rows = rows.as_array().cloned().unwrap_or_default();
    let mut ids = BTreeMap::new();
    for row in &rows {
        *ids.entry(row["identity"]["run_id"].as_str().unwrap_or("").to_owned()).or_insert(0) += 1;
    }
    if rows.len() != clients || ids.len() != clients {
        problems.push(format!(
            "the ledger holds {} runs with {} distinct run ids, not {clients}",
            rows.len(),
            ids.len()
        ));
    }
    let dirs: std::collections::BTreeSet<String> = rows
        .iter()
        .filter_map(|r| {
            let data = &r["handle"]["data"];
            data["work_dir"].as_str().or(data["run_dir"].as_str()).map(str::to_owned)
        })
        .collect();
    if !rows.is_empty() && dirs.len() != rows.len() {
        problems.push(format!("{} runs share {} run dirs", rows.len(), dirs.len()));
    }
    problems
}

fn case(step: &str, problems: Vec<String>, started: Instant) -> Case {
    Case {
        flow: "load",
        step: step.to_owned(),
        n: 1,
        of: 1,
        fault: "concurrency".into(),
        verdict: Verdict::Ok,
        left: problems,
        seconds: started.elapsed().as_secs_f64(),
    }
}

fn ledger_rows(list: &crate::proc::Ran) -> Value {
    serde_json::from_str(&list.stdout).unwrap_or(Value::Null)
}

/// 200 submits at once on the local host, then every job must have run once.
pub(crate) fn local(theseus: &Path, clients: usize) -> Result<Case, String> {
    let started = Instant::now();
    let world = hosts::World::local(theseus)?;
    let commands = (0..clients)
        .map(|i| world.command(&["submit", &format!("load-{i}"), "quick.yaml", "--code", ".", "--host", "local"]))
        .collect();
    let ends = all_at_once(commands, Duration::from_secs(300))?;
    let list =
        world.run(&["list", "--limit", "100000", "--no-refresh", "--output", "json"], Duration::from_secs(60))?;
    let mut problems = judge(&ends, &ledger_rows(&list), clients);
    // Every job runs about a second: each must have started exactly once.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let marks = world.marks();
        let twice = marks.values().filter(|&&n| n > 1).count();
        if marks.len() >= clients || Instant::now() > deadline {
            if marks.len() != clients || twice > 0 {
                problems.push(format!("{} runs started ({twice} more than once), not {clients}", marks.len()));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(case(&format!("{clients} local submits at once"), problems, started))
}

/// 50 submits at once against the simulator.
pub(crate) fn sim(theseus: &Path, clients: usize) -> Result<Case, String> {
    let started = Instant::now();
    let world = volcano::World::start(theseus)?;
    let commands = (0..clients).map(|i| world.command(&["submit", &format!("load-{i}"), "quick.yaml"])).collect();
    let ends = all_at_once(commands, Duration::from_secs(600))?;
    let list =
        world.run(&["list", "--limit", "100000", "--no-refresh", "--output", "json"], Duration::from_secs(60))?;
    let rows = ledger_rows(&list);
    let mut problems = judge(&ends, &rows, clients);
    let jobs = world.vcjobs_of_runs();
    if jobs != clients {
        problems.push(format!("{jobs} vcjobs in the cluster for {clients} runs"));
    }
    Ok(case(&format!("{clients} simulator submits at once"), problems, started))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(run: &str, dir: &str) -> Value {
        serde_json::json!({"identity": {"run_id": run}, "handle": {"data": {"work_dir": dir}}})
    }

    #[test]
    fn a_lost_run_a_shared_dir_and_a_locked_ledger_are_each_found() {
        let ok = vec![(Some(0), String::new()); 2];
        assert!(judge(&ok, &Value::Array(vec![row("a", "/a"), row("b", "/b")]), 2).is_empty());
        let problems = judge(&ok, &Value::Array(vec![row("a", "/a")]), 2);
        assert!(problems[0].contains("holds 1 runs"), "{problems:?}");
        let problems = judge(&ok, &Value::Array(vec![row("a", "/a"), row("b", "/a")]), 2);
        assert!(problems[0].contains("share 1 run dirs"), "{problems:?}");
        let locked = vec![(Some(0), String::new()), (Some(2), "error: database is locked\n".to_owned())];
        let problems = judge(&locked, &Value::Array(vec![row("a", "/a"), row("b", "/b")]), 2);
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
