//! Volcano (Kubernetes) backend for theseus: ships code to a PVC through a helper vcjob and starts a
//! gang-scheduled Volcano Job.
//!
//! This crate holds, so far, the pure part: the typed Volcano `Job` ([`types`]), Kubernetes
//! quantities ([`quantity`]), rendering of the gang job, its Secret and the helper ([`render`],
//! [`helper`]) and host validation ([`validate_host`]). The cluster IO (shipping, watching, logs)
//! is not implemented yet; the CLI reports volcano hosts as unsupported until this crate provides
//! a `Backend`.

pub mod api;
pub mod availability;
mod backend;
pub mod client;
pub mod error;
pub mod helper;
pub mod quantity;
pub mod render;
pub mod ship;
mod status;
pub mod types;
mod validate;

pub use api::{Cluster, PodGroup, PodLogOptions, Queue};
pub use client::RetryPolicy;
pub use error::VolcanoError;
pub use helper::{helper_name, helper_resources, render_helper};
pub use quantity::{InvalidQuantity, Quantity};
pub use render::{
    JobInputs, RenderError, RenderOptions, RenderedJob, job_name, owner_reference, redacted, render_job, render_secret,
};
pub use types::{Job, JobSpec, JobStatus, LifecyclePolicy, TaskSpec};
pub use validate::{is_label_key, is_label_value, validate_host};
