//! `theseus gc` on a Volcano host: what crashed clients left behind, found by theseus's labels and
//! older than a threshold. Each kind is judged by whether its run still has a job, never by a
//! missing owner reference (a client killed between creating a job and owning its Secret leaves a
//! live job's Secret without an owner):
//! - helper vcjobs (code shipping; a live submit deletes its own), and helper pods whose vcjob is
//!   gone;
//! - Secrets, coordinator Services and run-files ConfigMaps (`prebuilt.rs`) whose run id has no
//!   vcjob (those of a live job stay, owned or not);
//! - name claims (Leases) whose holder's job is terminal or gone and which were not renewed
//!   (`claim::judge`).
//!
//! Run dirs on the PVC are not touched: they hold the runs' code and logs, the user's results,
//! and the client cannot see the PVC without starting a pod.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{Cluster, JOB_NAME_LABEL};
use crate::error::VolcanoError;
use crate::render::{LABEL_ROLE, LABEL_RUN_ID};

/// Deletes (or with `dry_run` only lists) the leftovers older than `older_than`; returns
/// `kind/name` of each.
pub(crate) async fn gc(cluster: &Cluster, older_than: Duration, dry_run: bool) -> Result<Vec<String>, VolcanoError> {
    let now = SystemTime::now();
    let old = |meta: &ObjectMeta| {
        meta.creation_timestamp.as_ref().is_some_and(|t| {
            let created = UNIX_EPOCH + Duration::from_secs(u64::try_from(t.0.as_second()).unwrap_or(0));
            now.duration_since(created).is_ok_and(|age| age >= older_than)
        })
    };
    let mut removed = Vec::new();
    let jobs = cluster.list_jobs(LABEL_RUN_ID).await?;
    let job_names: HashSet<String> = jobs.iter().filter_map(|j| j.metadata.name.clone()).collect();
    // Run ids that have a gang job (helpers do not count: a helper never uses the Secret).
    let runs_with_jobs: HashSet<String> = jobs
        .iter()
        .filter(|j| j.metadata.labels.as_ref().is_none_or(|l| !l.contains_key(LABEL_ROLE)))
        .filter_map(|j| j.metadata.labels.as_ref().and_then(|l| l.get(LABEL_RUN_ID)).cloned())
        .collect();

    for helper in jobs.iter().filter(|j| role(&j.metadata) == Some("helper")) {
        if old(&helper.metadata)
            && let Some(name) = helper.metadata.name.clone()
        {
            if !dry_run {
                cluster.delete_job(&name).await?;
            }
            removed.push(format!("vcjob/{name}"));
        }
    }
    for pod in cluster.list_pods(&format!("{LABEL_ROLE}=helper")).await? {
        let owner_gone =
            pod.metadata.labels.as_ref().and_then(|l| l.get(JOB_NAME_LABEL)).is_none_or(|j| !job_names.contains(j));
        if owner_gone
            && pod.metadata.deletion_timestamp.is_none()
            && old(&pod.metadata)
            && let Some(name) = pod.metadata.name.clone()
        {
            if !dry_run {
                cluster.delete_pod(&name).await?;
            }
            removed.push(format!("pod/{name}"));
        }
    }
    // A run's Secret, coordinator Service and own files' ConfigMap: kept while its run has a job.
    let orphan = |meta: &ObjectMeta| {
        let run = meta.labels.as_ref().and_then(|l| l.get(LABEL_RUN_ID));
        run.is_some_and(|r| !runs_with_jobs.contains(r)) && old(meta)
    };
    let secrets = cluster.list_secrets(LABEL_RUN_ID).await?.into_iter().map(|o| o.metadata);
    let services = cluster.list_services(LABEL_RUN_ID).await?.into_iter().map(|o| o.metadata);
    let maps = cluster.list_run_config_maps(LABEL_RUN_ID).await?.into_iter().map(|o| o.metadata);
    let runs: Vec<(RunObject, ObjectMeta)> = (secrets.map(|m| (RunObject::Secret, m)))
        .chain(services.map(|m| (RunObject::Service, m)))
        .chain(maps.map(|m| (RunObject::ConfigMap, m)))
        .collect();
    for (kind, meta) in runs {
        let Some(name) = meta.name.clone().filter(|_| orphan(&meta)) else { continue };
        if !dry_run {
            match kind {
                RunObject::Secret => cluster.delete_secret(&name).await?,
                RunObject::Service => cluster.delete_service(&name).await?,
                RunObject::ConfigMap => cluster.delete_config_map(&name).await?,
            };
        }
        removed.push(format!("{}/{name}", kind.as_str()));
    }
    for (name, rv) in crate::claim::stale_claims(cluster, old).await? {
        // Conditional on the version judged: a claim taken over meanwhile stays.
        if dry_run || cluster.delete_lease_if(&name, &rv).await? {
            removed.push(format!("lease/{name}"));
        }
    }
    Ok(removed)
}

/// The kinds of a run's objects besides its job.
#[derive(Debug, Clone, Copy)]
enum RunObject {
    Secret,
    Service,
    ConfigMap,
}

impl RunObject {
    fn as_str(self) -> &'static str {
        match self {
            RunObject::Secret => "secret",
            RunObject::Service => "service",
            RunObject::ConfigMap => "configmap",
        }
    }
}

fn role(meta: &ObjectMeta) -> Option<&str> {
    meta.labels.as_ref().and_then(|l| l.get(LABEL_ROLE)).map(String::as_str)
}
