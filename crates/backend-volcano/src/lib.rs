//! Volcano (Kubernetes) backend for theseus: ships code to a PVC through a helper vcjob and starts a
//! gang-scheduled Volcano Job. Not implemented yet; see issue 3. The CLI reports volcano hosts as
//! unsupported until this crate provides a `Backend`.
