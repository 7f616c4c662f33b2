//! Integration tests of the TPU backend (one binary: modules per area).

mod cloud;
mod config;
mod fake;
