//! Integration tests of the Volcano backend: rendered manifests checked against the vendored CRD's
//! schema (with property-based variants and snapshots), wiremock contract tests of every API call,
//! shipping over the exec protocol, and whole flows against the cluster simulator.

mod busybox;
mod cancel;
mod claims;
mod contract;
mod fixtures;
mod flow;
mod follow;
mod gang_env;
mod interrupted;
mod lifecycle;
mod preflight;
mod props;
mod render;
mod schema;
mod shares;
mod ship;
mod site_support;
mod sites;
mod sites_exec;
mod sites_proxy;
mod store_exec;
mod store_flow;
mod store_prebuilt;
mod store_reclaim;
mod store_tree;
