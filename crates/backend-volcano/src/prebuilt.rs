//! Runs whose code the cluster's store holds already: no helper pod, no upload. The client
//! learns it from the store's index, one ConfigMap per code tree (`theseus-tree-<sha256>`,
//! label `theseus.dev/role=code-tree`), written after a ship that left the tree's archive in
//! the store ([`theseus_core::store::tree`]) and dropped by every `reclaim` (so a reclaimed
//! tree is shipped again, through a helper, rather than trusted). The gang job's pods then
//! build the run dir from the store themselves ([`theseus_core::store::tree::BUILD`], run
//! before the bootstrap, each rank privately; the first rename wins). The index is a hint: a
//! tree reclaimed after the client looked fails the pods with a message saying so, before any
//! code runs, never a stale or partial run dir.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapKeySelector, EnvVar, EnvVarSource};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use theseus_core::shell::quote;
use theseus_core::store::ObjectKey;
use theseus_core::store::tree::{BUILD, RUN_FILES_ENV};

use crate::api::Cluster;
use crate::config::VolcanoHost;
use crate::render::LABEL_ROLE;
use crate::types::Job;

/// Value of [`LABEL_ROLE`] on the index's ConfigMaps.
pub const INDEX_ROLE: &str = "code-tree";

/// The index entry's name for the tree `key`: `theseus-tree-` and 48 hex digits of its sha256
/// (a ConfigMap name has at most 253 characters; 192 bits cannot collide by chance).
pub fn index_name(key: &ObjectKey) -> String {
    format!("theseus-tree-{}", &hex::encode(key.sha256)[..48])
}

/// The index entry for the tree `key`: its full key, for a reader to check.
pub fn render_index(host: &VolcanoHost, key: &ObjectKey) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(index_name(key)),
            namespace: Some(host.namespace.clone()),
            labels: Some(BTreeMap::from([(LABEL_ROLE.to_owned(), INDEX_ROLE.to_owned())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("tree".to_owned(), key.path())])),
        ..ConfigMap::default()
    }
}

/// Whether the index says the store holds the tree `key`. An index that cannot be read (RBAC
/// without ConfigMaps, an API error) is a miss: the code is shipped as before.
pub async fn holds(cluster: &Cluster, key: &ObjectKey) -> bool {
    match cluster.get_config_map(&index_name(key)).await {
        Ok(Some(map)) => map.data.as_ref().and_then(|d| d.get("tree")).is_some_and(|t| *t == key.path()),
        Ok(None) => false,
        Err(e) => {
            tracing::debug!("cannot read the code store's index: {e}; shipping");
            false
        }
    }
}

/// Records that the store holds the tree `key` (best effort: a failure only means the next
/// submit of this code ships it again).
pub async fn record(cluster: &Cluster, host: &VolcanoHost, key: &ObjectKey) {
    match cluster.create_config_map(&render_index(host, key)).await {
        Ok(_) | Err(crate::error::VolcanoError::AlreadyExists { .. }) => {}
        Err(e) => tracing::debug!("cannot record the tree in the code store's index: {e}"),
    }
}

/// Drops the whole index (after a `reclaim`, which may have taken any tree).
///
/// # Errors
/// The API's, when the index cannot be listed or an entry cannot be deleted.
pub async fn forget_all(cluster: &Cluster) -> Result<usize, crate::error::VolcanoError> {
    let maps = cluster.list_config_maps(&format!("{LABEL_ROLE}={INDEX_ROLE}")).await?;
    for map in &maps {
        if let Some(name) = &map.metadata.name {
            cluster.delete_config_map(name).await?;
        }
    }
    Ok(maps.len())
}

/// The key of the run's own files in their ConfigMap (see [`run_files_map`]).
const RUN_FILES_KEY: &str = "run-files";

/// The largest [`RUN_FILES_ENV`] a store hit puts into a container's environment: half of
/// Linux's 131,072-byte limit on one environment string (`MAX_ARG_STRLEN`). Run files past it
/// (large `extra_files`) are shipped through the helper instead.
pub const RUN_FILES_MAX: usize = 65_536;

/// The name of the ConfigMap with the run's own files of the gang job `job_name`.
pub fn run_files_name(job_name: &str) -> String {
    format!("{job_name}-files")
}

/// The ConfigMap with the run's own files (`run_files`, from
/// [`theseus_core::store::tree::run_files_env`]) for the gang job `job`, labelled as the job.
/// The pods read it by reference (`configMapKeyRef`), so the files are stored once, not in every
/// pod object: a 1,024-pod job stays small to list. Created before the job and then owned by
/// it, as the Secret is.
pub fn run_files_map(job: &Job, run_files: String) -> ConfigMap {
    let name = job.metadata.name.clone().unwrap_or_default();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(run_files_name(&name)),
            namespace: job.metadata.namespace.clone(),
            labels: job.metadata.labels.clone(),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(RUN_FILES_KEY.to_owned(), run_files)])),
        ..ConfigMap::default()
    }
}

/// Makes the gang job's pods build the run dir `dest` from the store under `root` (the tree
/// `key`) before the bootstrap: the step runs first in the container's script, and the run's
/// own files reach it in [`RUN_FILES_ENV`], taken from the ConfigMap of [`run_files_map`]. A
/// failed build ends the pod, its message in the pod's log and appended to the run's log file
/// `log_file` (where `theseus logs` reads).
pub fn add_build_step(job: &mut Job, root: &str, dest: &str, log_file: &str, key: &ObjectKey) {
    let log_dir = log_file.rsplit_once('/').map_or(".", |(dir, _)| if dir.is_empty() { "/" } else { dir });
    let step = format!(
        "if ! theseus_built=$(sh -c {} theseus-build {} {} {} 2>&1); then\n  \
         printf '%s\\n' \"$theseus_built\" >&2\n  \
         mkdir -p {} && printf '%s\\n' \"$theseus_built\" >> {}\n  exit 1\nfi\n",
        quote(BUILD),
        quote(root),
        quote(dest),
        quote(&key.path()),
        quote(log_dir),
        quote(log_file),
    );
    let map = run_files_name(job.metadata.name.as_deref().unwrap_or_default());
    for task in &mut job.spec.tasks {
        let Some(pod) = task.template.as_mut().and_then(|t| t.spec.as_mut()) else { continue };
        for container in &mut pod.containers {
            if let Some(script) = container.args.as_mut().and_then(|a| a.first_mut()) {
                script.insert_str(0, &step);
            }
            container.env.get_or_insert_with(Vec::new).push(EnvVar {
                name: RUN_FILES_ENV.into(),
                value_from: Some(EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: map.clone(),
                        key: RUN_FILES_KEY.into(),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            });
        }
    }
}
