//! The Slurm backend's lifecycle guarantees against the Slurm lab, checked by what Slurm knows
//! (true on a real cluster, whose nodes the login node cannot look into): one live Slurm job per
//! (project, group, name) when submits and `--replace` race, a login node that cannot see the
//! nodes' processes, and a cancel that reports a step still running instead of success.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use theseus_backend_slurm::slurm::{Settings, SlurmBackend, SlurmHandleData, job_name};
use theseus_backend_ssh::ssh::{RemoteCommand, SshHost};
use theseus_backend_ssh::testing::{cancel_while_shipping, make_big};
use theseus_core::Error;
use theseus_core::backend::{Backend, JobHandle, JobState, LogOptions, PreparedJob, SubmitOptions};
use theseus_core::job::{Distributed, JobIdentity};

use crate::slurm::{SlurmLab, TIMEOUT, backend_at, host, lab, plan, prepare, wait_terminal};

fn settings() -> Settings {
    Settings { poll_interval: Duration::from_millis(200), ..Settings::default() }
}

/// `n` backends of one cluster root, each with its own SSH connection (like `n` processes).
fn backends(lab: &SlurmLab, name: &str, n: usize, settings: Settings) -> Vec<(Arc<SlurmBackend>, Arc<SshHost>)> {
    let root = lab.shared.join(format!("it-{name}-{}", theseus_core::job::new_run_id()));
    (0..n).map(|i| backend_at(lab, &format!("{name}-{i}"), host(), &root, settings.clone())).collect()
}

/// A job name no other test (or earlier run) uses.
fn unique(prefix: &str) -> String {
    format!("{prefix}-{:06x}", rand_suffix())
}

fn rand_suffix() -> u32 {
    let id = theseus_core::job::new_run_id();
    u32::from_str_radix(id.rsplit('-').next().unwrap_or("0"), 16).unwrap_or(0)
}

fn sleeper(b: &SlurmBackend, name: &str) -> (PreparedJob, tempfile::TempDir) {
    prepare(b, &plan("cpu", 1, 0), name, &[("x", "")], &["sleep", "600"], &[], Distributed::None)
}

/// Slurm job ids of non-terminal jobs of the run name `name` (project `slurm-it`, as
/// [`prepare`] names them), from `squeue` on the login node.
async fn live_jobs(ssh: &SshHost, name: &str) -> Vec<String> {
    let slurm_name = job_name(&JobIdentity::new(name, Some("slurm-it"), None));
    let cmd = RemoteCommand::new("squeue").args([
        "--noheader",
        "--states=PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED,REQUEUED",
        "--format=%i",
        "--name",
        &slurm_name,
    ]);
    let out = ssh.run(&cmd).await.expect("squeue");
    out.stdout_text().split_whitespace().map(str::to_owned).collect()
}

/// Steps of job `id` Slurm still lists (`squeue --steps`): none once every process of the job
/// is gone on every node.
pub(crate) async fn steps(ssh: &SshHost, id: &str) -> Vec<String> {
    let cmd = RemoteCommand::new("squeue").args(["--steps", "--noheader", "--format=%i", "--jobs", id]);
    let out = ssh.output(&cmd).await.expect("squeue --steps");
    if !out.success() {
        assert!(out.stderr_text().contains("Invalid job id"), "squeue --steps: {}", out.stderr_text());
        return Vec::new();
    }
    out.stdout_text().split_whitespace().map(str::to_owned).collect()
}

