//! The real-cluster target: a kind cluster (one control plane, two workers with 4 fake GPUs
//! each) on a pinned Kubernetes 1.35 node image, Volcano from its Helm chart at a pinned version
//! with its images preloaded, a namespace, a queue and a hostPath PVC, and a small Python + JAX
//! image built with Docker and loaded into kind. Then the scenarios, then the teardown
//! (diagnostics after a failure, `kind delete cluster` unless `--keep`; also on Ctrl-C).
//!
//! Needs docker, kind, kubectl and helm ([`preflight`] checks their versions). `--dry-run`
//! prints every step and manifest instead. The command lines, retries, waits and the teardown
//! are tested here with a scripted runner; the kind path itself has not run yet (no Docker
//! where it was written): docs/ARCHITECTURE.md lists what is proven and what is not.

mod plan;
mod preflight;
mod runner;
mod teardown;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::{Flags, Target, World, api::Api, build_binaries, scenarios};
use plan::{CLUSTER, DOCKERFILE, MOUNT_PATH, NAMESPACE, NODE_PVC_DIR, PACING, Plan};
use runner::{Processes, Runner, Step, execute};
use teardown::Teardown;

/// `cargo xtask e2e` (no `--sim`).
pub(crate) fn e2e(root: &Path, flags: &Flags) -> Result<()> {
    if flags.dry_run {
        let scratch = plan::dry_run_scratch(root);
        let plan = Plan {
            root: root.to_owned(),
            kubeconfig: scratch.join("kubeconfig"),
            scratch,
            save_platform: Some(plan::local_platform()),
            pacing: PACING,
        };
        print!("{}", dry_run_text(&plan, flags.keep));
        return Ok(());
    }
    let started = Instant::now();
    let mut runner = Processes::default();
    let tools = preflight::check(&mut runner)?;
    for warning in &tools.warnings {
        eprintln!("e2e: WARNING: {warning}");
    }
    eprintln!(
        "e2e: docker {} ({} image store), kind v{}.{}.{}",
        tools.platform,
        if tools.containerd_store { "containerd" } else { "classic" },
        tools.kind.0,
        tools.kind.1,
        tools.kind.2
    );
    refuse_existing_cluster(&mut runner)?;
    let scratch = super::scratch_dir(root, "kind")?;
    let plan = Plan {
        root: root.to_owned(),
        kubeconfig: scratch.join("kubeconfig"),
        scratch: scratch.clone(),
        save_platform: tools.save_platform.then(|| tools.platform.clone()),
        pacing: PACING,
    };
    let bin = build_binaries(root, false, false)?;
    let (home, code) = (scratch.join("home"), scratch.join("code"));
    for dir in [home.join(".kube"), plan.pvc(), scratch.join("images")] {
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // Pods may run as any user: the PVC dir is writable for all (the teardown gives what pods
    // wrote back to the user).
    let mode = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o777);
    std::fs::set_permissions(plan.pvc(), mode).with_context(|| format!("cannot chmod {}", plan.pvc().display()))?;
    World::write_code(&code)?;
    std::fs::write(plan.kind_config_path(), plan.kind_config())?;

    let shared =
        Arc::new(Mutex::new(Teardown::new(flags.keep, plan.kubeconfig.clone(), scratch.clone(), teardown::owner())));
    teardown::on_signals(shared.clone(), runner.current.clone())?;
    shared.lock().unwrap_or_else(|e| e.into_inner()).cluster_may_exist = true;
    let result = setup(&mut runner, &plan.setup_steps()).and_then(|()| {
        std::fs::copy(&plan.kubeconfig, home.join(".kube/config"))?;
        std::fs::write(home.join(".theseus.yaml"), target().dispatch_config())?;
        let world = World {
            theseus: bin.join("theseus"),
            home,
            code,
            pvc: plan.pvc(),
            api: Api::Kubectl { kubeconfig: plan.kubeconfig.clone() },
            namespace: NAMESPACE.into(),
            kubectl_server: None,
            kubectl_token: None,
            kubectl_ca: None,
            env: Vec::new(),
        };
        eprintln!("e2e: cluster ready after {:.1}s", started.elapsed().as_secs_f64());
        scenarios::run_all(&world, &flags.only, false)
    });
    if let Err(e) = &result {
        eprintln!("e2e: FAILED: {e:#}");
    }
    if !teardown::finish(&mut runner, &shared, result.is_err()) {
        // A signal's teardown runs in its thread, which exits the process when done.
        loop {
            std::thread::park();
        }
    }
    eprintln!("e2e (kind): {:.1}s; scratch dir {}", started.elapsed().as_secs_f64(), scratch.display());
    result
}

