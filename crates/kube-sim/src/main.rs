//! `theseus-kube-sim`: the simulator as a process, for `cargo xtask sim` (manual poking with
//! `kubectl --server`) and `cargo xtask e2e --sim` (the real `theseus` binary against it).
//!
//! Serves HTTPS with a CA it makes at start (see the library's docs). Prints the URL as the
//! first line of stdout once it serves, then runs until SIGINT or
//! SIGTERM; on the way out it stops every pod process it started.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use theseus_kube_sim::{NodeConfig, NodeTaint, Outage, Sim, SimConfig};

const USAGE: &str = "\
usage: theseus-kube-sim [options]
  --port P                 port to listen on (default: a free one)
  --listen IP              address to listen on (default 127.0.0.1; keep it a loopback one)
  --tls-name NAME          a DNS name or IP the serving certificate also holds (repeatable)
  --nodes N                simulated nodes (default 2)
  --gpus-per-node G        GPUs per node (default 4)
  --gpu-resource NAME      extended resource of GPUs (default nvidia.com/gpu)
  --node-label NODE:KEY=VALUE
                           a label on node NODE (sim-node-0, sim-node-1, ...), for nodeSelector
                           and node affinity (repeatable)
  --node-taint NODE:KEY[=VALUE]:EFFECT
                           a taint on node NODE; EFFECT is NoSchedule, PreferNoSchedule or
                           NoExecute (repeatable)
  --namespace NAME         a namespace that exists from the start (repeatable; default, kube-system,
                           kube-public and kube-node-lease always do; objects in any other
                           namespace are refused with 404 until it is created)
  --scheduler-conf FILE    the Volcano scheduler's volcano-scheduler.conf (YAML `actions:` and `tiers:`;
                           default: the v1.15.1 chart's, `enqueue, allocate, backfill`; shared
                           clusters add `preempt, reclaim`)
  --root DIR               pod sandboxes and logs (default: a temp dir, removed on exit)
  --kubeconfig-out PATH    write a kubeconfig pointing at the simulator (server, certificate-authority-data)
  --ca-out PATH            write the CA certificate (PEM), for `kubectl --certificate-authority`
  --unpullable-image IMG   pods with this image stay in ImagePullBackOff (repeatable)
  --pass-env VAR           host variable that pod processes see (repeatable; PATH and LANG always)
  --scheduling-delay SECS  admit every job only this long after it is first seen
  --cut-log-streams-after SECS
                           reset every followed pod log stream this long after it opens
  --outage-after SECS      start an API outage this long after serving (default: none)
  --outage-for SECS        how long the outage lasts (default: until stopped)
  --outage-kind KIND       refuse (close connections) or hang (accept, never answer; default)
  --hang                   hang from the start: accept connections and never answer
  --token-auth-file FILE   bearer tokens (`token,user,uid[,\"groups\"]` lines); with --rbac,
                           every request needs one (401 without), group system:masters may do all
  --rbac FILE              Role/ClusterRole/RoleBinding/ClusterRoleBinding YAML: what each user may do
  --kubeconfig-token T     the token the --kubeconfig-out kubeconfig carries (default: kind's admin
                           certificate, CN kubernetes-admin, O system:masters)
  --kubeconfig-cert USER[:GROUP]
                           the kubeconfig carries a client certificate (CN USER, O GROUP) signed by the CA,
                           as kind's (client-certificate-data, client-key-data)
  --kubeconfig-exec CMD    the kubeconfig's user runs the exec credential plugin CMD (client.authentication.k8s.io/v1)
  --kubeconfig-host NAME   the kubeconfig's server is https://NAME:PORT (default: the listen address)
  --kubeconfig-namespace NS
                           the context's namespace (default: default)
  --access-log PATH        append `METHOD PATH?QUERY` of every request served to PATH (flushed
                           every 100 ms and on exit), e.g. to count a command's API requests";

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
    ca_out: Option<PathBuf>,
    user: KubeconfigUser,
    namespace: String,
    kubeconfig_host: Option<String>,
    faults: FaultArgs,
    access_log: Option<PathBuf>,
}

/// The credentials the written kubeconfig carries.
#[derive(Debug, PartialEq, Eq)]
enum KubeconfigUser {
    Token(String),
    /// A client certificate for (user, group).
    Cert(String, Option<String>),
    /// An exec credential plugin command.
    Exec(String),
}

/// Faults asked for on the command line.
#[derive(Debug, Default)]
struct FaultArgs {
    cut_logs_after: Option<Duration>,
    outage_after: Option<Duration>,
    outage_for: Option<Duration>,
    outage_kind: Option<Outage>,
}

