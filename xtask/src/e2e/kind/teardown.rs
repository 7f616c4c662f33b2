//! The end of a kind run, on every path: after a failure, diagnostics into the scratch dir
//! (`kind export logs`, `kubectl describe` of vcjobs, PodGroups and pods, the events); then the
//! PVC dir given back to the user (pods write it as root); then `kind delete cluster` unless
//! `--keep`. SIGINT and SIGTERM run the same teardown (without diagnostics) from a signal
//! thread, stop the command running at that moment (by its PID), and exit 130 or 143.
//! Whoever starts the teardown first does it; the other path waits for it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::plan::{CLUSTER, NODE_PVC_DIR, WORKERS};
use super::runner::{Processes, Runner, Step, execute};

/// What the teardown must do, shared between the main flow and the signal thread.
#[derive(Clone, Debug)]
pub(crate) struct Teardown {
    /// Set just before `kind create cluster` (an interrupted create may leave nodes).
    pub(crate) cluster_may_exist: bool,
    pub(crate) keep: bool,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) scratch: PathBuf,
    /// The user's uid and gid, to give the PVC dir back to (`None` when running as root).
    pub(crate) owner: Option<(u32, u32)>,
    /// Someone is tearing down already.
    claimed: bool,
}

impl Teardown {
    pub(crate) fn new(keep: bool, kubeconfig: PathBuf, scratch: PathBuf, owner: Option<(u32, u32)>) -> Teardown {
        Teardown { cluster_may_exist: false, keep, kubeconfig, scratch, owner, claimed: false }
    }

    /// The diagnostics of a failed run, each command's output in a file of `diagnostics/`.
    pub(crate) fn diagnostics_steps(&self) -> Vec<Step> {
        let dir = self.scratch.join("diagnostics");
        let kc = self.kubeconfig.display().to_string();
        let logs = dir.join("kind-logs").display().to_string();
        let mut steps = vec![Step::new(
            "export the nodes' logs (kubelet, containerd, pods)",
            &["kind", "export", "logs", &logs, "--name", CLUSTER],
        )];
        for (what, resource) in [
            ("vcjobs", "vcjobs.batch.volcano.sh"),
            ("podgroups", "podgroups.scheduling.volcano.sh"),
            ("queues", "queues.scheduling.volcano.sh"),
            ("pods", "pods"),
            ("nodes", "nodes"),
        ] {
            let mut argv = vec!["kubectl", "--kubeconfig", &kc, "describe", resource];
            if !matches!(what, "queues" | "nodes") {
                argv.push("--all-namespaces");
            }
            steps.push(Step::new(format!("describe {what}"), &argv).stdout_to(dir.join(format!("{what}.txt"))));
        }
        steps.push(
            Step::new(
                "list the events",
                &[
                    "kubectl",
                    "--kubeconfig",
                    &kc,
                    "get",
                    "events",
                    "--all-namespaces",
                    "--sort-by=.lastTimestamp",
                    "-o",
                    "wide",
                ],
            )
            .stdout_to(dir.join("events.txt")),
        );
        steps
    }

    /// Everything to do at the end, in order; `failed` adds the diagnostics first.
    pub(crate) fn steps(&self, failed: bool) -> Vec<Step> {
        if !self.cluster_may_exist {
            return Vec::new();
        }
        let mut steps = if failed { self.diagnostics_steps() } else { Vec::new() };
        if let Some((uid, gid)) = self.owner {
            // Both workers mount the same host dir; one chown through one node is enough.
            let owner = format!("{uid}:{gid}");
            steps.push(Step::new(
                "give the PVC dir back to the user (pods write it as root)",
                &["docker", "exec", WORKERS[0], "chown", "-R", &owner, NODE_PVC_DIR],
            ));
        }
        if !self.keep {
            steps.push(Step::new("delete the kind cluster", &["kind", "delete", "cluster", "--name", CLUSTER]));
        }
        steps
    }

    /// Claims the teardown; `None` when another path has it already.
    pub(crate) fn claim(&mut self, failed: bool) -> Option<Vec<Step>> {
        if self.claimed {
            return None;
        }
        self.claimed = true;
        Some(self.steps(failed))
    }
}

