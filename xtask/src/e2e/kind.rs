//! The real-cluster target: a kind cluster (one control plane, two workers with 4 fake GPUs
//! each), Volcano from its Helm chart at a pinned version, a namespace, a queue and a hostPath
//! PVC, and a small Python + JAX image built with Docker and loaded into kind. Then the
//! scenarios, then `kind delete cluster` (unless `--keep`).
//!
//! Needs docker, kind, kubectl and helm. `--dry-run` prints every step and manifest instead.
//! Not run on the machine this was written on (no Docker there); see README.md.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::{Flags, Target, World, api::Api, build_binaries, scenarios};

/// Name of the kind cluster (its kubectl context is `kind-<name>`).
const CLUSTER: &str = "theseus-e2e";
/// Volcano release, and the version of its Helm chart.
const VOLCANO_VERSION: &str = "1.15.1";
const VOLCANO_CHART_REPO: &str = "https://volcano-sh.github.io/helm-charts";
/// Namespace, queue, PV and PVC of the jobs.
const NAMESPACE: &str = "theseus-e2e";
/// Image of the job pods, built from `xtask/e2e/Dockerfile`.
const JOB_IMAGE: &str = "theseus-e2e-jax:local";
/// The helper image (the default of a volcano host), loaded into kind so no pull is needed.
const HELPER_IMAGE: &str = "busybox:1.36";
/// Where the PVC lives inside the kind nodes (an `extraMounts` of a host dir).
const NODE_PVC_DIR: &str = "/var/theseus-e2e-pvc";
/// Where pods mount the PVC.
const MOUNT_PATH: &str = "/mnt/theseus-e2e";
/// Fake GPUs per worker node, advertised by patching the node status.
const GPUS_PER_NODE: u32 = 4;
const WORKERS: [&str; 2] = ["theseus-e2e-worker", "theseus-e2e-worker2"];
const DOCKERFILE: &str = include_str!("../../e2e/Dockerfile");

/// One step: a command, with an optional manifest on stdin.
struct Step {
    what: String,
    argv: Vec<String>,
    stdin: Option<String>,
}

fn step(what: &str, argv: &[&str], stdin: Option<String>) -> Step {
    Step { what: what.to_owned(), argv: argv.iter().map(|s| (*s).to_owned()).collect(), stdin }
}

/// `cargo xtask e2e` (no `--sim`).
pub(crate) fn e2e(root: &Path, flags: &Flags) -> Result<()> {
    let scratch = if flags.dry_run {
        crate::target_dir(root).join("xtask-e2e/kind-<timestamp>-<pid>")
    } else {
        preflight()?;
        super::scratch_dir(root, "kind")?
    };
    let (home, pvc, code) = (scratch.join("home"), scratch.join("pvc"), scratch.join("code"));
    let kubeconfig = scratch.join("kubeconfig");
    let target = Target {
        namespace: NAMESPACE.into(),
        queue: NAMESPACE.into(),
        image: JOB_IMAGE.into(),
        pvc_name: NAMESPACE.into(),
        mount_path: MOUNT_PATH.into(),
        host_env: Vec::new(),
    };
    let kind_config = kind_config(&pvc);
    let setup = setup_steps(root, &scratch, &kubeconfig);
    if flags.dry_run {
        print_plan(&scratch, &kind_config, &setup, &target, flags);
        return Ok(());
    }
    let started = Instant::now();
    let bin = build_binaries(root, false, false)?;
    for dir in [&home.join(".kube"), &pvc] {
        std::fs::create_dir_all(dir)?;
    }
    World::write_code(&code)?;
    std::fs::write(scratch.join("kind-config.yaml"), &kind_config)?;
    let mut cluster = ClusterGuard { created: false, keep: flags.keep, kubeconfig: kubeconfig.clone() };
    for (i, s) in setup.iter().enumerate() {
        eprintln!("e2e: [setup {}/{}] {}", i + 1, setup.len(), s.what);
        run_step(s)?;
        if s.argv.get(1).is_some_and(|a| a == "create") {
            cluster.created = true;
        }
    }
    std::fs::copy(&kubeconfig, home.join(".kube/config"))?;
    std::fs::write(home.join(".theseus.yaml"), target.dispatch_config())?;
    let world = World {
        theseus: bin.join("theseus"),
        home,
        code,
        pvc,
        api: Api::Kubectl { kubeconfig },
        namespace: NAMESPACE.into(),
        kubectl_server: None,
    };
    eprintln!("e2e: cluster ready after {:.1}s", started.elapsed().as_secs_f64());
    let result = scenarios::run_all(&world, &flags.only);
    drop(cluster);
    eprintln!("e2e (kind): {:.1}s", started.elapsed().as_secs_f64());
    result
}