async fn serve(args: Args) -> Result<(), String> {
    let sim = Sim::start(args.sim).await.map_err(|e| error_chain(&e))?;
    let url = sim.url();
    if let Some(path) = &args.ca_out {
        std::fs::write(path, sim.ca_pem())
            .map_err(|e| format!("failed to write the CA certificate `{}`: {e}", path.display()))?;
    }
    if let Some(path) = &args.kubeconfig_out {
        let user = match &args.user {
            KubeconfigUser::Token(token) => format!("{{token: {token:?}}}"),
            KubeconfigUser::Cert(user, group) => theseus_kube_sim::kubeconfig_cert_user(
                &sim.issue_client_cert(user, group.as_deref()).map_err(|e| error_chain(&e))?,
            ),
            KubeconfigUser::Exec(command) => format!(
                "{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: {command:?}, interactiveMode: Never}}}}"
            ),
        };
        let text = match &args.kubeconfig_host {
            Some(host) => theseus_kube_sim::kubeconfig_text(
                &format!("https://{host}:{}", sim.addr().port()),
                &sim.ca_pem(),
                &user,
                &args.namespace,
            ),
            None => sim.kubeconfig(&user, &args.namespace),
        };
        std::fs::write(path, text).map_err(|e| format!("failed to write the kubeconfig `{}`: {e}", path.display()))?;
        eprintln!("theseus-kube-sim: wrote a kubeconfig: export KUBECONFIG={}", path.display());
    }
    eprintln!(
        "theseus-kube-sim: serving {url}; pods run as local processes under {}\n\
         theseus-kube-sim: try `kubectl get vcjob,pods -A` with that kubeconfig; Ctrl-C stops the simulator and its pods",
        sim.root().display()
    );
    println!("{url}");
    let faults = sim.faults();
    faults.cut_log_streams_after(args.faults.cut_logs_after);
    if let Some(after) = args.faults.outage_after {
        let kind = args.faults.outage_kind.unwrap_or(Outage::Hang);
        let duration = args.faults.outage_for;
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            eprintln!("theseus-kube-sim: API outage ({kind:?}) starts");
            faults.outage(kind, duration);
        });
    }
    let log = match &args.access_log {
        Some(path) => Some(AccessLog::open(path)?),
        None => None,
    };
    let flushing = log.clone().map(|log| {
        let faults = sim.faults();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                log.flush(&faults);
            }
        })
    });
    shutdown_signal().await;
    eprintln!("theseus-kube-sim: stopping");
    if let (Some(task), Some(log)) = (flushing, &log) {
        task.abort();
        log.flush(&sim.faults());
    }
    drop(sim);
    Ok(())
}

/// `--access-log`: every request served, appended as `METHOD PATH?QUERY` lines.
#[derive(Clone)]
struct AccessLog {
    file: std::sync::Arc<std::sync::Mutex<(std::fs::File, usize)>>,
}

