//! The name claim: one `coordination.k8s.io/v1` Lease per (namespace, project, group, name),
//! named deterministically from that identity, whose `holderIdentity` is the run id that may have
//! a live vcjob of that name. Creating it (409 when it exists) is the server-side check that makes
//! a second live job of one name impossible; it is taken before any code is shipped.
//!
//! The rules, as Kubernetes leader election uses Leases (client-go `tools/leaderelection`,
//! `LeaderElector.tryAcquireOrRenew`): every change is a `PUT` with the `resourceVersion` read, so
//! of two takers only one wins; the holder renews `renewTime` while it ships; the claim is stale
//! when its holder's gang vcjob is terminal or gone and it was not renewed within
//! `leaseDurationSeconds`. Once the vcjob exists, the holder makes it the Lease's owner (again a
//! conditional `PUT`, which is also the holder's proof that it still holds the name), so the claim
//! goes away with the job. `--replace` takes a running holder's claim over the same way and then
//! deletes the other runs' jobs; it never takes a claim whose holder is still submitting (that
//! submit is refused, having created nothing, as a plain one is). A run that lost its claim
//! (a stale one taken over) deletes what it created.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use theseus_core::backend::SubmitOptions;
use theseus_core::job::{JobIdentity, k8s_name};

use crate::api::Cluster;
use crate::error::VolcanoError;
use crate::render::{LABEL_GROUP, LABEL_NAME, LABEL_PROJECT, LABEL_ROLE, LABEL_RUN_ID, label_value, owner_reference};
use crate::types::{Job, TERMINAL_PHASES};

/// `theseus.dev/role` of claim Leases.
pub const ROLE_CLAIM: &str = "claim";
/// Annotation naming the holder's gang vcjob.
pub const ANNOTATION_JOB: &str = "theseus.dev/job";
/// How long a claim that is not renewed stays the holder's while its vcjob does not exist yet.
pub const LEASE_DURATION: Duration = Duration::from_secs(60);
/// Attempts at taking a claim that others keep changing.
const ATTEMPTS: usize = 8;

/// The claim Lease's name for `identity`: always hashed from the full identity (the `/` makes
/// [`k8s_name`] add the hash), so identities that sanitize alike never share a claim.
pub fn claim_name(identity: &JobIdentity) -> String {
    k8s_name(&format!("theseus-claim/{}/{}/{}", identity.project, identity.group, identity.name))
}

/// The claim of `identity` held by its run, naming the run's gang vcjob `job`. Pure.
pub fn render_claim(identity: &JobIdentity, job: &str, now: Timestamp) -> Lease {
    let labels: BTreeMap<String, String> = [
        (LABEL_PROJECT, label_value(&identity.project)),
        (LABEL_GROUP, label_value(&identity.group)),
        (LABEL_NAME, label_value(&identity.name)),
        (LABEL_RUN_ID, label_value(&identity.run_id)),
        (LABEL_ROLE, ROLE_CLAIM.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    Lease {
        metadata: ObjectMeta {
            name: Some(claim_name(identity)),
            labels: Some(labels),
            annotations: Some([(ANNOTATION_JOB.to_owned(), job.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(identity.run_id.clone()),
            lease_duration_seconds: Some(i32::try_from(LEASE_DURATION.as_secs()).unwrap_or(i32::MAX)),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        }),
    }
}

/// The run id holding `lease`.
pub fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
}

/// What a claim's holder is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    /// The holder's gang vcjob exists and is not terminal.
    Running {
        /// The vcjob.
        job: String,
    },
    /// The holder has no vcjob yet and renewed the claim within its duration (shipping).
    Submitting,
    /// The holder's vcjob is terminal or gone and the claim was not renewed in time.
    Stale,
}

/// Judges `lease` from its holder's gang vcjobs (`jobs`: those labelled with the holder's run
/// id) at `now`. Pure.
pub fn judge(lease: &Lease, jobs: &[Job], now: Timestamp) -> Holding {
    let live = jobs.iter().find(|j| {
        let phase = j.status.as_ref().and_then(|s| s.state.as_ref()).and_then(|s| s.phase.as_deref());
        j.metadata.deletion_timestamp.is_none() && !phase.is_some_and(|p| TERMINAL_PHASES.contains(&p))
    });
    if let Some(job) = live {
        return Holding::Running { job: job.metadata.name.clone().unwrap_or_default() };
    }
    if !jobs.is_empty() {
        return Holding::Stale;
    }
    if fresh(lease, now) { Holding::Submitting } else { Holding::Stale }
}

/// Whether the lease was renewed within its duration (a lease without times is not fresh).
pub fn fresh(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else { return false };
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else { return false };
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0).max(0));
    now.as_second() < renewed.0.as_second().saturating_add(duration)
}

