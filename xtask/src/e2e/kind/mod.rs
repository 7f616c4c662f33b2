//! The real-cluster target: a kind cluster (one control plane, two workers with 4 fake GPUs
//! each) on a pinned Kubernetes 1.35 node image, Volcano from its Helm chart at a pinned version
//! with its images preloaded, a namespace, a queue and a hostPath PVC, and a small Python + JAX
//! image built with Docker and loaded into kind. Then the scenarios, then the teardown
//! (diagnostics after a failure, `kind delete cluster` unless `--keep`; also on Ctrl-C).
//!
//! Needs docker, kind, kubectl and helm ([`preflight`] checks their versions). `--dry-run`
//! prints every step and manifest instead. The command lines, retries, waits and the teardown
//! are tested here with a scripted runner; the kind path itself has not run yet (no Docker
//! where it was written).
//!
//! # What is proven and what is not
//! `cargo xtask e2e` (kind) has **never run**: no machine it was written on has a Docker daemon.
//! The setup follows kind's practice (pin the node image by digest, as kind's release notes ask)
//! and Volcano's own CI (kind v0.31.0, Kubernetes 1.35, images loaded into the nodes). Each point
//! below is marked **unit-tested** (the command line, order, retry bound or message is asserted by
//! `cargo test -p xtask` with a scripted runner), **read** (reasoned from upstream sources, named),
//! or **unproven** (only a real run can show it).
//!
//! | point | how it is handled | checked how |
//! | --- | --- | --- |
//! | Queue applied before the webhooks work | after `helm install --wait`, `kubectl create --dry-run=server -f -` of the Queue is retried (60 x 2 s) before `apply` | unit-tested (`the_queue_is_applied_only_after_a_server_side_dry_run_succeeds`); the cause read in Volcano v1.15.1: `templates/webhooks.yaml` (`failurePolicy: Fail`), no readiness probe in `templates/admission.yaml`, `caBundle` patched after start in `cmd/webhook-manager/app/util.go` (`addCaCertForWebhook`); that a dry run reaches the webhooks: they declare `sideEffects: NoneOnDryRun` (same file), so the API server calls them for dry-run requests; unproven on a cluster |
//! | `kind load docker-image` on containerd's image store | every image is `docker save [--platform os/arch]` + `kind load image-archive`; preflight reads `docker info` `DriverStatus` and refuses containerd's store on a daemon below API 1.48 | unit-tested (`every_image_is_loaded_from_an_archive_saved_for_one_platform`, preflight tests); read: kind issue 3795 and kind PR 4247 (the documented workaround), Docker's `image save --platform` (API 1.48+); unproven on Docker |
//! | pending reason never empty | scenario 2 waits (120 s) for a message naming what is missing (`nvidia.com/gpu`, overused, insufficient, Unschedulable), else fails with the last message | unit-tested (`a_pending_message_counts_only_when_it_names_what_is_missing`); passes on the simulator; Volcano's event texts read in v1.15.1 (`plugins/overcommit`, `plugins/proportion`); unproven on kind |
//! | helper pods still terminating | scenarios 3 and 5 wait (120 s) until helper jobs and pods are gone, naming what is left (phase, terminating) on timeout | unit-tested (`what_is_left_names_each_helper_and_its_state`, `a_wait_that_times_out_says_what_it_saw_last`); passes on the simulator |
//! | Kubernetes version | `kindest/node:v1.35.0@sha256:452d707d...`, kind v0.31.0's default image (`pkg/apis/config/defaults/image.go` at tag v0.31.0); preflight requires kind >= 0.31 and warns for other than 0.31 | unit-tested (pin and `--image`, version parsing); read: Volcano v1.15.1 README (Kubernetes 1.23-1.35), its CI (`kind@v0.31.0`); kind versions tried: **none** (expected: v0.31.0) |
//! | GPUs only in `capacity` | the status patch adds `capacity` and `allocatable`; the setup then waits (30 x 2 s) until `allocatable` shows 4 | unit-tested (`gpus_are_patched_then_waited_for_in_allocatable`); whether the kubelet keeps the patched allocatable: unproven |
//! | Docker Hub pull limit | `--set basic.image_pull_policy=IfNotPresent`; the three Volcano images and busybox pulled once on the host (skipped when present) and loaded; a helm timeout names the rate limit | unit-tested (`volcano_is_installed_from_the_chart_url...`, `a_helm_timeout_names_the_pull_rate_limit`); image list read in Volcano v1.15.1 `values.yaml` and templates; unproven that nothing else is pulled |
//! | no diagnostics on failure | a failed setup or scenario runs `kind export logs`, `kubectl describe` of vcjobs, PodGroups, queues, pods, nodes and the events into `<scratch>/diagnostics/`, then the teardown | unit-tested (`a_failure_exports_diagnostics_before_the_cluster_is_deleted`), and the real `xtask e2e` process against stub tools (`xtask/tests/kind_stubs.rs`: `a_failed_setup_exports_diagnostics_then_deletes_the_cluster`) |
//! | Ctrl-C | a signal thread (SIGINT, SIGTERM) stops the running command by its PID, deletes the cluster unless `--keep`, exits 130/143; the teardown is claimed once, and a main flow whose command died of the same Ctrl-C leaves it to the signal thread | the real process against stub tools, SIGINT to xtask alone and to its whole process group during `helm install` (`sigint_during_helm_install_...`, `ctrl_c_to_the_whole_group_...`); the claim unit-tested; with real kind: unproven |
//! | `helm repo add --force-update` | `helm install volcano volcano --repo <chart URL> --version 1.15.1`: the user's repositories are untouched | unit-tested |
//! | root-owned files under `target/` | the PVC dir is made mode 0777; the teardown runs `docker exec <worker> chown -R uid:gid` on it (skipped as root) | unit-tested (command line); unproven on Docker (rootless Docker maps root differently) |
//! | dry run said HOME and code are shared | it now says only `<scratch>/pvc` is shared into the workers | unit-tested (`the_dry_run_says_only_the_pvc_is_shared_and_shows_every_step`) |
//! | tool versions | preflight parses `docker version` (daemon, API, platform), `docker info` (image store), `kind version`, `kubectl version --client --output=json` (1.24+ for `--subresource`), `helm version --short` (3.x; 4.x warned as untried), naming every problem and its fix | unit-tested on the documented output formats (`reads_each_tools_version_output`, `old_or_missing_tools_are_all_named_with_their_fix`) |
//!
//! The kubectl check of `e2e --sim` (not kind, but the same runner of scenarios) is required in CI:
//! `cargo xtask test` installs kubectl with apt-get when it is missing and xtask runs as root
//! (Debian's `kubectl` package where a repository has it, else `kubernetes-client`), and passes
//! `--require-kubectl`, which turns NOT RUN into FAIL (`a_missing_kubectl_fails_only_when_required`,
//! `root_tries_apt_get_until_kubectl_works`; run by hand with kubectl off `PATH`: FAIL with the flag,
//! NOT RUN without).

mod plan;
mod preflight;
mod runner;
mod teardown;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::{Flags, Target, World, api::Api, build_binaries, scenarios};
pub(crate) use plan::SCHEDULER_CONF;
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
            job_image: plan::JOB_IMAGE.into(),
            queue: NAMESPACE.into(),
            home,
            code,
            pvc: plan.pvc(),
            api: Api::Kubectl { kubeconfig: plan.kubeconfig.clone() },
            namespace: NAMESPACE.into(),
            kubectl_server: None,
            kubectl_token: None,
            kubectl_ca: None,
            env: Vec::new(),
            access_log: None,
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
