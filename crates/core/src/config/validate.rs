//! Validation of a merged config: everything serde cannot check (references between tables,
//! chip names with suggestions, TPU hosts, empty required strings).