/// What the jobs of the kind target look like in the dispatch config.
fn target() -> Target {
    Target {
        namespace: NAMESPACE.into(),
        queue: NAMESPACE.into(),
        image: plan::JOB_IMAGE.into(),
        pvc_name: NAMESPACE.into(),
        mount_path: MOUNT_PATH.into(),
        host_env: Vec::new(),
    }
}

/// Runs the setup steps in order, stopping at the first failure.
fn setup(runner: &mut dyn Runner, steps: &[Step]) -> Result<()> {
    for (i, step) in steps.iter().enumerate() {
        eprintln!("e2e: [setup {}/{}] {}", i + 1, steps.len(), step.what);
        execute(runner, step)?;
    }
    Ok(())
}

/// A cluster of our name left by `--keep` would be deleted by our teardown: refuse instead.
fn refuse_existing_cluster(runner: &mut dyn Runner) -> Result<()> {
    let out = runner.run(&["kind".into(), "get".into(), "clusters".into()], None)?;
    if out.stdout.lines().any(|l| l.trim() == CLUSTER) {
        bail!(
            "a kind cluster named `{CLUSTER}` already exists (left by `--keep`?); \
             delete it with `kind delete cluster --name {CLUSTER}` and retry"
        );
    }
    Ok(())
}

/// Everything a real run would do, as text (stdout of `--dry-run`).
fn dry_run_text(plan: &Plan, keep: bool) -> String {
    let scratch = plan.scratch.display();
    let mut out = String::from("# cargo xtask e2e --dry-run: what a real run does (nothing is run now)\n\n");
    out.push_str(
        "# 0. preflight: docker (daemon running; its API version, platform and image store), kind (v0.31 \
         expected), kubectl (1.24+) and helm (3.x)\n# build: cargo build --bins -p theseus-cli\n",
    );
    out.push_str(&format!(
        "# scratch dir: {scratch} (HOME, code and the kubeconfig stay on this machine; only {scratch}/pvc is \
         shared into the kind workers, at {NODE_PVC_DIR}; theseus ships the code into the PVC itself)\n\
         # image archives: {scratch}/images; diagnostics after a failure: {scratch}/diagnostics\n\
         # platform: {} (a real run asks the Docker daemon)\n\n",
        plan.save_platform.as_deref().unwrap_or("-")
    ));
    out.push_str(&format!("# ---- {}/kind-config.yaml ----\n{}", scratch, plan.kind_config()));
    for (i, step) in plan.setup_steps().iter().enumerate() {
        out.push_str(&format!("# {}. {}\n", i + 1, step.what));
        if let Some(until) = &step.until {
            out.push_str(&format!(
                "#    (repeated until it succeeds{}, at most {} times {:?} apart)\n",
                until.stdout_is.as_ref().map(|s| format!(" and prints `{s}`")).unwrap_or_default(),
                until.attempts,
                until.every
            ));
        }
        out.push_str(&step.command_line());
        out.push('\n');
        if let Some(input) = &step.stdin {
            out.push_str(&format!("# ---- stdin ----\n{input}# ---- end ----\n"));
        }
        if step.argv.first().is_some_and(|a| a == "docker") && step.argv.get(1).is_some_and(|a| a == "build") {
            out.push_str(&format!("# ---- xtask/e2e/Dockerfile ----\n{DOCKERFILE}# ---- end ----\n"));
        }
    }
    out.push_str(&format!(
        "\n# the theseus config: {scratch}/home/.theseus.yaml (the kubeconfig is copied to home/.kube/config)\n"
    ));
    out.push_str(&target().dispatch_config());
    out.push_str(&format!("\n# scenarios (run in {scratch}/code with HOME={scratch}/home):\n"));
    out.push_str(&scenarios::describe());
    let mut teardown = Teardown::new(keep, plan.kubeconfig.clone(), plan.scratch.clone(), Some((1000, 1000)));
    teardown.cluster_may_exist = true;
    out.push_str("\n# after a failed step or scenario, first (each command's output into diagnostics/):\n");
    for step in teardown.diagnostics_steps() {
        out.push_str(&format!("{}\n", step.command_line()));
    }
    out.push_str("\n# teardown (also on SIGINT/SIGTERM, then exit 130/143); chown only when not run as root:\n");
    for step in teardown.steps(false) {
        out.push_str(&format!("{}\n", step.command_line().replace("1000:1000", "$(id -u):$(id -g)")));
    }
    if keep {
        out.push_str("# --keep: the cluster stays up afterwards\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::runner::Fake;
    use super::*;

    fn plan() -> Plan {
        Plan {
            root: "/src".into(),
            scratch: "/s".into(),
            kubeconfig: "/s/kubeconfig".into(),
            save_platform: Some("linux/amd64".into()),
            pacing: PACING,
        }
    }

    #[test]
    fn the_dry_run_says_only_the_pvc_is_shared_and_shows_every_step() {
        let text = dry_run_text(&plan(), false);
        assert!(text.contains("HOME, code and the kubeconfig stay on this machine; only /s/pvc is shared"), "{text}");
        assert!(!text.contains("HOME, code, and pvc/ shared"), "{text}");
        for step in plan().setup_steps() {
            assert!(text.contains(&step.command_line()), "dry run lacks `{}`", step.command_line());
        }
        for needle in [
            "(repeated until it succeeds, at most 60 times 2s apart)",
            "kind export logs /s/diagnostics/kind-logs --name theseus-e2e",
            "docker exec theseus-e2e-worker chown -R $(id -u):$(id -g) /var/theseus-e2e-pvc",
            "kind delete cluster --name theseus-e2e",
            "# scenario 5:",
        ] {
            assert!(text.contains(needle), "`{needle}` missing:\n{text}");
        }
        let kept = dry_run_text(&plan(), true);
        assert!(!kept.contains("kind delete cluster") && kept.contains("--keep: the cluster stays"), "{kept}");
    }

    #[test]
    fn a_failed_setup_step_stops_the_setup_and_leaves_the_rest() {
        let mut fake = Fake::default();
        fake.answer("helm install", vec![Fake::fail(1, "Error: INSTALLATION FAILED: context deadline exceeded")]);
        let err = setup(&mut fake, &plan().setup_steps()).unwrap_err().to_string();
        assert!(err.contains("pull rate limit"), "{err}");
        assert!(fake.position("kubectl").is_none(), "nothing after helm ran: {:#?}", fake.ran);
    }

    #[test]
    fn an_existing_cluster_of_our_name_is_refused() {
        let mut fake = Fake::default();
        fake.answer("kind get clusters", vec![Fake::ok("kind\ntheseus-e2e\n")]);
        assert!(refuse_existing_cluster(&mut fake).unwrap_err().to_string().contains("already exists"));
        let mut fake = Fake::default();
        fake.answer("kind get clusters", vec![Fake::ok("kind\n")]);
        refuse_existing_cluster(&mut fake).unwrap();
    }
}
