//! The kind path's setup as data: the kind config, the manifests and every command of the
//! setup in order, built from the scratch dir and what the preflight found. Pure, so that the
//! command lines are tested here and printed by `--dry-run` exactly as they would run.
//!
//! Sources of the choices (Volcano v1.15.1's chart, `installer/helm/chart/volcano/`):
//! - `values.yaml` sets `basic.image_pull_policy: "Always"` for every Volcano image; the setup
//!   sets `IfNotPresent` and preloads the three images the default values deploy
//!   (`vc-webhook-manager`, also used by the `admission-init` hook Job, `vc-controller-manager`,
//!   `vc-scheduler`), so a fresh cluster pulls nothing from Docker Hub.
//! - `templates/webhooks.yaml` registers the queue and job webhooks with `failurePolicy: Fail`,
//!   and the admission Deployment (`templates/admission.yaml`) has no readiness probe, while the
//!   webhook manager patches the webhooks' `caBundle` only after it starts
//!   (`cmd/webhook-manager/app/util.go`, `addCaCertForWebhook`). So `helm install --wait` can
//!   return before a Queue can be created: the setup retries a server-side dry-run create of the
//!   Queue until the webhooks answer (they declare `sideEffects: NoneOnDryRun`, so the API server
//!   calls them for dry runs), then applies it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::runner::{Step, Until};

/// Name of the kind cluster (its kubectl context is `kind-<name>`).
pub(crate) const CLUSTER: &str = "theseus-e2e";
/// The node image: Kubernetes 1.35.0, the default image of kind v0.31.0
/// (`pkg/apis/config/defaults/image.go` at kind's tag v0.31.0). Volcano 1.15 supports
/// Kubernetes 1.23 to 1.35; kind v0.32's default (1.36) is outside that.
pub(crate) const NODE_IMAGE: &str =
    "kindest/node:v1.35.0@sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f";
/// Volcano release, and the version of its Helm chart.
pub(crate) const VOLCANO_VERSION: &str = "1.15.1";
/// The Volcano scheduler configuration of the e2e clusters (kind and the simulator), relative
/// to the repository root.
pub(crate) const SCHEDULER_CONF: &str = "xtask/e2e/volcano-scheduler.conf";
/// The chart repository, given to `helm install --repo` (no `helm repo add`: the user's own
/// repository list stays as it is).
pub(crate) const VOLCANO_CHART_REPO: &str = "https://volcano-sh.github.io/helm-charts";
/// The Volcano images the chart's default values deploy.
pub(crate) const VOLCANO_IMAGES: [&str; 3] = [
    "docker.io/volcanosh/vc-webhook-manager:v1.15.1",
    "docker.io/volcanosh/vc-controller-manager:v1.15.1",
    "docker.io/volcanosh/vc-scheduler:v1.15.1",
];
/// Namespace, queue, PV and PVC of the jobs.
pub(crate) const NAMESPACE: &str = "theseus-e2e";
/// Image of the job pods, built from `xtask/e2e/Dockerfile`.
pub(crate) const JOB_IMAGE: &str = "theseus-e2e-jax:local";
/// The helper image (the default of a volcano host), preloaded so no node pulls it.
pub(crate) const HELPER_IMAGE: &str = "docker.io/library/busybox:1.36";
/// Where the PVC lives inside the kind nodes (an `extraMounts` of a host dir).
pub(crate) const NODE_PVC_DIR: &str = "/var/theseus-e2e-pvc";
/// Where pods mount the PVC.
pub(crate) const MOUNT_PATH: &str = "/mnt/theseus-e2e";
/// Fake GPUs per worker node, advertised by patching the node status.
pub(crate) const GPUS_PER_NODE: u32 = 4;
pub(crate) const WORKERS: [&str; 2] = ["theseus-e2e-worker", "theseus-e2e-worker2"];
pub(crate) const DOCKERFILE: &str = include_str!("../../../e2e/Dockerfile");

