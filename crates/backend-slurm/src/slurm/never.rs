//! Whether a pending Slurm job can never start: Slurm's pending reason says so for requests no
//! node, partition, QOS or association limit of the cluster can ever satisfy (more nodes than
//! the partition has, more CPUs or memory per node than its nodes have, a time limit over the
//! partition's, a per-job limit). `submit --follow` gives up at once on such a job instead of
//! waiting for it for ever (issue 23). Reasons that pass (`Resources`, `Priority`, group limits,
//! held jobs, reserved or down nodes) are not judged.
//!
//! [`judge`] is pure; [`never_starts`] asks `squeue` (and, for `PartitionNodeLimit`, which
//! Slurm also gives while nodes are down, `sinfo` for the partition's size).

use theseus_core::Result;

use super::SlurmBackend;
use crate::parse::SlurmJob;
use theseus_backend_ssh::ssh::RemoteCommand;

/// What a pending reason means when it can never pass, or `None`.
pub(crate) fn judge(reason: &str) -> Option<String> {
    let what = match reason {
        "PartitionNodeLimit" => "it asks for more nodes than its partition has",
        "PartitionConfig" => {
            "its partition cannot give what it asks (that many nodes, or CPUs, memory or GPUs per node): ask for less"
        }
        "PartitionTimeLimit" => "its time limit is over its partition's MaxTime: set a shorter `time`",
        "BadConstraints" => "its constraints cannot be satisfied by any node",
        "InvalidAccount" => "its account is not valid: fix the host's `account`",
        "InvalidQOS" => "its QOS is not valid: fix the host's `qos`",
        "DependencyNeverSatisfied" => "a job it depends on failed",
        r if (r.starts_with("QOSMax") || r.starts_with("AssocMax")) && r.contains("PerJob") => {
            "it asks for more than a per-job limit of its QOS or association allows: ask for less"
        }
        _ => return None,
    };
    Some(format!("Slurm says {reason}: {what}"))
}

fn remote(backend: &SlurmBackend, argv: &[&str]) -> RemoteCommand {
    RemoteCommand::new(argv[0])
        .args(argv[1..].iter().copied())
        .retry_safe()
        .timeout(backend.remote.settings.command_timeout)
}

/// Why the pending Slurm job `job_id` (asking for `nodes` nodes) can never start, or `None`.
pub(crate) async fn never_starts(backend: &SlurmBackend, job_id: &str, nodes: u32) -> Result<Option<String>> {
    let Some(job): Option<SlurmJob> = super::status::from_squeue(backend, job_id).await? else {
        return Ok(None);
    };
    if job.state != theseus_core::backend::JobState::Pending {
        return Ok(None);
    }
    let Some(reason) = job.reason.as_deref().and_then(|r| judge(r).map(|w| (r, w))) else { return Ok(None) };
    if reason.0 != "PartitionNodeLimit" {
        return Ok(Some(reason.1));
    }
    // Also given while nodes are down: judged only when the partition has fewer nodes in all.
    let partition =
        backend.remote.ssh.output(&remote(backend, &["squeue", "--noheader", "--format=%P", "--jobs", job_id])).await;
    let Some(partition) = partition.ok().filter(|o| o.success()).map(|o| o.stdout_text().trim().to_owned()) else {
        return Ok(None);
    };
    let sizes = backend
        .remote
        .ssh
        .output(&remote(backend, &["sinfo", "--noheader", "--format=%D", "--partition", &partition]))
        .await;
    let Some(total) = sizes
        .ok()
        .filter(|o| o.success())
        .map(|o| o.stdout_text().lines().filter_map(|l| l.trim().parse::<u32>().ok()).sum::<u32>())
    else {
        return Ok(None);
    };
    Ok((nodes > total).then(|| {
        format!("Slurm says PartitionNodeLimit: it asks for {nodes} nodes and partition {partition:?} has {total}")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reasons_that_never_pass_are_judged() {
        for never in ["PartitionConfig", "PartitionTimeLimit", "QOSMaxGRESPerJob", "AssocMaxNodesPerJob"] {
            assert!(judge(never).is_some_and(|w| w.starts_with(&format!("Slurm says {never}: "))), "{never}");
        }
        for passes in ["Resources", "Priority", "QOSGrpGRES", "AssocGrpCpuLimit", "ReqNodeNotAvail", "JobHeldUser"] {
            assert_eq!(judge(passes), None, "{passes}");
        }
    }
}
