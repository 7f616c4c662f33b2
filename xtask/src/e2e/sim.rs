//! The simulator target: `theseus-kube-sim` as a child process serving HTTPS with its own CA
//! (2 nodes x 4 GPUs, the multi-team scheduler conf of the kind cluster, the helper image of the
//! broken host unpullable, RBAC on: theseus's user
//! holds exactly `docs/rbac.yaml`, then the namespaced Role alone), the `e2e` host in a temp
//! `HOME`, the scenarios, then the simulator stopped with SIGTERM (it kills its pod processes on
//! the way out). The passes differ in how theseus's user authenticates (a bearer token, a client
//! certificate as kind's kubeconfig has it, an exec credential plugin) and in whether an HTTP
//! proxy stands between (see [`PASSES`]). Also `cargo xtask sim`, which only starts the
//! simulator and waits.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::proxy::{self, Tinyproxy};
use super::{Flags, Target, UNPULLABLE_IMAGE, World, api::Api, build_binaries, passes, scenarios, scratch_dir};

/// Who the e2e's users are: theseus's user `researcher`, and `admin` (group `system:masters`)
/// for the checks (the harness and kubectl, over HTTPS with the simulator's CA).
const TOKENS: &str = "t-researcher,researcher,1\nt-admin,admin,0,\"system:masters\"\n";

/// How theseus's user `researcher` authenticates in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `token: t-researcher` in the kubeconfig.
    Token,
    /// `client-certificate-data` / `client-key-data` for `CN=researcher`, `O=e2e-researchers`,
    /// signed by the simulator's CA, as kind's kubeconfig carries its admin's.
    ClientCert,
    /// `users[].user.exec`: a script in the temp `HOME` that counts its runs and prints an
    /// ExecCredential with the researcher's token.
    ExecPlugin,
}

/// A pass's own check, given the world and the proxy (if any).
type PassCheck = fn(&World, Option<&Tinyproxy>) -> Result<()>;

/// One pass of `cargo xtask e2e --sim`.
struct Pass {
    rbac: Rbac,
    auth: Auth,
    /// The scenarios it runs (all when empty), before `extra`.
    only: &'static [u32],
    /// Every theseus command runs with `HTTPS_PROXY` pointing at a tinyproxy on loopback.
    proxy: bool,
    /// A check of its own after the scenarios (given the proxy, if any).
    extra: Option<PassCheck>,
    what: &'static str,
}

/// The passes, in order. The new ones run a subset: scenario 1 (helper pod, shipping through
/// exec, the gang job, followed logs, watches; through the proxy too) and, with client
/// certificates, 2 (status and cancel of a pending job) cover every kind of call the
/// credentials and the proxy must carry; the rest would repeat them at 10 s or more each.
const PASSES: [Pass; 5] = [
    Pass {
        rbac: Rbac::Documented,
        auth: Auth::Token,
        only: &[],
        proxy: false,
        extra: None,
        what: "with a bearer token and the documented Role and ClusterRole (docs/rbac.yaml)",
    },
    Pass {
        rbac: Rbac::NamespacedOnly,
        auth: Auth::Token,
        only: &[],
        proxy: false,
        extra: None,
        what: "with the namespaced Role alone",
    },
    Pass {
        rbac: Rbac::Documented,
        auth: Auth::ClientCert,
        only: &[1, 2],
        proxy: false,
        extra: None,
        what: "with a client certificate as kind's kubeconfig (client-certificate-data)",
    },
    Pass {
        rbac: Rbac::Documented,
        auth: Auth::ExecPlugin,
        only: &[1],
        proxy: false,
        extra: Some(passes::exec_plugin_runs_once_per_command),
        what: "with an exec credential plugin",
    },
    Pass {
        rbac: Rbac::Documented,
        auth: Auth::Token,
        only: &[1],
        proxy: true,
        extra: Some(passes::through_an_http_proxy),
        what: "through an HTTP proxy (tinyproxy), NO_PROXY honoured",
    },
];