async fn cancel_all(b: &SlurmBackend, handles: &[JobHandle]) {
    for h in handles {
        let _ = b.cancel(h).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_submits_of_one_name_leave_exactly_one_live_slurm_job() {
    let Some(lab) = lab() else { return };
    const N: usize = 3;
    let bs = backends(lab, "race", N, settings());
    let name = unique("race");
    let jobs: Vec<_> = bs.iter().map(|(b, _)| sleeper(b, &name)).collect();
    let results = futures::future::join_all(
        bs.iter().zip(&jobs).map(|((b, _), (job, _))| async move { b.submit(job, &SubmitOptions::default()).await }),
    )
    .await;
    let handles: Vec<JobHandle> = results.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    let live = live_jobs(&bs[0].1, &name).await;
    cancel_all(&bs[0].0, &handles).await;

    assert_eq!(handles.len(), 1, "exactly one submit wins: {results:?}");
    assert_eq!(live, [handles[0].id.clone()], "exactly the winner's Slurm job is live");
    let winner: SlurmHandleData = serde_json::from_value(handles[0].data.clone()).unwrap();
    for ((result, (job, _)), (b, _)) in results.iter().zip(&jobs).zip(&bs) {
        let Err(err) = result else { continue };
        let text = err.to_string();
        assert!(matches!(err, Error::AlreadyExists { .. }), "{err:?}");
        assert!(text.contains(&winner.run_id) && text.contains("already exists"), "{text}");
        let layout = b.layout(&job.identity, &plan("cpu", 1, 0)).unwrap();
        assert!(!std::path::Path::new(&layout.work_dir).exists(), "the loser shipped nothing: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_replacements_leave_exactly_one_live_slurm_job() {
    let Some(lab) = lab() else { return };
    const N: usize = 3;
    let bs = backends(lab, "replace-race", N, settings());
    let name = unique("rep");
    let (first, _d) = sleeper(&bs[0].0, &name);
    let h0 = bs[0].0.submit(&first, &SubmitOptions::default()).await.unwrap();
    let jobs: Vec<_> = bs.iter().map(|(b, _)| sleeper(b, &name)).collect();
    let replace = SubmitOptions { replace: true, ..SubmitOptions::default() };
    let results = futures::future::join_all(bs.iter().zip(&jobs).map(|((b, _), (job, _))| {
        let replace = replace.clone();
        async move { b.submit(job, &replace).await }
    }))
    .await;
    let mut handles: Vec<JobHandle> = results.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    let live = live_jobs(&bs[0].1, &name).await;
    let replaced = bs[0].0.status(&h0).await;
    handles.push(h0.clone());
    cancel_all(&bs[0].0, &handles).await;
    assert!(handles.len() >= 2, "at least one replacement succeeds: {results:?}");
    assert_eq!(live.len(), 1, "exactly one live Slurm job, not {live:?}: {results:?}");
    assert_ne!(live[0], h0.id, "the replaced job was stopped");
    assert_eq!(replaced.unwrap().state, JobState::Cancelled);
}

/// The login node is another machine than the nodes on a real cluster: the lab's login sshd
/// runs in its own PID namespace, so nothing the backend runs there can see a job's processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_node_cannot_see_the_nodes_processes() {
    let Some(lab) = lab() else { return };
    let (b, ssh) = backend_at(
        lab,
        "pidns",
        host(),
        &lab.shared.join(format!("it-pidns-{}", theseus_core::job::new_run_id())),
        settings(),
    );
    let (job, _d) = sleeper(&b, &unique("pidns"));
    let h = b.submit(&job, &SubmitOptions::default()).await.unwrap();
    let run = job.identity.run_id.clone();
    let deadline = Instant::now() + TIMEOUT;
    // The lab's nodes are this machine: the test itself sees the job's processes.
    while theseus_core::local::process::job_processes(&run).is_empty() {
        assert!(Instant::now() < deadline, "the job never started: {:?}", b.status(&h).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let count = RemoteCommand::script(
        r#"grep -lzxF -- "THESEUS_LOCAL_RUN=$1" /proc/[0-9]*/environ 2>/dev/null | wc -l"#,
        [run.clone()],
    );
    let seen = ssh.run(&count).await.unwrap().stdout_text().trim().to_owned();
    let _ = b.cancel(&h).await;
    assert_eq!(seen, "0", "the login node sees {seen} processes of a job running on the nodes");
}

const STUBBORN: &str = "trap '' TERM; echo started; sleep 300";

/// A step that does not end at once after `scancel` (its processes ignore SIGTERM until Slurm's
/// `KillWait`, 5 s in the lab, sends SIGKILL) is reported by `cancel` as an error naming the
/// step, when the cancel's own patience is shorter; once Slurm has killed it, cancel succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_still_running_after_scancel_is_reported_not_hidden() {
    let Some(lab) = lab() else { return };
    let impatient = Settings { cancel_timeout: Duration::from_secs(2), ..settings() };
    let root = lab.shared.join(format!("it-stuck-{}", theseus_core::job::new_run_id()));
    let (b, ssh) = backend_at(lab, "stuck", host(), &root, impatient);
    let two = plan("cpu", 2, 0);
    let (job, _d) =
        prepare(&b, &two, &unique("stuck"), &[("x", "")], &["bash", "-c", STUBBORN], &[], Distributed::None);
    let h = b.submit(&job, &SubmitOptions::default()).await.unwrap();
    let mut stream = b.logs(&h, &LogOptions { follow: true, rank: None }).await.unwrap();
    let mut started = 0;
    tokio::time::timeout(TIMEOUT, async {
        while let Some(line) = stream.next().await {
            if line.unwrap().text == "started" {
                started += 1;
                if started == 2 {
                    break;
                }
            }
        }
    })
    .await
    .expect("both ranks start");
    drop(stream);
    let err = b.cancel(&h).await.expect_err("a step is still running 2 s after scancel");
    let text = err.to_string();
    eprintln!("cancel with a stuck step: {text}");
    assert!(text.contains(&format!("{}.0", h.id)), "the error names the step left: {text}");
    // Slurm kills it after KillWait; then the job is over and nothing is left.
    let status = wait_terminal(&b, &h).await;
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    let deadline = Instant::now() + TIMEOUT;
    while !steps(&ssh, &h.id).await.is_empty() {
        assert!(Instant::now() < deadline, "steps left: {:?}", steps(&ssh, &h.id).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = b.cancel(&h).await.expect("a cancel after Slurm finished the job succeeds");
    assert_eq!(again.state, JobState::Cancelled);
}

/// The handle known before `submit` has no Slurm job id yet: it reads and cancels the run while
/// it is being submitted (then no Slurm job ever appears), and finds the job through the run dir
/// once there is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planned_handle_reads_and_cancels_the_run_before_and_after_sbatch() {
    let Some(lab) = lab() else { return };
    let root = lab.shared.join(format!("it-planned-{}", theseus_core::job::new_run_id()));
    let (b, ssh) = backend_at(lab, "planned", host(), &root, settings());
    let name = unique("planned");
    let (mut job, dir) = sleeper(&b, &name);
    make_big(&mut job, dir.path());
    let planned = b.planned_handle(&job).expect("a Slurm host can name the run before sbatch");
    assert!(matches!(b.status(&planned).await, Err(Error::NotFound { .. })), "nothing exists before submit");

    cancel_while_shipping(&b, &job, &planned).await;
    assert_eq!(live_jobs(&ssh, &name).await, Vec::<String>::new(), "no Slurm job of that name");
    assert_eq!(b.status(&planned).await.unwrap().state, JobState::Cancelled);

    let (job2, _d2) = sleeper(&b, &name);
    let planned2 = b.planned_handle(&job2).unwrap();
    let h2 = b.submit(&job2, &SubmitOptions::default()).await.unwrap();
    let through_planned = b.status(&planned2).await.unwrap();
    assert!(matches!(through_planned.state, JobState::Pending | JobState::Running), "{through_planned:?}");
    assert_eq!(b.cancel(&planned2).await.unwrap().state, JobState::Cancelled);
    assert_eq!(b.status(&h2).await.unwrap().state, JobState::Cancelled);
    assert_eq!(steps(&ssh, &h2.id).await, Vec::<String>::new());
}