/// Deletes the kind cluster when dropped, unless `--keep`.
struct ClusterGuard {
    created: bool,
    keep: bool,
    kubeconfig: PathBuf,
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if !self.created {
            return;
        }
        if self.keep {
            eprintln!(
                "e2e: --keep: cluster `{CLUSTER}` stays; `kubectl --kubeconfig {} get vcjob,pods -A`; \
                 remove it with `kind delete cluster --name {CLUSTER}`",
                self.kubeconfig.display()
            );
            return;
        }
        eprintln!("e2e: deleting kind cluster `{CLUSTER}`");
        let _ = Command::new("kind").args(["delete", "cluster", "--name", CLUSTER]).status();
    }
}

/// Fails naming every missing tool and what to install.
fn preflight() -> Result<()> {
    let tools = [
        (
            "docker",
            &["version", "--format", "{{.Server.Version}}"][..],
            "Docker Engine or Docker Desktop, running (https://docs.docker.com/get-docker/)",
        ),
        ("kind", &["version"][..], "kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"),
        ("kubectl", &["version", "--client"][..], "kubectl (https://kubernetes.io/docs/tasks/tools/)"),
        ("helm", &["version", "--short"][..], "Helm 3 (https://helm.sh/docs/intro/install/)"),
    ];
    let mut missing = Vec::new();
    for (tool, args, install) in tools {
        let ok = Command::new(tool)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            missing.push(format!("  {tool}: install {install}"));
        }
    }
    if missing.is_empty() {
        let clusters = Command::new("kind").args(["get", "clusters"]).output().context("cannot run kind")?;
        if String::from_utf8_lossy(&clusters.stdout).lines().any(|l| l.trim() == CLUSTER) {
            bail!(
                "a kind cluster named `{CLUSTER}` already exists (left by `--keep`?); \
                 delete it with `kind delete cluster --name {CLUSTER}` and retry"
            );
        }
        return Ok(());
    }
    bail!(
        "`cargo xtask e2e` needs a real cluster toolchain; missing or not working:\n{}\n\
             (`cargo xtask e2e --sim` runs the same scenarios against the simulator without them)",
        missing.join("\n")
    );
}

fn run_step(s: &Step) -> Result<()> {
    let mut cmd = Command::new(&s.argv[0]);
    cmd.args(&s.argv[1..]);
    if s.stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().with_context(|| format!("cannot run {}", s.argv.join(" ")))?;
    if let Some(input) = &s.stdin {
        child.stdin.take().context("no stdin")?.write_all(input.as_bytes())?;
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("step `{}` failed ({status}): {}", s.what, s.argv.join(" "));
    }
    Ok(())
}

/// The kind cluster: a control plane and two workers sharing one host dir as the PVC.
fn kind_config(pvc: &Path) -> String {
    let worker =
        format!("- role: worker\n  extraMounts:\n  - hostPath: {}\n    containerPath: {NODE_PVC_DIR}\n", pvc.display());
    format!("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n{worker}{worker}")
}

/// Namespace, queue, a hostPath PV on the shared dir and the PVC bound to it.
fn cluster_manifests() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n---\n\
         apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n  name: {NAMESPACE}\nspec:\n  weight: 1\n  reclaimable: false\n---\n\
         apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {NAMESPACE}\nspec:\n  capacity:\n    storage: 10Gi\n\
         \x20 accessModes: [ReadWriteMany]\n  persistentVolumeReclaimPolicy: Retain\n  storageClassName: theseus-e2e-hostpath\n\
         \x20 hostPath:\n    path: {NODE_PVC_DIR}\n    type: DirectoryOrCreate\n---\n\
         apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {NAMESPACE}\n  namespace: {NAMESPACE}\nspec:\n\
         \x20 accessModes: [ReadWriteMany]\n  storageClassName: theseus-e2e-hostpath\n  volumeName: {NAMESPACE}\n\
         \x20 resources:\n    requests:\n      storage: 10Gi\n"
    )
}