/// The RBAC the simulator runs with in one pass of the scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rbac {
    /// No authorisation (an admin kubeconfig): `cargo xtask bench` and `cargo xtask sim`.
    Off,
    /// Exactly the Role and ClusterRole of `docs/rbac.yaml`, which the README documents.
    Documented,
    /// The namespaced Role of `docs/rbac.yaml` alone: no queue or node reads.
    NamespacedOnly,
}

impl Rbac {
    /// The YAML the simulator gets, `None` when off.
    fn objects(self, root: &Path) -> Result<Option<String>> {
        if self == Rbac::Off {
            return Ok(None);
        }
        let path = root.join("docs/rbac.yaml");
        let all = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Some(match self {
            Rbac::NamespacedOnly => {
                all.split("\n---\n").filter(|doc| !doc.contains("kind: Cluster")).collect::<Vec<_>>().join("\n---\n")
            }
            _ => all,
        }))
    }
}

/// `cargo xtask e2e --sim`: every scenario as a user holding exactly the documented Role and
/// ClusterRole, then once more with the namespaced Role alone (plan's capacity is unknown
/// then, and submit must still work), then the passes of the other credentials and the proxy
/// ([`PASSES`]). `--only` selects scenarios in every pass; the passes' own checks run unless
/// `--only` leaves a pass no scenario.
pub(crate) fn e2e(root: &Path, flags: &Flags) -> Result<()> {
    let started = Instant::now();
    let bin = build_binaries(root, true, false)?;
    let mut failed = Vec::new();
    // `--only` naming TPU scenarios alone skips the Kubernetes passes.
    let kube_wanted = flags.only.is_empty() || flags.only.iter().any(|n| !super::tpu::is_tpu(*n));
    for pass in PASSES.iter().filter(|_| kube_wanted) {
        let what = pass.what;
        let only: Vec<u32> = match (flags.only.as_slice(), pass.only) {
            ([], only) => only.to_vec(),
            (wanted, []) => wanted.to_vec(),
            (wanted, only) => only.iter().copied().filter(|n| wanted.contains(n)).collect(),
        };
        if !flags.only.is_empty() && only.is_empty() && pass.extra.is_none() {
            continue;
        }
        let t = Instant::now();
        let scratch = scratch_dir(root, "sim")?;
        // Through the proxy, the kubeconfig names the simulator by the host name: clients
        // (kubectl's Go) never proxy a loopback IP.
        let server_name = if pass.proxy { proxy::proxied_server_name() } else { None };
        if pass.proxy && server_name.is_none() {
            eprintln!("e2e: note: the host name resolves to no loopback address; the proxy pass uses 127.0.0.1");
        }
        let (mut sim, mut world) = start_world_with(root, &bin, &scratch, pass.rbac, pass.auth, server_name)?;
        let proxy = if pass.proxy { Some(Tinyproxy::start(&scratch)?) } else { None };
        if let Some(proxy) = &proxy {
            world.env.push(("HTTPS_PROXY".to_owned(), proxy.url.clone()));
        }
        eprintln!("e2e: simulator at {} {what}, scratch dir {}", sim.url, scratch.display());
        // A pass of the subset runs only its scenarios; `--only` asking for none of them runs none.
        // kubectl's checks (as the admin) run in the bearer-token passes; the others would
        // repeat them.
        let kubectl_server = world.kubectl_server.take();
        if pass.auth == Auth::Token && !pass.proxy {
            world.kubectl_server.clone_from(&kubectl_server);
        }
        let mut result = if only.is_empty() && !pass.only.is_empty() {
            Ok(())
        } else {
            scenarios::run_all(&world, &only, flags.require_kubectl)
        };
        world.kubectl_server = kubectl_server;
        if let Some(extra) = pass.extra {
            let checked = extra(&world, proxy.as_ref());
            match &checked {
                Ok(()) => eprintln!("e2e: [pass] PASS {what}"),
                Err(e) => eprintln!("e2e: [pass] FAIL {what}\n{e:#}"),
            }
            result = result.and(checked);
        }
        sim.stop();
        if result.is_ok() && !flags.keep {
            let _ = std::fs::remove_dir_all(&scratch);
        } else {
            eprintln!("e2e: kept {} (HOME, PVC, simulator root with pod logs)", scratch.display());
        }
        eprintln!("e2e: pass {what}: {:.1}s", t.elapsed().as_secs_f64());
        if let Err(e) = result {
            eprintln!("e2e: FAILED {what}: {e:#}");
            failed.push(what);
        }
    }
    // The Cloud TPU scenarios, in a simulator of their own.
    let t = Instant::now();
    if let Err(e) = super::tpu::run(root, &bin, &flags.only, flags.keep) {
        eprintln!("e2e: FAILED the TPU scenarios: {e:#}");
        failed.push("the TPU scenarios");
    }
    eprintln!("e2e: TPU scenarios: {:.1}s", t.elapsed().as_secs_f64());
    eprintln!("e2e --sim: {:.1}s including the build", started.elapsed().as_secs_f64());
    if !failed.is_empty() {
        bail!("e2e --sim failed {} of {} passes: {}", failed.len(), PASSES.len(), failed.join("; "));
    }
    Ok(())
}

