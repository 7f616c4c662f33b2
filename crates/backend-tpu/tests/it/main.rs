//! Integration tests of the TPU backend (one binary: modules per area).

mod api;
mod auth;
mod cloud;
mod config;
mod fake;
mod host;
mod sim;
mod simapi;
mod support;
mod tls;
mod workers;
