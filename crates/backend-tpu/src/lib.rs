//! Google Cloud TPU VMs (`type: tpu`): the host type, its settings and fit rule, the Cloud TPU
//! API v2 client with Google's credential chain, the VM's lifecycle (create after confirmation,
//! wait for `READY`, recreate after a preemption, delete when the job ends), and the backend
//! that ships the code to every worker over SSH and runs the bootstrap on all of them.

pub mod api;
pub mod auth;
pub mod backend;
pub mod cloud;
pub mod config;
pub mod fit;
pub mod host;

pub use host::TpuType;