impl AccessLog {
    fn open(path: &std::path::Path) -> Result<AccessLog, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("failed to open the access log `{}`: {e}", path.display()))?;
        Ok(AccessLog { file: std::sync::Arc::new(std::sync::Mutex::new((file, 0))) })
    }

    /// Appends the requests served since the last flush.
    fn flush(&self, faults: &theseus_kube_sim::Faults) {
        use std::io::Write as _;
        let mut guard = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let (file, written) = &mut *guard;
        let new = faults.requests_since(*written);
        let mut text = String::new();
        for (method, path) in &new {
            text.push_str(&format!("{method} {path}\n"));
        }
        if !text.is_empty() && file.write_all(text.as_bytes()).is_ok() {
            *written += new.len();
        }
    }
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
    let (mut kubeconfig_out, mut ca_out) = (None, None);
    // By default kind's: a client certificate of `kubernetes-admin` in `system:masters`.
    let mut user = KubeconfigUser::Cert("kubernetes-admin".into(), Some("system:masters".into()));
    let mut namespace = "default".to_owned();
    let mut kubeconfig_host = None;
    let (mut token_file, mut rbac_file) = (None, None);
    let mut faults = FaultArgs::default();
    let mut access_log = None;
    let (mut node_labels, mut node_taints) = (Vec::new(), Vec::new());
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
            "--node-label" => node_labels.push(value()?),
            "--node-taint" => node_taints.push(value()?),
            "--namespace" => sim.namespaces.push(value()?),
            "--root" => sim.root = Some(PathBuf::from(value()?)),
            "--scheduler-conf" => {
                let path = value()?;
                let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read `{path}`: {e}"))?;
                sim.scheduler = theseus_kube_sim::SchedulerConf::parse(&text).map_err(|e| format!("`{path}`: {e}"))?;
            }
            "--kubeconfig-out" => kubeconfig_out = Some(PathBuf::from(value()?)),
            "--ca-out" => ca_out = Some(PathBuf::from(value()?)),
            "--kubeconfig-token" => user = KubeconfigUser::Token(value()?),
            "--kubeconfig-cert" => {
                let value = value()?;
                let (name, group) = match value.split_once(':') {
                    Some((name, group)) => (name.to_owned(), Some(group.to_owned())),
                    None => (value, None),
                };
                user = KubeconfigUser::Cert(name, group);
            }
            "--kubeconfig-exec" => user = KubeconfigUser::Exec(value()?),
            "--kubeconfig-namespace" => namespace = value()?,
            "--kubeconfig-host" => kubeconfig_host = Some(value()?),
            "--listen" => sim.listen = value()?.parse().map_err(|_| format!("`{flag}` needs an IP address"))?,
            "--tls-name" => sim.tls_names.push(value()?),
            "--token-auth-file" => token_file = Some(PathBuf::from(value()?)),
            "--rbac" => rbac_file = Some(PathBuf::from(value()?)),
            "--unpullable-image" => {
                sim.unpullable_images.insert(value()?);
            }
            "--access-log" => access_log = Some(PathBuf::from(value()?)),
            "--pass-env" => sim.host_env_passthrough.push(value()?),
            "--scheduling-delay" => sim.scheduling_delay = Some(seconds(&flag, &value()?)?),
            "--cut-log-streams-after" => faults.cut_logs_after = Some(seconds(&flag, &value()?)?),
            "--outage-after" => faults.outage_after = Some(seconds(&flag, &value()?)?),
            "--outage-for" => faults.outage_for = Some(seconds(&flag, &value()?)?),
            "--outage-kind" => {
                faults.outage_kind = Some(match value()?.as_str() {
                    "refuse" => Outage::Refuse,
                    "hang" => Outage::Hang,
                    other => return Err(format!("`{flag}` is refuse or hang, not `{other}`")),
                });
            }
            "--hang" => {
                faults.outage_after = Some(Duration::ZERO);
                faults.outage_kind = Some(Outage::Hang);
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    sim.nodes = (0..nodes).map(|i| NodeConfig::new(&format!("sim-node-{i}"), gpus)).collect();
    for text in &node_labels {
        let (node, label) = on_node(&mut sim.nodes, "--node-label", text)?;
        let (key, value) = label
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("`--node-label {text}` needs NODE:KEY=VALUE"))?;
        node.labels.insert(key.to_owned(), value.to_owned());
    }
    for text in &node_taints {
        let (node, taint) = on_node(&mut sim.nodes, "--node-taint", text)?;
        node.taints.push(NodeTaint::parse(taint).map_err(|e| format!("`--node-taint {text}`: {e}"))?);
    }
    match (token_file, rbac_file) {
        (None, None) => {}
        (Some(tokens), Some(rbac)) => {
            let read =
                |p: &PathBuf| std::fs::read_to_string(p).map_err(|e| format!("cannot read `{}`: {e}", p.display()));
            sim.authz = Some(theseus_kube_sim::Authz::from_files(&read(&tokens)?, &read(&rbac)?)?);
        }
        _ => return Err("`--token-auth-file` and `--rbac` go together".into()),
    }
    Ok(Some(Args { sim, kubeconfig_out, ca_out, user, namespace, kubeconfig_host, faults, access_log }))
}

/// The node a `NODE:REST` flag value names, and the rest.
fn on_node<'a>(
    nodes: &'a mut [NodeConfig],
    flag: &str,
    text: &'a str,
) -> Result<(&'a mut NodeConfig, &'a str), String> {
    let (name, rest) = text.split_once(':').ok_or_else(|| format!("`{flag} {text}` needs NODE: first"))?;
    let known: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    nodes
        .iter_mut()
        .find(|n| n.name == name)
        .map(|n| (n, rest))
        .ok_or_else(|| format!("`{flag} {text}`: no node `{name}` (the nodes are {}; see --nodes)", known.join(", ")))
}

