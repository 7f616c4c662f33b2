//! Integration tests of the TPU backend (one binary: modules per area).

mod config;
mod support;
mod workers;
