//! Integration tests of the Volcano backend: rendered manifests against the vendored CRD.