/// A claim this run holds: the Lease as last written by us.
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub(crate) lease: Lease,
    pub(crate) run_id: String,
    pub(crate) name: String,
    pub(crate) namespace: String,
}

/// Gang vcjobs (not helpers) labelled with run id `run_id`.
async fn jobs_of_run(cluster: &Cluster, run_id: &str) -> Result<Vec<Job>, VolcanoError> {
    cluster.list_jobs(&format!("{LABEL_RUN_ID}={},!{LABEL_ROLE}", label_value(run_id))).await
}

/// Takes the claim of `identity` for its run, before anything else of the run is created.
/// A claim whose holder is submitting is [`VolcanoError::AlreadyRunning`], with or without
/// `replace`; so is one whose holder is running, without `replace`; a stale one is taken over.
/// With `replace`, a running holder's claim is taken over and the other runs' live gang jobs of
/// the identity are deleted and confirmed gone.
pub(crate) async fn acquire(
    cluster: &Cluster,
    identity: &JobIdentity,
    job_name: &str,
    options: &SubmitOptions,
    delete_timeout: Duration,
    poll: Duration,
) -> Result<Claim, VolcanoError> {
    let name = claim_name(identity);
    let claim = |lease: Lease| Claim {
        lease,
        run_id: identity.run_id.clone(),
        name: name.clone(),
        namespace: cluster.namespace().to_owned(),
    };
    for _ in 0..ATTEMPTS {
        let want = render_claim(identity, job_name, Timestamp::now());
        match cluster.create_lease(&want).await {
            Ok(lease) => return clear_others(cluster, identity, claim(lease), options, delete_timeout, poll).await,
            Err(VolcanoError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
        let Some(current) = cluster.get_lease(&name).await? else { continue };
        let Some(held_by) = holder(&current).map(str::to_owned) else { continue };
        if held_by == identity.run_id {
            // An earlier attempt of this very run (a retried create that did arrive).
            return clear_others(cluster, identity, claim(current), options, delete_timeout, poll).await;
        }
        let holding = judge(&current, &jobs_of_run(cluster, &held_by).await?, Timestamp::now());
        // A claim whose holder is still submitting is never taken over, not even by `--replace`
        // (which replaces live jobs): the holder could only learn it lost after it started its
        // helper and shipped. So of concurrent submits the first to claim goes on, and the
        // others fail here, having created nothing.
        if holding == Holding::Submitting || (!options.replace && holding != Holding::Stale) {
            return Err(already_running(identity, cluster.namespace(), &held_by, &holding, &name));
        }
        let mut next = want;
        next.metadata.resource_version = current.metadata.resource_version.clone();
        match cluster.replace_lease(&next).await {
            Ok(lease) => {
                tracing::debug!(claim = name, from = held_by, "took over the claim ({holding:?})");
                return clear_others(cluster, identity, claim(lease), options, delete_timeout, poll).await;
            }
            // Another taker won meanwhile (or the claim went with its job): judge again.
            Err(VolcanoError::Conflict { .. } | VolcanoError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Err(VolcanoError::AlreadyRunning {
        name: identity.name.clone(),
        namespace: cluster.namespace().to_owned(),
        what: format!("other submits kept changing its claim (lease {name}) in {ATTEMPTS} attempts"),
    })
}

fn already_running(identity: &JobIdentity, namespace: &str, run: &str, holding: &Holding, lease: &str) -> VolcanoError {
    let what = match holding {
        Holding::Running { job } => format!("vcjob {job} (run {run})"),
        _ => format!("run {run} is being submitted (claim lease {lease}); `--replace` stops a run once it has started"),
    };
    VolcanoError::AlreadyRunning { name: identity.name.clone(), namespace: namespace.to_owned(), what }
}

/// Live gang jobs of the identity that belong to other runs (older theseus made no claims, and a
/// run that lost its claim may not have cleaned up): refused without `--replace` (the claim is
/// given back), deleted and confirmed gone with it.
async fn clear_others(
    cluster: &Cluster,
    identity: &JobIdentity,
    claim: Claim,
    options: &SubmitOptions,
    delete_timeout: Duration,
    poll: Duration,
) -> Result<Claim, VolcanoError> {
    let selector = format!(
        "{LABEL_PROJECT}={},{LABEL_GROUP}={},{LABEL_NAME}={},!{LABEL_ROLE}",
        label_value(&identity.project),
        label_value(&identity.group),
        label_value(&identity.name)
    );
    let ours = label_value(&identity.run_id);
    let others: Vec<Job> = match cluster.list_jobs(&selector).await {
        Ok(jobs) => jobs
            .into_iter()
            .filter(|j| j.metadata.labels.as_ref().and_then(|l| l.get(LABEL_RUN_ID)) != Some(&ours))
            .filter(|j| {
                matches!(judge(&claim.lease, std::slice::from_ref(j), Timestamp::now()), Holding::Running { .. })
            })
            .collect(),
        Err(e) => {
            release(cluster, &claim).await;
            return Err(e);
        }
    };
    if others.is_empty() {
        return Ok(claim);
    }
    if !options.replace {
        release(cluster, &claim).await;
        let job = others[0].metadata.name.clone().unwrap_or_default();
        let run = others[0].metadata.labels.as_ref().and_then(|l| l.get(LABEL_RUN_ID)).cloned().unwrap_or_default();
        return Err(already_running(identity, cluster.namespace(), &run, &Holding::Running { job }, &claim.name));
    }
    for job in others {
        let name = job.metadata.name.unwrap_or_default();
        options.note(&format!("--replace: deleting vcjob {name} and waiting until its pods are gone"));
        if let Err(e) = crate::delete::delete_and_confirm(cluster, &name, delete_timeout, poll).await {
            release(cluster, &claim).await;
            return Err(e);
        }
    }
    Ok(claim)
}

impl Claim {
    /// Renews the claim (a conditional `PUT` of `renewTime`). [`VolcanoError::Replaced`] when
    /// someone else holds it now.
    pub(crate) async fn renew(&mut self, cluster: &Cluster) -> Result<(), VolcanoError> {
        self.update(cluster, |lease| {
            if let Some(spec) = lease.spec.as_mut() {
                spec.renew_time = Some(MicroTime(Timestamp::now()));
            }
        })
        .await
    }

    /// Renews every `interval` until dropped; returns only when the claim is lost. Transient
    /// failures are logged and retried at the next tick (the final check is [`Claim::bind`]).
    pub(crate) async fn keep(&mut self, cluster: &Cluster, interval: Duration) -> VolcanoError {
        loop {
            tokio::time::sleep(interval).await;
            match self.renew(cluster).await {
                Ok(()) => {}
                Err(e @ VolcanoError::Replaced { .. }) => return e,
                Err(e) => tracing::debug!("renewing the claim {}: {e}", self.name),
            }
        }
    }

    /// Makes the vcjob `job` (uid `uid`) the claim's owner, so the claim goes with the job. Also
    /// the proof that this run still holds the name: [`VolcanoError::Replaced`] when it does not.
    pub(crate) async fn bind(&mut self, cluster: &Cluster, job: &str, uid: &str) -> Result<(), VolcanoError> {
        let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            controller: None,
            ..owner_reference(job, uid)
        };
        self.update(cluster, |lease| {
            lease.metadata.owner_references = Some(vec![owner.clone()]);
            if let Some(spec) = lease.spec.as_mut() {
                spec.renew_time = Some(MicroTime(Timestamp::now()));
            }
        })
        .await
    }

    /// A conditional update; on 409 the claim is read again and the update retried while this run
    /// still holds it (a renewal whose answer was lost changed the `resourceVersion`).
    async fn update(&mut self, cluster: &Cluster, change: impl Fn(&mut Lease)) -> Result<(), VolcanoError> {
        for _ in 0..ATTEMPTS {
            let mut next = self.lease.clone();
            change(&mut next);
            match cluster.replace_lease(&next).await {
                Ok(lease) => {
                    self.lease = lease;
                    return Ok(());
                }
                Err(VolcanoError::Conflict { .. } | VolcanoError::NotFound { .. }) => {
                    let current = cluster.get_lease(&self.name).await?;
                    match current {
                        Some(lease) if holder(&lease) == Some(self.run_id.as_str()) => self.lease = lease,
                        other => return Err(self.lost(other.as_ref())),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(self.lost(None))
    }

    fn lost(&self, now_held: Option<&Lease>) -> VolcanoError {
        let name = self.lease.metadata.labels.as_ref().and_then(|l| l.get(LABEL_NAME)).cloned().unwrap_or_default();
        VolcanoError::Replaced {
            name,
            namespace: self.namespace.clone(),
            by: match now_held.and_then(holder) {
                Some(run) => format!("taken over by run {run}, a concurrent `--replace`"),
                None => "its claim was deleted, e.g. by `theseus cancel` of this run".to_owned(),
            },
        }
    }
}

/// Gives the claim back if this run still holds it as last written (best effort).
pub(crate) async fn release(cluster: &Cluster, claim: &Claim) {
    let Some(rv) = claim.lease.metadata.resource_version.as_deref() else { return };
    if let Err(e) = cluster.delete_lease_if(&claim.name, rv).await {
        tracing::warn!("could not give back the claim {}: {e}; `theseus gc` removes it later", claim.name);
    }
}

/// Gives the claim `name` back if run `run_id` holds it for vcjob `job` (cancel). `true` when
/// one was deleted.
pub(crate) async fn release_if_held(
    cluster: &Cluster,
    name: &str,
    run_id: &str,
    job: &str,
) -> Result<bool, VolcanoError> {
    let Some(lease) = cluster.get_lease(name).await? else { return Ok(false) };
    let for_job = lease.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION_JOB)).is_some_and(|j| j == job);
    if holder(&lease) != Some(run_id) || !for_job {
        return Ok(false);
    }
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    cluster.delete_lease_if(name, &rv).await
}

/// Whether a submit of vcjob `job` (run `run_id`) is under way: the claim `name` is held by the
/// run for that job, not yet bound to a created job, and renewed.
pub(crate) async fn submitting(cluster: &Cluster, name: &str, run_id: &str, job: &str) -> Result<bool, VolcanoError> {
    let Some(lease) = cluster.get_lease(name).await? else { return Ok(false) };
    let for_job = lease.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION_JOB)).is_some_and(|j| j == job);
    let bound = lease.metadata.owner_references.as_ref().is_some_and(|o| !o.is_empty());
    Ok(holder(&lease) == Some(run_id) && for_job && !bound && fresh(&lease, Timestamp::now()))
}

/// Claims that `old` accepts, whose holder has no live gang job and that were not renewed in
/// time, and that are not bound to a job that still exists: `(name, resourceVersion)`.
pub(crate) async fn stale_claims(
    cluster: &Cluster,
    old: impl Fn(&ObjectMeta) -> bool,
) -> Result<Vec<(String, String)>, VolcanoError> {
    let mut stale = Vec::new();
    for lease in cluster.list_leases(&format!("{LABEL_ROLE}={ROLE_CLAIM}")).await? {
        if !old(&lease.metadata) {
            continue;
        }
        let Some(run) = holder(&lease) else { continue };
        let jobs = jobs_of_run(cluster, run).await?;
        // A claim bound to a job that still exists goes with that job: not a leftover.
        let bound = lease.metadata.owner_references.as_ref().is_some_and(|o| !o.is_empty());
        if bound && !jobs.is_empty() {
            continue;
        }
        if judge(&lease, &jobs, Timestamp::now()) == Holding::Stale
            && let (Some(name), Some(rv)) = (lease.metadata.name.clone(), lease.metadata.resource_version.clone())
        {
            stale.push((name, rv));
        }
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(project: &str, group: &str, name: &str) -> JobIdentity {
        let mut id = JobIdentity::new(name, Some(project), Some(group));
        id.run_id = "20260101-000000-abcdef".into();
        id
    }

    #[test]
    fn claim_names_are_valid_and_never_shared_by_identities_that_sanitize_alike() {
        let a = claim_name(&identity("a-b", "c", "d"));
        let b = claim_name(&identity("a", "b-c", "d"));
        let c = claim_name(&identity("a_b", "c", "d"));
        assert_ne!(a, b);
        assert_ne!(a, c);
        for n in [&a, &b, &c] {
            assert!(
                n.len() <= 63 && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{n}"
            );
        }
        let long = claim_name(&identity(&"p".repeat(200), "g", "n"));
        assert!(long.len() <= 63, "{long}");
        assert_eq!(claim_name(&identity("a-b", "c", "d")), a, "deterministic");
    }

    fn job(phase: Option<&str>) -> Job {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {"tasks": []},
            "status": phase.map(|p| serde_json::json!({"state": {"phase": p}})),
        }))
        .unwrap()
    }

    #[test]
    fn a_claim_is_live_while_its_job_runs_or_while_it_is_renewed() {
        let now = Timestamp::from_second(1_000_000).unwrap();
        let lease = render_claim(&identity("p", "g", "n"), "j", now);
        assert_eq!(judge(&lease, &[job(Some("Running"))], now), Holding::Running { job: "j".into() });
        assert_eq!(judge(&lease, &[job(None)], now), Holding::Running { job: "j".into() });
        assert_eq!(judge(&lease, &[job(Some("Completed"))], now), Holding::Stale, "a terminal job frees the name");
        assert_eq!(judge(&lease, &[], now), Holding::Submitting, "renewed, no job yet: shipping");
        let later = Timestamp::from_second(1_000_000 + 61).unwrap();
        assert_eq!(judge(&lease, &[], later), Holding::Stale, "not renewed within the lease duration");
        assert_eq!(judge(&lease, &[job(Some("Running"))], later), Holding::Running { job: "j".into() });
    }
}
