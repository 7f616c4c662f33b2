//! Integration tests of the cluster simulator, driven through kube-rs.

mod exec;