fn setup_steps(root: &Path, scratch: &Path, kubeconfig: &Path) -> Vec<Step> {
    let kc = kubeconfig.display().to_string();
    let kind_config = scratch.join("kind-config.yaml").display().to_string();
    let e2e_dir = root.join("xtask/e2e").display().to_string();
    let dockerfile = root.join("xtask/e2e/Dockerfile").display().to_string();
    let mut steps = vec![
        step(
            "create the kind cluster",
            &[
                "kind",
                "create",
                "cluster",
                "--name",
                CLUSTER,
                "--config",
                &kind_config,
                "--kubeconfig",
                &kc,
                "--wait",
                "120s",
            ],
            None,
        ),
        step(
            "add Volcano's Helm repository",
            &["helm", "repo", "add", "--force-update", "volcano-sh", VOLCANO_CHART_REPO],
            None,
        ),
        step(
            &format!("install Volcano v{VOLCANO_VERSION}"),
            &[
                "helm",
                "install",
                "volcano",
                "volcano-sh/volcano",
                "--version",
                VOLCANO_VERSION,
                "--namespace",
                "volcano-system",
                "--create-namespace",
                "--kubeconfig",
                &kc,
                "--wait",
                "--timeout",
                "10m",
            ],
            None,
        ),
        step(
            "create the namespace, queue, PV and PVC",
            &["kubectl", "--kubeconfig", &kc, "apply", "-f", "-"],
            Some(cluster_manifests()),
        ),
    ];
    for node in WORKERS {
        let patch = format!(r#"[{{"op":"add","path":"/status/capacity/nvidia.com~1gpu","value":"{GPUS_PER_NODE}"}}]"#);
        steps.push(Step {
            what: format!("advertise {GPUS_PER_NODE} fake GPUs on {node}"),
            argv: [
                "kubectl",
                "--kubeconfig",
                &kc,
                "patch",
                "node",
                node,
                "--subresource=status",
                "--type=json",
                "-p",
                &patch,
            ]
            .map(str::to_owned)
            .to_vec(),
            stdin: None,
        });
    }
    steps.extend([
        step(
            "build the job image (Python + JAX on CPU)",
            &["docker", "build", "-t", JOB_IMAGE, "-f", &dockerfile, &e2e_dir],
            None,
        ),
        step("load the job image into kind", &["kind", "load", "docker-image", JOB_IMAGE, "--name", CLUSTER], None),
        step("pull the helper image", &["docker", "pull", HELPER_IMAGE], None),
        step(
            "load the helper image into kind",
            &["kind", "load", "docker-image", HELPER_IMAGE, "--name", CLUSTER],
            None,
        ),
    ]);
    steps
}

fn print_plan(scratch: &Path, kind_config: &str, setup: &[Step], target: &Target, flags: &Flags) {
    println!("# cargo xtask e2e --dry-run: what a real run does (nothing is run now)\n");
    println!("# 0. preflight: docker, kind, kubectl and helm must be installed (and docker running)");
    println!("# build: cargo build --bins -p theseus-cli");
    println!("# scratch dir: {} (HOME, code, and pvc/ shared into the kind nodes)\n", scratch.display());
    println!("# ---- {}/kind-config.yaml ----\n{kind_config}", scratch.display());
    for (i, s) in setup.iter().enumerate() {
        println!("# {}. {}", i + 1, s.what);
        println!("{}", s.argv.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" "));
        if let Some(input) = &s.stdin {
            println!("# ---- stdin ----\n{input}# ---- end ----");
        }
        if s.argv.first().is_some_and(|a| a == "docker") && s.argv.get(1).is_some_and(|a| a == "build") {
            println!("# ---- xtask/e2e/Dockerfile ----\n{DOCKERFILE}# ---- end ----");
        }
    }
    println!(
        "\n# the theseus config: {}/home/.theseus.yaml (the kubeconfig is copied to home/.kube/config)",
        scratch.display()
    );
    print!("{}", target.dispatch_config());
    println!("\n# scenarios (run in {}/code with HOME={}/home):", scratch.display(), scratch.display());
    print!("{}", scenarios::describe());
    if flags.keep {
        println!("\n# --keep: the cluster stays up afterwards");
    } else {
        println!("\n# teardown\nkind delete cluster --name {CLUSTER}");
    }
}

/// Quotes a word for display when it has shell metacharacters.
fn shell_word(word: &str) -> String {
    if word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+".contains(c)) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_image_pins_the_same_jax_as_the_test_venv() {
        assert!(super::DOCKERFILE.contains(crate::python::JAX), "xtask/e2e/Dockerfile and python::JAX disagree");
    }
}
