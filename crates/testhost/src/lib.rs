//! A host type for tests, `type: sandbox`, defined entirely outside core and the CLI: each job
//! runs as local processes under the host's sandbox dir, with its state in files there. The
//! binary `theseus-testhost` is the `theseus` command line with this type added to the built-in
//! ones; the tests drive `plan`, `submit`, `status`, `cancel` and `gc` through it, and the
//! backend conformance suite through [`SandboxBackend`].
//!
//! What a new backend writes, in the order the registry reaches it: its settings ([`config`]),
//! its pure fit rule ([`fit`]), the two host-type traits ([`host`]) and its [`Backend`]
//! ([`backend`], with [`run`], [`runner`], [`procs`] and [`logs`]).
//!
//! [`Backend`]: theseus_core::backend::Backend

pub mod backend;
pub mod config;
pub mod fit;
pub mod host;
mod logs;
pub mod procs;
pub mod run;
mod runner;

pub use backend::SandboxBackend;
pub use config::{KIND, SandboxHost};
pub use host::SandboxType;
