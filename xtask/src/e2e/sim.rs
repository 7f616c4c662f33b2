//! The simulator target: `theseus-kube-sim` as a child process (2 nodes x 4 GPUs, the helper
//! image of the broken host unpullable, bearer tokens and RBAC on: theseus's user holds exactly
//! `docs/rbac.yaml`, then the namespaced Role alone), the `e2e` host in a temp `HOME`, the
//! scenarios, then the simulator stopped with SIGTERM (it kills its pod processes on the way out).
//! Also `cargo xtask sim`, which only starts the simulator and waits.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::{Flags, Target, UNPULLABLE_IMAGE, World, api::Api, build_binaries, scenarios, scratch_dir};

/// Who the e2e's users are: theseus's user `researcher`, and `admin` (group `system:masters`)
/// for the checks.
const TOKENS: &str = "t-researcher,researcher,1\nt-admin,admin,0,\"system:masters\"\n";

/// kubectl sends no bearer token over plain HTTP, so its checks run as the anonymous user,
/// whom the harness (not theseus) lets read everything and create (its `--dry-run=server`
/// apply stores nothing).
const ANONYMOUS_READER: &str = "
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-anonymous-reader}
rules: [{apiGroups: ['*'], resources: ['*'], verbs: [get, list, create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-anonymous-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-anonymous-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: 'system:anonymous'}]
";

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
/// then, and submit must still work).
pub(crate) fn e2e(root: &Path, flags: &Flags) -> Result<()> {
    let started = Instant::now();
    let bin = build_binaries(root, true, false)?;
    for (rbac, what) in [
        (Rbac::Documented, "with the documented Role and ClusterRole (docs/rbac.yaml)"),
        (Rbac::NamespacedOnly, "with the namespaced Role alone"),
    ] {
        let scratch = scratch_dir(root, "sim")?;
        let (mut sim, world) = start_world(root, &bin, &scratch, rbac)?;
        eprintln!("e2e: simulator at {} {what}, scratch dir {}", sim.url, scratch.display());
        let result = scenarios::run_all(&world, &flags.only, flags.require_kubectl);
        sim.stop();
        if result.is_ok() && !flags.keep {
            let _ = std::fs::remove_dir_all(&scratch);
        } else {
            eprintln!("e2e: kept {} (HOME, PVC, simulator root with pod logs)", scratch.display());
        }
        result.with_context(|| format!("e2e --sim {what}"))?;
    }
    eprintln!("e2e --sim: {:.1}s including the build", started.elapsed().as_secs_f64());
    Ok(())
}

/// Starts the simulator (2 nodes x 4 GPUs, the broken host's helper image unpullable) with its
/// root under `scratch`, and makes the world around it: a temp `HOME` with a kubeconfig and the
/// dispatch config, the PVC dir, and a code dir with the scenarios' job files.
/// `bin` is the dir holding `theseus` and `theseus-kube-sim`. Also used by `cargo xtask bench`.
pub(crate) fn start_world(root: &Path, bin: &Path, scratch: &Path, rbac: Rbac) -> Result<(SimProcess, World)> {
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
            std::fs::write(&rbac_file, format!("{objects}\n---{ANONYMOUS_READER}"))?;
            args.extend(["--token-auth-file".to_owned(), tokens.display().to_string()]);
            args.extend(["--rbac".to_owned(), rbac_file.display().to_string()]);
            args.extend(["--kubeconfig-token".to_owned(), "t-researcher".to_owned()]);
            Some("t-admin".to_owned())
        }
        None => None,
    };
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
        home,
        code,
        pvc,
        api: Api::Sim { addr: sim.url.trim_start_matches("http://").to_owned(), token: admin_token.clone() },
        namespace: target.namespace.clone(),
        kubectl_server: Some(sim.url.clone()),
        kubectl_token: None,
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
    if !url.starts_with("http://") {
        bail!("the simulator printed `{url}` instead of its URL");
    }
    Ok(url)
}
