//! The by-hand floors of the simulator's figures, measured in the same run as theseus's:
//! a bare "sink" vcjob whose pod sleeps, and pipes of `tar -c` or `git archive` into
//! `kubectl exec -i <sink> -- tar -x` (what a user without theseus would do to put code on the
//! PVC). The sink's pods are local processes of the simulator, so `tar -x` writes where the PVC
//! is on this machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use crate::e2e::{World, text};

/// kubectl with the world's kubeconfig (the one theseus uses), in the world's namespace.
pub(super) fn kubectl(world: &World) -> Command {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(world.home.join(".kube/config")).args(["-n", &world.namespace]).stdin(Stdio::null());
    cmd
}

/// A sleeping pod to exec into; its vcjob is deleted on drop.
pub(super) struct Sink<'w> {
    world: &'w World,
    job: String,
    pub(super) pod: String,
}

impl<'w> Sink<'w> {
    /// Creates the vcjob `name` (one pod running `sleep 3600`) and waits until its pod runs.
    pub(super) fn start(world: &'w World, name: &str, scratch: &Path) -> Result<Sink<'w>> {
        let manifest = scratch.join(format!("{name}.yaml"));
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata:\n  name: {name}\n  namespace: {ns}\n\
                 spec:\n  minAvailable: 1\n  schedulerName: volcano\n  queue: default\n  tasks:\n  - name: worker\n\
                 \x20   replicas: 1\n    template:\n      spec:\n        restartPolicy: Never\n        containers:\n\
                 \x20       - name: main\n          image: theseus-e2e:local\n          command: [sleep, \"3600\"]\n\
                 \x20         resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}\n",
                ns = world.namespace
            ),
        )?;
        let mut create = kubectl(world);
        create.args(["create", "-f"]).arg(&manifest);
        let out = create.output().context("cannot run kubectl create")?;
        ensure!(out.status.success(), "kubectl create of the sink failed: {}", text(&out.stderr));
        let sink = Sink { world, job: name.to_owned(), pod: format!("{name}-worker-0") };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let out = sink
                .kubectl()
                .args(["get", "pod", &sink.pod, "-o", "jsonpath={.status.phase}"])
                .output()
                .context("cannot run kubectl get pod")?;
            if text(&out.stdout).trim() == "Running" {
                return Ok(sink);
            }
            ensure!(Instant::now() < deadline, "the sink pod {} did not start", sink.pod);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn kubectl(&self) -> Command {
        kubectl(self.world)
    }

    /// Seconds to pipe `producer`'s stdout into `kubectl exec -i <pod> -- tar -x -C dest`
    /// (dest made first). Fails unless both ends exit 0.
    pub(super) fn pipe_tar(&self, mut producer: Command, dest: &Path) -> Result<f64> {
        std::fs::create_dir_all(dest)?;
        let started = Instant::now();
        let mut source = producer.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("cannot start tar")?;
        let stdout = source.stdout.take().context("no stdout")?;
        let out = self
            .kubectl()
            .args(["exec", "-i", &self.pod, "--", "tar", "-x", "-C"])
            .arg(dest)
            .stdin(Stdio::from(stdout))
            .output()
            .context("cannot run kubectl exec")?;
        let produced = source.wait_with_output()?;
        let secs = started.elapsed().as_secs_f64();
        ensure!(out.status.success(), "kubectl exec tar -x failed: {}", text(&out.stderr));
        ensure!(produced.status.success(), "the producer failed: {}", text(&produced.stderr));
        Ok(secs)
    }
}

impl Drop for Sink<'_> {
    fn drop(&mut self) {
        let _ = self.kubectl().args(["delete", "vcjob", &self.job, "--wait=false"]).output();
    }
}

/// `tar -C dir -cf - .`
pub(super) fn tar_of(dir: &Path) -> Command {
    let mut cmd = Command::new("tar");
    cmd.arg("-C").arg(dir).args(["-cf", "-", "."]);
    cmd
}

/// `git -C repo archive HEAD`
pub(super) fn git_archive(repo: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(repo).args(["archive", "HEAD"]);
    cmd
}

/// A fresh dir under the world's PVC for one floor run.
pub(super) fn pvc_dest(world: &World, name: &str) -> PathBuf {
    world.pvc.join("bench-floor").join(name)
}