/// How long the bounded waits of the setup wait, as attempts and the pause between them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pacing {
    pub(crate) webhook_attempts: u32,
    pub(crate) allocatable_attempts: u32,
    pub(crate) every: Duration,
}

/// 2 minutes for the webhooks (the manager polls for its configurations for up to 5 minutes,
/// but on a fresh cluster they exist as soon as helm returns), 1 minute for node status.
pub(crate) const PACING: Pacing =
    Pacing { webhook_attempts: 60, allocatable_attempts: 30, every: Duration::from_secs(2) };

/// Inputs of the setup.
pub(crate) struct Plan {
    pub(crate) root: PathBuf,
    pub(crate) scratch: PathBuf,
    pub(crate) kubeconfig: PathBuf,
    /// `os/arch` images are saved for; `None` when the daemon cannot save one platform
    /// (Docker < 28, classic image store, where `docker save` writes the one it has).
    pub(crate) save_platform: Option<String>,
    pub(crate) pacing: Pacing,
}

impl Plan {
    /// The kind cluster: a control plane and two workers sharing one host dir as the PVC.
    pub(crate) fn kind_config(&self) -> String {
        let worker = format!(
            "- role: worker\n  extraMounts:\n  - hostPath: {}\n    containerPath: {NODE_PVC_DIR}\n",
            self.pvc().display()
        );
        format!("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n{worker}{worker}")
    }

    pub(crate) fn pvc(&self) -> PathBuf {
        self.scratch.join("pvc")
    }

    pub(crate) fn kind_config_path(&self) -> PathBuf {
        self.scratch.join("kind-config.yaml")
    }

    fn images_dir(&self) -> PathBuf {
        self.scratch.join("images")
    }

