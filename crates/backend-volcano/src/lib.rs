//! Volcano (Kubernetes) backend for theseus: ships code to a PVC through a helper vcjob and starts a
//! gang-scheduled Volcano Job.
//!
//! Pure parts: the typed Volcano `Job` ([`types`]), Kubernetes quantities ([`quantity`]),
//! rendering of the gang job, its Secret and the helper ([`render`], [`helper`]), host validation
//! ([`validate_host`]) and the status summary ([`status`]). IO parts: the kube client and retries
//! ([`client`]; its proxy choice [`proxy`], exec plugins [`credential`], connection failures
//! [`diagnose`]), typed API calls ([`api`]), queue availability ([`availability`]), shipping over
//! exec ([`ship`]) and the [`VolcanoBackend`] that ties them into theseus's `Backend`.

pub mod api;
pub mod availability;
mod backend;
pub mod claim;
pub mod client;
pub mod config;
pub mod credential;
mod delete;
pub mod diagnose;
pub mod error;
mod exec;
pub mod fit;
mod gc;
mod handle;
pub mod helper;
pub mod host;
mod kubeconfig;
pub mod log_cursor;
mod logs;
pub mod proxy;
pub mod quantity;
pub mod reclaim;
pub mod render;
mod resources;
pub mod retry;
pub mod rule;
pub mod ship;
pub mod status;
pub mod store_shell;
pub mod types;
mod validate;

pub use api::{Cluster, PodGroup, PodLogOptions, Queue};
pub use backend::{Settings, VolcanoBackend, WIRING};
pub use client::RetryPolicy;
pub use config::{KIND, Toleration, VolcanoHost};
pub use error::VolcanoError;
pub use handle::HandleData;
pub use helper::{helper_name, render_helper};
pub use host::VolcanoType;
pub use quantity::{InvalidQuantity, Quantity};
pub use render::{
    JobInputs, RenderError, RenderOptions, RenderedJob, job_name, owner_reference, redacted, render_job, render_secret,
};
pub use resources::helper_resources;
pub use types::{Job, JobSpec, JobStatus, LifecyclePolicy, TaskSpec};
pub use validate::{check_cluster_paths, is_label_key, is_label_value, validate_host};
