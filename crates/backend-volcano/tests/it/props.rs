//! Properties of everything theseus renders for Volcano, over generated configurations: schema
//! validity and invariants of the gang job, Secret and helper, rejection of invalid settings with
//! the key named, the pod script's quoting and signal forwarding (run for real under bash), and
//! YAML snapshots of representative manifests.

mod invalid;
mod manifests;
mod script;
mod signals;
mod snapshots;
mod strategies;