/// Runs every teardown step, going on after a failed one (each failure is printed), and says
/// where the diagnostics are and how to reach a kept cluster.
pub(crate) fn run(runner: &mut dyn Runner, teardown: &Teardown, steps: &[Step]) {
    let dir = teardown.scratch.join("diagnostics");
    if steps.iter().any(|s| s.stdout_to.is_some()) && std::fs::create_dir_all(&dir).is_err() {
        eprintln!("e2e: cannot create {}", dir.display());
    }
    for step in steps {
        eprintln!("e2e: [teardown] {}", step.what);
        if let Err(e) = execute(runner, step) {
            eprintln!("e2e: [teardown] {e:#}");
        }
    }
    if steps.iter().any(|s| s.stdout_to.is_some()) {
        eprintln!("e2e: diagnostics are in {}", dir.display());
    }
    if teardown.keep && teardown.cluster_may_exist {
        eprintln!(
            "e2e: --keep: cluster `{CLUSTER}` stays; `kubectl --kubeconfig {} get vcjob,pods -A`; \
             remove it with `kind delete cluster --name {CLUSTER}`",
            teardown.kubeconfig.display()
        );
    }
}

/// How long the main flow leaves the teardown to the signal thread when its command died of
/// SIGINT or SIGTERM (a Ctrl-C reaches both at once), as attempts 50 ms apart.
const SIGNAL_GRACE_ATTEMPTS: u32 = 40;

/// The end of the main flow: claims the teardown and runs it. When a signal claimed it first
/// (or is about to: the failed command died of one), leaves it to the signal thread, which
/// exits the process, and returns `false`: the caller then waits for that exit.
pub(crate) fn finish(runner: &mut dyn Runner, shared: &Mutex<Teardown>, failed: bool) -> bool {
    let lock = || shared.lock().unwrap_or_else(|e| e.into_inner());
    if failed && runner.last_interrupted() {
        for _ in 0..SIGNAL_GRACE_ATTEMPTS {
            if lock().claimed {
                break;
            }
            runner.sleep(std::time::Duration::from_millis(50));
        }
    }
    let claimed = {
        let mut t = lock();
        t.claim(failed).map(|steps| (steps, t.clone()))
    };
    match claimed {
        Some((steps, state)) => {
            run(runner, &state, &steps);
            true
        }
        None => false,
    }
}

/// The exit code of a process ended by a signal, as shells report it.
pub(crate) fn exit_code(signal_number: i32) -> i32 {
    128 + signal_number
}

/// Starts the thread that turns SIGINT and SIGTERM into a teardown and an exit. `current` is
/// the runner's slot for the PID of the command running now.
pub(crate) fn on_signals(shared: Arc<Mutex<Teardown>>, current: Arc<Mutex<Option<u32>>>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Registered here, before the thread starts, so no signal is missed after this returns.
    let (mut int, mut term) = runtime.block_on(async {
        Ok::<_, std::io::Error>((signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?))
    })?;
    std::thread::spawn(move || {
        loop {
            let (name, number) = runtime.block_on(async {
                tokio::select! {
                    _ = int.recv() => ("SIGINT", 2),
                    _ = term.recv() => ("SIGTERM", 15),
                }
            });
            let steps = shared.lock().unwrap_or_else(|e| e.into_inner()).claim(false);
            let Some(steps) = steps else {
                eprintln!("e2e: {name}: the teardown is already running; wait for it");
                continue;
            };
            eprintln!("e2e: {name}: stopping and cleaning up");
            if let Some(pid) = *current.lock().unwrap_or_else(|e| e.into_inner()) {
                stop(pid);
            }
            let state = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
            run(&mut Processes::default(), &state, &steps);
            std::process::exit(exit_code(number));
        }
    });
    Ok(())
}

/// SIGTERM to a command this process started.
fn stop(pid: u32) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// The user to give the PVC dir back to: `None` for root.
pub(crate) fn owner() -> Option<(u32, u32)> {
    let uid = rustix::process::getuid().as_raw();
    (uid != 0).then(|| (uid, rustix::process::getgid().as_raw()))
}

#[cfg(test)]
mod tests {
    use super::super::runner::Fake;
    use super::*;

