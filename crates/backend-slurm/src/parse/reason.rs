//! Slurm's reason codes of a pending job (`squeue %r`, `sacct Reason`) in plain words, for the
//! one-sentence reason `status`, `list` and the dashboard show: `pending (Priority): jobs of
//! higher priority are ahead of it in the queue`. The meanings are those of the squeue manual's
//! "JOB REASON CODES" (read, not run); a code not listed here is shown as it is.

/// What the reason code of a pending job means, when it is a common one.
pub fn explain(code: &str) -> Option<&'static str> {
    Some(match code {
        "Resources" => "waiting for the nodes it asked for to be free",
        "Priority" => "jobs of higher priority are ahead of it in the queue",
        "Dependency" => "waiting for the jobs it depends on",
        "DependencyNeverSatisfied" => "a job it depends on ended in a way that never satisfies it: it will never start",
        "BeginTime" => "its start time has not come yet",
        "JobHeldUser" => "held by its user (`scontrol release` lets it start)",
        "JobHeldAdmin" => "held by an administrator",
        "ReqNodeNotAvail" => "a node it needs is not available (down, drained or reserved)",
        "NodeDown" => "a node it needs is down",
        "PartitionDown" => "its partition is down",
        "PartitionInactive" => "its partition is inactive",
        "PartitionNodeLimit" => "it asks for more nodes than its partition allows",
        "PartitionTimeLimit" => "its time limit is above its partition's",
        "Reservation" => "waiting for its reservation to start",
        "BadConstraints" => "no node can satisfy its constraints",
        "Licenses" => "waiting for licenses",
        "Cleaning" => "being cleaned up after a requeue",
        "Prolog" => "its prolog is running",
        "launch failed requeued held" => "its launch failed: requeued and held",
        _ if code.starts_with("QOS") => "a limit of its QOS is reached (on its user, account or the QOS itself)",
        _ if code.starts_with("AssocGrp") || code.starts_with("AssocMax") => "a limit of its account is reached",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::explain;

    #[test]
    fn common_codes_are_explained_and_others_are_not() {
        assert_eq!(explain("Priority"), Some("jobs of higher priority are ahead of it in the queue"));
        assert!(explain("QOSMaxGRESPerUser").unwrap().contains("QOS"));
        assert!(explain("AssocGrpGRES").unwrap().contains("account"));
        assert_eq!(explain("SomethingNew"), None);
        assert_eq!(explain(""), None);
    }
}
