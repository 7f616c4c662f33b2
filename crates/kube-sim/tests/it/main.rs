//! Integration tests of the cluster simulator, driven through kube-rs.

mod exec;
mod faults;
mod https;
mod lifecycle;
mod objects;
mod placement;
mod refusals;
mod shared;
mod support;
mod ttl;
mod volcano;
mod watch;
