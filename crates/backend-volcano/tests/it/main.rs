//! Integration tests of the Volcano backend's pure part: rendered manifests checked against the
//! vendored CRD's schema, and the properties the IO code relies on.

mod fixtures;
mod render;
mod schema;