/// Starts the simulator (2 nodes x 4 GPUs, the broken host's helper image unpullable) with its
/// root under `scratch`, and makes the world around it: a temp `HOME` with a kubeconfig and the
/// dispatch config, the PVC dir, and a code dir with the scenarios' job files.
/// `bin` is the dir holding `theseus` and `theseus-kube-sim`. Also used by `cargo xtask bench`.
pub(crate) fn start_world(root: &Path, bin: &Path, scratch: &Path, rbac: Rbac) -> Result<(SimProcess, World)> {
    start_world_with(root, bin, scratch, rbac, Auth::Token, None)
}

/// [`start_world`], with theseus's user authenticating by `auth`, and with `server_name`
/// (name, loopback IP) the simulator listening on that IP and the kubeconfig naming it so.
fn start_world_with(
    root: &Path,
    bin: &Path,
    scratch: &Path,
    rbac: Rbac,
    auth: Auth,
    server_name: Option<(String, std::net::IpAddr)>,
) -> Result<(SimProcess, World)> {
    let python = crate::python::ensure_venv(root)?;
    let (home, pvc, code) = (scratch.join("home"), scratch.join("pvc"), scratch.join("code"));
    for dir in [&home.join(".kube"), &pvc] {
        std::fs::create_dir_all(dir)?;
    }
    World::write_code(&code)?;
    let mut args: Vec<String> =
        ["--nodes", "2", "--gpus-per-node", "4", "--unpullable-image", UNPULLABLE_IMAGE].map(str::to_owned).to_vec();
    let admin_token = match rbac.objects(root)? {
        Some(objects) => {
            let (tokens, rbac_file) = (scratch.join("tokens.csv"), scratch.join("rbac.yaml"));
            std::fs::write(&tokens, TOKENS)?;
            std::fs::write(&rbac_file, objects)?;
            args.extend(["--token-auth-file".to_owned(), tokens.display().to_string()]);
            args.extend(["--rbac".to_owned(), rbac_file.display().to_string()]);
            Some("t-admin".to_owned())
        }
        None => None,
    };
    match auth {
        Auth::Token if admin_token.is_some() => args.extend(["--kubeconfig-token".into(), "t-researcher".into()]),
        Auth::Token => {}
        Auth::ClientCert => args.extend(["--kubeconfig-cert".into(), "researcher:e2e-researchers".into()]),
        Auth::ExecPlugin => {
            let plugin = passes::write_exec_plugin(&home, "t-researcher")?;
            args.extend(["--kubeconfig-exec".into(), plugin.display().to_string()]);
        }
    }
    if let Some((name, ip)) = &server_name {
        args.extend(["--listen".to_owned(), ip.to_string(), "--tls-name".to_owned(), name.clone()]);
        args.extend(["--kubeconfig-host".to_owned(), name.clone()]);
    }
    let ca = scratch.join("ca.pem");
    args.extend(["--ca-out".to_owned(), ca.display().to_string()]);
    // The scheduler of a cluster many teams share, as the kind cluster runs it.
    args.extend(["--scheduler-conf".to_owned(), root.join(super::kind::SCHEDULER_CONF).display().to_string()]);
    let access_log = scratch.join("access.log");
    args.extend(["--access-log".to_owned(), access_log.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sim =
        SimProcess::start(&bin.join("theseus-kube-sim"), &args, &scratch.join("sim"), &home.join(".kube/config"))?;
    let target = Target {
        namespace: "default".into(),
        queue: "default".into(),
        image: "theseus-e2e:local".into(),
        pvc_name: "theseus-e2e".into(),
        mount_path: pvc.display().to_string(),
        host_env: vec![("THESEUS_PYTHON".into(), python.display().to_string())],
    };
    std::fs::write(home.join(".theseus.yaml"), target.dispatch_config())?;
    let world = World {
        theseus: bin.join("theseus"),
        job_image: target.image.clone(),
        queue: target.queue.clone(),
        home,
        code,
        pvc,
        api: Api::Sim {
            addr: sim.url.trim_start_matches("https://").to_owned(),
            ca_pem: std::fs::read_to_string(&ca).with_context(|| format!("cannot read {}", ca.display()))?,
            token: admin_token.clone(),
        },
        namespace: target.namespace.clone(),
        kubectl_server: Some(sim.url.clone()),
        kubectl_token: admin_token,
        kubectl_ca: Some(ca),
        env: Vec::new(),
        access_log: Some(access_log),
    };
    Ok((sim, world))
}

/// `cargo xtask sim [simulator args...]`: becomes the simulator (exec), so Ctrl-C and SIGTERM
/// reach it directly. Writes a kubeconfig under the target dir unless `--kubeconfig-out` is given.
pub(crate) fn serve(root: &Path, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let bin = build_binaries(root, true, false)?;
    let mut cmd = Command::new(bin.join("theseus-kube-sim"));
    cmd.args(args);
    if !args.iter().any(|a| a == "--kubeconfig-out") {
        let dir = crate::target_dir(root).join("xtask-sim");
        std::fs::create_dir_all(&dir)?;
        cmd.arg("--kubeconfig-out").arg(dir.join("kubeconfig"));
    }
    let err = cmd.exec();
    Err(err).context("cannot start theseus-kube-sim")
}

/// A simulator child process, stopped on drop.
pub(crate) struct SimProcess {
    child: Option<Child>,
    pub(crate) url: String,
}

impl SimProcess {
    fn start(bin: &Path, args: &[&str], root: &Path, kubeconfig: &Path) -> Result<SimProcess> {
        let log = root.with_extension("log");
        std::fs::create_dir_all(root)?;
        let stderr = std::fs::File::create(&log)?;
        let mut child = Command::new(bin)
            .args(args)
            .arg("--root")
            .arg(root)
            .arg("--kubeconfig-out")
            .arg(kubeconfig)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        match first_line(&mut child) {
            Ok(url) => Ok(SimProcess { child: Some(child), url }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e.context(format!("the simulator did not start; see {}", log.display())))
            }
        }
    }

    /// SIGTERM (so it stops its pods), then wait.
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pid = child.id().to_string();
        let termed = Command::new("kill").args(["-TERM", &pid]).status().is_ok_and(|s| s.success());
        if !termed {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The URL the simulator prints first on stdout.
fn first_line(child: &mut Child) -> Result<String> {
    let stdout = child.stdout.take().context("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let url = line.trim().to_owned();
    if !url.starts_with("https://") {
        bail!("the simulator printed `{url}` instead of its URL");
    }
    Ok(url)
}
