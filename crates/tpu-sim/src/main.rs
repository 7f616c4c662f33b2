//! `theseus-tpu-sim`: the TPU API simulator as a process, for `cargo xtask e2e --sim` (the real
//! `theseus` binary against it) and manual poking with curl. Prints one JSON line on stdout once
//! it serves (endpoint, CA file, token URI, metadata host, ssh proxy), then runs until SIGINT or
//! SIGTERM; on the way out it stops every worker and removes every namespace it made.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use theseus_tpu_sim::{Sim, SimConfig};

const USAGE: &str = "\
usage: theseus-tpu-sim --root DIR [options]
  --root DIR                 CA file, workers' homes and logs (required)
  --port P                   HTTPS port on 127.0.0.1 (default 0: a free one)
  --zones Z1,Z2,...          zones served (default: us-central1-a, us-central2-b, us-east5-a, ...)
  --project P                project the host's metadata server names (default sim-project)
  --create-seconds S         how long a node is CREATING (default 3)
  --delete-seconds S         how long a node is DELETING (default 0.5)
  --preempt-grace S          SIGTERM to SIGKILL on preemption (default 2)
  --workers-per-host auto|N  workers per node: auto (the accelerator type's) or at most N
  --latency-ms N             added to every API call (default 30)
  --token-seconds N          expires_in of issued tokens (default 3599, as Google's)
  --flaky SEED               about one API read in twenty answers 503 UNAVAILABLE (seeded)
  --no-workers               no network namespaces or sshd (nodes still go READY)";

#[tokio::main]
async fn main() -> ExitCode {
    let config = match parse(std::env::args().skip(1)) {
        Ok(Some(config)) => config,
        Ok(None) => {
            eprintln!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("theseus-tpu-sim: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let sim = match Sim::start(config).await {
        Ok(sim) => sim,
        Err(err) => {
            let mut message = err.to_string();
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("theseus-tpu-sim: {message}");
            return ExitCode::FAILURE;
        }
    };
    match serde_json::to_string(sim.info()) {
        Ok(line) => {
            use std::io::Write as _;
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        Err(err) => eprintln!("theseus-tpu-sim: {err}"),
    }
    shutdown_signal().await;
    eprintln!("theseus-tpu-sim: stopping");
    sim.shutdown().await;
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn seconds(flag: &str, value: &str) -> Result<Duration, String> {
    match value.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("`{flag}` needs seconds between 0 and 86400, not `{value}`")),
    }
}

/// `Ok(None)` for `--help`.
fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<SimConfig>, String> {
    let mut config = SimConfig::default();
    let mut root = None;
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        if flag == "--no-workers" {
            config.workers = false;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("`{flag}` needs a value"))?;
        match flag.as_str() {
            "--root" => root = Some(PathBuf::from(value)),
            "--port" => {
                config.port = value.parse().map_err(|_| format!("`--port` needs a port number, not `{value}`"))?
            }
            "--zones" => {
                config.zones = value.split(',').map(str::trim).filter(|z| !z.is_empty()).map(str::to_owned).collect();
                if config.zones.is_empty() {
                    return Err("`--zones` needs at least one zone".into());
                }
            }
            "--project" => config.project = value,
            "--latency-ms" => {
                let ms = value.parse().map_err(|_| format!("`--latency-ms` needs a number, not `{value}`"))?;
                config.latency = Duration::from_millis(ms);
            }
            "--token-seconds" => {
                let secs = value.parse().map_err(|_| format!("`--token-seconds` needs a number, not `{value}`"))?;
                config.token_lifetime = Duration::from_secs(secs);
            }
            "--flaky" => {
                let seed = value.parse().map_err(|_| format!("`--flaky` needs a number (the seed), not `{value}`"))?;
                config.flaky_seed = Some(seed);
            }
            "--create-seconds" => config.create_seconds = seconds(&flag, &value)?,
            "--delete-seconds" => config.delete_seconds = seconds(&flag, &value)?,
            "--preempt-grace" => config.preempt_grace = seconds(&flag, &value)?,
            "--workers-per-host" => {
                config.max_workers =
                    match value.as_str() {
                        "auto" => None,
                        n => Some(n.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                            format!("`--workers-per-host` is `auto` or a positive number, not `{n}`")
                        })?),
                    }
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    config.root = root.ok_or("`--root DIR` is required")?;
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Option<SimConfig>, String> {
        parse(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn flags_parse_and_bad_ones_name_themselves() {
        let c = args(&["--root", "/r", "--zones", "a-b-c,d-e-f", "--create-seconds", "0.5", "--workers-per-host", "2"])
            .unwrap()
            .unwrap();
        assert_eq!((c.zones.len(), c.create_seconds, c.max_workers), (2, Duration::from_millis(500), Some(2)));
        let t = args(&["--root", "/r", "--token-seconds", "20", "--flaky", "3", "--latency-ms", "0"]).unwrap().unwrap();
        assert_eq!((t.token_lifetime, t.flaky_seed, t.latency), (Duration::from_secs(20), Some(3), Duration::ZERO));
        assert!(args(&["--zones", "x"]).unwrap_err().contains("--root"));
        assert!(args(&["--root", "/r", "--create-seconds", "-1"]).unwrap_err().contains("--create-seconds"));
        assert!(args(&["--root", "/r", "--workers-per-host", "0"]).unwrap_err().contains("--workers-per-host"));
        assert!(args(&["--root", "/r", "--bogus", "1"]).unwrap_err().contains("--bogus"));
        assert!(args(&["--help"]).unwrap().is_none());
    }
}