/// Seconds: finite, not negative, at most a day.
fn seconds(flag: &str, value: &str) -> Result<Duration, String> {
    match value.parse::<f64>() {
        Ok(secs) if secs.is_finite() && (0.0..=86_400.0).contains(&secs) => Ok(Duration::from_secs_f64(secs)),
        _ => Err(format!("`{flag}` needs seconds between 0 and 86400, not `{value}`")),
    }
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| format!("`{flag}` needs a number, not `{value}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Option<Args>, String> {
        parse(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn scheduler_conf_is_read_from_the_file_and_bad_ones_name_it() {
        let dir = std::env::temp_dir().join(format!("kube-sim-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.conf");
        std::fs::write(&good, "# a comment\nactions: \"enqueue, allocate, preempt, reclaim, backfill\"\n").unwrap();
        let parsed = args(&["--scheduler-conf", good.to_str().unwrap()]).unwrap().unwrap();
        assert_eq!(parsed.sim.scheduler.actions, ["enqueue", "allocate", "preempt", "reclaim", "backfill"]);
        assert_eq!(args(&[]).unwrap().unwrap().sim.scheduler, theseus_kube_sim::SchedulerConf::default());
        let bad = dir.join("bad.conf");
        std::fs::write(&bad, "actions: \"allocate, shuffle\"\n").unwrap();
        let err = args(&["--scheduler-conf", bad.to_str().unwrap()]).err().unwrap();
        assert!(err.contains("bad.conf") && err.contains("`shuffle`"), "{err}");
        let err = args(&["--scheduler-conf", "/nonexistent/x.conf"]).err().unwrap();
        assert!(err.contains("cannot read `/nonexistent/x.conf`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fault_flags_parse() {
        let a = args(&[
            "--cut-log-streams-after",
            "1.5",
            "--outage-after",
            "10",
            "--outage-for",
            "60",
            "--outage-kind",
            "refuse",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(a.faults.cut_logs_after, Some(Duration::from_millis(1500)));
        assert_eq!(a.faults.outage_after, Some(Duration::from_secs(10)));
        assert_eq!(a.faults.outage_for, Some(Duration::from_secs(60)));
        assert_eq!(a.faults.outage_kind, Some(Outage::Refuse));
        let hang = args(&["--hang"]).unwrap().unwrap();
        assert_eq!((hang.faults.outage_after, hang.faults.outage_kind), (Some(Duration::ZERO), Some(Outage::Hang)));
        for bad in [&["--outage-kind", "melt"][..], &["--outage-for", "inf"], &["--cut-log-streams-after", "-1"]] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn kubeconfig_user_flags_parse() {
        let default = args(&[]).unwrap().unwrap();
        assert_eq!(default.user, KubeconfigUser::Cert("kubernetes-admin".into(), Some("system:masters".into())));
        let cert = args(&["--kubeconfig-cert", "ops:sre"]).unwrap().unwrap();
        assert_eq!(cert.user, KubeconfigUser::Cert("ops".into(), Some("sre".into())));
        let plain = args(&["--kubeconfig-cert", "researcher"]).unwrap().unwrap();
        assert_eq!(plain.user, KubeconfigUser::Cert("researcher".into(), None));
        let exec = args(&["--kubeconfig-exec", "/h/cred.sh", "--kubeconfig-namespace", "ml"]).unwrap().unwrap();
        let made = args(&["--namespace", "ml", "--namespace", "team-a"]).unwrap().unwrap();
        assert_eq!(made.sim.namespaces, ["ml", "team-a"]);
        assert_eq!((exec.user, exec.namespace.as_str()), (KubeconfigUser::Exec("/h/cred.sh".into()), "ml"));
    }

    #[test]
    fn node_label_and_taint_flags_parse() {
        let a = args(&[
            "--node-label",
            "sim-node-1:gpu=a100",
            "--node-taint",
            "sim-node-1:dedicated=ml:NoSchedule",
            "--node-taint",
            "sim-node-0:rdma:NoExecute",
        ])
        .unwrap()
        .unwrap();
        let nodes = &a.sim.nodes;
        assert_eq!(nodes[1].labels.get("gpu").map(String::as_str), Some("a100"));
        assert_eq!(nodes[1].taints, [NodeTaint::parse("dedicated=ml:NoSchedule").unwrap()]);
        assert_eq!(nodes[1].taints[0].value, "ml");
        assert_eq!((nodes[0].taints[0].key.as_str(), nodes[0].taints[0].value.as_str()), ("rdma", ""));
        for bad in [
            &["--node-label", "sim-node-9:gpu=a100"][..],
            &["--node-label", "sim-node-0:gpu"],
            &["--node-taint", "sim-node-0:gpu=a100"],
            &["--node-taint", "sim-node-0:gpu=a100:Sometimes"],
        ] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
    }
}
