//! `theseus-kube-sim`: the simulator as a process, for `cargo xtask sim` (manual poking with
//! `kubectl --server`) and `cargo xtask e2e --sim` (the real `theseus` binary against it).
//!
//! Prints the URL as the first line of stdout once it serves, then runs until SIGINT or
//! SIGTERM; on the way out it stops every pod process it started.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use theseus_kube_sim::{NodeConfig, Sim, SimConfig};

const USAGE: &str = "\
usage: theseus-kube-sim [options]
  --port P                 port on 127.0.0.1 (default: a free one)
  --nodes N                simulated nodes (default 2)
  --gpus-per-node G        GPUs per node (default 4)
  --gpu-resource NAME      extended resource of GPUs (default nvidia.com/gpu)
  --root DIR               pod sandboxes and logs (default: a temp dir, removed on exit)
  --kubeconfig-out PATH    write a kubeconfig pointing at the simulator
  --unpullable-image IMG   pods with this image stay in ImagePullBackOff (repeatable)
  --pass-env VAR           host variable that pod processes see (repeatable; PATH and LANG always)
  --scheduling-delay SECS  admit every job only this long after it is first seen";

fn main() -> ExitCode {
    let config = match parse(std::env::args().skip(1)) {
        Ok(Some(config)) => config,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

struct Args {
    sim: SimConfig,
    kubeconfig_out: Option<PathBuf>,
}

async fn serve(args: Args) -> Result<(), String> {
    let sim = Sim::start(args.sim).await.map_err(|e| error_chain(&e))?;
    let url = sim.url();
    if let Some(path) = &args.kubeconfig_out {
        std::fs::write(path, kubeconfig(&url))
            .map_err(|e| format!("failed to write the kubeconfig `{}`: {e}", path.display()))?;
        eprintln!("theseus-kube-sim: wrote a kubeconfig: export KUBECONFIG={}", path.display());
    }
    eprintln!(
        "theseus-kube-sim: serving {url}; pods run as local processes under {}\n\
         theseus-kube-sim: try `kubectl --server {url} get vcjob,pods -A`; Ctrl-C stops the simulator and its pods",
        sim.root().display()
    );
    println!("{url}");
    shutdown_signal().await;
    eprintln!("theseus-kube-sim: stopping");
    drop(sim);
    Ok(())
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

/// A kubeconfig with one cluster, one user without credentials and one current context.
fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: theseus-sim\n  cluster:\n    server: {server}\n\
         users:\n- name: theseus-sim\n  user: {{}}\ncontexts:\n- name: theseus-sim\n  context:\n    \
         cluster: theseus-sim\n    user: theseus-sim\n    namespace: default\ncurrent-context: theseus-sim\n"
    )
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    message
}

/// `Ok(None)` for `--help`.
fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut sim = SimConfig::default();
    let (mut nodes, mut gpus) = (2u32, 4u32);
    let mut kubeconfig_out = None;
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        let mut value = || args.next().ok_or_else(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--port" => sim.port = number(&flag, &value()?)?,
            "--nodes" => nodes = number(&flag, &value()?)?,
            "--gpus-per-node" => gpus = number(&flag, &value()?)?,
            "--gpu-resource" => sim.gpu_resource = value()?,
            "--root" => sim.root = Some(PathBuf::from(value()?)),
            "--kubeconfig-out" => kubeconfig_out = Some(PathBuf::from(value()?)),
            "--unpullable-image" => {
                sim.unpullable_images.insert(value()?);
            }
            "--pass-env" => sim.host_env_passthrough.push(value()?),
            "--scheduling-delay" => {
                let secs: f64 = value()?.parse().map_err(|_| format!("`{flag}` needs seconds"))?;
                sim.scheduling_delay = Some(Duration::from_secs_f64(secs.max(0.0)));
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    sim.nodes = (0..nodes).map(|i| NodeConfig::new(&format!("sim-node-{i}"), gpus)).collect();
    Ok(Some(Args { sim, kubeconfig_out }))
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| format!("`{flag}` needs a number, not `{value}`"))
}
