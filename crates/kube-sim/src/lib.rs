//! An in-process Kubernetes API server for theseus tests: discovery, an object store with label
//! selectors and resumable watches, `pods/exec` and `pods/log` over the real wire protocols, and a
//! Volcano controller that gang-admits jobs and runs their pods as local processes.
//!
//! Not part of the shipped binary. kube-rs (and `kubectl --server`) talk to it over plain HTTP on
//! 127.0.0.1.

pub mod exec;
