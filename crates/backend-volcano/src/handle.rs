//! [`HandleData`]: what a Volcano job handle carries, read by the backend and its log streams.

use serde::{Deserialize, Serialize};

/// What a Volcano job handle carries (the `data` of [`JobHandle`](theseus_core::backend::JobHandle)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleData {
    /// Namespace of the job.
    pub namespace: String,
    /// The vcjob's name.
    pub job: String,
    /// The run id (pods' processes carry it as `THESEUS_RUN_ID`).
    #[serde(default)]
    pub run_id: Option<String>,
    /// The vcjob's uid (a job re-created under the same name is not ours).
    #[serde(default)]
    pub uid: Option<String>,
    /// The Secret holding the job's secret env, when it has one.
    #[serde(default)]
    pub secret: Option<String>,
    /// The headless Service naming rank 0 (see `render::render_coordinator_service`); `None`
    /// in handles of runs submitted before theseus rendered one.
    #[serde(default)]
    pub service: Option<String>,
    /// The ConfigMap with the run's own files (`prebuilt.rs`; it exists only for a run whose
    /// pods build the run dir from the code store). `None` in older handles.
    #[serde(default)]
    pub files: Option<String>,
    /// The run's log file on the PVC.
    #[serde(default)]
    pub log_file: Option<String>,
    /// The run's name claim (a Lease, see `claim.rs`).
    #[serde(default)]
    pub claim: Option<String>,
    /// The run's code-shipping helper vcjob (exists only while `submit` ships).
    #[serde(default)]
    pub helper: Option<String>,
    /// The run's code dir on the PVC, as the pods see it (`theseus shell` starts there).
    #[serde(default)]
    pub work_dir: Option<String>,
    /// The run's status dir on the PVC (the bootstrap's `metadata.json`), read once the vcjob
    /// is gone. `None` in older handles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_dir: Option<String>,
    /// The `ttlSecondsAfterFinished` the vcjob was created with (`None`: none, or an older
    /// handle): says whether a vcjob that is gone was collected after its TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<u32>,
}