    fn kubectl<'a>(&'a self, kc: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
        let mut argv = vec!["kubectl", "--kubeconfig", kc];
        argv.extend_from_slice(rest);
        argv
    }

    /// Every setup command, in order.
    pub(crate) fn setup_steps(&self) -> Vec<Step> {
        let kc = self.kubeconfig.display().to_string();
        let kind_config = self.kind_config_path().display().to_string();
        let mut steps = vec![Step::new(
            "create the kind cluster (Kubernetes 1.35)",
            &[
                "kind",
                "create",
                "cluster",
                "--name",
                CLUSTER,
                "--image",
                NODE_IMAGE,
                "--config",
                &kind_config,
                "--kubeconfig",
                &kc,
                "--wait",
                "120s",
            ],
        )];
        for image in VOLCANO_IMAGES.iter().chain([&HELPER_IMAGE]) {
            steps.extend(self.preload(image, true));
        }
        let e2e_dir = self.root.join("xtask/e2e").display().to_string();
        // The scheduler of a cluster many teams share (preempt and reclaim on), the same file
        // the simulator runs with.
        let scheduler_conf = self.root.join(SCHEDULER_CONF).display().to_string();
        let dockerfile = self.root.join("xtask/e2e/Dockerfile").display().to_string();
        steps.push(Step::new(
            "build the job image (Python + JAX on CPU)",
            &["docker", "build", "-t", JOB_IMAGE, "-f", &dockerfile, &e2e_dir],
        ));
        steps.extend(self.preload(JOB_IMAGE, false));
        steps.push(Step::new(
            format!("install Volcano v{VOLCANO_VERSION} (images preloaded, pull policy IfNotPresent)"),
            &[
                "helm",
                "install",
                "volcano",
                "volcano",
                "--repo",
                VOLCANO_CHART_REPO,
                "--version",
                VOLCANO_VERSION,
                "--namespace",
                "volcano-system",
                "--create-namespace",
                "--kubeconfig",
                &kc,
                "--set",
                "basic.image_pull_policy=IfNotPresent",
                "--set-file",
                &format!("custom.scheduler_config_override={scheduler_conf}"),
                "--wait",
                "--timeout",
                "10m",
            ],
        ));
        steps.push(
            Step::new(
                "wait until Volcano's admission webhooks accept a Queue (server-side dry run)",
                &self.kubectl(&kc, &["create", "--dry-run=server", "-f", "-"]),
            )
            .stdin(queue_manifest())
            .until(Until {
                attempts: self.pacing.webhook_attempts,
                every: self.pacing.every,
                stdout_is: None,
                hint: "the queue webhook (failurePolicy Fail) does not answer yet; see `kubectl -n volcano-system \
                       logs deploy/volcano-admission` and `get pods`"
                    .into(),
            }),
        );
        steps.push(
            Step::new("create the namespace, queue, PV and PVC", &self.kubectl(&kc, &["apply", "-f", "-"]))
                .stdin(cluster_manifests()),
        );
        for node in WORKERS {
            let patch = format!(
                r#"[{{"op":"add","path":"/status/capacity/nvidia.com~1gpu","value":"{GPUS_PER_NODE}"}},{{"op":"add","path":"/status/allocatable/nvidia.com~1gpu","value":"{GPUS_PER_NODE}"}}]"#
            );
            steps.push(Step::new(
                format!("advertise {GPUS_PER_NODE} fake GPUs on {node}"),
                &self.kubectl(&kc, &["patch", "node", node, "--subresource=status", "--type=json", "-p", &patch]),
            ));
            steps.push(
                Step::new(
                    format!("wait until {node} has {GPUS_PER_NODE} allocatable GPUs"),
                    &self.kubectl(&kc, &["get", "node", node, "-o", r"jsonpath={.status.allocatable.nvidia\.com/gpu}"]),
                )
                .until(Until {
                    attempts: self.pacing.allocatable_attempts,
                    every: self.pacing.every,
                    stdout_is: Some(GPUS_PER_NODE.to_string()),
                    hint: "the kubelet has not put the patched GPUs into the node's allocatable".into(),
                }),
            );
        }
        steps
    }

    /// Loads `image` into every node from an archive (`kind load docker-image` fails on Docker's
    /// containerd image store); `pull` first when the host does not have it.
    fn preload(&self, image: &str, pull: bool) -> Vec<Step> {
        let file = image.rsplit('/').next().unwrap_or(image).replace(':', "_");
        let archive = self.images_dir().join(format!("{file}.tar")).display().to_string();
        let platform: Vec<&str> = match &self.save_platform {
            Some(p) => vec!["--platform", p],
            None => vec![],
        };
        let mut steps = Vec::new();
        if pull {
            let mut argv = vec!["docker", "pull"];
            argv.extend(&platform);
            argv.push(image);
            steps.push(
                Step::new(format!("pull {image} on the host unless it is there"), &argv)
                    .unless(&["docker", "image", "inspect", "--format", "{{.Id}}", image]),
            );
        }
        let mut save = vec!["docker", "save"];
        save.extend(&platform);
        save.extend(["-o", &archive, image]);
        steps.push(Step::new(format!("save {image}"), &save));
        steps.push(Step::new(
            format!("load {image} into the nodes"),
            &["kind", "load", "image-archive", &archive, "--name", CLUSTER],
        ));
        steps
    }
}

/// The queue of the jobs (also what the webhook readiness check dry-runs).
pub(crate) fn queue_manifest() -> String {
    format!(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n  name: {NAMESPACE}\nspec:\n  weight: 1\n  reclaimable: false\n"
    )
}

