//! The core of theseus: everything that is not tied to one kind of cluster.
//!
//! - [`config`]: the layered dispatch config (clusters, hosts, priority, GRES mapping), its strict
//!   validation and its provenance, and the host-type seam ([`config::HostType`],
//!   [`config::HostSettings`], the [`config::HostTypes`] registry the program passes in); core
//!   implements only the local type. [`cluster`]: one cluster's layout; [`keys`]: strict reading
//!   of config sections with errors that name the key.
//! - [`chips`]: the chip catalog, aliases and `nvidia-smi` name matching.
//! - [`solver`]: pure host selection (`solve(config, request, availability) -> Plan`) over
//!   [`plan`] (the request and plan types) and [`fit`] (what a host type's fit rule is made of).
//! - [`backend`]: the one async [`Backend`](backend::Backend) trait every backend implements, and
//!   [`availability`] gathering across backends with per-host timeouts.
//! - [`shares`]: how a request stands among a shared cluster's queues (`plan` shows it).
//! - [`job`]: experiment files, job identity, Kubernetes-safe names; [`original`]: job configs
//!   of the original theseus loaded as experiments that run its registered jobs.
//! - [`snapshot`]: streamed code snapshots of a git repository or a plain directory.
//! - [`bootstrap`]: the rendered bash bootstrap and Python launcher each process runs.
//! - [`store`]: the content-addressed object store runs' code dirs are made from, on every
//!   backend.
//! - [`local`]: the local host type and backend (runs jobs on this machine).
//! - [`ledger`]: the SQLite record of every submission.
//! - [`lifecycle`]: a run after submit: its state, cancel, follow, and settling runs whose
//!   client died or that a newer run replaced.
//! - [`duration`], [`files`], [`paths`]: the one duration parser, bounded reading of user files,
//!   and the checks that cluster paths are normalised and stay under their root.
//! - [`interrupt`]: the program's SIGINT/SIGTERM, seen by operations that must clean up.
//! - `testing` (feature `testing`): the conformance suite every backend passes.
//!
//! Pure logic (config validation, solving, rendering) does no IO; backends and the ledger do.

pub mod availability;
pub mod backend;
pub mod batch_search;
pub mod bootstrap;
pub mod chips;
pub mod cluster;
pub mod config;
pub mod dispatch;
pub mod duration;
pub mod encoding;
mod error;
pub mod files;
pub mod fit;
pub mod interrupt;
pub mod job;
pub mod keys;
pub mod ledger;
pub mod lifecycle;
pub mod local;
pub mod original;
pub mod paths;
pub mod plan;
pub mod probe;
pub mod session;
pub mod shares;
pub mod shell;
pub mod snapshot;
pub mod solver;
pub mod standalone;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use error::{Error, NothingCreated, Result};
