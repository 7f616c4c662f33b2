//! The Slurm backend at a site as dirty as real ones, through the lab's permanent traits
//! (`ci/lab/README.md`): the login node's `sbatch` is a site wrapper that prints lines around the
//! job id (and, per job, hides it or fails after submitting), its sessions set `SQUEUE_FORMAT`,
//! `SINFO_FORMAT`, `SACCT_FORMAT` and `SLURM_TIME_FORMAT=relative`, and a job gets the original's
//! time limit unless the host sets one (issue 23, points 4 and 10).

use theseus_core::backend::{Backend, EnvVar, JobState, PreparedJob, SubmitOptions};
use theseus_core::job::Distributed;

use theseus_backend_slurm::slurm::SlurmHandleData;
use theseus_backend_ssh::ssh::{RemoteCommand, SshHost};

use crate::slurm::{backend, host, lab, plan, prepare, wait_terminal};

/// Asks the lab's sbatch wrapper to `mode` (`swallow`: print no job id; `fail-after`: exit 1
/// after submitting) for this job: a secret, so it is in sbatch's environment.
fn site_sbatch(job: &mut PreparedJob, mode: &str) {
    job.env.push(EnvVar { name: "THESEUS_LAB_SBATCH".into(), value: mode.into(), secret: true });
}

/// `squeue --format=FORMAT --jobs ID` on the login node, without the site's formats.
async fn squeue_field(ssh: &SshHost, id: &str, format: &str) -> String {
    let cmd = RemoteCommand::new("env")
        .args(["-u", "SQUEUE_FORMAT", "-u", "SQUEUE_FORMAT2", "squeue", "--noheader", "--states=all"])
        .arg(format!("--format={format}"))
        .args(["--jobs", id]);
    ssh.run(&cmd).await.expect("squeue").stdout_text().trim().to_owned()
}

fn is_job_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_id_is_read_through_the_sites_sbatch_wrapper_and_the_time_limit_is_the_originals() {
    let Some(lab) = lab() else { return };
    let (b, ssh) = backend(lab, "site-wrapper", theseus_backend_slurm::SlurmHost { time: None, ..host() });
    // The lab is as dirty as promised: the login node's sbatch is the site's wrapper, which
    // prints lines before and after the id, and the sessions carry the site's formats.
    let probe = RemoteCommand::script(
        r#"command -v sbatch; printf '%s|%s|%s|%s\n' "$SQUEUE_FORMAT" "$SINFO_FORMAT" "$SACCT_FORMAT" "$SLURM_TIME_FORMAT""#,
        Vec::<String>::new(),
    );
    let out = ssh.run(&probe).await.unwrap().stdout_text();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first().copied(), Some("/usr/local/bin/sbatch"), "{out}");
    assert!(lines.get(1).is_some_and(|l| l.split('|').all(|v| !v.is_empty()) && l.ends_with("|relative")), "{out}");

    let (job, _dir) = prepare(&b, &plan("cpu", 1, 0), "wrapped", &[("x", "")], &["echo", "hi"], &[], Distributed::None);
    let handle = b.submit(&job, &SubmitOptions::default()).await.expect("submit through the site's sbatch wrapper");
    assert!(is_job_id(&handle.id), "{handle:?}");
    let status = wait_terminal(&b, &handle).await;
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}");
    // The job carries its run's comment, and the original's 14 days when the host sets no `time:`.
    assert_eq!(squeue_field(&ssh, &handle.id, "%k").await, format!("theseus-run:{}", job.identity.run_id));
    assert_eq!(squeue_field(&ssh, &handle.id, "%l").await, "14-00:00:00");
    // Named as the original named its Slurm jobs: `<project>-<group>-<name>`.
    assert_eq!(squeue_field(&ssh, &handle.id, "%j").await, "slurm-it-default-wrapped");
    let doc = &b.dry_run(&job).unwrap()[0].text;
    assert!(doc.contains("#SBATCH --time=14-0\n"), "{doc}");
}

/// A wrapper that hides sbatch's answer, or fails after submitting: the job is found by its
/// run's comment and adopted (tracked, run to its end), never left queued behind a failed submit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_id_sbatch_does_not_answer_is_found_by_its_comment_and_adopted() {
    let Some(lab) = lab() else { return };
    let (b, ssh) = backend(lab, "site-adopt", host());
    for mode in ["swallow", "fail-after"] {
        let (mut job, _dir) = prepare(
            &b,
            &plan("cpu", 1, 0),
            &format!("adopt-{mode}"),
            &[("x", "")],
            &["echo", "hi"],
            &[],
            Distributed::None,
        );
        site_sbatch(&mut job, mode);
        let handle = b.submit(&job, &SubmitOptions::default()).await.unwrap_or_else(|e| panic!("{mode}: {e:#}"));
        assert!(is_job_id(&handle.id), "{mode}: {handle:?}");
        assert_eq!(squeue_field(&ssh, &handle.id, "%k").await, format!("theseus-run:{}", job.identity.run_id));
        let status = wait_terminal(&b, &handle).await;
        assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{mode}: {status:?}");
        let data: SlurmHandleData = serde_json::from_value(handle.data.clone()).unwrap();
        let recorded = ssh.run(&RemoteCommand::new("cat").arg(format!("{}/slurm_job", data.run_dir))).await.unwrap();
        assert_eq!(recorded.stdout_text().trim(), handle.id, "{mode}");
    }
}