/// Namespace, queue, a hostPath PV on the shared dir and the PVC bound to it.
pub(crate) fn cluster_manifests() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n---\n{}---\n\
         apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {NAMESPACE}\nspec:\n  capacity:\n    storage: 10Gi\n\
         \x20 accessModes: [ReadWriteMany]\n  persistentVolumeReclaimPolicy: Retain\n  storageClassName: theseus-e2e-hostpath\n\
         \x20 hostPath:\n    path: {NODE_PVC_DIR}\n    type: DirectoryOrCreate\n---\n\
         apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {NAMESPACE}\n  namespace: {NAMESPACE}\nspec:\n\
         \x20 accessModes: [ReadWriteMany]\n  storageClassName: theseus-e2e-hostpath\n  volumeName: {NAMESPACE}\n\
         \x20 resources:\n    requests:\n      storage: 10Gi\n",
        queue_manifest()
    )
}

/// The Docker platform name of this machine's architecture, for `--dry-run` (a real run asks
/// the daemon).
pub(crate) fn local_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("linux/{arch}")
}

/// The scratch dir of a dry run (no dir is made).
pub(crate) fn dry_run_scratch(root: &Path) -> PathBuf {
    crate::target_dir(root).join("xtask-e2e/kind-<timestamp>-<pid>")
}

#[cfg(test)]
mod tests {
    use super::super::runner::{Fake, execute};
    use super::*;

    fn plan(save_platform: Option<&str>) -> Plan {
        Plan {
            root: "/src".into(),
            scratch: "/s".into(),
            kubeconfig: "/s/kubeconfig".into(),
            save_platform: save_platform.map(str::to_owned),
            pacing: Pacing { webhook_attempts: 5, allocatable_attempts: 3, every: Duration::from_secs(2) },
        }
    }

    fn lines(steps: &[Step]) -> Vec<String> {
        steps.iter().map(Step::command_line).collect()
    }

    #[test]
    fn the_node_image_is_kubernetes_1_35_pinned_by_digest() {
        let (tag, digest) = NODE_IMAGE.split_once('@').unwrap();
        assert!(tag.starts_with("kindest/node:v1.35."), "{tag}");
        assert!(digest.strip_prefix("sha256:").is_some_and(|h| h.len() == 64), "{digest}");
        let create = &plan(None).setup_steps()[0];
        assert!(create.command_line().contains(&format!("--image {NODE_IMAGE}")), "{}", create.command_line());
    }

    #[test]
    fn every_image_is_loaded_from_an_archive_saved_for_one_platform() {
        let lines = lines(&plan(Some("linux/amd64")).setup_steps());
        assert!(!lines.iter().any(|l| l.contains("load docker-image")), "{lines:#?}");
        for image in VOLCANO_IMAGES.iter().chain([&HELPER_IMAGE]) {
            let pull = format!(
                "docker image inspect --format '{{{{.Id}}}}' {image} >/dev/null 2>&1 || docker pull --platform linux/amd64 {image}"
            );
            assert!(lines.contains(&pull), "no `{pull}` in {lines:#?}");
        }
        let save = "docker save --platform linux/amd64 -o /s/images/theseus-e2e-jax_local.tar theseus-e2e-jax:local";
        let load = "kind load image-archive /s/images/theseus-e2e-jax_local.tar --name theseus-e2e";
        let (build, save_at, load_at) = (
            lines.iter().position(|l| l.starts_with("docker build")).unwrap(),
            lines.iter().position(|l| l == save).unwrap(),
            lines.iter().position(|l| l == load).unwrap(),
        );
        assert!(build < save_at && save_at < load_at);
        let classic = self::lines(&plan(None).setup_steps());
        assert!(
            classic.iter().any(|l| l == "docker save -o /s/images/busybox_1.36.tar docker.io/library/busybox:1.36")
        );
    }

    #[test]
    fn volcano_is_installed_from_the_chart_url_without_touching_helm_repos_after_the_preload() {
        let lines = lines(&plan(None).setup_steps());
        assert!(!lines.iter().any(|l| l.contains("helm repo")), "{lines:#?}");
        let helm = lines.iter().position(|l| l.starts_with("helm install")).unwrap();
        assert!(lines[helm].contains(&format!("--repo {VOLCANO_CHART_REPO} --version 1.15.1")), "{}", lines[helm]);
        assert!(lines[helm].contains("--set basic.image_pull_policy=IfNotPresent"), "{}", lines[helm]);
        assert!(lines[helm].contains("--set-file custom.scheduler_config_override="), "{}", lines[helm]);
        let last_load = lines.iter().rposition(|l| l.starts_with("kind load")).unwrap();
        assert!(last_load < helm, "images are loaded before Volcano starts");
    }

