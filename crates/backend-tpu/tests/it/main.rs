//! Integration tests of the TPU backend (one binary: modules per area).

mod config;
mod host;
mod sim;
mod support;
mod workers;