    fn teardown(keep: bool, owner: Option<(u32, u32)>) -> Teardown {
        let mut t = Teardown::new(keep, "/s/kubeconfig".into(), "/s".into(), owner);
        t.cluster_may_exist = true;
        t
    }

    #[test]
    fn a_failure_exports_diagnostics_before_the_cluster_is_deleted() {
        let t = teardown(false, Some((1000, 1000)));
        let mut fake = Fake::default();
        let dir = tempdir();
        let t = Teardown { scratch: dir.clone(), ..t };
        fake.answer("kubectl --kubeconfig /s/kubeconfig describe vcjobs", vec![Fake::ok("Name: general-default-x\n")]);
        fake.answer("kind export logs", vec![Fake::fail(1, "docker: not running")]);
        run(&mut fake, &t, &t.steps(true));
        let export = fake.position("kind export logs").unwrap();
        let chown = fake.position("docker exec theseus-e2e-worker chown -R 1000:1000 /var/theseus-e2e-pvc").unwrap();
        let delete = fake.position("kind delete cluster --name theseus-e2e").unwrap();
        for what in
            ["vcjobs.batch.volcano.sh --all-namespaces", "podgroups.scheduling.volcano.sh", "pods --all-namespaces"]
        {
            let describe = fake.position(&format!("kubectl --kubeconfig /s/kubeconfig describe {what}")).unwrap();
            assert!(export < describe && describe < delete, "{:#?}", fake.ran);
        }
        assert!(fake.position("kubectl --kubeconfig /s/kubeconfig get events --all-namespaces").unwrap() < chown);
        assert!(chown < delete, "a failed export does not stop the teardown: {:#?}", fake.ran);
        let saved = std::fs::read_to_string(dir.join("diagnostics/vcjobs.txt")).unwrap();
        assert_eq!(saved, "Name: general-default-x\n");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn success_keep_and_root_change_what_is_done() {
        let lines = |steps: Vec<Step>| steps.iter().map(Step::command_line).collect::<Vec<_>>();
        assert_eq!(lines(teardown(false, None).steps(false)), vec!["kind delete cluster --name theseus-e2e"]);
        let kept = lines(teardown(true, Some((1000, 100))).steps(true));
        assert!(kept.iter().any(|l| l.starts_with("kind export logs")), "{kept:#?}");
        assert!(kept.iter().any(|l| l.contains("chown -R 1000:100")), "{kept:#?}");
        assert!(!kept.iter().any(|l| l.starts_with("kind delete")), "--keep keeps the cluster: {kept:#?}");
        let never_created = Teardown::new(false, "/k".into(), "/s".into(), None);
        assert!(never_created.steps(true).is_empty());
    }

    #[test]
    fn the_teardown_is_claimed_once() {
        let mut t = teardown(false, None);
        assert!(t.claim(false).is_some_and(|s| s.len() == 1));
        assert!(t.claim(true).is_none(), "the signal thread and the main flow never both tear down");
        assert_eq!((exit_code(2), exit_code(15)), (130, 143));
    }

    #[test]
    fn a_command_killed_by_ctrl_c_leaves_the_teardown_to_the_signal_thread() {
        // The signal thread has claimed it: the main flow runs nothing (no diagnostics).
        let shared = Mutex::new(teardown(false, None));
        let _ = shared.lock().unwrap().claim(false);
        let mut fake = Fake::default();
        fake.interrupted = true;
        assert!(!finish(&mut fake, &shared, true));
        assert!(fake.ran.is_empty(), "{:#?}", fake.ran);
        // Nobody claims it within the grace: the main flow tears down itself, bounded.
        let shared = Mutex::new(teardown(false, None));
        let mut fake = Fake::default();
        fake.interrupted = true;
        assert!(finish(&mut fake, &shared, true));
        assert_eq!(fake.slept.len(), SIGNAL_GRACE_ATTEMPTS as usize);
        assert!(fake.position("kind delete cluster").is_some());
        // A plain failure does not wait.
        let shared = Mutex::new(teardown(false, None));
        let mut fake = Fake::default();
        assert!(finish(&mut fake, &shared, true));
        assert!(fake.slept.is_empty() && fake.position("kind export logs").is_some());
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "xtask-teardown-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