    #[test]
    fn the_queue_is_applied_only_after_a_server_side_dry_run_succeeds() {
        let steps = plan(None).setup_steps();
        let lines = lines(&steps);
        let dry = lines.iter().position(|l| l.contains("create --dry-run=server -f -")).unwrap();
        let apply = lines.iter().position(|l| l.contains(" apply -f -")).unwrap();
        assert!(lines.iter().position(|l| l.starts_with("helm install")).unwrap() < dry && dry < apply);
        assert_eq!(steps[dry].stdin.as_deref(), Some(queue_manifest().as_str()));
        assert!(steps[apply].stdin.as_ref().is_some_and(|m| m.contains(&queue_manifest())));

        // Webhook without its CA for two tries, then ready: three dry runs, then the apply.
        let mut fake = Fake::default();
        let refused = "Error from server (InternalError): Internal error occurred: failed calling webhook \
                       \"mutatequeue.volcano.sh\": tls: failed to verify certificate: x509";
        fake.answer(
            "kubectl --kubeconfig /s/kubeconfig create --dry-run=server",
            vec![
                Fake::fail(1, refused),
                Fake::fail(1, refused),
                Fake::ok("queue.scheduling.volcano.sh/theseus-e2e created (server dry run)"),
            ],
        );
        for step in &steps[dry..=apply] {
            execute(&mut fake, step).unwrap();
        }
        assert_eq!(fake.count("kubectl --kubeconfig /s/kubeconfig create --dry-run=server"), 3);
        assert_eq!(fake.count("kubectl --kubeconfig /s/kubeconfig apply"), 1);

        // Never ready: bounded, and the apply never runs.
        let mut fake = Fake::default();
        fake.answer("kubectl --kubeconfig /s/kubeconfig create --dry-run=server", vec![Fake::fail(1, refused)]);
        let err = execute(&mut fake, &steps[dry]).unwrap_err().to_string();
        assert_eq!(fake.count("kubectl"), 5);
        assert!(err.contains("mutatequeue.volcano.sh") && err.contains("5 attempts"), "{err}");
    }

    #[test]
    fn gpus_are_patched_then_waited_for_in_allocatable() {
        let steps = plan(None).setup_steps();
        for node in WORKERS {
            let patch =
                steps.iter().position(|s| s.argv.contains(&"patch".to_owned()) && s.argv.contains(&node.to_owned()));
            let patch = patch.unwrap();
            assert!(steps[patch].command_line().contains("/status/allocatable/nvidia.com~1gpu"));
            let wait = &steps[patch + 1];
            assert!(
                wait.command_line().contains(r"jsonpath={.status.allocatable.nvidia\.com/gpu}"),
                "{}",
                wait.command_line()
            );
            let mut fake = Fake::default();
            fake.answer("kubectl", vec![Fake::ok(""), Fake::ok("4")]);
            execute(&mut fake, wait).unwrap();
            assert_eq!(fake.count("kubectl"), 2);
            let mut fake = Fake::default();
            fake.answer("kubectl", vec![Fake::ok("")]);
            assert!(execute(&mut fake, wait).unwrap_err().to_string().contains("allocatable"));
            assert_eq!(fake.count("kubectl"), 3);
        }
    }

    #[test]
    fn the_image_pins_the_same_jax_as_the_test_venv() {
        assert!(DOCKERFILE.contains(crate::python::JAX), "xtask/e2e/Dockerfile and python::JAX disagree");
    }
}