/// A submit cut off between `sbatch` and recording its job id (the client killed, the
/// connection lost): `cancel` of the run finds the job by its comment and cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_off_between_sbatch_and_its_record_is_cancelled_not_left_behind() {
    let Some(lab) = lab() else { return };
    let (b, ssh) = backend(lab, "site-cutoff", host());
    let (job, _dir) =
        prepare(&b, &plan("cpu", 1, 0), "cutoff", &[("x", "")], &["sleep", "600"], &[], Distributed::None);
    let planned = b.planned_handle(&job).expect("a planned handle");
    let data: SlurmHandleData = serde_json::from_value(planned.data.clone()).unwrap();
    // What the cut-off submit left: its run dir (claimed, no job id) and its queued job.
    let sbatch = RemoteCommand::script(
        r#"mkdir -p -- "$1" && date +%s > "$1/claimed" && /usr/bin/sbatch --parsable --partition=cpu --mem=100M \
  --time=10 --output=/dev/null --job-name=cutoff --comment="theseus-run:$2" --wrap='sleep 600'"#,
        [data.run_dir.clone(), data.run_id.clone()],
    );
    let id = ssh.run(&sbatch).await.unwrap().stdout_text().trim().to_owned();
    assert!(is_job_id(&id), "{id}");

    let status = b.cancel(&planned).await.expect("cancel");
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    assert_eq!(squeue_field(&ssh, &id, "%T").await, "CANCELLED", "the cut-off submit's job is cancelled");
    let after = b.status(&planned).await.unwrap();
    assert_eq!(after.state, JobState::Cancelled, "{after:?}");
}

const WHERE_PY: &str = r#"
import os
print("ran on", os.environ["SLURMD_NODENAME"], "rank", os.environ["RANK"], "in", os.getcwd(), flush=True)
open("written-by-rank-" + os.environ["RANK"], "w").write(os.environ["SLURMD_NODENAME"])
"#;

/// Issue 23 point 11: the original's `hpc` layout, `work` on each node's own `/scratch` (the
/// lab's node-local dir) and a separate shared `share`, runs a 2-node job: the code reaches each
/// node's `work`, the job runs there, and its log is read from the login node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_job_runs_with_a_node_local_work_on_each_node() {
    let Some(lab) = lab() else { return };
    let local = std::env::var("THESEUSTEST_SLURM_NODE_LOCAL").expect("the lab's node-local dir");
    let local_dirs = std::path::PathBuf::from(std::env::var("THESEUSTEST_SLURM_NODE_LOCAL_DIRS").unwrap());
    let unique = format!("it-nodelocal-{}", theseus_core::job::new_run_id());
    let shared = lab.shared.join(&unique);
    let cluster = theseus_core::config::ClusterConfig {
        root: shared.join("root").display().to_string(),
        work: format!("{local}/{unique}/theseus"),
        share: Some(shared.join("dispatch").display().to_string()),
        ..Default::default()
    };
    let settings = theseus_backend_slurm::slurm::Settings {
        poll_interval: std::time::Duration::from_millis(200),
        ..Default::default()
    };
    let (b, _ssh) = crate::slurm::backend_of(lab, "nodelocal", host(), cluster, settings);
    let (job, _dir) = prepare(
        &b,
        &plan("gpu", 2, 1),
        "nodelocal",
        &[("w.py", WHERE_PY)],
        &["python", "w.py"],
        &[],
        Distributed::None,
    );
    let handle = b.submit(&job, &SubmitOptions::default()).await.expect("submit with a node-local work");
    let status = wait_terminal(&b, &handle).await;
    let data: SlurmHandleData = serde_json::from_value(handle.data.clone()).unwrap();
    let log = theseus_backend_ssh::testing::log_lines(&*b, &handle).await;
    assert_eq!((status.state, status.exit_code), (JobState::Completed, Some(0)), "{status:?}\nlog: {log:#?}");
    // Each rank ran in the node-local work dir of its own node, which holds the code.
    let rel = data.work_dir.strip_prefix(&format!("{local}/")).expect("the work dir is on the node-local dir");
    let nodes: Vec<String> = status.ranks.iter().map(|r| r.location.clone().unwrap()).collect();
    for (rank, node) in nodes.iter().enumerate() {
        let dir = local_dirs.join(node).join(rel);
        assert!(dir.join("w.py").exists(), "{} has the code", dir.display());
        let written = std::fs::read_to_string(dir.join(format!("written-by-rank-{rank}"))).unwrap();
        assert_eq!(&written, node);
        let line = format!("ran on {node} rank {rank} in {}", data.work_dir);
        assert!(log.contains(&line), "{line:?} in {log:#?}");
    }
    assert_ne!(nodes[0], nodes[1]);
    // The login node's own /scratch never had it; the log is on the share.
    assert!(!local_dirs.join("login").join(rel).exists());
    assert!(data.log_file.starts_with(&shared.join("dispatch").display().to_string()), "{}", data.log_file);
    // The stage on the share is what the login node reclaims once the run is over.
    let stage = data.stage_dir.clone().expect("a node-local run has a stage dir");
    assert!(std::path::Path::new(&stage).join("w.py").exists(), "{stage}");
    let options = theseus_core::backend::ReclaimOptions {
        older_than: std::time::Duration::ZERO,
        ..theseus_core::backend::ReclaimOptions::default()
    };
    let report = b.reclaim(&options).await.expect("reclaim");
    assert!(report.items.iter().any(|i| i.path == stage), "{report:?}");
    assert!(!std::path::Path::new(&stage).exists() && std::path::Path::new(&data.log_file).exists());
    for node in ["node1", "node2", "login"] {
        let _ = std::fs::remove_dir_all(local_dirs.join(node).join(&unique));
    }
}
